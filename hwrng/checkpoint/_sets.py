"""Per-rank files beside a checkpoint that one rank writes: one new set per save, never overwritten.

A trainer that writes rank 0's dict alone (Lightning, Fabric, accelerate)
cannot hold the other ranks' states, so with ``RNGState(directory=D)`` each
rank writes its own, sealed, into the set of the save::

    D/save-<nonce>/rank-<r>.pt      (written as rank-<r>.pt.tmp, then renamed)

``<nonce>`` is the save's nonce (16 hex digits), which the shared entry in the
trainer's checkpoint holds: the checkpoint names its set, and a save never
writes into the set of another. ``D`` is a local path or an fsspec URL: the
files go to the filesystem of the trainer's checkpoint (``_storage``). Which
sets a commit may remove is decided in ``_commit``; here each rank reads,
writes and removes its own files (rank 0 also those of ranks beyond the
world), so no rank's cost grows with the world.
"""

from __future__ import annotations

import os
import re
import warnings

from hwrng._exceptions import HwrngWarning
from hwrng.checkpoint._storage import Storage, is_url, storage_for

__all__ = [
    "SET_PREFIX",
    "beside",
    "folder_name",
    "has_own",
    "rank_file",
    "read_own",
    "remove_sets",
    "set_folder",
    "set_nonces",
    "write_own",
]

#: Every set folder's name starts with this, then the save's nonce in 16 hex digits.
SET_PREFIX = "save-"
_SET = re.compile(r"save-([0-9a-f]{16})")
_RANK_FILE = re.compile(r"rank-(\d+)\.pt(\.tmp)?")


def _name(nonce: int) -> str:
    return f"{SET_PREFIX}{nonce:016x}"


def set_folder(directory: str | os.PathLike[str], nonce: int) -> str:
    """The folder of the save with ``nonce``: ``<directory>/save-<nonce:016x>``."""
    text = os.fspath(directory)
    return (
        f"{text.rstrip('/')}/{_name(nonce)}" if is_url(text) else os.path.join(text, _name(nonce))
    )


def rank_file(directory: str | os.PathLike[str], nonce: int, rank: int) -> str:
    """Where rank ``rank`` writes its own entry of the save ``nonce`` (as the user names it)."""
    folder = set_folder(directory, nonce)
    return f"{folder}/rank-{rank}.pt" if is_url(folder) else os.path.join(folder, f"rank-{rank}.pt")


def folder_name(directory: str | os.PathLike[str]) -> str:
    """The last name of ``directory`` (what the shared entry records)."""
    text = os.fspath(directory)
    return (
        text.rstrip("/").rsplit("/", 1)[-1]
        if is_url(text)
        else os.path.basename(os.path.normpath(text))
    )


def beside(directory: str | os.PathLike[str], name: str) -> str:
    """The folder called ``name`` in the folder that holds ``directory``."""
    text = os.fspath(directory)
    if is_url(text):
        return f"{text.rstrip('/').rsplit('/', 1)[0]}/{name}"
    return os.path.join(os.path.dirname(os.path.normpath(text)), name)


def _own(storage: Storage, root: str, nonce: int, rank: int) -> str:
    return storage.join(root, _name(nonce), f"rank-{rank}.pt")


def write_own(directory: str | os.PathLike[str], nonce: int, rank: int, blob: bytes) -> None:
    """Write this rank's sealed entry into the save's set, atomically (a new file, always)."""
    storage, root = storage_for(directory)
    storage.write_atomically(_own(storage, root, nonce, rank), blob, f"rank-{rank}.pt.tmp")


def read_own(directory: str | os.PathLike[str], nonce: int, rank: int) -> bytes | None:
    """Rank ``rank``'s entry of the save ``nonce``; ``None`` where there is no such file.

    Raises
    ------
    CheckpointError
        If something other than a regular file is there (refused without
        opening it: a FIFO would block), or fsspec is needed and missing.
    """
    storage, root = storage_for(directory)
    what = f"the RNG entry of rank {rank}"
    return storage.read(_own(storage, root, nonce, rank), what)


def has_own(directory: str | os.PathLike[str], nonce: int, rank: int) -> bool:
    """Whether rank ``rank``'s file of the save ``nonce`` is there, as a regular file."""
    storage, root = storage_for(directory)
    return storage.kind(_own(storage, root, nonce, rank)) == "file"


def set_nonces(directory: str | os.PathLike[str]) -> list[int]:
    """The nonces of every set in ``directory`` (none if there is no such folder)."""
    storage, root = storage_for(directory)
    return [
        int(match.group(1), 16)
        for name in storage.names(root)
        if (match := _SET.fullmatch(name)) is not None
    ]


def remove_sets(
    directory: str | os.PathLike[str], nonces: list[int], rank: int, world_size: int
) -> None:
    """Remove this rank's files of the sets ``nonces``; rank 0 also those of ranks beyond the world.

    Call it on every rank with the same ``nonces`` (sets no checkpoint names).
    Rank 0 lists each set and removes the files of every rank not in this
    world, whichever are missing (a set of a larger world killed part way). A
    set folder goes with its last file, whichever rank removes it. A file
    that cannot be removed is named in a :class:`~hwrng.HwrngWarning`: the
    checkpoint is complete, and the leftover is tried again at the next commit.
    """
    storage, root = storage_for(directory)
    failures: list[str] = []
    for nonce in nonces:
        folder = storage.join(root, _name(nonce))
        doomed = [f"rank-{rank}.pt", f"rank-{rank}.pt.tmp"]
        if rank == 0:
            try:
                names = storage.names(folder)
            except OSError as error:
                failures.append(f"{folder!r}: {error.strerror or error}")
                names = []
            doomed += [
                name
                for name in names
                if (match := _RANK_FILE.fullmatch(name)) is not None
                and int(match.group(1)) >= world_size
            ]
        for name in doomed:
            try:
                storage.remove(storage.join(folder, name))
            except OSError as error:
                failures.append(f"{storage.join(folder, name)!r}: {error.strerror or error}")
        storage.remove_folder(folder)  # not empty yet (another rank's file), or gone
    if failures:
        warnings.warn(
            "hwrng: the checkpoint is complete, but these files of earlier saves could not be "
            f"removed (tried again at the next save): {'; '.join(failures)}",
            HwrngWarning,
            stacklevel=3,
        )

"""Per-rank files beside a checkpoint that one rank writes: one new set per save, never overwritten.

A trainer that writes rank 0's dict alone (Lightning, Fabric, accelerate)
cannot hold the other ranks' states, so with ``RNGState(directory=D)`` each
rank writes its own, sealed, into the set of the save::

    D/save-<nonce>/rank-<r>.pt      (written as rank-<r>.pt.tmp, then renamed)

``<nonce>`` is the save's nonce (16 hex digits), which the shared entry in the
trainer's checkpoint holds: the checkpoint names its set, and a save never
writes into the set of another. ``D`` is a local path or an fsspec URL: the
files go to the filesystem of the trainer's checkpoint (``_storage``).

A set goes in two steps (which sets, and when, is decided in ``_commit``):
it is first *retired*, renamed to ``D/save-<nonce>.retired-<token>`` -- out of
sight of the check its owner makes at its commit (:func:`has_own`), which then
writes its own file again, but still found by a load (:func:`read_own`) --
and only *removed* once a read of the trainer's files made after it was
retired finds that no file names it. Locally rank 0 retires a set in one
rename of its folder; on an object store (no folders) each rank moves its own
files. Each rank removes its own files (rank 0 also those of ranks beyond the
world), so no rank's cost grows with the world. Every rename and removal is
made durable (the folder synced) where the storage has folders.
"""

from __future__ import annotations

import os
import re
import warnings

from hwrng._exceptions import CheckpointError, HwrngWarning
from hwrng.checkpoint._storage import Storage, is_url, storage_for

__all__ = [
    "SET_PREFIX",
    "beside",
    "folder_name",
    "has_own",
    "rank_file",
    "read_own",
    "remove_retired",
    "retire_sets",
    "retired_name",
    "set_folder",
    "sets_in",
    "write_own",
]

#: Every set folder's name starts with this, then the save's nonce in 16 hex digits.
SET_PREFIX = "save-"
_SET = re.compile(r"save-([0-9a-f]{16})")
_RETIRED = re.compile(r"save-([0-9a-f]{16})\.retired-([0-9a-f]{16})")
_RANK_FILE = re.compile(r"rank-(\d+)\.pt(\.tmp)?")
#: How many times a rank writes its file when its folder is retired while it writes.
_ATTEMPTS = 3


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


def retired_name(nonce: int, token: int) -> str:
    """The name of the set ``nonce`` once retired by the commit ``token``."""
    return f"{_name(nonce)}.retired-{token:016x}"


def _own(storage: Storage, root: str, nonce: int, rank: int) -> str:
    return storage.join(root, _name(nonce), f"rank-{rank}.pt")


def write_own(directory: str | os.PathLike[str], nonce: int, rank: int, blob: bytes) -> None:
    """Write this rank's sealed entry into the save's set, atomically and durably (a new file).

    Where the folder is retired (by another run's commit) while the file is
    written, the write fails and is made again, up to three times.
    """
    storage, root = storage_for(directory)
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            storage.write_atomically(_own(storage, root, nonce, rank), blob, f"rank-{rank}.pt.tmp")
            return
        except CheckpointError as error:  # a folder or file that vanished: write again
            if attempt == _ATTEMPTS or not isinstance(error.__cause__, FileNotFoundError):
                raise


def read_own(directory: str | os.PathLike[str], nonce: int, rank: int) -> bytes | None:
    """Rank ``rank``'s entry of the save ``nonce``; ``None`` where there is no such file.

    Sought in the set's folder, then in the folders it was retired to (a set
    is loadable until it is removed).

    Raises
    ------
    CheckpointError
        If something other than a regular file is there (refused without
        opening it: a FIFO would block), or fsspec is needed and missing.
    """
    storage, root = storage_for(directory)
    what = f"the RNG entry of rank {rank}"
    blob = storage.read(_own(storage, root, nonce, rank), what)
    if blob is not None:
        return blob
    for retired, token in sets_in(directory)[1]:
        if retired == nonce:
            path = storage.join(root, retired_name(nonce, token), f"rank-{rank}.pt")
            if (blob := storage.read(path, what)) is not None:
                return blob
    return None


def has_own(directory: str | os.PathLike[str], nonce: int, rank: int) -> bool:
    """Whether rank ``rank``'s file of the save ``nonce`` is in sight (not retired), a file."""
    storage, root = storage_for(directory)
    return storage.kind(_own(storage, root, nonce, rank)) == "file"


def sets_in(directory: str | os.PathLike[str]) -> tuple[list[int], list[tuple[int, int]]]:
    """The nonces of the sets in ``directory``, and the ``(nonce, token)`` of its retired ones.

    Both empty if there is no such folder.
    """
    storage, root = storage_for(directory)
    names = storage.names(root)
    present = [int(m.group(1), 16) for name in names if (m := _SET.fullmatch(name)) is not None]
    retired = [
        (int(m.group(1), 16), int(m.group(2), 16))
        for name in names
        if (m := _RETIRED.fullmatch(name)) is not None
    ]
    return present, retired


def _files_of(storage: Storage, folder: str, rank: int, world_size: int) -> list[str]:
    """The names of this rank's files in ``folder``; rank 0 also those of ranks beyond the world.

    Raises ``OSError`` where rank 0 cannot list the folder.
    """
    names = [f"rank-{rank}.pt", f"rank-{rank}.pt.tmp"]
    if rank == 0:
        names += [
            name
            for name in storage.names(folder)
            if (match := _RANK_FILE.fullmatch(name)) is not None
            and int(match.group(1)) >= world_size
        ]
    return names


def _failed(storage: Storage, path: str, error: OSError) -> str:
    return f"{storage.url_prefix}{path!r}: {error.strerror or error}"


def _rename_sets(
    storage: Storage, root: str, nonces: list[int], token: int, failures: list[str]
) -> None:
    """Retire the sets ``nonces`` of ``root`` each in one rename of its folder; failures named."""
    for nonce in nonces:
        folder = storage.join(root, _name(nonce))
        try:
            storage.rename(folder, storage.join(root, retired_name(nonce, token)))
        except FileNotFoundError:  # gone already (another run retired it)
            continue
        except OSError as error:
            failures.append(_failed(storage, folder, error))


def retire_sets(
    directory: str | os.PathLike[str], nonces: list[int], token: int, rank: int, world_size: int
) -> None:
    """Retire the sets ``nonces`` (commit ``token``): out of their owner's sight, still loadable.

    Call it on every rank with the same arguments. Locally rank 0 renames each
    set's folder, every rank's file at once, and syncs ``directory``; on a
    storage without folders each rank moves its own files (rank 0 also those
    of ranks beyond the world). What cannot be moved is named in a
    :class:`~hwrng.HwrngWarning` and tried again at the next commit.
    """
    storage, root = storage_for(directory)
    failures: list[str] = []
    if storage.renames_folders:
        if rank == 0:
            _rename_sets(storage, root, nonces, token, failures)
    else:
        for nonce in nonces:
            folder = storage.join(root, _name(nonce))
            retired = storage.join(root, retired_name(nonce, token))
            try:
                names = _files_of(storage, folder, rank, world_size)
                storage.make_folder(retired)
            except OSError as error:
                failures.append(_failed(storage, folder, error))
                continue
            for name in names:
                try:
                    if storage.kind(storage.join(folder, name)) is not None:
                        storage.rename(storage.join(folder, name), storage.join(retired, name))
                except FileNotFoundError:
                    continue
                except OSError as error:
                    failures.append(_failed(storage, storage.join(folder, name), error))
            storage.remove_folder(folder)
    if nonces and (rank == 0 or not storage.renames_folders):
        _sync(storage, root, failures)
    _warn(failures, "retired")


def remove_retired(
    directory: str | os.PathLike[str], retired: list[tuple[int, int]], rank: int, world_size: int
) -> None:
    """Remove this rank's files of the retired sets ``retired``; rank 0 also those beyond the world.

    Call it on every rank with the same ``retired`` (``(nonce, token)`` of sets
    a read made after they were retired found unnamed). Rank 0 lists each
    folder and removes the files of every rank not in this world, whichever
    are missing (a set of a larger world killed part way). A folder goes with
    its last file, whichever rank removes it; the removals are made durable.
    A file that cannot be removed is named in a :class:`~hwrng.HwrngWarning`:
    the checkpoint is complete, and the leftover is tried again at the next
    commit.
    """
    storage, root = storage_for(directory)
    failures: list[str] = []
    emptied = False
    for nonce, token in retired:
        folder = storage.join(root, retired_name(nonce, token))
        try:
            names = _files_of(storage, folder, rank, world_size)
        except OSError as error:
            failures.append(_failed(storage, folder, error))
            names = [f"rank-{rank}.pt", f"rank-{rank}.pt.tmp"]
        for name in names:
            try:
                storage.remove(storage.join(folder, name))
            except OSError as error:
                failures.append(_failed(storage, storage.join(folder, name), error))
        if storage.remove_folder(folder):  # else another rank's file is still there
            emptied = True
        else:
            _sync(storage, folder, failures)
    if emptied:
        _sync(storage, root, failures)
    _warn(failures, "removed")


def retire_whole(directory: str | os.PathLike[str], nonces: list[int], token: int) -> None:
    """One process: retire the sets ``nonces`` whole, every rank's files (no collective)."""
    storage, root = storage_for(directory)
    failures: list[str] = []
    _rename_sets(storage, root, nonces, token, failures)
    if nonces:
        _sync(storage, root, failures)
    _warn(failures, "retired")


def remove_whole(directory: str | os.PathLike[str], retired: list[tuple[int, int]]) -> None:
    """One process: remove the retired sets ``retired`` whole, and ``directory`` once empty."""
    storage, root = storage_for(directory)
    failures: list[str] = []
    for nonce, token in retired:
        storage.remove_tree(storage.join(root, retired_name(nonce, token)))
    parent, _ = storage.split(root)
    if storage.remove_folder(root):
        _sync(storage, parent or ".", failures)
    elif retired:
        _sync(storage, root, failures)
    _warn(failures, "removed")


def _sync(storage: Storage, folder: str, failures: list[str]) -> None:
    try:
        storage.sync_folder(folder)
    except FileNotFoundError:  # removed meanwhile: nothing left in it to make durable
        pass
    except OSError as error:
        failures.append(f"{_failed(storage, folder, error)} (could not be synced)")


def _warn(failures: list[str], done: str) -> None:
    if failures:
        warnings.warn(
            f"hwrng: the checkpoint is complete, but these files of earlier saves could not be "
            f"{done} (tried again at the next save): {'; '.join(failures)}",
            HwrngWarning,
            stacklevel=4,
        )

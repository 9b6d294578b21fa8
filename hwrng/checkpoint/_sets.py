"""Per-rank files beside a checkpoint that one rank writes: one new set per save, never overwritten.

A trainer that writes rank 0's dict alone (Lightning, Fabric, accelerate)
cannot hold the other ranks' states, so with ``RNGState(directory=D)`` each
rank writes its own, sealed, into the set of the save::

    D/save-<nonce>/rank-<r>.pt      (written as rank-<r>.pt.tmp, then renamed)

``<nonce>`` is the save's nonce (16 hex digits), which the shared entry in the
trainer's checkpoint holds: the checkpoint names its set, and a save never
writes into the set of another. The trainer's own write of its checkpoint is
the commit point; the files of other saves are removed only when the trainer
says its checkpoint is complete (:func:`remove_other_sets`, through
``RNGState.commit``). Each rank reads, writes and removes its own files only,
and lists ``D``, which holds a set per save not yet removed: no rank's cost
grows with the world.
"""

from __future__ import annotations

import contextlib
import os
import warnings

from hwrng._exceptions import HwrngWarning
from hwrng.checkpoint._files import write_atomically

__all__ = ["SET_PREFIX", "rank_file", "read_own", "remove_other_sets", "set_folder", "write_own"]

#: Every set folder's name starts with this, then the save's nonce in 16 hex digits.
SET_PREFIX = "save-"


def set_folder(directory: str | os.PathLike[str], nonce: int) -> str:
    """The folder of the save with ``nonce``: ``<directory>/save-<nonce:016x>``."""
    return os.path.join(os.fspath(directory), f"{SET_PREFIX}{nonce:016x}")


def rank_file(directory: str | os.PathLike[str], nonce: int, rank: int) -> str:
    """Where rank ``rank`` writes its own entry of the save with ``nonce``."""
    return os.path.join(set_folder(directory, nonce), f"rank-{rank}.pt")


def write_own(directory: str | os.PathLike[str], nonce: int, rank: int, blob: bytes) -> None:
    """Write this rank's sealed entry into the save's set, atomically (a new file, always)."""
    folder = set_folder(directory, nonce)
    os.makedirs(folder, exist_ok=True)
    write_atomically(rank_file(directory, nonce, rank), blob, temporary=f"rank-{rank}.pt.tmp")


def read_own(directory: str | os.PathLike[str], nonce: int, rank: int) -> bytes | None:
    """Read rank ``rank``'s entry of the save ``nonce``; ``None`` where there is no such file."""
    try:
        with open(rank_file(directory, nonce, rank), "rb") as file:
            return file.read()
    except FileNotFoundError:
        return None


def _remove(path: str, failures: list[str]) -> bool:
    """Remove one file; False where there was none."""
    if not os.path.lexists(path):
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:  # another process was first
        return False
    except OSError as error:
        failures.append(f"{path!r}: {error.strerror}")
    return True


def remove_other_sets(
    directory: str | os.PathLike[str], keep: int, rank: int, world_size: int
) -> None:
    """Remove this rank's files of every set in ``directory`` but the save ``keep``'s.

    Call it only once the checkpoint that names ``keep`` is complete, on
    every rank. A set folder goes with its last file (whichever rank removes
    it); rank 0 also removes the files of ranks beyond this world (a
    checkpoint of a larger world saved over). A file that cannot be removed
    is named in a :class:`~hwrng.HwrngWarning`: the checkpoint is complete,
    and the leftover is tried again at the next commit.
    """
    kept = os.path.basename(set_folder(directory, keep))
    failures: list[str] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError as error:
        names = []
        failures.append(f"{os.fspath(directory)!r}: {error.strerror}")
    for name in names:
        if not name.startswith(SET_PREFIX) or name == kept:
            continue
        folder = os.path.join(os.fspath(directory), name)
        for own in (f"rank-{rank}.pt", f"rank-{rank}.pt.tmp"):
            _remove(os.path.join(folder, own), failures)
        if rank == 0:
            beyond = world_size
            while any(
                [
                    _remove(os.path.join(folder, f"rank-{beyond}.pt"), failures),
                    _remove(os.path.join(folder, f"rank-{beyond}.pt.tmp"), failures),
                ]
            ):
                beyond += 1
        with contextlib.suppress(OSError):  # not empty yet (another rank's file), or gone
            os.rmdir(folder)
    if failures:
        warnings.warn(
            "hwrng: the checkpoint is complete, but these files of earlier saves could not be "
            f"removed (tried again at the next save): {'; '.join(failures)}",
            HwrngWarning,
            stacklevel=3,
        )

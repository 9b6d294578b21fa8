"""The retention rule: which sets of per-rank files a commit removes, agreed on every rank.

A set may be loaded as long as some trainer's file names it, so a commit
removes a set only when no trainer's file *in reach* names it:

- in reach is the trainer's file the commit is for (``checkpoint``, which every
  integration passes), or, when none is given, every file in the folder that
  holds the directory of sets (the by-hand layout: ``trainer.pt`` beside
  ``trainer.pt.hwrng``);
- a file names the sets whose shared entry it holds (``_named``: found without
  unpickling it); it is read *now*, after the trainer's write, so a set stays
  while the trainer's file still names it -- an asynchronous write not yet
  done, a second run on the same path whose newer file landed last, a second
  trainer's file sharing the directory;
- this run's own sets newer than the newest of them a trainer's file names are
  kept too: their trainer's writes may still be on their way (Lightning's
  ``AsyncCheckpointIO``);
- when a file in reach cannot be told (unreadable, or too large to search),
  nothing is removed, and rank 0 warns.

Everything else -- the sets of earlier saves, of saves that died, of another
run that a newer trainer's file no longer names -- goes, every file of it,
whatever ranks are missing. Rank 0 decides, and every rank learns the decision
in reductions of eight words (more only when more than seven sets go at once);
each rank then removes its own files.
"""

from __future__ import annotations

import os
import warnings

from hwrng._collectives import Comm
from hwrng._exceptions import HwrngWarning
from hwrng.checkpoint._named import nonces_named
from hwrng.checkpoint._sets import set_nonces
from hwrng.checkpoint._storage import Storage, storage_for

__all__ = ["BATCH", "agree", "choose", "in_reach"]

#: How many sets' nonces one reduction carries (with one word for how many go in all).
BATCH = 7


def in_reach(
    directory: str | os.PathLike[str], checkpoint: str | os.PathLike[str] | None
) -> list[tuple[Storage, str]]:
    """The trainer's files that may name sets of ``directory``.

    ``checkpoint`` alone if given; otherwise every entry of the folder that
    holds ``directory`` (the directory itself excepted).
    """
    if checkpoint is not None:
        return [storage_for(checkpoint)]
    storage, root = storage_for(directory)
    parent, own = storage.split(root)
    parent = parent or "."  # a directory named relative to the working directory
    return [(storage, storage.join(parent, name)) for name in storage.names(parent) if name != own]


def choose(
    directory: str | os.PathLike[str],
    checkpoint: str | os.PathLike[str] | None,
    own: list[int],
) -> list[int]:
    """Rank 0: the sets of ``directory`` to remove (see the module notes); ``own`` oldest first."""
    try:
        present = set_nonces(directory)
        named: set[int] = set()
        for storage, path in in_reach(directory, checkpoint):
            found = nonces_named(storage, path)
            if found is None:
                warnings.warn(
                    f"hwrng: kept every earlier set of per-rank RNG files in "
                    f"{os.fspath(directory)!r}: cannot tell which of them {path!r} names (it "
                    "cannot be read, or is too large to search); they are tried again at the "
                    "next commit",
                    HwrngWarning,
                    stacklevel=4,
                )
                return []
            named |= found
    except Exception as error:  # keeping every set is safe; rank 0 must reach the reduction
        warnings.warn(
            f"hwrng: kept every earlier set of per-rank RNG files in {os.fspath(directory)!r}: "
            f"{type(error).__name__}: {error}",
            HwrngWarning,
            stacklevel=4,
        )
        return []
    confirmed = [index for index, nonce in enumerate(own) if nonce in named]
    pending = own[confirmed[-1] :] if confirmed else own
    return sorted(nonce for nonce in present if nonce not in named and nonce not in pending)


def agree(comm: Comm, chosen: list[int]) -> list[int]:
    """Rank 0's ``chosen`` on every rank (the others' is ignored): reductions of eight words."""
    agreed: list[int] = []
    while True:
        batch = chosen[len(agreed) : len(agreed) + BATCH] if comm.rank == 0 else []
        words = [len(chosen), *batch] if comm.rank == 0 else []
        words += [0] * (BATCH + 1 - len(words))
        total, *nonces = comm.max(words)
        agreed += nonces[: min(BATCH, total - len(agreed))]
        if len(agreed) >= total:
            return agreed

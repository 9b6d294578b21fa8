"""The retention rule: which sets of per-rank files go, and how, agreed on every rank.

A set may be loaded as long as some file names it, so a set goes only when no
file *in reach* names it, whatever made the file (the trainer, a copy, a
rename, a link, another tool):

- in reach is every file in the folder that holds the directory of sets
  (``trainer.pt`` beside ``trainer.pt.hwrng``; Lightning's ``best.ckpt`` copied
  from ``epoch=3.ckpt``, beside ``epoch=3.ckpt.hwrng``), and the trainer's file
  the commit is for (``checkpoint``) with the files beside it;
- a file names the sets whose shared entry it holds (``_named``: found without
  unpickling it); the files are read *now*, after the trainer's write, so a set
  stays while a file still names it -- an asynchronous write not yet done, a
  second run on the same path whose newer file landed last, a second trainer's
  file sharing the directory, a copy;
- this run's own sets newer than the newest of them a file names are kept
  too: their trainer's writes may still be on their way (Lightning's
  ``AsyncCheckpointIO``);
- when a file in reach cannot be told (a storage error, unreadable, or too
  large to search), or the folder cannot be listed, nothing goes, and rank 0
  warns.

A set no file names goes in two steps, so that nothing a concurrent run lands
between the decision and the removal is lost: the commit *retires* it
(``_sets``: renamed out of sight of its owner's check, still loadable), and a
later commit *removes* it only when its own read, made after the set was
retired, still finds no file naming it. A run whose file lands naming a set
retired before that read finds its own file gone at its commit and writes it
again; a file that landed before the read keeps the set. A set retired while
its files were being written (a run still saving) makes that run write them
again. Rank 0 decides, and every rank learns the decision in reductions of
eight words (more only when more than seven words go at once); each rank then
acts on its own files.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

from hwrng._collectives import Comm
from hwrng._exceptions import HwrngWarning
from hwrng.checkpoint._named import nonces_named
from hwrng.checkpoint._sets import remove_whole, retire_whole, sets_in
from hwrng.checkpoint._storage import Storage, storage_for

__all__ = [
    "BATCH",
    "Decision",
    "agree",
    "choose",
    "decision_point",
    "in_reach",
    "pause_at_decision",
    "release",
]

#: How many words one reduction carries (with one word for how many go in all).
BATCH = 7

#: Called on every rank of a commit once rank 0 has decided, before anything is agreed or
#: moved (and by :func:`release` after its first read): a test sets it to hold a commit at
#: its decision point while another run lands and commits. ``None``: nothing is called.
decision_point: Callable[[], None] | None = None


@dataclass(frozen=True)
class Decision:
    """What a commit does to the sets of a directory."""

    retire: list[int] = field(default_factory=list)  # nonces of sets in sight that no file names
    remove: list[tuple[int, int]] = field(default_factory=list)  # (nonce, token): retired, unnamed

    def words(self) -> list[int]:
        """The decision as words: how many retire, their nonces, then each removal's two."""
        return [len(self.retire), *self.retire, *(w for pair in self.remove for w in pair)]

    @classmethod
    def of_words(cls, words: list[int]) -> Decision:
        """The decision :meth:`words` wrote."""
        count, rest = words[0], words[1:]
        pairs = rest[count:]
        return cls(rest[:count], [(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2)])


def _entries(storage: Storage, folder: str, leave_out: str) -> list[tuple[Storage, str]]:
    folder = folder or "."  # a path named relative to the working directory
    return [
        (storage, storage.join(folder, name)) for name in storage.names(folder) if name != leave_out
    ]


def in_reach(
    directory: str | os.PathLike[str], checkpoint: str | os.PathLike[str] | None
) -> list[tuple[Storage, str]]:
    """The files that may name sets of ``directory``, ``checkpoint`` first.

    ``checkpoint`` (if given) and every entry of its folder, and every entry of
    the folder that holds ``directory`` (the directory itself excepted).

    Raises
    ------
    OSError
        If a folder cannot be listed (a storage error, not a missing folder).
    """
    storage, root = storage_for(directory)
    parent, own = storage.split(root)
    found: list[tuple[Storage, str]] = []
    if checkpoint is not None:
        trainer_storage, trainer_path = storage_for(checkpoint)
        found.append((trainer_storage, trainer_path))
        folder, name = trainer_storage.split(trainer_path)
        if (type(trainer_storage), trainer_storage.url_prefix, folder) != (
            type(storage),
            storage.url_prefix,
            parent,
        ):
            found += _entries(trainer_storage, folder, name)
    found += _entries(storage, parent, own)
    seen: set[tuple[str, str]] = set()
    unique = []
    for where, path in found:
        if (where.url_prefix, path) not in seen:
            seen.add((where.url_prefix, path))
            unique.append((where, path))
    return unique


def _decide(
    present: list[int], retired: list[tuple[int, int]], named: set[int], own: list[int]
) -> Decision:
    confirmed = [index for index, nonce in enumerate(own) if nonce in named]
    pending = set(own[confirmed[-1] :] if confirmed else own)
    kept = named | pending
    return Decision(
        sorted(nonce for nonce in present if nonce not in kept),
        sorted(pair for pair in retired if pair[0] not in kept),
    )


def _kept_all(directory: str | os.PathLike[str], why: str) -> Decision:
    warnings.warn(
        f"hwrng: kept every earlier set of per-rank RNG files in {os.fspath(directory)!r}: "
        f"{why}; they are tried again at the next commit",
        HwrngWarning,
        stacklevel=4,
    )
    return Decision()


def choose(
    directory: str | os.PathLike[str],
    checkpoint: str | os.PathLike[str] | None,
    own: list[int],
) -> Decision:
    """Rank 0: the sets of ``directory`` to retire and remove; ``own`` oldest first.

    Nothing is read where nothing could go (no set but this run's newest).
    The trainer's file is read first: when it alone leaves nothing to go, the
    other files in reach are not read (they could only keep more, but for
    this run's own sets, which then go at a later commit).
    """
    try:
        present, retired = sets_in(directory)
        if not retired and not [nonce for nonce in present if nonce not in own[-1:]]:
            return Decision()
        named: set[int] = set()
        if checkpoint is not None:
            named = _named_by([storage_for(checkpoint)])
            decision = _decide(present, retired, named, own)
            if not decision.retire and not decision.remove:
                return decision
        others = in_reach(directory, checkpoint)[0 if checkpoint is None else 1 :]
        return _decide(present, retired, named | _named_by(others), own)
    except Exception as error:  # keeping every set is safe; rank 0 must reach the reduction
        return _kept_all(directory, str(error) if isinstance(error, _CannotTell) else repr(error))


class _CannotTell(Exception):
    """A file in reach whose names cannot be told."""


def _named_by(files: list[tuple[Storage, str]]) -> set[int]:
    """The nonces the ``files`` name; :class:`_CannotTell` naming the first that cannot be told."""
    named: set[int] = set()
    for storage, path in files:
        found = nonces_named(storage, path)
        if found is None:
            raise _CannotTell(
                f"cannot tell which of them {storage.url_prefix}{path!r} names (a storage "
                "error, it cannot be read, or it is too large to search)"
            )
        named |= found
    return named


def agree(comm: Comm, decision: Decision) -> Decision:
    """Rank 0's ``decision`` on every rank (the others' is ignored): reductions of eight words."""
    chosen = decision.words() if comm.rank == 0 else []
    agreed: list[int] = []
    while True:
        batch = chosen[len(agreed) : len(agreed) + BATCH] if comm.rank == 0 else []
        words = [len(chosen), *batch] if comm.rank == 0 else []
        words += [0] * (BATCH + 1 - len(words))
        total, *values = comm.max(words)
        agreed += values[: min(BATCH, total - len(agreed))]
        if len(agreed) >= total:
            return Decision.of_words(agreed)


def pause_at_decision() -> None:
    """Call the test hook :data:`decision_point`, if one is set."""
    if decision_point is not None:
        decision_point()


def release(directory: str | os.PathLike[str]) -> None:
    """One process, for every rank: let the sets of ``directory`` go that no file in reach names.

    For a trainer that has removed its own file (Lightning's ``remove_checkpoint``):
    the files beside ``directory`` are read, the sets none of them names are
    retired, the files are read again, and the retired sets still unnamed are
    removed, every rank's files (``directory`` too, once empty). A copy of the
    removed file keeps its set. No collective: call it on one rank.
    """
    token = int.from_bytes(os.urandom(8), "little") % (2**62)
    decided = choose(directory, None, [])
    pause_at_decision()
    retire_whole(directory, decided.retire, token)
    remove_whole(directory, choose(directory, None, []).remove)

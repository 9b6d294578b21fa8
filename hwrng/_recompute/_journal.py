"""Journals: what each random context of a checkpointed forward started from, in order.

A checkpointed forward appends one :class:`Entry` per hwrng context it enters
(a named-state fork, a tracked region, ``fork_rng``, ``isolate_rng``) to the
journal of its checkpoint; each recomputation of that checkpoint reads the
journal back in the same order through its own :class:`Replay`, so the k-th
context it enters starts where the forward's k-th did. A journal lives on
torch's object for the checkpoint (``_CheckpointFrame`` or the reentrant
``ctx``) and goes when torch drops it, with the graph.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any, NamedTuple

from hwrng._exceptions import RecomputationError

__all__ = ["Entry", "Journal", "Replay", "journal_of"]

_ATTRIBUTE = "_hwrng_journal"
_lock = threading.Lock()


class Entry(NamedTuple):
    """One context of a checkpointed forward: its kind, what it acted on, and where it started."""

    kind: str
    key: Hashable
    start: Any

    def describe(self) -> str:
        """The context, as a message names it."""
        return f"{self.kind} {self.key!r}"


class Replay:
    """One recomputation's walk through a journal."""

    __slots__ = ("_journal", "_next")

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._next = 0

    def take(self, kind: str, key: Hashable) -> Any:
        """Where the forward's context at this point started; refuse a context it never entered.

        Raises
        ------
        RecomputationError
            If the forward entered no more contexts, or another one here.
        """
        entries = self._journal.entries
        index = self._next
        asked = Entry(kind, key, None).describe()
        if index >= len(entries):
            raise RecomputationError(
                f"this recomputation of a checkpointed block entered {asked} (random context "
                f"{index + 1}), but its forward entered only {len(entries)} hwrng random "
                "context(s) that hwrng saw: the recomputation would draw numbers its forward "
                "never drew. Make the block run the same random contexts in its forward and "
                "its recomputation (no branch on state that changes in between)"
            )
        entry = entries[index]
        if entry.kind != kind or entry.key != key:
            raise RecomputationError(
                f"this recomputation of a checkpointed block entered {asked} where its forward "
                f"entered {entry.describe()} (random context {index + 1}): it would draw other "
                "numbers than the forward. Make the block run the same random contexts in its "
                "forward and its recomputation (no branch on state that changes in between)"
            )
        self._next = index + 1
        return entry.start


class Journal:
    """The contexts one checkpointed forward entered, and the recomputations reading them."""

    __slots__ = ("_replays", "entries")

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._replays: dict[Hashable, Replay] = {}

    def record(self, entry: Entry) -> None:
        """Append the next context of the forward."""
        self.entries.append(entry)

    def replay(self, run: Hashable) -> Replay:
        """The walk of recomputation ``run`` (the same object for every call of one run)."""
        with _lock:
            found = self._replays.get(run)
            if found is None:
                found = self._replays[run] = Replay(self)
            return found


def journal_of(owner: object, *, create: bool) -> Journal | None:
    """The journal kept on torch's checkpoint object ``owner``; made if ``create`` and missing."""
    journal = getattr(owner, _ATTRIBUTE, None)
    if journal is None and create:
        with _lock:
            journal = getattr(owner, _ATTRIBUTE, None)
            if journal is None:
                journal = Journal()
                setattr(owner, _ATTRIBUTE, journal)
    return journal

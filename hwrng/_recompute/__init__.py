"""Recompute-safe streams: activation checkpointing redraws exactly what the forward drew.

``torch.utils.checkpoint`` (every flavour) rewinds torch's default generators
before it recomputes a block, and knows nothing of hwrng's other streams: a
named state of :class:`~hwrng.RNGStatesTracker`, a user's generator under a
tracked region, Python's ``random`` and NumPy under :func:`~hwrng.isolate_rng`.
So every hwrng context that starts a stream segment asks :func:`site` where it
runs:

* outside any checkpointed forward and recomputation -- the block's own
  backward included (a tensor hook, a custom Function's backward), which a
  reentrant checkpoint runs inside its own backward: nothing more to do;
* in a checkpointed forward: it records where its streams start, in the
  journal of each checkpoint it runs in (``hwrng._recompute._journal``);
* in a recomputation: it starts from the forward's record instead of the
  streams' current positions, and leaves every stream where it found it
  (a named state is not advanced a second time), so the backward pass leaves
  the streams where an uninterrupted run would.

No call is needed from the user; :mod:`hwrng._recompute._torch_frames` reads
which of the two is running from torch's own frames.
"""

from __future__ import annotations

from collections.abc import Hashable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch

from hwrng._recompute._journal import Entry, Journal, journal_of
from hwrng._recompute._rewound import rewound
from hwrng._recompute._torch_frames import Enclosing, enclosing, unsupported_reason

if TYPE_CHECKING:
    from hwrng._platform import Platform

__all__ = ["Site", "quietly", "site", "unsupported_reason"]


class Site:
    """Where a random context runs: the checkpointed forwards and the recomputation around it."""

    __slots__ = ("_enclosing",)

    def __init__(self, found: Enclosing) -> None:
        self._enclosing = found

    @property
    def replaying(self) -> bool:
        """Whether the context runs in a recomputation (it must start where its forward did)."""
        return self._enclosing.replaying is not None

    def record(self, kind: str, key: Hashable, start: Any) -> None:
        """Note where a context of a checkpointed forward starts, for each checkpoint around it."""
        if not self._enclosing.recording:
            return
        entry = Entry(kind, key, start)
        for owner in self._enclosing.recording:
            journal = journal_of(owner, create=True)
            assert journal is not None
            journal.record(entry)

    def replay(self, kind: str, key: Hashable) -> Any:
        """Where the forward's context at this point started (and record it for nested forwards).

        Raises
        ------
        RecomputationError
            If the forward entered another context here, or none.
        """
        assert self._enclosing.replaying is not None
        owner, run = self._enclosing.replaying
        journal = journal_of(owner, create=False) or Journal()
        start = journal.replay(run).take(kind, key)
        self.record(kind, key, start)
        return start

    def rewinds(self, generator: torch.Generator, platform: Platform) -> bool:
        """Whether torch put ``generator`` back to its forward state for this recomputation.

        torch rewinds its CPU generator and the default generators of the
        checkpoint's input devices, unless ``preserve_rng_state=False``; read
        from torch's record, never from the generator's state (a forward run
        inside ``fork_rng`` leaves the state as the forward found it).

        Raises
        ------
        RecomputationError
            If torch's record of what it rewound cannot be read.
        """
        assert self._enclosing.replaying is not None
        return rewound(self._enclosing.replaying.owner).covers(generator, platform)


def site() -> Site | None:
    """Where the calling context runs; ``None`` outside checkpointed forwards and recomputations.

    Raises
    ------
    RecomputationError
        If it runs in a recomputation of a torch whose checkpointing hwrng cannot read.
    """
    found = enclosing()
    return None if found is None else Site(found)


def quietly() -> AbstractContextManager[None]:
    """Hide hwrng's bookkeeping tensor ops from dispatch modes (selective checkpointing's cache).

    Selective activation checkpointing counts the ops of a block by kind and
    serves the recomputation's k-th op of a kind from the forward's k-th; a
    copy hwrng makes of a state must not be counted among them.
    """
    return torch._C._DisableTorchDispatch()

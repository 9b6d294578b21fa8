"""Process-wide claims on generators: hwrng's contexts on one generator never interleave.

A generator is shared by every thread of a process. Each hwrng context that
reads and repositions one -- a tracked region, a named-state fork,
``fork_rng``, a checkpoint's snapshot -- claims it for its duration. Claims
*serialise*: a second thread that wants a claimed generator waits until the
first releases it, so each draws from its own, correct positions (which
thread goes first is up to the scheduler). The owning thread may claim again
(a region inside a fork); the rules about what may nest are the contexts' own.

Draws made outside hwrng (a plain ``torch.rand`` in another thread) cannot be
seen and are not serialised.

A wait longer than ``HWRNG_CLAIM_TIMEOUT`` seconds (default 60) raises a
:class:`~hwrng.NestingError` naming the thread that holds the generator: a
thread that waits for another while holding a claim the other needs (say, a
backward pass run inside a named-state fork, whose recomputation runs on an
autograd thread) would otherwise hang for ever.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator

import torch

from hwrng._exceptions import NestingError
from hwrng._validation import positive_seconds_from_env

__all__ = ["CLAIM_TIMEOUT_ENV", "Claim", "claim", "claim_for"]

CLAIM_TIMEOUT_ENV = "HWRNG_CLAIM_TIMEOUT"
DEFAULT_CLAIM_TIMEOUT = 60.0


class Claim:
    """The process-wide claim on one generator: a re-entrant lock and who holds it.

    ``regions`` counts the tracked regions the holding thread has open on the
    generator; only the holder changes ``owner``, ``depth`` and ``regions``.
    """

    __slots__ = ("__weakref__", "depth", "lock", "owner", "regions")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.owner: str | None = None
        self.depth = 0
        self.regions = 0

    def acquire(self, generator: torch.Generator) -> None:
        """Take the claim for the calling thread (waiting for another holder), or raise."""
        if not self.lock.acquire(blocking=False):
            timeout = _timeout()
            if not self.lock.acquire(timeout=timeout):
                raise NestingError(
                    f"the {generator.device} generator has been held by thread "
                    f"{self.owner!r} for more than {timeout:g} s ({CLAIM_TIMEOUT_ENV}); hwrng "
                    "serialises its contexts on one generator across threads, so a thread "
                    "waiting for another while holding a claim it needs (e.g. a backward pass "
                    "inside a named-state fork) cannot proceed"
                )
        if self.depth == 0:
            self.owner = threading.current_thread().name
        self.depth += 1

    def release(self) -> None:
        """Give back one level of the claim."""
        self.depth -= 1
        if self.depth == 0:
            self.owner = None
        self.lock.release()


_table_lock = threading.Lock()
_claims: weakref.WeakKeyDictionary[torch.Generator, Claim] = weakref.WeakKeyDictionary()


def claim_for(generator: torch.Generator) -> Claim:
    """The claim of ``generator`` (made on first use; it lives as long as the generator)."""
    found = _claims.get(generator)
    if found is None:
        with _table_lock:
            found = _claims.get(generator)
            if found is None:
                found = _claims[generator] = Claim()
    return found


def _timeout() -> float:
    return positive_seconds_from_env(CLAIM_TIMEOUT_ENV, DEFAULT_CLAIM_TIMEOUT)


@contextlib.contextmanager
def claim(*generators: torch.Generator) -> Iterator[None]:
    """Hold ``generators`` for the calling thread until the block ends.

    Generators are taken in one global order, so two threads claiming the
    same pair cannot deadlock each other.

    Raises
    ------
    NestingError
        If another thread holds one of them for longer than the timeout.
    """
    unique = {id(g): g for g in generators}
    held: list[Claim] = []
    try:
        for key in sorted(unique):
            entry = claim_for(unique[key])
            entry.acquire(unique[key])
            held.append(entry)
        yield
    finally:
        for entry in reversed(held):
            entry.release()

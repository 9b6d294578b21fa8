"""Process-wide claims on generators: hwrng's contexts on one generator never interleave.

A generator is shared by every thread of a process. Each hwrng context that
reads and repositions one -- a tracked region, a named-state fork,
``fork_rng``, a checkpoint's snapshot -- claims it for its duration. Claims
*serialise*: a second thread that wants a claimed generator waits until the
first releases it, so each draws from its own, correct positions (which
thread goes first is up to the scheduler). The thread that took a claim may
claim again (a region inside a fork); the rules about what may nest are the
contexts' own. A claim belongs to the context that took it, not to its
thread: a context ended on another thread (a generator function holding
``fork_rng()`` across a ``yield``, closed elsewhere) gives it back all the same.

Draws made outside hwrng (a plain ``torch.rand`` in another thread) cannot be
seen and are not serialised.

A wait longer than ``HWRNG_CLAIM_TIMEOUT`` seconds (default 60; ``inf``, or
any value past ``threading.TIMEOUT_MAX``, waits without limit) raises a
:class:`~hwrng.NestingError` naming the thread that holds the generator: a
thread that waits for another while holding a claim the other needs (say, a
backward pass run inside a named-state fork, whose recomputation runs on an
autograd thread) would otherwise hang for ever.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

from hwrng._exceptions import NestingError
from hwrng._generator_table import GeneratorTable
from hwrng._validation import positive_seconds_from_env

__all__ = ["CLAIM_TIMEOUT_ENV", "Claim", "claim", "claim_for"]

CLAIM_TIMEOUT_ENV = "HWRNG_CLAIM_TIMEOUT"
DEFAULT_CLAIM_TIMEOUT = 60.0


class Claim:
    """The process-wide claim on one generator: who holds it and how deeply.

    The claim belongs to the contexts that took it, not to a thread: the
    thread that took it may take it again (a region inside a fork), and
    whichever thread ends a context gives its level back -- a generator
    function holding ``fork_rng()`` across a ``yield`` may be closed on
    another thread than the one that entered it. ``regions`` counts the
    tracked regions open on the generator.
    """

    __slots__ = ("_free", "depth", "owner", "owner_ident", "regions")

    def __init__(self) -> None:
        self._free = threading.Condition(threading.Lock())
        self.owner: str | None = None
        self.owner_ident: int | None = None
        self.depth = 0
        self.regions = 0

    def acquire(self, generator: torch.Generator) -> None:
        """Take the claim for the calling thread (waiting for another holder), or raise."""
        me = threading.get_ident()
        with self._free:
            if self.depth and self.owner_ident != me:
                timeout = _timeout()
                if not self._free.wait_for(lambda: self.depth == 0, timeout):
                    raise NestingError(
                        f"the {generator.device} generator has been held by thread "
                        f"{self.owner!r} for more than {timeout:g} s ({CLAIM_TIMEOUT_ENV}); "
                        "hwrng serialises its contexts on one generator across threads, so a "
                        "thread waiting for another while holding a claim it needs (e.g. a "
                        "backward pass inside a named-state fork) cannot proceed"
                    )
            if self.depth == 0:
                self.owner = threading.current_thread().name
                self.owner_ident = me
            self.depth += 1

    def release(self) -> None:
        """Give back one level of the claim, from whichever thread ends the context."""
        with self._free:
            if self.depth == 0:  # a bug in hwrng, never a user's doing
                raise NestingError("hwrng released a generator claim that was not held")
            self.depth -= 1
            if self.depth == 0:
                self.owner = None
                self.owner_ident = None
                self._free.notify_all()


_claims: GeneratorTable[Claim] = GeneratorTable()


def claim_for(generator: torch.Generator) -> Claim:
    """The claim of ``generator`` (made on first use; it lives as long as the generator)."""
    return _claims.setdefault(generator, Claim)


def _timeout() -> float | None:
    """The wait limit in seconds; ``None`` (no limit) for ``inf`` or beyond what the OS can wait."""
    seconds = positive_seconds_from_env(CLAIM_TIMEOUT_ENV, DEFAULT_CLAIM_TIMEOUT)
    return None if seconds >= threading.TIMEOUT_MAX else seconds


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

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
import os
import threading
import weakref
from collections.abc import Iterator

import torch

from hwrng._exceptions import InvalidArgumentError, NestingError

__all__ = ["CLAIM_TIMEOUT_ENV", "claim"]

CLAIM_TIMEOUT_ENV = "HWRNG_CLAIM_TIMEOUT"
DEFAULT_CLAIM_TIMEOUT = 60.0


class _Claim:
    __slots__ = ("depth", "lock", "owner")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.owner: str | None = None  # only the holding thread writes these two
        self.depth = 0


_table_lock = threading.Lock()
_claims: weakref.WeakKeyDictionary[torch.Generator, _Claim] = weakref.WeakKeyDictionary()


def _claim_for(generator: torch.Generator) -> _Claim:
    found = _claims.get(generator)
    if found is None:
        with _table_lock:
            found = _claims.get(generator)
            if found is None:
                found = _claims[generator] = _Claim()
    return found


def _timeout() -> float:
    text = os.environ.get(CLAIM_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_CLAIM_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise InvalidArgumentError(f"{CLAIM_TIMEOUT_ENV}={text!r} is not a positive number")
    return value


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
    ordered = [unique[key] for key in sorted(unique)]
    held: list[_Claim] = []
    timeout = _timeout()
    me = threading.current_thread().name
    try:
        for generator in ordered:
            entry = _claim_for(generator)
            if not entry.lock.acquire(timeout=timeout):
                raise NestingError(
                    f"the {generator.device} generator has been held by thread "
                    f"{entry.owner!r} for more than {timeout:g} s ({CLAIM_TIMEOUT_ENV}); hwrng "
                    "serialises its contexts on one generator across threads, so a thread "
                    "waiting for another while holding a claim it needs (e.g. a backward pass "
                    "inside a named-state fork) cannot proceed"
                )
            entry.owner = me
            entry.depth += 1
            held.append(entry)
        yield
    finally:
        for entry in reversed(held):
            entry.depth -= 1
            if entry.depth == 0:
                entry.owner = None
            entry.lock.release()

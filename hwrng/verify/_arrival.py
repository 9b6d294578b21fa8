"""Before any collective: every rank of the group reaches this ``verify``, within the timeout.

A collective waits for every member, for as long as its group allows --
torch's default is 30 minutes -- and says nothing of who is missing. So
``verify`` first meets its peers through the job's rendezvous store (the
default process group's ``TCPStore``, through a connection of its own that
gives up after the timeout), which every backend has and which knows who
arrived:

* each rank writes its *record* (the group of its call and the call's number
  over that group) and counts itself in (``add``) under the call's key;
* the rank that completes the count declares the call complete; the others
  wait for that word, at most until the timeout, then declare it abandoned
  -- one ``compare_set`` decides, so every rank, a late one included, reads
  the same outcome;
* on an abandoned call one rank reads its peers' records and says, once for
  all, who did not arrive -- and when one of them is in a call over another
  group (a rank alone with ``group=``), that the arguments differ. A late
  rank reads the same words and raises at once instead of waiting again.

In a small group (:data:`WATCHED`), waiting ranks also read their peers'
records as they wait: a peer waiting in a call over another group that
holds this rank -- the call this rank would make next over that group -- can
only be met after this call ends, which needs that peer. Such a deadlock is
declared at once, both calls decided as a :class:`Mismatch` in the same
words whichever of the two ranks finds it, which every rank of both reports
as a failing verdict naming it.

Nothing here is a collective: a call that fails here leaves every process
group untouched. Calls are numbered per group on each rank, so ranks that
call ``verify(group=g)`` and ranks that do not stay in step for later calls;
a late rank consumes the call it missed, and a mismatch counts both calls as
made on every rank that reads it, so ranks stay in step after a failure too.
"""

from __future__ import annotations

import datetime
import json
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hwrng._collectives import Comm, digest_of, played_by_one_process
from hwrng._exceptions import DistributedError, InvalidArgumentError, InvalidValueError

__all__ = ["DEFAULT_TIMEOUT", "WATCHED", "Mismatch", "arrive", "check_timeout"]

#: How long ``verify`` waits, by default, for every rank to arrive and for each collective.
DEFAULT_TIMEOUT = datetime.timedelta(minutes=5)
#: Groups of at most this many ranks poll for the outcome and watch for a deadlock while they
#: wait (a larger group's ranks wait on the store without polling it).
WATCHED = 64
#: Seconds between polls of a waiting rank (after a first blocking wait of :data:`WATCH_S`):
#: the first, the most in its first second, and the most after that.
POLL_S = (0.001, 0.01, 0.1)
#: Seconds between a waiting rank's reads of its peers' records, looking for a deadlock.
WATCH_S = 0.5
#: Ranks named, at most, in a message (the rest are counted).
NAMED = 16
#: A record lists its group's members up to this many (the whole world is known without).
RECORDED_MEMBERS = 1024
#: How long ranks wait for the one that reads the records to say who is missing.
TELL_S = 10.0

_ROOT = "hwrng/verify"
_COMPLETE = "complete"
_lock = threading.Lock()
_calls: dict[str, int] = {}


def check_timeout(timeout: object) -> float:
    """``timeout`` (seconds, or a :class:`datetime.timedelta`) in seconds.

    Refused alike on every rank, before any collective, unless it is a
    positive, finite duration.
    """
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise InvalidArgumentError(
            f"timeout must be seconds or a datetime.timedelta, got {type(timeout).__name__}"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidValueError(f"timeout must be a positive, finite duration, got {timeout!r}")
    return seconds


_connection: list[tuple[Any, Any]] = []


def _store(seconds: float) -> Any:
    """The job's rendezvous store, through a connection of verify's own.

    That connection gives up after ``seconds``: a store whose host is stopped
    must not hold a rank for the store's own timeout. Where the store cannot
    be cloned (torch < 2.8), the default store itself.
    """
    from torch.distributed import distributed_c10d

    base = distributed_c10d._get_default_store()
    with _lock:
        if not _connection or _connection[0][0] is not base:
            clone = getattr(base, "clone", None)
            _connection[:] = [(base, clone() if callable(clone) else None)]
        own = _connection[0][1]
    if own is None:
        return base
    own.set_timeout(datetime.timedelta(seconds=seconds))
    return own


def _group_words(members: Sequence[int], world: int) -> tuple[str, str]:
    """The key of a call's group, and the group in words."""
    if list(members) == list(range(world)):
        return f"world{world}", f"all {world} ranks"

    shown = ", ".join(str(r) for r in members[:NAMED])
    more = f", ... ({len(members)} ranks)" if len(members) > NAMED else ""
    return f"group{digest_of(tuple(members)):x}", f"ranks [{shown}{more}]"


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class _Call:
    """One call of ``verify`` on this rank, as the store sees it."""

    def __init__(self, members: Sequence[int], me: int, world: int, seconds: float) -> None:
        self.members = list(members)
        self.me = me
        self.seconds = seconds
        self.group, self.words = _group_words(self.members, world)
        with _lock:
            self.number = _calls.get(self.group, 0)
            _calls[self.group] = self.number + 1
        self.key = f"{_ROOT}/{self.group}/{self.number}"
        self.store = _store(seconds)

    def record(self) -> dict[str, Any]:
        """What this rank tells the others of its call (its members, for a group not too large)."""
        members = self.members if len(self.members) <= RECORDED_MEMBERS else None
        return {"group": self.group, "words": self.words, "call": self.number, "members": members}

    def read_record(self, rank: int) -> dict[str, Any] | None:
        key = f"{_ROOT}/rank/{rank}"
        if not self.store.check([key]):
            return None
        found: dict[str, Any] = json.loads(_text(self.store.get(key)))
        return found

    # -- deciding ------------------------------------------------------------------------

    def decide(self, outcome: str) -> str:
        """Declare the call ``outcome`` unless it is decided already; return the decision."""
        return _text(self.store.compare_set(f"{self.key}/decision", "", outcome))

    def decided(self) -> str | None:
        key = f"{self.key}/decision"
        return _text(self.store.get(key)) if self.store.check([key]) else None

    def arrive(self) -> Mismatch | None:
        """Count this rank in; return once every member is, else raise (see the module).

        Returns the :class:`Mismatch` found instead, where ranks called verify over
        different groups.
        """
        self.store.set(f"{_ROOT}/rank/{self.me}", json.dumps(self.record()))
        count = int(self.store.add(f"{self.key}/arrived", 1))
        if count >= len(self.members):
            decision = self.decide(_COMPLETE)
        else:
            decision = self._wait(time.monotonic() + self.seconds)
        if decision.startswith("mismatch: "):
            mismatch = json.loads(decision.removeprefix("mismatch: "))
            _skip(mismatch["calls"])
            text = f"the ranks' arguments differ: {mismatch['text']}"
            return Mismatch(text, tuple(sorted(mismatch["ranks"])))
        if decision != _COMPLETE:
            given_up = json.loads(decision.removeprefix("abandoned: "))
            late = count > given_up["arrived"]  # counted in after the others gave up
            raise DistributedError(self._failure(given_up["waited"], late=late))
        return None

    def _wait(self, deadline: float) -> str:
        watched = len(self.members) <= WATCHED
        started = time.monotonic()
        # the ranks of a passing job arrive together: one blocking wait, woken by the store,
        # answers them at once; polling (which can watch for a deadlock) only after it
        if self._block(min(started + WATCH_S, deadline)):
            return _text(self.store.get(f"{self.key}/decision"))
        pause, watch_at = POLL_S[0], started + WATCH_S
        while True:
            found = self.decided()
            if found is not None:
                return found
            now = time.monotonic()
            if now >= deadline:
                return self.decide(self._abandoned())
            if not watched:  # one blocking wait: a large group's ranks do not poll the store
                self._block(deadline)
                continue
            if now >= watch_at:
                deadlock = self._deadlock()
                if deadlock is not None:
                    return deadlock
                watch_at = time.monotonic() + WATCH_S
            time.sleep(min(pause, max(deadline - now, 0.0)))
            pause = min(pause * 1.25, POLL_S[1] if now - started < 1 else POLL_S[2])

    def _block(self, until: float) -> bool:
        """Wait on the store for the call's decision, until ``until`` at most; whether it came."""
        remaining = until - time.monotonic()
        if remaining <= 0:
            return False
        try:
            self.store.wait([f"{self.key}/decision"], datetime.timedelta(seconds=remaining))
        except RuntimeError:  # DistStoreError: no decision yet (or the store's own timeout)
            time.sleep(min(POLL_S[1], max(until - time.monotonic(), 0.0)))
            return False
        return True

    def _abandoned(self) -> str:
        """The words that give the call up: how long this rank waited, how many had arrived."""
        arrived = int(self.store.add(f"{self.key}/arrived", 0))
        return "abandoned: " + json.dumps({"waited": self.seconds, "arrived": arrived})

    # -- saying who is missing -----------------------------------------------------------

    def _deadlock(self) -> str | None:
        """A peer waiting in the call this rank would make next over a group that holds it."""
        for rank in self.members:
            if rank == self.me:
                continue
            found = self.read_record(rank)
            if found is None or found["group"] == self.group or not self._holds_me(found):
                continue
            other = f"{_ROOT}/{found['group']}/{found['call']}"
            with _lock:
                made = _calls.get(found["group"], 0)
            # only the call this rank would make next over that group is one it holds up: a
            # peer past it went on after that call ended -- decided already, for this rank too
            if made != found["call"] or self.store.check([f"{other}/decision"]):
                continue
            if not self.store.check([f"{other}/arrived"]):
                continue
            message = _mismatch((rank, found), (self.me, self.record()))
            self.store.compare_set(f"{other}/decision", "", message)
            return self.decide(message)
        return None

    def _holds_me(self, record: dict[str, Any]) -> bool:
        """Whether the group of a peer's call holds this rank (unknown: taken as not)."""
        if str(record["group"]).startswith("world"):
            return True
        members = record.get("members")
        return members is not None and self.me in members

    def _failure(self, waited: float, *, late: bool) -> str:
        head = f"hwrng.verify over {self.words}"
        if int(self.store.add(f"{self.key}/namer", 1)) == 1:
            text = self._name_missing()
            self.store.set(f"{self.key}/missing", json.dumps({"text": text}))
        else:
            text = self._told()
        if late:
            return (
                f"{head}: the other ranks stopped waiting (timeout={waited:g} s) before this "
                f"rank ({self.me}) arrived; {text}"
            )
        return f"{head}: not every rank arrived within timeout={waited:g} s; {text}"

    def _told(self) -> str:
        key = f"{self.key}/missing"
        deadline = time.monotonic() + TELL_S
        while time.monotonic() < deadline:
            if self.store.check([key]):
                return str(json.loads(_text(self.store.get(key)))["text"])
            time.sleep(0.05)
        return "the rank reading the others' records did not say which are missing in time"

    def _name_missing(self) -> str:
        arrived = int(self.store.add(f"{self.key}/arrived", 0))
        missing = len(self.members) - arrived
        absent: list[tuple[int, dict[str, Any] | None]] = []
        for rank in self.members:
            if len(absent) >= min(missing, NAMED):
                break
            found = self.read_record(rank)
            here = found is not None and (found["group"], found["call"]) == (
                self.group,
                self.number,
            )
            if not here:
                absent.append((rank, found))
        if not absent:
            return f"{max(missing, 0)} rank(s) did not arrive"
        parts = []
        for rank, found in absent:
            if found is None:
                parts.append(f"rank {rank} (never called hwrng.verify)")
            elif found["group"] != self.group:
                parts.append(
                    f"rank {rank} (its latest hwrng.verify is over {found['words']}: the ranks' "
                    "group= arguments differ)"
                )
            else:
                parts.append(
                    f"rank {rank} (its latest hwrng.verify over these ranks is an earlier "
                    f"call, {found['call']})"
                )
        more = f" and {missing - len(absent)} more" if missing > len(absent) else ""
        return f"did not arrive: {', '.join(parts)}{more}"


def _mismatch(*sides: tuple[int, dict[str, Any]]) -> str:
    """The decision for two ranks' calls over different groups, as each rank's record has them.

    The same words whichever of the two ranks finds it (lowest rank first): both may find it at
    once, and every rank involved reports the one decision.
    """
    (first, one), (second, other) = sorted(sides, key=lambda side: side[0])
    text = (
        f"rank {first} called hwrng.verify over {one['words']} while rank {second} called it "
        f"over {other['words']}: every rank of a group must call verify with the same group=, "
        "in the same order"
    )
    calls = [[one["group"], one["call"]], [other["group"], other["call"]]]
    return "mismatch: " + json.dumps({"text": text, "calls": calls, "ranks": [first, second]})


def _skip(calls: list[list[Any]]) -> None:
    """Count both calls of a mismatch as made, so the ranks stay in step for later calls."""
    with _lock:
        for group, number in calls:
            _calls[group] = max(_calls.get(group, 0), int(number) + 1)


@dataclass(frozen=True)
class Mismatch:
    """Ranks that called verify over different groups: what every rank involved reports.

    Attributes
    ----------
    text
        The mismatch, in words (the same on every rank involved).
    ranks
        The two ranks whose calls were found at odds.
    """

    text: str
    ranks: tuple[int, ...]


def arrive(whole: Comm, seconds: float) -> Mismatch | None:
    """Meet the other ranks of ``whole`` in this call of ``verify``, before any collective.

    Returns ``None`` once every member has arrived, or the :class:`Mismatch`
    found when ranks called verify over different groups; raises
    :class:`~hwrng.DistributedError` naming the ranks that did not arrive
    within ``seconds`` (see the module). A group of one has no one to meet, and
    torch's fake process group (one process playing the world, for
    measurements) no one who could come.
    """
    import torch.distributed as dist

    if whole.size == 1 or played_by_one_process(whole.group):
        return None
    members = whole.global_ranks()
    me = whole.global_rank(whole.rank)
    try:
        return _Call(members, me, int(dist.get_world_size()), seconds).arrive()
    except DistributedError:
        raise
    except RuntimeError as error:  # the store did not answer (DistStoreError), or went away
        raise DistributedError(
            f"hwrng.verify could not meet the other ranks through the rendezvous store within "
            f"{seconds:g} s: {type(error).__name__}: {str(error).strip()[:300]}"
        ) from error

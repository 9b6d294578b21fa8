"""Before any collective: every rank of the group reaches this ``verify``, within the timeout.

A collective waits for every member, for as long as its group allows --
torch's default is 30 minutes -- and says nothing of who is missing. So
``verify`` first meets its peers through the job's rendezvous store (the
default process group's ``TCPStore``, through a connection of its own that
gives up after the timeout), which every backend has and which knows who
arrived:

* each rank writes its *record* (the group of its call and the call's number
  over that group) and counts itself in (``add``) under the call's key. A
  group is the process group, not its ranks: ``new_group`` of every rank is
  not the default group, and calls over the two never meet;
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
words whichever ranks find it (both calls decided in one order, the second
in the first's words, so ranks finding it at once agree), which every rank
of both reports as a failing verdict naming it.

A rank whose own arguments are refused still takes part: it decides the
call refused, naming its error, then counts itself in (:func:`refuse`); its
peers, waiting or still to come, report that at once instead of waiting for
it.

The store keeps the keys of the latest calls over each group only: the rank
that completes a call's count removes the keys of every earlier call over
the group, which no rank can read any more (every member is past them).

Nothing here is a collective: a call that fails here leaves every process
group untouched. Calls are numbered per group on each rank, so ranks that
call ``verify(group=g)`` and ranks that do not stay in step for later calls;
a late rank consumes the call it missed, and a mismatch counts both calls as
made on every rank that reads it, so ranks stay in step after a failure too.
"""

from __future__ import annotations

import datetime
import json
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

from hwrng._collectives import digest_of, group_name, played_by_one_process
from hwrng._exceptions import DistributedError, HwrngWarning

__all__ = ["WATCHED", "Mismatch", "Refused", "arrive", "refuse"]

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
#: The most characters of a refused call's error its peers are told.
REFUSAL_CHARS = 2000

_ROOT = "hwrng/verify"
_COMPLETE = "complete"
#: The keys of one call under its own key: every one is removed once a later call over the
#: group has every member counted in (none of them can still read it then).
_CALL_KEYS = ("arrived", "decision", "namer", "missing")
_lock = threading.Lock()
_calls: dict[str, int] = {}
_undeletable: list[str] = []


_connection: list[tuple[Any, Any]] = []


def _store(seconds: float) -> Any:
    """The job's rendezvous store, through a connection of verify's own.

    That connection gives up after ``seconds``: a store whose host is stopped
    must not hold a rank for the store's own timeout. Where the store cannot
    be cloned (torch < 2.8, or a store written in Python, whose ``clone`` torch
    leaves unimplemented), the default store itself, with its own timeout.
    """
    from torch.distributed import distributed_c10d

    base = distributed_c10d._get_default_store()
    with _lock:
        if not _connection or _connection[0][0] is not base:
            _connection[:] = [(base, _clone(base))]
        own = _connection[0][1]
    if own is None:
        return base
    own.set_timeout(datetime.timedelta(seconds=seconds))
    return own


def _clone(store: Any) -> Any:
    """A new connection to ``store``, or ``None`` where it cannot make one."""
    clone = getattr(store, "clone", None)
    if not callable(clone):
        return None
    try:
        return clone()
    except (NotImplementedError, RuntimeError):  # "Tried to call pure virtual function"
        return None


@dataclass(frozen=True)
class _Group:
    """The group of a call as the store knows it: its key, its members, its name, in words."""

    key: str
    members: list[int]
    name: str
    everyone: bool  # every rank of the world is a member
    words: str


def _group_of(group: Any) -> _Group:
    """``group`` (``None``: the default process group) as the store knows it.

    The default group's calls are keyed by the world's size; another group's by
    its c10d name and its members: two groups of the same ranks (``new_group``
    of every rank, beside the default group) are two groups, whose calls never
    meet.
    """
    import torch.distributed as dist

    world = int(dist.get_world_size())
    name = group_name(group)
    if group is None or name == group_name(None):
        return _Group(f"world{world}", list(range(world)), name, True, f"all {world} ranks")
    members = [int(r) for r in dist.get_process_group_ranks(group)]
    everyone = sorted(members) == list(range(world))
    if everyone:
        words = f"all {world} ranks"
    else:
        shown = ", ".join(str(r) for r in members[:NAMED])
        more = f", ... ({len(members)} ranks)" if len(members) > NAMED else ""
        words = f"ranks [{shown}{more}]"
    return _Group(f"group{digest_of(name, tuple(members)):x}", members, name, everyone, words)


def _apart(one: dict[str, Any], other: dict[str, Any]) -> tuple[str, str]:
    """Two calls' groups in words, told apart by their process groups where the ranks are alike."""
    if one["words"] != other["words"]:
        return one["words"], other["words"]
    return _named(one), _named(other)


def _named(record: dict[str, Any]) -> str:
    if str(record["group"]).startswith("world"):
        return f"{record['words']} (the default process group)"
    return f"{record['words']} (process group {record['name']!r})"


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class _Call:
    """One call of ``verify`` on this rank, as the store sees it."""

    def __init__(self, group: _Group, me: int, seconds: float) -> None:
        self.members = group.members
        self.me = me
        self.seconds = seconds
        self.group, self.words = group.key, group.words
        self.name, self.everyone = group.name, group.everyone
        with _lock:
            self.number = _calls.get(self.group, 0)
            _calls[self.group] = self.number + 1
        self.key = self._key(self.number)
        self.store = _store(seconds)

    def _key(self, number: int) -> str:
        return f"{_ROOT}/{self.group}/{number}"

    def record(self) -> dict[str, Any]:
        """What this rank tells the others of its call (its members, for a group not too large)."""
        members = self.members if len(self.members) <= RECORDED_MEMBERS else None
        return {
            "group": self.group,
            "words": self.words,
            "name": self.name,
            "call": self.number,
            "members": members,
            "everyone": self.everyone,
        }

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

    def arrive(self) -> Mismatch | Refused | None:
        """Count this rank in; return once every member is, else raise (see the module).

        Returns the :class:`Mismatch` found instead, where ranks called verify over
        different groups, or the :class:`Refused` call of a peer whose arguments
        were refused.
        """
        count = self._count_in()
        if count >= len(self.members):
            decision = self.decide(_COMPLETE)
        else:
            decision = self._wait(time.monotonic() + self.seconds)
        if count == len(self.members):
            self._remove_earlier()
        stopped = _stopped(decision)
        if stopped is not None:
            return stopped
        if decision != _COMPLETE:
            given_up = json.loads(decision.removeprefix("abandoned: "))
            late = count > given_up["arrived"]  # counted in after the others gave up
            raise DistributedError(self._failure(given_up["waited"], late=late))
        return None

    def refuse(self, text: str) -> None:
        """Decide the call refused, naming it, then count this rank in: its peers stop at once.

        Decided first: the count cannot complete without this rank, so no peer
        can declare the call complete before it.
        """
        refusal = {"rank": self.me, "text": text[:REFUSAL_CHARS]}
        decision = self.decide("refused: " + json.dumps(refusal))
        count = self._count_in()
        if count == len(self.members):
            self._remove_earlier()
        _stopped(decision)  # a mismatch decided first counts both calls as made, here too

    def _count_in(self) -> int:
        self.store.set(f"{_ROOT}/rank/{self.me}", json.dumps(self.record()))
        return int(self.store.add(f"{self.key}/arrived", 1))

    def _remove_earlier(self) -> None:
        """Remove the keys of every earlier call over this group that are still in the store.

        Every member has counted itself into this call, so none is still in an
        earlier one, nor can a rank watching for a deadlock look at one (it
        looks only at the call it would make next over a group that holds it).
        The group's ``kept`` key says from which call on keys may remain: calls
        whose count never completed (a mismatch, a rank that never came) are
        removed with the next call that completes. What stays is the latest
        calls' keys of each group: bounded by the groups a job verifies over,
        never by the number of calls.
        """
        kept_key = f"{_ROOT}/{self.group}/kept"
        try:
            kept = int(self.store.add(kept_key, 0))
            for number in range(kept, self.number):
                for name in _CALL_KEYS:
                    self.store.delete_key(f"{self._key(number)}/{name}")
            self.store.add(kept_key, self.number - kept)
        except (AttributeError, NotImplementedError, RuntimeError) as error:  # cannot delete
            if not _undeletable:  # the call itself is decided: it goes on
                _undeletable.append(type(self.store).__name__)
                warnings.warn(
                    f"hwrng.verify cannot remove its keys from the rendezvous store "
                    f"({type(self.store).__name__}: {type(error).__name__}: "
                    f"{str(error).strip()[:300]}): its calls leave 2 to 4 keys each behind",
                    HwrngWarning,
                    stacklevel=4,
                )

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
            return self._decide_both(other, _mismatch((rank, found), (self.me, self.record())))
        return None

    def _decide_both(self, other: str, message: str) -> str:
        """Decide this call and a peer's ``other`` call as one mismatch; this call's decision.

        Where a group holds more than two ranks, several may find the mismatch
        at once, each in its own words (the two ranks it names). So both calls
        are decided in one order (by key), and the second takes the words the
        first was decided with, where those name these two calls: every rank
        of both calls then reads the same words.
        """
        first, second = sorted((self.key, other))
        opened = _text(self.store.compare_set(f"{first}/decision", "", message))
        if _names_calls(opened, {first, second}):
            message = opened
        closed = _text(self.store.compare_set(f"{second}/decision", "", message))
        return opened if first == self.key else closed

    def _holds_me(self, record: dict[str, Any]) -> bool:
        """Whether the group of a peer's call holds this rank (unknown: taken as not)."""
        if str(record["group"]).startswith("world") or record.get("everyone"):
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
                _, words = _apart(self.record(), found)
                parts.append(
                    f"rank {rank} (its latest hwrng.verify is over {words}: the ranks' "
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

    The same words whichever of the two ranks finds it (lowest rank first); where others find
    it too, in their own words, :meth:`_Call._decide_both` keeps one decision for both calls.
    """
    (first, one), (second, other) = sorted(sides, key=lambda side: side[0])
    one_words, other_words = _apart(one, other)
    text = (
        f"rank {first} called hwrng.verify over {one_words} while rank {second} called it "
        f"over {other_words}: every rank of a group must call verify with the same group=, "
        "in the same order"
    )
    calls = [[one["group"], one["call"]], [other["group"], other["call"]]]
    return "mismatch: " + json.dumps({"text": text, "calls": calls, "ranks": [first, second]})


def _names_calls(decision: str, keys: set[str]) -> bool:
    """Whether ``decision`` is a mismatch of exactly the calls under ``keys``."""
    if not decision.startswith("mismatch: "):
        return False
    calls = json.loads(decision.removeprefix("mismatch: "))["calls"]
    return {f"{_ROOT}/{group}/{number}" for group, number in calls} == keys


def _skip(calls: list[list[Any]]) -> None:
    """Count both calls of a mismatch as made, so the ranks stay in step for later calls."""
    with _lock:
        for group, number in calls:
            _calls[group] = max(_calls.get(group, 0), int(number) + 1)


def _stopped(decision: str) -> Mismatch | Refused | None:
    """What a decision other than complete or abandoned tells every rank that reads it."""
    if decision.startswith("mismatch: "):
        mismatch = json.loads(decision.removeprefix("mismatch: "))
        _skip(mismatch["calls"])
        text = f"the ranks' arguments differ: {mismatch['text']}"
        return Mismatch(text, tuple(sorted(mismatch["ranks"])))
    if decision.startswith("refused: "):
        refusal = json.loads(decision.removeprefix("refused: "))
        return Refused(str(refusal["text"]), int(refusal["rank"]))
    return None


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


@dataclass(frozen=True)
class Refused:
    """A peer's call refused its own arguments: what every other rank of the call reports.

    Attributes
    ----------
    text
        The refusal, ``"ErrorName: message"``, as the refused rank raised it.
    rank
        The refused rank (the first, where several were).
    """

    text: str
    rank: int


def _meeting(group: Any) -> tuple[_Group, int] | None:
    """``group`` as the store knows it and this rank's global rank; ``None``: no one to meet.

    A group of one has no one to meet, and torch's fake process group (one
    process playing the world, for measurements) no one who could come.
    """
    import torch.distributed as dist

    if int(dist.get_world_size(group)) == 1 or played_by_one_process(group):
        return None
    return _group_of(group), int(dist.get_rank())


def arrive(group: Any, seconds: float) -> Mismatch | Refused | None:
    """Meet the other ranks of ``group`` in this call of ``verify``, before any collective.

    Returns ``None`` once every member has arrived; the :class:`Mismatch`
    found when ranks called verify over different groups; or the
    :class:`Refused` call of a rank whose arguments were wrong. Raises
    :class:`~hwrng.DistributedError` naming the ranks that did not arrive
    within ``seconds`` (see the module).
    """
    meeting = _meeting(group)
    if meeting is None:
        return None
    try:
        return _Call(*meeting, seconds).arrive()
    except DistributedError:
        raise
    except RuntimeError as error:  # the store did not answer (DistStoreError), or went away
        raise DistributedError(
            f"hwrng.verify could not meet the other ranks through the rendezvous store within "
            f"{seconds:g} s: {type(error).__name__}: {str(error).strip()[:300]}"
        ) from error


def refuse(group: Any, error: BaseException, seconds: float) -> None:
    """Tell the other ranks of ``group`` that this rank's call refused its arguments.

    This rank counts itself into the call and decides it refused, naming
    ``error``: every peer, waiting or still to come, gets a failing report at
    once instead of waiting for this rank (the caller then raises ``error``).
    Where the store cannot be reached within ``seconds``, a warning says so
    (the peers then name this rank at their timeout).
    """
    try:
        meeting = _meeting(group)
        if meeting is not None:
            _Call(*meeting, seconds).refuse(f"{type(error).__name__}: {error}")
    except RuntimeError as failure:  # the store did not answer (DistStoreError), or went away
        warnings.warn(
            f"hwrng.verify could not tell the other ranks through the rendezvous store that this "
            f"rank's call was refused ({type(failure).__name__}: {str(failure).strip()[:300]}): "
            "they wait for it until their timeout",
            HwrngWarning,
            stacklevel=3,
        )

"""The collectives the judging algorithm asks for, and the driver that runs them on real groups.

The algorithm (``_judging``) is written as a generator: each collective it
needs is *yielded* as a request, and the answer comes back through ``send``.
:func:`drive` answers with real ``torch.distributed`` collectives over this
rank's groups; ``_simulator`` answers for every rank of a simulated world at
once, in one process, with real values -- so the very code that runs on a
cluster is what the property tests check against a brute-force oracle.

Requests name their group by *axis*: an index into the judged grid's axes
(the mesh dims of size > 1, this rank's line along each), or :data:`WHOLE`,
the whole group being judged. Positions along an axis are coordinates;
positions in the whole group are group ranks.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from hwrng._collectives import MESSAGE_BYTES, Comm

__all__ = [
    "WHOLE",
    "Announce",
    "Exchange",
    "Line",
    "Reduce",
    "Request",
    "Steps",
    "Total",
    "collect_texts",
    "drive",
    "lowest_flagged",
]

#: The axis of a request over the whole judged group.
WHOLE = -1

T = TypeVar("T")


@dataclass(frozen=True)
class Reduce:
    """Element-wise maxima of ``high`` and minima of ``low`` over the group.

    Answered with ``(maxima, minima)``.
    """

    axis: int
    high: tuple[int, ...]
    low: tuple[int, ...] = ()


@dataclass(frozen=True)
class Total:
    """Element-wise sums of ``words`` over the group."""

    axis: int
    words: tuple[int, ...]


@dataclass(frozen=True)
class Exchange:
    """Send ``outgoing[c]`` to the member at coordinate ``c``.

    Answered with what each member sent here, by coordinate.
    """

    axis: int
    outgoing: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Announce:
    """The text of the member at ``source``, cut to :data:`MESSAGE_BYTES`, on every member."""

    axis: int
    text: str
    source: int


Request = Reduce | Total | Exchange | Announce
#: A judging program: yields requests, receives their answers, returns its result.
Steps = Generator[Request, Any, T]


def cut(text: str) -> str:
    """``text`` as a broadcast delivers it: at most :data:`MESSAGE_BYTES` bytes of UTF-8."""
    return text.encode("utf-8")[:MESSAGE_BYTES].decode("utf-8", errors="replace")


def lowest_flagged(flagged: bool, position: int, size: int, after: int) -> Steps[int | None]:
    """The lowest position above ``after`` whose ``flagged`` is true, or ``None``. One reduction."""
    mine = position if flagged and position > after else size
    _, (lowest,) = yield Reduce(WHOLE, (), (mine,))
    return None if lowest >= size else lowest


def collect_texts(
    text: str | None, position: int, size: int, limit: int
) -> Steps[list[tuple[int, str]]]:
    """``(position, text)`` of the lowest ``limit`` members that have a text, on every member.

    One reduction and one broadcast per text, and one reduction to find there is no more.
    """
    collected: list[tuple[int, str]] = []
    last = -1
    while len(collected) < limit:
        found = yield from lowest_flagged(text is not None, position, size, last)
        if found is None:
            break
        announced = yield Announce(WHOLE, text or "", found)
        collected.append((found, announced))
        last = found
    return collected


def encode_json(items: list[Any]) -> str | None:
    """``items`` as JSON that fits one broadcast, dropping the last ones until it does."""
    if not items:
        return None
    kept = list(items)
    while kept:
        text = json.dumps(kept)
        if len(text.encode()) <= MESSAGE_BYTES:
            return text
        kept.pop()
    return json.dumps([])


@dataclass(frozen=True)
class Line:
    """A rank's group along one axis, and the group position of each coordinate on it."""

    comm: Comm
    positions: Sequence[int]


def drive(steps: Steps[T], whole: Comm, lines: Sequence[Line]) -> T:
    """Run ``steps`` with real collectives: over ``whole`` or ``lines[axis]``."""
    answer: Any = None
    while True:
        try:
            request = steps.send(answer)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        answer = _answer(request, whole, lines)


def _answer(request: Request, whole: Comm, lines: Sequence[Line]) -> Any:
    line = None if request.axis == WHOLE else lines[request.axis]
    comm = whole if line is None else line.comm
    if isinstance(request, Reduce):
        values = comm.max(list(request.high), negated=list(request.low))
        return values[: len(request.high)], values[len(request.high) :]
    if isinstance(request, Total):
        return comm.sum(list(request.words))
    if isinstance(request, Announce):
        source = request.source if line is None else line.positions[request.source]
        return comm.broadcast_text(request.text, source)
    if line is None:  # an exchange over the whole group: positions are group ranks
        return comm.exchange(list(request.outgoing))
    by_position: list[Sequence[int]] = [()] * comm.size
    for coordinate, words in enumerate(request.outgoing):
        by_position[line.positions[coordinate]] = words
    received = comm.exchange(by_position)
    return [received[position] for position in line.positions]

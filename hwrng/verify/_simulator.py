"""A whole world of ranks judged in one process, with real values: the collectives, in memory.

torch's fake process group answers every collective at once with no real
data, so it measures what a rank sends, never whether the verdict is right.
:func:`simulate` runs the judging program of every simulated rank of a grid
in lockstep and answers each request as the real collective would -- with
the values the members of the group really sent -- so the verdicts (and the
problems each owner finds) are those the job itself would reach. It also
refuses what would hang a real job: members of one group asking for
different collectives, or a rank finishing while others still wait.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hwrng._mesh import unravel_index
from hwrng.verify._routing import Place
from hwrng.verify._wire import WHOLE, Announce, Exchange, Reduce, Request, Steps, Total, cut

__all__ = ["Traffic", "grid", "simulate"]

T = TypeVar("T")


def grid(sizes: Sequence[int]) -> list[Place]:
    """Every rank of a grid of ``sizes`` (row-major; dims of size 1 dropped)."""
    axes = tuple(s for s in sizes if s > 1)
    world = math.prod(axes)
    return [Place(r, r, world, axes, unravel_index(r, axes)) for r in range(world)]


@dataclass
class Traffic:
    """What the simulated ranks sent: collectives issued and words each rank handed over.

    Attributes
    ----------
    collectives
        Collectives each rank took part in (the same for every rank).
    words
        Per rank, the words it put into collectives (exchange counts included).
    """

    collectives: int = 0
    words: list[int] = field(default_factory=list)


def simulate(
    places: Sequence[Place],
    program: Callable[[Place], Steps[T]],
    traffic: Traffic | None = None,
) -> list[T]:
    """Run ``program(place)`` for every rank of ``places`` together; return each rank's result."""
    size = len(places)
    running = [program(place) for place in places]
    results: list[Any] = [None] * size
    answers: list[Any] = [None] * size
    if traffic is not None:
        traffic.words = [0] * size
    while True:
        requests: list[Request | None] = []
        for rank, steps in enumerate(running):
            try:
                requests.append(steps.send(answers[rank]))
            except StopIteration as done:
                results[rank] = done.value
                requests.append(None)
        if all(r is None for r in requests):
            return results
        if any(r is None for r in requests):
            finished = [rank for rank, r in enumerate(requests) if r is None]
            raise RuntimeError(f"ranks {finished[:8]} finished while others wait in a collective")
        asked: list[Request] = [r for r in requests if r is not None]
        kinds = {(type(r).__name__, r.axis) for r in asked}
        if len(kinds) > 1:
            raise RuntimeError(f"ranks ask for different collectives at once: {sorted(kinds)}")
        if traffic is not None:
            traffic.collectives += 1 + isinstance(asked[0], Exchange)
            for rank, request in enumerate(asked):
                traffic.words[rank] += _words(request)
        answers = _answer_all(asked, places)


def _words(request: Request) -> int:
    if isinstance(request, Reduce):
        return len(request.high) + len(request.low)
    if isinstance(request, Total):
        return len(request.words)
    if isinstance(request, Exchange):
        return len(request.outgoing) + sum(len(w) for w in request.outgoing)
    return 0


def _groups(places: Sequence[Place], axis: int) -> list[list[int]]:
    """The ranks of each group along ``axis`` (by coordinate), or the whole world."""
    if axis == WHOLE:
        return [list(range(len(places)))]
    lines: dict[tuple[int, ...], list[int]] = {}
    for rank, place in enumerate(places):
        rest = place.coordinate[:axis] + place.coordinate[axis + 1 :]
        lines.setdefault(rest, []).append(rank)
    return [sorted(line, key=lambda r: places[r].coordinate[axis]) for line in lines.values()]


def _answer_all(requests: list[Request], places: Sequence[Place]) -> list[Any]:
    answers: list[Any] = [None] * len(requests)
    for members in _groups(places, requests[0].axis):
        asked = [requests[r] for r in members]
        first = asked[0]
        if isinstance(first, Reduce):
            reduces = [r for r in asked if isinstance(r, Reduce)]
            if len({(len(r.high), len(r.low)) for r in reduces}) > 1:
                raise RuntimeError("members of one group reduce different numbers of words")
            high = [max(v) for v in zip(*(r.high for r in reduces), strict=True)]
            low = [min(v) for v in zip(*(r.low for r in reduces), strict=True)]
            for rank in members:
                answers[rank] = (list(high), list(low))
        elif isinstance(first, Total):
            totals = [
                sum(v) for v in zip(*(r.words for r in asked if isinstance(r, Total)), strict=True)
            ]
            for rank in members:
                answers[rank] = list(totals)
        elif isinstance(first, Announce):
            sources = {r.source for r in asked if isinstance(r, Announce)}
            if len(sources) > 1:
                raise RuntimeError(f"members of one group broadcast from {sorted(sources)}")
            source = asked[first.source]
            text = cut(source.text if isinstance(source, Announce) else "")
            for rank in members:
                answers[rank] = text
        else:
            exchanges = [r for r in asked if isinstance(r, Exchange)]
            if any(len(r.outgoing) != len(members) for r in exchanges):
                raise RuntimeError("an exchange must send one list to every member")
            for position, rank in enumerate(members):
                answers[rank] = [r.outgoing[position] for r in exchanges]
    return answers

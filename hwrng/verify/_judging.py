"""Judging every rank's observations at a cost per rank set by the mesh's dims, never the world.

:func:`judging` applies the rule of ``_rule`` to the observations of a whole
job -- every pair of ranks, not only ranks on one mesh line -- without
gathering them anywhere:

1. *Where do checks vary?* One reduction along each axis (this rank's line
   along one mesh dim) of each check's observations, word for word (maxima
   and minima), tells exactly whether the check is the same along the line;
   one reduction over the whole group tells, per check, the axes along which
   it varies anywhere.
   Along the others every layer of ranks is a copy of every other, so a
   layer is judged for all (see ``_routing``): a dim of replicas, however
   long, costs one fixed-size reduction and nothing more.
2. *The verdict.* Each observation becomes two fixed-size tallies -- one
   keyed by its agree key, one by its digest -- routed to their owners
   within the layer, merging on the way; an owner that sees two digests
   under one agree key, or two apart keys under one digest, has found a
   violation. One reduction gives every rank every check's verdict. Exact:
   digests are compared for equality, so a hash collision can only make an
   owner hold two keys, never miss a duplicate.
3. *Naming*, only for checks that failed: the same routing over every axis,
   with exact holdings, first by agree key (each owner finds its group's
   most common digest, and the minority or tie), then the compared digests
   by digest (ranks of different apart keys that drew one digest). One sum
   counts the problems; the lowest ``shown`` ranks that own problems
   broadcast them, one fixed-size message each.

Cost per rank of a passing job: one reduction per axis and two over the
whole group (a few words per check each), plus, per axis some check varies
along, one ``all_to_all`` of one word per member of the line and one of the
few records routed -- only a varying dim's own size enters.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hwrng._collectives import WORD_LIMIT
from hwrng.verify._records import Holding, Role, Tally, merge_holdings, merge_tallies
from hwrng.verify._routing import Place, route
from hwrng.verify._rule import Kind, Observation, Problem, agreement_problem, apart_problem
from hwrng.verify._wire import WHOLE, Reduce, Steps, Total, collect_texts, encode_json

__all__ = ["Judged", "Outcome", "judging"]

#: Ranks listed, at most, for each problem collected.
RANKS_PER_PROBLEM = 64


@dataclass(frozen=True)
class Judged:
    """The verdict of one check, the same on every rank.

    Attributes
    ----------
    problems
        One line per violation shown (each naming ranks and coordinates).
    ranks
        The ranks the shown problems name.
    hidden
        Violations found but not shown (past the naming round's limit).
    compared_equal, compared_apart
        Whether some ranks were required to agree, or to differ.
    alike
        Whether a shown problem is of ranks that should differ drawing alike.
    """

    problems: tuple[str, ...]
    ranks: tuple[int, ...]
    hidden: int
    compared_equal: bool
    compared_apart: bool
    alike: bool = False

    @property
    def ok(self) -> bool:
        """Whether no violation was found."""
        return not self.problems and not self.hidden


@dataclass(frozen=True)
class Outcome:
    """What :func:`judging` returns on one rank.

    Attributes
    ----------
    judged
        One verdict per check, the same on every rank.
    owned
        The problems this rank found as an owner in the naming round (every
        problem of the job is owned by exactly one rank).
    varying
        Per check, the axes along which its observations vary.
    """

    judged: list[Judged]
    owned: list[Problem]
    varying: list[tuple[int, ...]]


#: Observations per check a line's reduction compares word for word; a rank with more makes
#: its lines vary (exact either way: a check is never taken as the same where it is not).
COMPARED_PER_CHECK = 2


def _words(observations: Sequence[Observation], coordinate: int) -> list[int]:
    """One check's observations as words for a line's reduction.

    Their maxima equal their minima along the line exactly when every rank of
    the line holds the same observations.
    """
    ordered = sorted(
        (int(o.agree is not None), o.agree or 0, o.apart, o.digest, int(o.empty))
        for o in observations
    )
    words = [len(ordered), coordinate if len(ordered) > COMPARED_PER_CHECK else 0]
    for slot in range(COMPARED_PER_CHECK):
        words += ordered[slot] if slot < len(ordered) else (0, 0, 0, 0, 0)
    return words


def judging(
    observations: Sequence[Sequence[Observation]],
    place: Place,
    name: Callable[[int], str],
    *,
    shown: int = 16,
    limit: int = RANKS_PER_PROBLEM,
) -> Steps[Outcome]:
    """Judge every rank's observations; a collective over the whole group (see the module).

    Parameters
    ----------
    observations
        This rank's observations, per check (the same checks on every rank; a
        rank may hold none, or several, for a check).
    place
        Where this rank sits among the judged ranks.
    name
        Labels a rank in problem texts.
    shown
        At most this many ranks broadcast the problems they own.
    limit
        Ranks listed, at most, per problem.
    """
    checks = len(observations)
    axes = range(len(place.sizes))
    here: list[list[bool]] = []
    for axis in axes:
        rows = [_words(o, place.coordinate[axis]) for o in observations]
        words = tuple(w for row in rows for w in row)
        high, low = yield Reduce(axis, words, words)
        width = len(rows[0]) if rows else 0
        here.append(
            [
                high[c * width : (c + 1) * width] != low[c * width : (c + 1) * width]
                for c in range(checks)
            ]
        )
    drawn = [[o.apart for o in obs if not o.empty] for obs in observations]
    high, low = yield Reduce(
        WHOLE,
        tuple(int(here[a][c]) for c in range(checks) for a in axes)
        + tuple(max(d, default=0) for d in drawn),
        tuple(min(d, default=WORD_LIMIT - 1) for d in drawn),
    )
    varying = [tuple(a for a in axes if high[c * len(axes) + a]) for c in range(checks)]
    tops = high[checks * len(axes) :]
    compared_apart = [tops[c] > low[c] for c in range(checks)]

    tallies = [
        tally
        for c, obs in enumerate(observations)
        for o in obs
        for tally in (
            [Tally(Role.AGREE, c, o.agree, o.digest, o.digest)] if o.agree is not None else []
        )
        + ([] if o.empty else [Tally(Role.APART, c, o.digest, o.apart, o.apart)])
    ]
    owned = yield from route(tallies, place, dict(enumerate(varying)), merge_tallies)
    failed = [0] * checks
    equal = [
        int(any(o.agree is not None for o in obs) and len(varying[c]) < len(axes))
        for c, obs in enumerate(observations)
    ]
    for tally in owned:
        failed[tally.check] |= tally.split
        if tally.role is Role.AGREE and tally.count > 1:
            equal[tally.check] = 1
    (verdict, _) = yield Reduce(WHOLE, tuple(failed) + tuple(equal))
    compared_equal = [bool(e) for e in verdict[checks:]]
    failing = [c for c in range(checks) if verdict[c]]
    problems: list[Problem] = []
    if failing:
        problems = yield from _name(observations, failing, place, name, limit)
    counts = [0] * checks
    if failing:
        for problem in problems:
            counts[problem.check] += 1
        totals = yield Total(WHOLE, tuple(counts[c] for c in failing))
        for c, total in zip(failing, totals, strict=True):
            counts[c] = total
        collected = yield from _collect(problems, place, shown, limit)
    else:
        collected = []
    judged = []
    for c in range(checks):
        mine = sorted((ranks, text, kind) for check, kind, text, ranks in collected if check == c)
        judged.append(
            Judged(
                problems=tuple(text for _, text, _ in mine),
                ranks=tuple(sorted({r for ranks, _, _ in mine for r in ranks})),
                hidden=counts[c] - len(mine),
                compared_equal=compared_equal[c],
                compared_apart=compared_apart[c],
                alike=any(kind == Kind.ALIKE.value for _, _, kind in mine),
            )
        )
    return Outcome(judged, problems, varying)


def _name(
    observations: Sequence[Sequence[Observation]],
    failing: list[int],
    place: Place,
    name: Callable[[int], str],
    limit: int,
) -> Steps[list[Problem]]:
    """The naming round: exact holdings over every axis, by agree key, then by digest."""
    everywhere = tuple(range(len(place.sizes)))
    varying = dict.fromkeys(failing, everywhere)
    mine = (place.rank,)

    def merge(held: list[Holding]) -> list[Holding]:
        return merge_holdings(held, limit)

    agreeing = [
        Holding(Role.AGREE, c, o.agree, o.digest, o.apart, o.empty, 1, mine)
        for c in failing
        for o in observations[c]
        if o.agree is not None
    ]
    owned = yield from route(agreeing, place, varying, merge)
    problems: list[Problem] = []
    compared = [
        Holding(Role.APART, c, 0, o.digest, o.apart, False, 1, mine)
        for c in failing
        for o in observations[c]
        if o.agree is None and not o.empty
    ]
    for group in _groups(owned, lambda h: (h.check, h.agree)):
        problem, majority = agreement_problem(group, name, limit)
        problems += [problem] if problem is not None else []
        compared += majority
    owned = yield from route(compared, place, varying, merge)
    for group in _groups(owned, lambda h: (h.check, h.digest)):
        problem = apart_problem(group, name, limit)
        problems += [problem] if problem is not None else []
    return problems


def _groups(
    holdings: list[Holding], key: Callable[[Holding], tuple[int, int]]
) -> list[list[Holding]]:
    grouped: dict[tuple[int, int], list[Holding]] = {}
    for holding in holdings:
        grouped.setdefault(key(holding), []).append(holding)
    return [grouped[k] for k in sorted(grouped)]


def _collect(
    problems: list[Problem], place: Place, shown: int, limit: int
) -> Steps[list[tuple[int, str, str, list[int]]]]:
    """``(check, kind, text, ranks)`` of the problems the lowest ``shown`` owners found."""
    ordered = sorted(problems, key=lambda p: (p.check, p.ranks))
    text = encode_json([[p.check, p.kind.value, p.text, list(p.ranks[:limit])] for p in ordered])
    found = yield from collect_texts(text, place.position, place.size, shown)
    return [(c, k, t, r) for _, message in found for c, k, t, r in json.loads(message)]

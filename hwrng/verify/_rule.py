"""The one rule ranks are judged by: equal where they should agree, apart where not.

Each rank makes :class:`Observation` s per check: a digest of what it drew or
holds, and two keys. Ranks with equal ``agree`` keys must hold equal digests
(a ``None`` key asks for nothing); ranks with different ``apart`` keys must
hold different digests. An empty draw (a shard with no elements) is never
said to match another.

A job passes a check exactly when no pair of observations breaks either
requirement. When one does, the ranks to name follow one policy:

* within an agree group, the ranks off the most common digest are named
  (:attr:`Kind.MINORITY`), or every member when no digest is the most common
  (:attr:`Kind.TIE`), the tie going to the digest held by the lowest rank;
* only each agree group's most common digest, and observations with no
  agree key, take part in distinctness, so one odd replica is not blamed
  twice; ranks that drew one digest under different apart keys are named
  together (:attr:`Kind.ALIKE`).

The owners of keys apply the rule to :class:`~hwrng.verify._records.Holding` s
(:func:`agreement_problem`, :func:`apart_problem`), which merge exactly, so a
problem found at an owner is the problem the whole job has.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hwrng.verify._records import Holding, Role, lowest

__all__ = ["Kind", "Observation", "Problem", "agreement_problem", "apart_problem"]

#: Ranks a problem's text names; the rest are counted.
NAMED = 8


@dataclass(frozen=True)
class Observation:
    """One rank's observation for one check.

    Attributes
    ----------
    digest
        What the rank drew or holds, digested (a word below ``2**62``).
    agree
        Ranks with equal keys must hold equal digests; ``None``: no requirement.
    apart
        Ranks with different keys must hold different digests.
    empty
        The draw was empty: it matches nothing.
    """

    digest: int
    agree: int | None
    apart: int
    empty: bool = False


class Kind(enum.Enum):
    """What a :class:`Problem` found."""

    #: Ranks off the common digest of their agree group.
    MINORITY = "minority"
    #: An agree group with no most common digest: every member is named.
    TIE = "tie"
    #: Ranks whose apart keys differ hold one digest.
    ALIKE = "alike"


@dataclass(frozen=True)
class Problem:
    """One violation of one check.

    Attributes
    ----------
    check
        The check's index.
    kind
        What was found.
    ranks
        The lowest of the ranks it names, sorted.
    count
        How many ranks it names in all.
    text
        A line naming them with their coordinates.
    """

    check: int
    kind: Kind
    ranks: tuple[int, ...]
    count: int
    text: str


def who(ranks: Sequence[int], count: int, name: Callable[[int], str]) -> str:
    """``rank 1 {'tp': 1}, rank 3 {'tp': 1}``, then how many more ``count`` holds."""
    shown = ", ".join(name(r) for r in ranks[:NAMED])
    more = count - min(len(ranks), NAMED)
    return f"{shown} and {more} more" if more > 0 else shown


@dataclass(frozen=True)
class _Digest:
    digest: int
    count: int
    ranks: tuple[int, ...]


def _by_digest(holdings: Sequence[Holding], limit: int) -> list[_Digest]:
    """The holdings' digests, most common first, ties to the digest of the lowest rank."""
    groups: dict[int, list[Holding]] = {}
    for holding in holdings:
        groups.setdefault(holding.digest, []).append(holding)
    found = [
        _Digest(digest, sum(h.count for h in same), lowest((h.ranks for h in same), limit))
        for digest, same in groups.items()
    ]
    return sorted(found, key=lambda d: (-d.count, d.ranks[0]))


def agreement_problem(
    holdings: Sequence[Holding], name: Callable[[int], str], limit: int
) -> tuple[Problem | None, list[Holding]]:
    """Judge one agree group of one check (every holding of one agree key).

    Returns
    -------
    tuple
        The group's problem (``None`` when its ranks agree), and the holdings
        of its most common digest that take part in distinctness (as
        ``APART`` holdings, empty draws left out).
    """
    check = holdings[0].check
    ranked = _by_digest(holdings, limit)
    majority = ranked[0]
    problem = None
    if len(ranked) > 1 and ranked[1].count == majority.count:
        members = lowest((d.ranks for d in ranked), limit)
        total = sum(d.count for d in ranked)
        problem = Problem(
            check,
            Kind.TIE,
            members,
            total,
            "replicas disagree, with no majority to tell which is right: "
            + who(members, total, name),
        )
    elif len(ranked) > 1:
        odd = lowest((d.ranks for d in ranked[1:]), limit)
        total = sum(d.count for d in ranked[1:])
        problem = Problem(
            check,
            Kind.MINORITY,
            odd,
            total,
            f"replicas disagree: {who(odd, total, name)} differ from "
            f"{who(majority.ranks[:2], min(majority.count, 2), name)}",
        )
    compared = [
        Holding(Role.APART, check, 0, h.digest, h.apart, False, h.count, h.ranks)
        for h in holdings
        if h.digest == majority.digest and not h.empty
    ]
    return problem, compared


def apart_problem(
    holdings: Sequence[Holding], name: Callable[[int], str], limit: int
) -> Problem | None:
    """Judge one digest of one check (every compared holding of that digest).

    Returns
    -------
    Problem or None
        ``ALIKE`` when ranks of different apart keys drew the digest: it names
        the lowest rank of each apart key, and counts every rank that drew it.
    """
    firsts: dict[int, int] = {}
    for holding in holdings:
        first = holding.ranks[0]
        firsts[holding.apart] = min(first, firsts.get(holding.apart, first))
    if len(firsts) < 2:
        return None
    members = lowest((h.ranks for h in holdings), limit)
    total = sum(h.count for h in holdings)
    named = sorted(firsts.values())
    text = "shards draw alike: " + who(named, len(named), name)
    if total > len(named):
        text += " (and their replicas)"
    return Problem(holdings[0].check, Kind.ALIKE, members, total, text)

"""The one rule by which ranks' draws are judged: equal where they should agree, apart where not.

Each rank makes a :class:`Claim` per check: a digest of what it drew or holds,
and two keys. Ranks with equal ``agree`` keys must hold equal digests (a
``None`` key asks for nothing); ranks with different ``apart`` keys must hold
different digests. :func:`find_violations` judges the claims of any set of
ranks -- a mesh dim's line of ranks, or the whole job -- and names offenders;
it is pure, so :func:`hwrng.verify` and ``hwrng check`` share it, and tests
can check it on its own.

Agreement is judged before distinctness: within an agree group, the ranks off
the most common digest are named (both sides when no digest is the most
common), and only the group's common digest takes part in the distinctness
check, so one odd replica is not blamed twice. An empty draw (a shard with
no elements) is never said to match another.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["Claim", "Finding", "Kind", "Problem", "find_violations"]


@dataclass(frozen=True)
class Claim:
    """One rank's claim for one check.

    Attributes
    ----------
    digest
        What the rank drew or holds, digested.
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
    """One violation: what kind, which ranks, and a line naming them with their coordinates."""

    kind: Kind
    ranks: tuple[int, ...]
    text: str


@dataclass
class Finding:
    """What :func:`find_violations` found among one set of ranks."""

    problems: list[Problem] = field(default_factory=list)
    #: Whether some pair of ranks was required to agree.
    compared_equal: bool = False
    #: Whether some pair of ranks was required to differ.
    compared_apart: bool = False

    @property
    def offenders(self) -> list[int]:
        """Every rank some problem names, sorted."""
        return sorted({r for p in self.problems for r in p.ranks})


def _group_by(values: Mapping[int, object]) -> dict[object, list[int]]:
    groups: dict[object, list[int]] = {}
    for rank in sorted(values):
        groups.setdefault(values[rank], []).append(rank)
    return groups


def find_violations(claims: Mapping[int, Claim], name: Callable[[int], str]) -> Finding:
    """Judge the claims of a set of ranks (rank -> claim); ``name(rank)`` labels a rank.

    Returns
    -------
    Finding
        One problem per agree group that disagrees and per digest that ranks of
        different apart keys share, plus whether anything was compared at all.
    """
    finding = Finding()

    def who(ranks: list[int]) -> str:
        return ", ".join(name(r) for r in ranks)

    compared: dict[int, int] = {}
    agreeing = {r: c.agree for r, c in claims.items() if c.agree is not None}
    for members in _group_by(agreeing).values():
        if len(members) > 1:
            finding.compared_equal = True
        by_digest = _group_by({r: claims[r].digest for r in members})
        ranked = sorted(by_digest.items(), key=lambda item: (-len(item[1]), item[1][0]))
        majority = ranked[0][1]
        compared.update({r: claims[r].digest for r in majority})
        if len(ranked) > 1 and len(majority) == len(ranked[1][1]):
            finding.problems.append(
                Problem(
                    Kind.TIE,
                    tuple(members),
                    "replicas disagree, with no majority to tell which is right: " + who(members),
                )
            )
        elif len(ranked) > 1:
            odd = sorted(r for _, ranks in ranked[1:] for r in ranks)
            finding.problems.append(
                Problem(
                    Kind.MINORITY,
                    tuple(odd),
                    f"replicas disagree: {who(odd)} differ from {who(majority[:2])}",
                )
            )
    compared.update({r: c.digest for r, c in claims.items() if c.agree is None})
    drawn = {r: digest for r, digest in compared.items() if not claims[r].empty}
    if len({claims[r].apart for r in drawn}) > 1:
        finding.compared_apart = True
    for members in _group_by(drawn).values():
        keys = sorted({claims[r].apart for r in members})
        if len(keys) > 1:
            named = sorted(min(r for r in members if claims[r].apart == k) for k in keys)
            more = " (and their replicas)" if len(members) > len(named) else ""
            finding.problems.append(
                Problem(Kind.ALIKE, tuple(members), f"shards draw alike: {who(named)}{more}")
            )
    return finding

"""Judging every rank's claims at a per-rank cost set by the mesh's dims, not the world.

:func:`judge` applies the rule of ``_agreement`` to the claims of a whole job
without gathering them in one place. Ranks are compared along *lines*: the
ranks that differ from this one along one mesh dim (its group in the
DeviceMesh). Along each line:

1. one ``all_reduce`` of every claim's words, maxima and minima, tells whether
   the keys are the same on the whole line; where they are (a line of
   replicas), equal digests are proven by the same reduction -- a fixed cost,
   however long the line;
2. only checks whose keys differ along the line (the dims that shard), or
   whose replicas disagree, gather the line's claims (one ``all_gather`` of a
   fixed-size row per member of the line) and are judged by
   :func:`~hwrng._agreement.find_violations`.

A disagreement that leaves no majority on a line (two replicas, one of them
wrong) is settled by the other lines: a rank in a minority elsewhere is the
culprit, and the tie is not reported. Finally one ``all_reduce`` over the whole
group gives every rank the same verdicts, and -- only when something failed --
the problems are collected from the lowest ranks that found them (each line's
problems are reported once, by its lowest rank), one fixed-size broadcast per
reporting rank, at most ``shown`` of them.

Without a mesh covering the group, the group is one line: the same steps, with
a gather over the whole group where keys differ (a cost that grows with it).
Ranks that differ along two sharded dims at once are compared only through
the dims in between: each pair of shards along one dim is compared directly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hwrng._agreement import Claim, Finding, Kind, Problem, find_violations
from hwrng._collectives import MESSAGE_BYTES, Comm, digest62, rank_and_size
from hwrng._mesh import MeshLayout, mesh_tensor

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from hwrng._platform import Platform

__all__ = ["Judged", "Line", "Topology", "judge"]

_FIELDS = 5  # per claim: has an agree key, agree key, apart key, digest, empty
_RANKS_PER_PROBLEM = 64  # ranks listed in a collected problem; more are counted, not named


@dataclass(frozen=True)
class Line:
    """The ranks compared with this one along one mesh dim (``dim``), or the whole group."""

    dim: str
    comm: Comm


@dataclass
class Topology:
    """How ranks are compared: along each dim of a mesh, or as one group.

    Attributes
    ----------
    whole
        The whole group being judged (its verdicts, and the naming round).
    lines
        This rank's lines.
    layout
        Names ranks by their mesh coordinates, when known.
    """

    whole: Comm
    lines: list[Line]
    layout: MeshLayout | None = None

    @classmethod
    def over_mesh(cls, mesh: DeviceMesh, whole: Comm, platform: Platform | None) -> Topology:
        """Lines along each dim of ``mesh`` (which must hold every rank of ``whole``)."""
        layout = MeshLayout.of(mesh)
        lines = [
            Line(name, Comm(mesh.get_group(index), platform))
            for index, (name, size) in enumerate(zip(layout.names, layout.shape, strict=True))
            if size > 1
        ]
        return cls(whole, lines, layout)

    @classmethod
    def over_group(cls, whole: Comm, layout: MeshLayout | None = None) -> Topology:
        """The whole group as one line."""
        return cls(whole, [Line("", whole)] if whole.size > 1 else [], layout)

    def coordinate(self, rank: int) -> dict[str, int] | None:
        """``{'dp': 2, 'tp': 1}``: where ``rank`` sits in the layout, if known."""
        if self.layout is not None:
            found = self.layout.coordinate(rank)
            if found is not None:
                return dict(zip(self.layout.names, found, strict=True))
        return None

    def name(self, rank: int) -> str:
        """``rank 5 {'dp': 2, 'tp': 1}``, or ``rank 5`` where no coordinate is known."""
        coordinate = self.coordinate(rank)
        return f"rank {rank}" if coordinate is None else f"rank {rank} {coordinate}"


def mesh_identity(mesh: DeviceMesh) -> int:
    """A digest of a mesh's dim names, shape and ranks (ranks must agree on their topology)."""
    names = repr((tuple(mesh.mesh_dim_names or ()), tuple(mesh.shape))).encode()
    return digest62(names, mesh_tensor(mesh))


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
    """

    problems: tuple[str, ...]
    ranks: tuple[int, ...]
    hidden: int
    compared_equal: bool
    compared_apart: bool

    @property
    def ok(self) -> bool:
        """Whether no violation was found."""
        return not self.problems and not self.hidden


def _row(claims: Sequence[Claim]) -> list[int]:
    row: list[int] = []
    for claim in claims:
        agree = claim.agree if claim.agree is not None else 0
        row += [int(claim.agree is not None), agree, claim.apart, claim.digest, int(claim.empty)]
    return row


def _claim(row: Sequence[int], check: int) -> Claim:
    has, agree, apart, digest, empty = row[check * _FIELDS : (check + 1) * _FIELDS]
    return Claim(digest, agree if has else None, apart, bool(empty))


@dataclass
class _LineFindings:
    line: Line
    ranks: list[int]
    findings: dict[int, Finding]


def _judge_line(
    line: Line, row: list[int], checks: int, topology: Topology, *, gather: bool = False
) -> tuple[_LineFindings | None, list[bool]]:
    """Steps 1 and 2 along one line; also whether each check required agreement on it.

    ``gather``: the caller knows the keys differ along this line (it shards),
    so the reduction of step 1 is skipped and every check is judged from rows.
    """
    if gather:
        return _gathered(line, row, list(range(checks)), topology), [False] * checks
    high = line.comm.max(row, negated=row)
    low = high[len(row) :]
    equal = [False] * checks
    needed = []
    for check in range(checks):
        base = check * _FIELDS
        keys_fixed = all(high[base + k] == low[base + k] for k in (0, 1, 2, 4))
        if not keys_fixed:
            needed.append(check)
        elif high[base] == 1:  # a line of replicas: their digests must be one
            equal[check] = True
            if high[base + 3] != low[base + 3]:
                needed.append(check)
    if not needed:
        return None, equal
    return _gathered(line, row, needed, topology), equal


def _gathered(line: Line, row: list[int], checks: list[int], topology: Topology) -> _LineFindings:
    """Step 2: gather the line's rows and judge ``checks`` from them."""
    rows = line.comm.gather_rows(row)
    ranks = line.comm.global_ranks()
    findings = {
        check: find_violations(
            {rank: _claim(member, check) for rank, member in zip(ranks, rows, strict=True)},
            topology.name,
        )
        for check in checks
    }
    return _LineFindings(line, ranks, findings)


def _shown(problem: Problem, dim: str) -> str:
    return f"{problem.text} (along {dim})" if dim else problem.text


def _encode(reports: list[tuple[int, str, Problem]]) -> str | None:
    """The reports of this rank as one message that fits a broadcast (later ones dropped)."""
    if not reports:
        return None
    items = [[c, _shown(p, dim), list(p.ranks[:_RANKS_PER_PROBLEM])] for c, dim, p in reports]
    while items:
        text = json.dumps(items)
        if len(text.encode()) <= MESSAGE_BYTES:
            return text
        items.pop()
    return json.dumps([])


@dataclass
class _Walk:
    """What walking this rank's lines found (before the naming round)."""

    equal: list[bool]
    apart: list[bool]
    convicted: list[bool]  # this rank is in a minority somewhere, per check
    judged: list[_LineFindings]


def _walk(
    row: list[int], checks: int, topology: Topology, me: int, gather: frozenset[str]
) -> _Walk:
    walk = _Walk([False] * checks, [False] * checks, [False] * checks, [])
    for line in topology.lines:
        found, required = _judge_line(
            line, row, checks, topology, gather=bool(line.dim) and line.dim in gather
        )
        walk.equal = [a or b for a, b in zip(walk.equal, required, strict=True)]
        if found is None:
            continue
        walk.judged.append(found)
        for check, finding in found.findings.items():
            walk.equal[check] = walk.equal[check] or finding.compared_equal
            walk.apart[check] = walk.apart[check] or finding.compared_apart
            if any(p.kind is Kind.MINORITY and me in p.ranks for p in finding.problems):
                walk.convicted[check] = True
    return walk


def _reports(walk: _Walk, me: int) -> list[tuple[int, str, Problem]]:
    """The problems this rank reports: those of the lines it is the lowest rank of.

    A tie is settled, and not reported, when one of its ranks is in a
    minority on another line: that rank is the culprit, reported there.
    """
    reports: list[tuple[int, str, Problem]] = []
    for found in walk.judged:
        ties = any(p.kind is Kind.TIE for f in found.findings.values() for p in f.problems)
        guilty: dict[int, list[int]] = {}
        if ties:  # every rank of the line holds the same findings, so all gather here
            statuses = found.line.comm.gather_rows([int(c) for c in walk.convicted])
            guilty = dict(zip(found.ranks, statuses, strict=True))
        if me != min(found.ranks):
            continue
        for check, finding in found.findings.items():
            for problem in finding.problems:
                settled = problem.kind is Kind.TIE and any(guilty[r][check] for r in problem.ranks)
                if not settled:
                    reports.append((check, found.line.dim, problem))
    return reports


def judge(
    claims: Sequence[Claim],
    topology: Topology,
    *,
    shown: int = 16,
    gather: frozenset[str] = frozenset(),
) -> list[Judged]:
    """Judge every rank's ``claims`` (one per check, the same checks on every rank).

    A collective over ``topology.whole``: every rank must call it with as many
    claims, and every rank gets the same verdicts.

    Parameters
    ----------
    claims
        This rank's claim for each check; keys and digests are words below ``2**62``.
    topology
        The lines this rank is compared along.
    shown
        At most this many ranks report the problems they found, lowest first.
    gather
        Mesh dims along which keys are known to differ (the dims that shard, on
        every rank alike): their lines gather at once, without the reduction
        that would only find that out.

    Returns
    -------
    list of Judged
        One per check, in order.
    """
    checks = len(claims)
    me, _ = rank_and_size()
    walk = _walk(_row(claims), checks, topology, me, gather)
    reports = _reports(walk, me)
    counts = [sum(1 for check, _, _ in reports if check == c) for c in range(checks)]
    totals = topology.whole.sum([*map(int, walk.equal), *map(int, walk.apart), *counts])
    total_problems = totals[2 * checks :]
    collected: list[list[Any]] = []
    if any(total_problems):
        for _, message in topology.whole.collect_texts(_encode(reports), shown):
            collected.extend(json.loads(message))
    verdicts = []
    for check in range(checks):
        mine = [(text, ranks) for c, text, ranks in collected if c == check]
        verdicts.append(
            Judged(
                problems=tuple(text for text, _ in mine),
                ranks=tuple(sorted({r for _, ranks in mine for r in ranks})),
                hidden=total_problems[check] - len(mine),
                compared_equal=totals[check] > 0,
                compared_apart=totals[checks + check] > 0,
            )
        )
    return verdicts

"""A brute-force oracle for hwrng.verify's rule, and simulated jobs to judge (no torch).

The oracle looks at every rank's observations at once, as no rank of a real job
can: a check passes exactly when no two observations break the rule -- equal
agree keys with different digests, or different apart keys with one digest
(empty draws match nothing). When one fails, the ranks to name follow the
documented policy: the minority of an agree group (every member on a tie, the
tie going to the digest of the lowest rank), then, among each group's most
common digest and observations with no agree key, every rank of a digest drawn
under several apart keys.

``Job`` describes a simulated job: a mesh, the dims its plan shards, and the
bug its seeding has; ``observations`` gives what each rank would report for
three streams of verify -- a plan stream (replicas agree, shards differ), a
named state (shards differ), and a DTensor stream (one observation per mesh:
its ranks must draw alike, whatever seed each takes).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from hwrng._mesh import linear_index, unravel_index
from hwrng.verify._rule import Observation

BUGS = (
    "sound",
    "additive",  # seed = base + pp + tp: sums of coordinates collide
    "megatron",  # seed = base + 100 * pp + 100 * ep: Megatron-LM's expert stream
    "copied",  # one rank took another rank's seed
    "swapped",  # two ranks swapped seeds
    "deviant",  # one rank reseeded itself
    "wrong dims",  # sharded along other dims than the plan says
    "out of step",  # one rank drew one DTensor op more on a mesh
    "empty",  # some shards are empty: they match nothing
)
#: Bugs of seeds wider than torch's CPU seeding, which keys its Mersenne Twister with the low
#: 32 bits: judged on real ranks by what they draw (the simulation has no such generator).
SEED_WIDTH_BUGS = (
    "high bits",  # shards differ only above bit 32: torch draws alike on all of them
    "replicas above bit 32",  # replicas differ only above bit 32: torch draws alike, random not
)


def word(*parts: object) -> int:
    """A 62-bit digest of ``parts`` (its own, not hwrng's)."""
    raw = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(raw[:8], "little") % 2**62


@dataclass(frozen=True)
class Job:
    """A simulated job: mesh sizes, the plan's sharded dims, and one bug."""

    sizes: tuple[int, ...]
    sharded: tuple[int, ...]
    bug: str
    dims: tuple[int, ...] = ()  # the dims the bug involves
    ranks: tuple[int, ...] = ()  # the ranks it involves
    empty: frozenset[int] = field(default_factory=frozenset)

    @property
    def world(self) -> int:
        return math.prod(self.sizes)

    def coordinate(self, rank: int) -> tuple[int, ...]:
        return unravel_index(rank, self.sizes)

    def expected(self, rank: int) -> int:
        """The plan's replica key: the linear index over the sharded dims."""
        c = self.coordinate(rank)
        return linear_index([c[d] for d in self.sharded], [self.sizes[d] for d in self.sharded])

    def seed(self, rank: int) -> int:
        """The seed the (buggy) job really gave ``rank``."""
        c = self.coordinate(rank)
        formulas = {
            "additive": lambda: sum(c[d] for d in self.dims),
            "megatron": lambda: sum(100 * c[d] for d in self.dims),
            "wrong dims": lambda: linear_index(
                [c[d] for d in self.dims], [self.sizes[d] for d in self.dims]
            ),
            "high bits": lambda: self.expected(rank) * 2**32,
            "replicas above bit 32": lambda: self.expected(rank) + self.replica(rank) * 2**32,
        }
        if self.bug in formulas:
            return 1000 + formulas[self.bug]()
        if self.bug == "copied" and rank == self.ranks[0]:
            return self.seed(self.ranks[1]) if self.ranks[1] != rank else 1000
        if self.bug == "swapped" and rank in self.ranks[:2]:
            other = self.ranks[1] if rank == self.ranks[0] else self.ranks[0]
            return 1000 + self.expected(other)
        if self.bug == "deviant" and rank == self.ranks[0]:
            return 999_999
        return 1000 + self.expected(rank)

    def replica(self, rank: int) -> int:
        """The linear index over the dims the plan does not shard (which replica ``rank`` is)."""
        c = self.coordinate(rank)
        rest = [d for d in range(len(self.sizes)) if d not in self.sharded]
        return linear_index([c[d] for d in rest], [self.sizes[d] for d in rest])

    def observations(self, rank: int) -> list[list[Observation]]:
        """What ``rank`` reports: a plan stream, a named state, a DTensor stream."""
        key = word("key", self.expected(rank))
        seed = self.seed(rank)
        empty = rank in self.empty
        plan = Observation(word("drawn", seed), key, key, empty)
        named = Observation(word("named", seed + 2718), None, key, empty)
        return [[plan], [named], self._dtensor(rank)]

    def _dtensor(self, rank: int) -> list[Observation]:
        """One observation per mesh: the whole mesh, and the stage mesh of the first sharded dim."""
        c = self.coordinate(rank)
        offset = 4 + int(self.bug == "out of step" and rank in self.ranks[:1])
        seed = self.seed(rank)
        meshes = [("whole", 0)]
        if self.sharded:
            stage = self.sharded[0]
            meshes.append((f"stage {c[stage]}", c[stage]))
        found = []
        for mesh, stage_seed in meshes:
            expected_seed = 1000 + stage_seed
            drawn = expected_seed if seed == 1000 + self.expected(rank) else seed
            apart = word("seed", expected_seed)
            found.append(Observation(word(drawn, offset), word(mesh), apart))
        return found


@dataclass(frozen=True)
class Verdict:
    """What the oracle finds for one check."""

    ok: bool
    offenders: frozenset[int]
    problems: int


def judge(observations: list[list[Observation]]) -> Verdict:
    """The oracle's verdict on one check, from every rank's observations (rank -> list)."""
    flat = [(rank, o) for rank, held in enumerate(observations) for o in held]
    ok = _pairwise_ok(flat) if len(flat) <= 160 else _grouped_ok(flat)
    groups: dict[int, list[tuple[int, Observation]]] = defaultdict(list)
    compared = [(r, o) for r, o in flat if o.agree is None]
    for r, o in flat:
        if o.agree is not None:
            groups[o.agree].append((r, o))
    offenders: set[int] = set()
    problems = 0
    for members in groups.values():
        counts = Counter(o.digest for _, o in members)
        first = {d: min(r for r, o in members if o.digest == d) for d in counts}
        ranked = sorted(counts, key=lambda d: (-counts[d], first[d]))
        top = ranked[0]
        if len(ranked) > 1:
            problems += 1
            if counts[ranked[1]] == counts[top]:
                offenders |= {r for r, _ in members}
            else:
                offenders |= {r for r, o in members if o.digest != top}
        compared += [(r, o) for r, o in members if o.digest == top]
    by_digest: dict[int, list[tuple[int, Observation]]] = defaultdict(list)
    for r, o in compared:
        if not o.empty:
            by_digest[o.digest].append((r, o))
    for members in by_digest.values():
        if len({o.apart for _, o in members}) > 1:
            problems += 1
            offenders |= {r for r, _ in members}
    return Verdict(ok, frozenset(offenders), problems)


def _pairwise_ok(flat: list[tuple[int, Observation]]) -> bool:
    for (_, a), (_, b) in itertools.combinations(flat, 2):
        if a.agree is not None and a.agree == b.agree and a.digest != b.digest:
            return False
        if a.apart != b.apart and not a.empty and not b.empty and a.digest == b.digest:
            return False
    return True


def _grouped_ok(flat: list[tuple[int, Observation]]) -> bool:
    digests: dict[int, set[int]] = defaultdict(set)
    aparts: dict[int, set[int]] = defaultdict(set)
    for _, o in flat:
        if o.agree is not None:
            digests[o.agree].add(o.digest)
        if not o.empty:
            aparts[o.digest].add(o.apart)
    return all(len(d) == 1 for d in digests.values()) and all(len(a) == 1 for a in aparts.values())

"""What :func:`hwrng.verify` returns: a verdict per stream, the same on every rank."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hwrng._exceptions import VerificationError
from hwrng.verify._streams import BOTH_WAYS, DTENSOR, SHARDS_DIFFER

__all__ = ["StreamVerdict", "VerifyReport"]


@dataclass(frozen=True)
class StreamVerdict:
    """What :func:`~hwrng.verify` found for one stream.

    Attributes
    ----------
    stream
        The stream's name: ``"torch.cpu"``, ``"cuda:0"``, ``"random"``, ``"numpy"``,
        ``"dtensor"``, or ``"state:<tracker>/<name>"`` for a named state.
    expectation
        The relation checked, in words.
    problems
        One line per violation, naming ranks and coordinates; empty when it holds.
        At most a few ranks report theirs; a last line counts the rest.
    ranks
        The offending ranks the problems name (sorted).
    unjudged
        What could not be judged, and why, in words; empty when every pair of
        ranks that should differ was compared.
    replicas_compared
        Whether any ranks were required to agree (``False`` where no two ranks
        are replicas, e.g. a mesh with ``dp=1``).
    shards_compared
        Whether any ranks were required to differ (``False`` where every rank
        is a replica of every other, e.g. nothing sharded).
    """

    stream: str
    expectation: str
    problems: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    unjudged: str = ""
    replicas_compared: bool = True
    shards_compared: bool = True

    @property
    def ok(self) -> bool:
        """Whether the stream holds the expected relation on every rank."""
        return not self.problems

    @property
    def compared(self) -> str:
        """What was compared, in words: the expectation, less what had nothing to compare."""
        said = _COMPARED.get((self.expectation, self.replicas_compared, self.shards_compared))
        return said if said is not None else self.expectation


#: What a verdict says it compared, by (expectation, replicas compared, shards compared),
#: where something had nothing to compare; otherwise it states its expectation.
_COMPARED = {
    (BOTH_WAYS, False, False): "nothing to compare (a single rank)",
    (BOTH_WAYS, False, True): "shards differ (no replicas in this mesh)",
    (BOTH_WAYS, True, False): "replicas agree (no shards: every rank shares one seed)",
    (SHARDS_DIFFER, False, False): "nothing to compare (no shards: every rank shares one seed)",
    (SHARDS_DIFFER, True, False): "nothing to compare (no shards: every rank shares one seed)",
    (DTENSOR, False, False): "nothing to compare (no two ranks ran DTensor ops on one mesh)",
    (DTENSOR, False, True): "meshes differ (no two ranks ran DTensor ops on one mesh)",
    (DTENSOR, True, False): "each DTensor mesh agrees (every mesh draws with one seed)",
}


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of :func:`~hwrng.verify`, the same on every rank.

    Attributes
    ----------
    rank, world_size
        This rank and the size of the group that was checked.
    streams
        One verdict per stream, in a fixed order.
    coordinates
        ``(rank, coordinate)`` of each rank the report names (a dict over the
        mesh dims where a mesh is known).
    plan
        The seed plan the expectations came from, in words.
    """

    rank: int
    world_size: int
    streams: tuple[StreamVerdict, ...]
    coordinates: tuple[Any, ...] = field(repr=False)
    plan: str = ""

    @property
    def ok(self) -> bool:
        """Whether every stream holds."""
        return all(verdict.ok for verdict in self.streams)

    @property
    def failures(self) -> list[StreamVerdict]:
        """The streams that do not hold."""
        return [verdict for verdict in self.streams if not verdict.ok]

    @property
    def unjudged(self) -> list[StreamVerdict]:
        """The streams that hold as far as they could be judged, but not everywhere."""
        return [verdict for verdict in self.streams if verdict.ok and verdict.unjudged]

    def describe(self) -> str:
        """A readable report: one line per stream, then each problem."""
        lines = [f"hwrng verify: {self.world_size} rank(s); plan: {self.plan}"]
        for verdict in self.streams:
            if not verdict.ok:
                lines.append(f"  {verdict.stream:<32} FAILED  expected: {verdict.expectation}")
            elif verdict.unjudged:
                lines.append(f"  {verdict.stream:<32} PARTLY  {verdict.compared}")
            else:
                lines.append(f"  {verdict.stream:<32} ok      {verdict.compared}")
            lines.extend(f"      {problem}" for problem in verdict.problems)
            if verdict.unjudged:
                lines.append(f"      not judged: {verdict.unjudged}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()

    def raise_if_failed(self) -> None:
        """Raise :class:`~hwrng.VerificationError` naming each failing stream, rank and coordinate.

        Raises
        ------
        VerificationError
            If any stream fails; ``error.report`` is this report.
        """
        failures = self.failures
        if not failures:
            return
        parts = [f"{v.stream}: {'; '.join(v.problems)}" for v in failures]
        raise VerificationError(
            f"{len(failures)} RNG stream(s) break the seed plan ({self.plan}): "
            + " | ".join(parts),
            report=self,
        )

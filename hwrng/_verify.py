"""``hwrng.verify``: prove at run time that replicas agree and shards differ, stream by stream.

Each rank digests every stream it holds -- without drawing or changing
anything -- and makes one :class:`~hwrng._agreement.Claim` per stream: ranks
with the same *replica key* (from the plan: ``rank_seed - seed``, or the linear
index over ``sharded_dims``) must agree, ranks with different keys must
differ. The claims are judged by :func:`hwrng._judge.judge` along the dims of
the job's mesh, so the cost per rank is a few fixed-size reductions plus one
gather of a few hundred bytes per rank along each dim whose ranks differ --
set by the mesh's dims, not by the world.

Before any stream is judged, one reduction over the whole group checks that
every rank built its claims (a rank that could not is named, with its error,
on every rank: nobody waits in a collective for it), checks the same streams,
holds the same plan and uses the same mesh to compare along. A rank whose
plan differs is named, with the plan most ranks hold as the reference.

Expected relations: torch CPU, the devices, ``random`` and NumPy agree within
replica keys and differ across them; the DTensor stream agrees among ranks
that ran DTensor ops on the same meshes (by default the meshes the adapter saw,
so each pipeline stage is judged on its own) and differs where the meshes'
seeds differ; a named state differs across replica keys (it may differ
between replicas too: Megatron's tensor-parallel stream does), or across the
dims its preset says it varies along.

Without a DeviceMesh over the whole group (a plan over process groups, a
preset's plan, a plan made on a submesh or on a mesh the job has dropped, or
``group=``), the group is compared
as one: a gather over the whole group, whose cost grows with it.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hwrng._agreement import Claim
from hwrng._collectives import Comm, digest62, digest_of, distributed, rank_and_size
from hwrng._exceptions import DistributedError, InvalidArgumentError, MeshError, VerificationError
from hwrng._host import host_generator
from hwrng._judge import Judged, Topology, judge, mesh_identity
from hwrng._mesh import MeshLayout, linear_index, mesh_tensor, require_known
from hwrng._plan import Seeding
from hwrng._platform import Platform
from hwrng._registry import resolve_platform
from hwrng._seeding import current_seeding, seeded_mesh
from hwrng._states import live_trackers
from hwrng._validation import SEED_MODULUS, check_dim_names
from hwrng.dtensor._meshes import meshes_in_use

if TYPE_CHECKING:
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["StreamVerdict", "VerifyReport", "verify"]

#: Ranks named, at most, for each kind of problem (the rest are counted).
SHOWN = 16
#: Plans that record a trainer's seed formula rather than the job's parallel layout.
_LAYOUT_SOURCES = ("manual_seed", "groups")

#: How each kind of stream is expected to relate across ranks.
_BOTH_WAYS = "replicas agree, shards differ"
_SHARDS_DIFFER = "shards differ"
_DTENSOR = "one DTensor mesh agrees, meshes differ"


@dataclass(frozen=True)
class StreamVerdict:
    """What :func:`verify` found for one stream.

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
    (_BOTH_WAYS, False, False): "nothing to compare (a single rank)",
    (_BOTH_WAYS, False, True): "shards differ (no replicas in this mesh)",
    (_BOTH_WAYS, True, False): "replicas agree (no shards: every rank shares one seed)",
    (_SHARDS_DIFFER, False, False): "nothing to compare (no shards: every rank shares one seed)",
    (_SHARDS_DIFFER, True, False): "nothing to compare (no shards: every rank shares one seed)",
    (_DTENSOR, False, False): "nothing to compare (no two ranks ran DTensor ops on one mesh)",
    (_DTENSOR, False, True): "meshes differ (no two ranks ran DTensor ops on one mesh)",
}


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of :func:`verify`, the same on every rank.

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


@dataclass(frozen=True)
class _Stream:
    name: str
    expectation: str
    digest: int
    state: str | None = None  # "tracker/state" for a named state


def _tensor_digest(tensor: torch.Tensor) -> int:
    return digest62(tensor.detach().cpu().contiguous().numpy())


def _host_and_device_streams(platform: Platform) -> list[_Stream]:
    host = host_generator()
    streams = [_Stream("torch.cpu", _BOTH_WAYS, _tensor_digest(host.get_state()))]
    if platform.device_type == "cpu" and platform.generator() is host:
        return streams
    for index in range(platform.device_count()):
        state = platform.generator(index).get_state()
        streams.append(
            _Stream(f"{platform.device_type}:{index}", _BOTH_WAYS, _tensor_digest(state))
        )
    return streams


def _library_streams() -> list[_Stream]:
    numpy_state: Any = np.random.get_state()
    return [
        _Stream("random", _BOTH_WAYS, digest_of(random.getstate())),
        _Stream(
            "numpy",
            _BOTH_WAYS,
            digest62(np.ascontiguousarray(numpy_state[1]), repr(numpy_state[2:]).encode()),
        ),
    ]


def _named_streams() -> list[_Stream]:
    streams = []
    for tracker_name, tracker in live_trackers().items():
        for state_name, state in tracker.get_states().items():
            streams.append(
                _Stream(
                    f"state:{tracker_name}/{state_name}",
                    _SHARDS_DIFFER,
                    _tensor_digest(state),
                    f"{tracker_name}/{state_name}",
                )
            )
    return streams


@dataclass(frozen=True)
class _DTensorKeys:
    stream: _Stream
    agree: int  # ranks that ran ops on the same meshes, drawing with the same seeds
    apart: int  # the seeds those meshes draw with


def _dtensor_stream(platform: Platform, seeding: Seeding | None, mesh: Any) -> _DTensorKeys:
    """The DTensor stream's digest and its keys, from the meshes in use.

    Ranks that ran DTensor random ops on the same meshes should sit at the same
    offset; those meshes' seeds (from the plan) say which ranks should draw apart.
    """
    generator = platform.generator()
    own_seed, offset = platform.counter.peek(generator)
    meshes = [mesh] if mesh is not None else meshes_in_use()
    mesh_key = digest62(*(mesh_tensor(m) for m in meshes))
    if seeding is None:
        # seeded by other means: DTensor ops should agree across each mesh
        seed_key, actual = 0, own_seed.to_bytes(8, "little")
    else:
        seeds = [seeding.dtensor_seed(m) for m in meshes] if meshes else [seeding.seed]
        seed_key = digest_of(seeds)
        # on the plan's stream ops draw with the meshes' seeds; re-seeded, with its own
        actual = repr(seeds).encode() if own_seed == seeding.rank_seed else repr(own_seed).encode()
    digest = digest62(actual, offset.to_bytes(8, "little"))
    stream = _Stream("dtensor", _DTENSOR, digest)
    return _DTensorKeys(stream, digest_of(mesh_key, seed_key), seed_key)


def _check_stream_names(chosen: Iterable[str] | None) -> list[str] | None:
    """The stream names asked for, checked alike on every rank (before any collective)."""
    if chosen is None:
        return None
    if isinstance(chosen, (str, bytes)) or not isinstance(chosen, Iterable):
        raise InvalidArgumentError(f"streams must be a list of names, not {chosen!r}")
    wanted = list(chosen)
    odd = [name for name in wanted if not isinstance(name, str)]
    if odd:
        raise InvalidArgumentError(f"stream names must be strings, got {odd!r}")
    if len(set(wanted)) != len(wanted):
        raise InvalidArgumentError(f"streams names a stream twice: {wanted!r}")
    return wanted


def _select_streams(streams: list[_Stream], wanted: list[str] | None) -> list[_Stream]:
    """The streams named in ``wanted`` (all if ``None``), refusing names this rank lacks."""
    if wanted is None:
        return streams
    known = {s.name for s in streams}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise InvalidArgumentError(f"unknown stream(s) {unknown}; this rank has {sorted(known)}")
    return [s for s in streams if s.name in wanted]


def _keys(
    seeding: Seeding | None, mesh: Any, sharded_dims: tuple[str, ...] | None
) -> tuple[int, int, str, MeshLayout | None]:
    """``(replica key, plan digest, plan in words, layout)`` from the plan or the arguments."""
    if sharded_dims is not None:
        dims = sharded_dims
        layout = MeshLayout.of(mesh)
        require_known(dims, layout.names)
        coordinate = mesh.get_coordinate()
        if coordinate is None:
            raise MeshError("this rank is not part of the mesh given to verify")
        sizes = dict(zip(layout.names, layout.shape, strict=True))
        position = dict(zip(layout.names, coordinate, strict=True))
        key = linear_index([position[d] for d in dims], [sizes[d] for d in dims])
        words = f"sharded {', '.join(dims) or 'along no dim'} over {layout.describe()}"
        identity = (layout.names, layout.shape, dims)  # not its ranks: each stage has its own
        return key, digest_of(identity), words, layout
    if seeding is None:
        raise MeshError(
            "no seed plan is in force (seeded by other means than hwrng.manual_seed or a "
            "preset): pass mesh= and sharded_dims= to say which ranks should be replicas"
        )
    key = (seeding.rank_seed - seeding.seed) % SEED_MODULUS
    plan_layout = seeding.layout
    plan_identity = (
        seeding.seed,
        [(d.name, d.weight, d.size) for d in seeding.dims],
        seeding.source,
        seeding.platform,
        None if plan_layout is None else (plan_layout.names, plan_layout.shape),
        seeding.generation,
        seeding.named,
    )
    known = plan_layout if mesh is None else MeshLayout.of(mesh)
    return key, digest_of(plan_identity), seeding.describe(), known


def _named_apart(stream: _Stream, seeding: Seeding | None, replica: int) -> tuple[int, bool]:
    """A named state's apart key, and whether its preset said which dims it differs along."""
    dims = None if seeding is None or stream.state is None else seeding.named_dims(stream.state)
    if dims is None:
        return replica, False
    coordinates = {d.name: d.coordinate for d in seeding.dims} if seeding is not None else {}
    return digest_of([(d, coordinates.get(d)) for d in dims]), True


@dataclass(frozen=True)
class _Fingerprint:
    """What this rank contributes: its claims, and what every rank must share."""

    chosen: list[_Stream]
    claims: list[Claim]
    described: list[bool]  # named states whose preset said what they differ along
    names_digest: int
    plan_digest: int
    layout: MeshLayout | None
    plan_words: str
    groups: list[int]
    preset: str | None
    sharded: frozenset[str]  # mesh dims along which replica keys differ (gathered at once)


def _members_digest(members: Iterable[int]) -> int:
    return digest_of(tuple(sorted(members)))


def _fingerprint(
    mesh: Any,
    sharded_dims: tuple[str, ...] | None,
    wanted: list[str] | None,
    platform: Platform | str | None,
    checked: Sequence[int] | None,
) -> _Fingerprint:
    """Everything this rank sends; may raise (the caller turns that into a setup failure)."""
    seeding = current_seeding() if sharded_dims is None else None
    plan = current_seeding()
    if platform is None and plan is not None:
        platform = plan.platform
    resolved = resolve_platform(platform)
    replica, plan_digest, plan_words, layout = _keys(seeding, mesh, sharded_dims)
    replica_key = digest_of(replica)
    dtensor = _dtensor_stream(resolved, plan, mesh)
    everything = [
        *_host_and_device_streams(resolved),
        *_library_streams(),
        *_named_streams(),
        dtensor.stream,
    ]
    chosen = _select_streams(everything, wanted)
    claims: list[Claim] = []
    described: list[bool] = []
    for stream in chosen:
        said = False
        if stream.expectation == _DTENSOR:
            claim = Claim(stream.digest, dtensor.agree, dtensor.apart)
        elif stream.expectation == _SHARDS_DIFFER:
            apart, said = _named_apart(stream, seeding, replica)
            claim = Claim(stream.digest, None, apart)
        else:
            claim = Claim(stream.digest, replica_key, replica_key)
        claims.append(claim)
        described.append(said)
    claims.append(Claim(replica_key, replica_key, replica_key))  # are any two ranks replicas?
    groups: list[int] = []
    if seeding is not None and any(d.members is not None for d in seeding.dims):
        inside = set(checked if checked is not None else range(rank_and_size()[1]))
        groups = [
            _members_digest(set(d.members) & inside) for d in seeding.dims if d.members is not None
        ]
    preset = None
    if seeding is not None and seeding.source not in _LAYOUT_SOURCES:
        terms = ", ".join(d.name for d in seeding.dims if d.weight) or "none"
        preset = f"the {seeding.source} plan (its terms: {terms})"
    if sharded_dims is not None:
        sharded = frozenset(sharded_dims)
    elif seeding is not None and seeding.source in _LAYOUT_SOURCES:
        sharded = frozenset(d.name for d in seeding.dims if d.weight and (d.size or 0) > 1)
    else:
        sharded = frozenset()
    return _Fingerprint(
        chosen,
        claims,
        described,
        digest_of([s.name for s in chosen]),
        plan_digest,
        layout,
        plan_words,
        groups,
        preset,
        sharded,
    )


def _check_arguments(
    mesh: Any, sharded_dims: Sequence[str] | None, group: Any
) -> tuple[str, ...] | None:
    """Refuse, alike on every rank and before any collective, what is wrong in the arguments."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    if not distributed():
        raise DistributedError("verify is a collective: initialise torch.distributed first")
    if mesh is not None and not isinstance(mesh, DeviceMesh):
        raise MeshError(f"mesh must be a torch DeviceMesh, got {type(mesh).__name__}")
    dims = None
    if sharded_dims is not None:
        dims = check_dim_names(sharded_dims)
        if mesh is None:
            raise MeshError("sharded_dims name dims of a mesh: pass the mesh too")
        if dims and mesh.mesh_dim_names is None:
            raise MeshError("sharded_dims needs a DeviceMesh with mesh_dim_names")
    if group is not None:
        if group is dist.GroupMember.NON_GROUP_MEMBER:
            raise DistributedError(
                f"this rank ({dist.get_rank()}) is not a member of the group given to verify "
                "(torch.distributed.new_group gives ranks outside a group a placeholder): "
                "call verify only on the group's ranks"
            )
        if not isinstance(group, dist.ProcessGroup):
            raise DistributedError(f"group must be a ProcessGroup, got {type(group).__name__}")
        if dist.get_rank(group) < 0:
            raise DistributedError(
                f"this rank ({dist.get_rank()}) is not a member of the group given to verify "
                f"(its ranks: {dist.get_process_group_ranks(group)}): call verify only on "
                "the group's ranks"
            )
    return dims


def _comparison_mesh(mesh: Any, group: Any, plan: Seeding | None) -> Any:
    """The DeviceMesh whose dims ranks are compared along, or ``None`` to compare as one group."""
    import torch.distributed as dist

    if group is not None:
        return None
    if plan is not None and any(d.members is not None for d in plan.dims):
        return None  # process groups are judged by their members, over the whole group
    candidate = mesh if mesh is not None else seeded_mesh()
    if candidate is None or candidate.get_coordinate() is None:
        return None
    if candidate.size() != dist.get_world_size():
        return None
    return candidate


def verify(
    mesh: DeviceMesh | None = None,
    *,
    sharded_dims: Sequence[str] | None = None,
    streams: Iterable[str] | None = None,
    group: dist.ProcessGroup | None = None,
    platform: Platform | str | None = None,
) -> VerifyReport:
    """Check every RNG stream of every rank against the seed plan, at a cost set by the mesh.

    Call it on every rank of ``group`` (a collective). It changes no RNG state:
    streams are read, never drawn from. It never leaves a peer waiting: a rank
    that cannot build its fingerprint (no plan in force, a stream it does not
    have, a mesh it is not in, ...) still joins the collectives, and every rank
    gets the same report, failing with ``setup failed on rank r: ...``.

    With a DeviceMesh over the whole world (``mesh``, or the one the plan was
    made on, while the job holds it), ranks are compared along each of its dims: per rank, a few
    reductions of some hundred bytes, plus one gather of a row per stream from
    each rank along each dim whose ranks should differ. Otherwise the group is
    compared as one, with a gather over all of it.

    Parameters
    ----------
    mesh
        The DeviceMesh DTensor ops run on (each rank passes its own, e.g. its
        pipeline stage's submesh); ranks are named by their coordinates in it.
        By default the DTensor stream is judged over the meshes the DTensor
        adapter ran random ops on since the plan was made (each pipeline
        stage on its own submesh), and ranks are named by the plan's mesh.
    sharded_dims
        Dims of ``mesh`` along which ranks should differ, when no plan is in
        force (ranks seeded by other means) or to check another expectation.
        By default the plan's.
    streams
        The stream names to check (see :class:`StreamVerdict`); by default
        every one: torch CPU, each device of the platform, ``random``, NumPy,
        every named state of every live :class:`~hwrng.RNGStatesTracker`, and
        the DTensor stream.
    group
        The process group to check over; by default the whole world.
    platform
        Whose devices to read; by default the plan's platform, else
        :func:`hwrng.get_platform`'s choice.

    Returns
    -------
    VerifyReport
        The same report on every rank; ``report.raise_if_failed()`` raises.
        Ranks whose plans differ (seed, terms, preset, platform, mesh shape,
        resume generation), or whose process groups do not match their
        members' groups, fail the ``plan`` check. After a preset that knows
        what its named states differ along (Megatron: the tensor-parallel
        stream along ``pp`` and ``tp``), they are judged so; after one that
        does not, named states are compared only between ranks the plan
        tells apart, and their verdicts say so (``unjudged``).

    Raises
    ------
    DistributedError
        On every rank, before any collective, if ``torch.distributed`` is not
        initialised; on a rank outside ``group`` (which must not call it).
    MeshError
        On every rank, before any collective, if ``mesh`` is not a DeviceMesh
        or ``sharded_dims`` are malformed or given without a mesh.
    InvalidArgumentError
        On every rank, before any collective, if ``streams`` is not a list of
        distinct names.
    """
    dims = _check_arguments(mesh, sharded_dims, group)
    wanted = _check_stream_names(streams)
    plan = current_seeding()
    chosen_platform = platform if platform is not None or plan is None else plan.platform
    resolved = resolve_platform(chosen_platform)
    whole = Comm(group, resolved)
    me = whole.global_rank(whole.rank)
    failure = ""
    fingerprint: _Fingerprint | None = None
    comparison = None
    try:
        comparison = _comparison_mesh(mesh, group, plan if dims is None else None)
        checked = None if group is None else whole.global_ranks()
        fingerprint = _fingerprint(mesh, dims, wanted, platform, checked)
    except Exception as error:  # any failure must still reach the collectives
        failure = f"{type(error).__name__}: {error}"
    ok = fingerprint is not None
    shared = (
        [fingerprint.names_digest, fingerprint.plan_digest] if fingerprint is not None else [0, 0]
    )
    mesh_word = mesh_identity(comparison) if comparison is not None else 0
    high = whole.max(
        [int(not ok), *shared, mesh_word],
        negated=[*shared, mesh_word, whole.rank if not ok else whole.size],
    )
    layout = fingerprint.layout if fingerprint is not None else None
    fallback = Topology.over_group(whole, layout)
    if high[0]:
        return _setup_failed(whole, failure if not ok else None, fallback)
    assert fingerprint is not None  # every rank's status is 0, this one's included
    if high[1] != high[4]:
        problems, ranks = _name_minority(
            whole, fingerprint.names_digest, "the streams they have", fallback
        )
        verdict = StreamVerdict("setup", "every rank checks the same streams", problems, ranks)
        return _report(whole, me, [verdict], fallback, fingerprint.plan_words)
    if high[2] != high[5]:
        problems, ranks = _name_minority(whole, fingerprint.plan_digest, "the seed plan", fallback)
        verdict = StreamVerdict("plan", "every rank holds the same seed plan", problems, ranks)
        return _report(whole, me, [verdict], fallback, fingerprint.plan_words)
    if fingerprint.groups:
        found = _group_problems(whole, fingerprint.groups, fallback)
        if found is not None:
            verdict = StreamVerdict("plan", "every rank holds the same seed plan", *found)
            return _report(whole, me, [verdict], fallback, fingerprint.plan_words)
    if comparison is not None and high[3] == high[6]:
        topology = Topology.over_mesh(comparison, whole, resolved)
        if layout is not None:
            topology.layout = layout
    else:
        topology = fallback
    judged = judge(fingerprint.claims, topology, shown=SHOWN, gather=fingerprint.sharded)
    return _report(
        whole,
        me,
        _stream_verdicts(fingerprint, judged),
        topology,
        fingerprint.plan_words,
    )


def _stream_verdicts(fingerprint: _Fingerprint, judged: list[Judged]) -> list[StreamVerdict]:
    replicas_exist = judged[-1].compared_equal
    verdicts = []
    for stream, said, found in zip(fingerprint.chosen, fingerprint.described, judged, strict=False):
        unjudged = ""
        if (
            stream.expectation == _SHARDS_DIFFER
            and fingerprint.preset is not None
            and not said
            and replicas_exist
        ):
            unjudged = (
                f"ranks that {fingerprint.preset} does not tell apart were not compared, so a "
                "state with one seed on every tensor-parallel rank passes; to judge it, "
                "pass mesh= and sharded_dims= with streams=[this state]"
            )
        problems = found.problems
        if found.hidden:
            problems += (f"... and {found.hidden} more violation(s) not shown",)
        verdicts.append(
            StreamVerdict(
                stream.name,
                stream.expectation,
                problems,
                found.ranks,
                unjudged,
                replicas_compared=found.compared_equal,
                shards_compared=found.compared_apart,
            )
        )
    return verdicts


def _report(
    whole: Comm, me: int, verdicts: list[StreamVerdict], topology: Topology, plan: str
) -> VerifyReport:
    named = sorted({r for v in verdicts for r in v.ranks})
    coordinates = tuple((r, _coordinate(topology, r)) for r in named)
    return VerifyReport(me, whole.size, tuple(verdicts), coordinates, plan)


def _coordinate(topology: Topology, rank: int) -> Any:
    found = topology.coordinate(rank)
    return {"rank": rank} if found is None else found


def _setup_failed(whole: Comm, failure: str | None, topology: Topology) -> VerifyReport:
    """Every rank's report when some rank could not build its fingerprint."""
    (count,) = whole.sum([int(failure is not None)])
    collected = whole.collect_texts(failure, SHOWN)
    ranks = tuple(whole.global_rank(position) for position, _ in collected)
    problems = tuple(
        f"setup failed on rank {rank}: {text}"
        for rank, (_, text) in zip(ranks, collected, strict=True)
    )
    if count > len(collected):
        problems += (f"... and {count - len(collected)} more rank(s) failed",)
    verdict = StreamVerdict("setup", "every rank builds its fingerprint", problems, ranks)
    coordinates = tuple((r, {"rank": r}) for r in ranks)
    me = whole.global_rank(whole.rank)
    return VerifyReport(me, whole.size, (verdict,), coordinates, "unknown (setup failed)")


def _name_minority(
    whole: Comm, value: int, what: str, topology: Topology
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Name the ranks whose ``value`` differs from what most hold (every rank, if none do)."""
    positions, total = whole.odd_ones(value, SHOWN)
    ranks = tuple(whole.global_rank(p) for p in positions)
    named = ", ".join(topology.name(r) for r in ranks)
    more = f" and {total - len(ranks)} more" if total > len(ranks) else ""
    return (f"ranks disagree on {what}: {named}{more}",), ranks


def _group_problems(
    whole: Comm, words: list[int], topology: Topology
) -> tuple[tuple[str, ...], tuple[int, ...]] | None:
    """Each process group of the plan must be held by exactly its members (a gather over all)."""
    rows = whole.gather_rows(words)
    ranks = whole.global_ranks()
    problems: list[str] = []
    offenders: set[int] = set()
    for term in range(len(words)):
        claims: dict[int, list[int]] = {}
        for rank, row in zip(ranks, rows, strict=True):
            claims.setdefault(row[term], []).append(rank)
        for digest, members in claims.items():
            if _members_digest(members) != digest:
                offenders.update(members)
                named = ", ".join(topology.name(r) for r in sorted(members))
                problems.append(
                    f"groups[{term}] of {named} is not the group its other members hold "
                    "(a rank seeded with another rank's process group?)"
                )
    return (tuple(problems), tuple(sorted(offenders))) if problems else None

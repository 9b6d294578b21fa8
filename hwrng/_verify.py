"""``hwrng.verify``: prove at run time that replicas agree and shards differ, stream by stream.

Every rank sends one fingerprint of 64 bytes -- 16 words of 32 bits -- in a
single ``all_gather``; only when some rank could not build its fingerprint do
all ranks exchange one more fixed-size message (what went wrong), so that every
rank returns the same verdict and none waits in a collective for a rank that
raised.

====== =================================================================
word   content
====== =================================================================
0      status: 0, or 1 when this rank could not build its fingerprint
1      digest of the names of the streams checked (all ranks must agree)
2      digest of the plan every rank should share: the job's seed, each
       term's name, weight and size, the preset (source), the platform
       and the dim names and shape of the mesh the plan was made for (not
       its ranks: each pipeline stage may seed on its own submesh)
3, 4   the *replica key*: ranks with equal keys should be replicas
5      the *DTensor mesh key*: digest of the meshes DTensor random ops
       ran on; ranks with equal keys ran the same ops and should agree
6      the *DTensor seed key*: digest of the seeds those meshes draw
       with; ranks whose seed keys differ should draw differently
7..    for a plan over process groups, one word per group: a digest of
       the group's members (within the checked group); then one 32-bit
       digest per stream (nine streams at most, fewer with groups)
====== =================================================================

The keys come from the plan, not from the streams: the replica key is this
rank's index over the sharded dims (``rank_seed - seed``, or the linear index
of its coordinate over ``sharded_dims`` when they are given). A stream's
digest is read without drawing and without changing anything: torch's
generators by their state bytes (so a replica that drew one number more is
caught), ``random`` and NumPy by their state, named states by theirs, and the
DTensor stream by the seed and offset DTensor ops would use next.

Expected relations: torch CPU, the devices, ``random`` and NumPy agree within
replica keys and differ across them; the DTensor stream agrees among ranks
that ran DTensor ops on the same meshes (by default the meshes the adapter saw,
so each pipeline stage is judged on its own) and differs where the meshes'
seeds differ; a named state differs across replica keys (it may differ between
replicas too: Megatron's tensor-parallel stream does). Ranks that hold
different plans, or process groups that do not match their members', fail
before any stream is judged.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hwrng._exceptions import DistributedError, InvalidArgumentError, MeshError, VerificationError
from hwrng._host import host_generator
from hwrng._mesh import MeshLayout, linear_index, mesh_ranks, require_known
from hwrng._plan import Seeding
from hwrng._platform import Platform
from hwrng._registry import resolve_platform
from hwrng._seeding import current_seeding
from hwrng._states import live_trackers
from hwrng._validation import SEED_MODULUS, check_dim_names
from hwrng.dtensor._meshes import meshes_in_use

if TYPE_CHECKING:
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["MAX_STREAMS", "PAYLOAD_BYTES", "StreamVerdict", "VerifyReport", "verify"]

PAYLOAD_BYTES = 64
_WORDS = PAYLOAD_BYTES // 4
_HEADER_WORDS = 7
MAX_STREAMS = _WORDS - _HEADER_WORDS
#: Bytes of the one extra message each rank sends when some rank's setup failed.
MESSAGE_BYTES = 512
_SETUP_FAILED = 1
#: Plans that record a trainer's seed formula rather than the job's parallel layout.
_LAYOUT_SOURCES = ("manual_seed", "groups")

#: How each kind of stream is expected to relate across ranks.
_BOTH_WAYS = "replicas agree, shards differ"
_SHARDS_DIFFER = "shards differ"
_DTENSOR = "one DTensor mesh agrees, meshes differ"


def _digest32(*parts: bytes) -> int:
    hasher = hashlib.blake2b(digest_size=4, person=b"hwrng-verify")
    for part in parts:
        hasher.update(len(part).to_bytes(8, "little"))
        hasher.update(part)
    return int.from_bytes(hasher.digest(), "little")


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().numpy().tobytes()


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
    ranks
        The offending ranks (sorted).
    unjudged
        What could not be judged, and why, in words; empty when every pair of
        ranks that should differ was compared.
    """

    stream: str
    expectation: str
    problems: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    unjudged: str = ""

    @property
    def ok(self) -> bool:
        """Whether the stream holds the expected relation on every rank."""
        return not self.problems


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
        Each rank's coordinate (a tuple over the mesh dims) where a mesh is
        known, else its replica key; used to name offenders.
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
                lines.append(f"  {verdict.stream:<32} PARTLY  {verdict.expectation}")
            else:
                lines.append(f"  {verdict.stream:<32} ok      {verdict.expectation}")
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


def _host_and_device_streams(platform: Platform) -> list[_Stream]:
    host = host_generator()
    streams = [_Stream("torch.cpu", _BOTH_WAYS, _digest32(_tensor_bytes(host.get_state())))]
    if platform.device_type == "cpu" and platform.generator() is host:
        return streams
    for index in range(platform.device_count()):
        state = platform.generator(index).get_state()
        streams.append(
            _Stream(f"{platform.device_type}:{index}", _BOTH_WAYS, _digest32(_tensor_bytes(state)))
        )
    return streams


def _library_streams() -> list[_Stream]:
    numpy_state: Any = np.random.get_state()
    return [
        _Stream("random", _BOTH_WAYS, _digest32(repr(random.getstate()).encode())),
        _Stream(
            "numpy",
            _BOTH_WAYS,
            _digest32(
                np.ascontiguousarray(numpy_state[1]).tobytes(), repr(numpy_state[2:]).encode()
            ),
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
                    _digest32(_tensor_bytes(state)),
                )
            )
    return streams


@dataclass(frozen=True)
class _DTensorKeys:
    stream: _Stream
    mesh_key: int
    seed_key: int


def _dtensor_stream(platform: Platform, seeding: Seeding | None, mesh: Any) -> _DTensorKeys:
    """The DTensor stream's digest and its keys, from the meshes in use.

    Ranks that ran DTensor random ops on the same meshes should sit at the same
    offset; those meshes' seeds (from the plan) say which ranks should draw apart.
    """
    generator = platform.generator()
    own_seed, offset = platform.counter.peek(generator)
    meshes = [mesh] if mesh is not None else meshes_in_use()
    mesh_key = _digest32(repr([mesh_ranks(m) for m in meshes]).encode())
    if seeding is None:
        # seeded by other means: DTensor ops should agree across each mesh
        seed_key, actual = 0, own_seed.to_bytes(8, "little")
    else:
        seeds = [seeding.dtensor_seed(m) for m in meshes] if meshes else [seeding.seed]
        seed_key = _digest32(repr(seeds).encode())
        # on the plan's stream ops draw with the meshes' seeds; re-seeded, with its own
        actual = repr(seeds).encode() if own_seed == seeding.rank_seed else repr(own_seed).encode()
    digest = _digest32(actual, offset.to_bytes(8, "little"))
    return _DTensorKeys(_Stream("dtensor", _DTENSOR, digest), mesh_key, seed_key)


def _fold_devices(streams: list[_Stream]) -> list[_Stream]:
    devices = [s for s in streams if ":" in s.name and not s.name.startswith("state:")]
    if len(devices) < 2:
        return streams
    folded = _Stream(
        f"{devices[0].name.split(':')[0]}:*",
        _BOTH_WAYS,
        _digest32(*(s.digest.to_bytes(4, "little") for s in devices)),
    )
    kept = [s for s in streams if s not in devices]
    return [kept[0], folded, *kept[1:]]


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


def _select_streams_to_fingerprint(
    streams: list[_Stream], wanted: list[str] | None, capacity: int
) -> list[_Stream]:
    """The streams named in ``wanted`` (all if ``None``), folded or refused to fit ``capacity``."""
    if wanted is None:
        selected = streams
    else:
        known = {s.name for s in streams}
        unknown = [name for name in wanted if name not in known]
        if unknown:
            raise InvalidArgumentError(
                f"unknown stream(s) {unknown}; this rank has {sorted(known)}"
            )
        selected = [s for s in streams if s.name in wanted]
    if len(selected) > capacity:
        selected = _fold_devices(selected)
    if len(selected) > capacity:
        raise InvalidArgumentError(
            f"{len(selected)} streams do not fit in one {PAYLOAD_BYTES}-byte fingerprint "
            f"(at most {capacity} with this plan); choose some with streams=[...] "
            f"(this rank has {[s.name for s in selected]})"
        )
    return selected


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
        return key, _digest32(repr(identity).encode()), words, layout
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
    )
    known = plan_layout if mesh is None else MeshLayout.of(mesh)
    return key, _digest32(repr(plan_identity).encode()), seeding.describe(), known


def _members_digest(members: Iterable[int]) -> int:
    return _digest32(repr(tuple(sorted(members))).encode())


def _group_words(seeding: Seeding | None, checked: Sequence[int]) -> list[int]:
    """One word per process-group term of the plan: its members among the checked ranks."""
    if seeding is None:
        return []
    inside = set(checked)
    return [_members_digest(set(d.members) & inside) for d in seeding.dims if d.members is not None]


def _split64(value: int) -> tuple[int, int]:
    return value & 0xFFFFFFFF, value >> 32


@dataclass(frozen=True)
class _Fingerprint:
    words: list[int]
    chosen: list[_Stream]
    layout: MeshLayout | None
    plan_words: str
    group_terms: int
    preset: str | None


def _fingerprint(
    mesh: Any,
    sharded_dims: tuple[str, ...] | None,
    wanted: list[str] | None,
    platform: Platform | str | None,
    checked: Sequence[int],
) -> _Fingerprint:
    """Everything this rank sends; may raise (the caller turns that into a setup failure)."""
    seeding = current_seeding() if sharded_dims is None else None
    plan = current_seeding()
    if platform is None and plan is not None:
        platform = plan.platform
    resolved = resolve_platform(platform)
    replica_key, plan_digest, plan_words, layout = _keys(seeding, mesh, sharded_dims)
    dtensor = _dtensor_stream(resolved, plan, mesh)
    groups = _group_words(seeding, checked)
    everything = [
        *_host_and_device_streams(resolved),
        *_library_streams(),
        *_named_streams(),
        dtensor.stream,
    ]
    chosen = _select_streams_to_fingerprint(everything, wanted, MAX_STREAMS - len(groups))
    names_digest = _digest32(repr([s.name for s in chosen]).encode())
    words = [0, names_digest, plan_digest, *_split64(replica_key)]
    words += [dtensor.mesh_key, dtensor.seed_key, *groups, *(s.digest for s in chosen)]
    preset = None
    if seeding is not None and seeding.source not in _LAYOUT_SOURCES:
        terms = ", ".join(d.name for d in seeding.dims) or "none"
        preset = f"the {seeding.source} plan (its terms: {terms})"
    return _Fingerprint(words, chosen, layout, plan_words, len(groups), preset)


def _check_arguments(
    mesh: Any, sharded_dims: Sequence[str] | None, group: Any
) -> tuple[str, ...] | None:
    """Refuse, alike on every rank and before any collective, what is wrong in the arguments."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    if not (dist.is_available() and dist.is_initialized()):
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


def verify(
    mesh: DeviceMesh | None = None,
    *,
    sharded_dims: Sequence[str] | None = None,
    streams: Iterable[str] | None = None,
    group: dist.ProcessGroup | None = None,
    platform: Platform | str | None = None,
) -> VerifyReport:
    """Check every RNG stream of every rank against the seed plan, in one small all_gather.

    Call it on every rank of ``group`` (a collective). It changes no RNG state:
    streams are read, never drawn from. It never leaves a peer waiting: a rank
    that cannot build its fingerprint (no plan in force, a stream it does not
    have, a mesh it is not in, ...) still joins the collective, and every rank
    gets the same report, failing with ``setup failed on rank r: ...``.

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
        the DTensor stream. Nine at most (one fewer per process group of the
        plan): several devices are folded into one.
    group
        The process group to check over; by default the whole world.
    platform
        Whose devices to read; by default the plan's platform, else
        :func:`hwrng.get_platform`'s choice.

    Returns
    -------
    VerifyReport
        The same report on every rank; ``report.raise_if_failed()`` raises.
        Ranks whose plans differ (seed, terms, preset, platform, mesh shape), or
        whose process groups do not match their members' groups, fail the
        ``plan`` check. After a preset (Megatron, slapo), whose plan has no
        tensor-parallel term, named states are compared only between ranks
        the plan tells apart, and their verdicts say so (``unjudged``).

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
    import torch.distributed as dist

    dims = _check_arguments(mesh, sharded_dims, group)
    wanted = _check_stream_names(streams)
    ranks = (
        list(range(dist.get_world_size())) if group is None else dist.get_process_group_ranks(group)
    )
    failure = ""
    try:
        fingerprint: _Fingerprint | None = _fingerprint(mesh, dims, wanted, platform, ranks)
    except Exception as error:  # any failure must still reach the collective
        fingerprint = None
        failure = f"{type(error).__name__}: {error}"
    words = [_SETUP_FAILED] if fingerprint is None else fingerprint.words
    words = words + [0] * (_WORDS - len(words))
    device = _collective_device(group, platform)
    table = _gather_words(words, device, group)
    me = dist.get_rank()
    if any(row[0] == _SETUP_FAILED for row in table):
        messages = _gather_message(failure, device, group)
        problems = tuple(
            f"setup failed on rank {rank}: {message}"
            for rank, row, message in zip(ranks, table, messages, strict=True)
            if row[0] == _SETUP_FAILED
        )
        failed = tuple(r for r, row in zip(ranks, table, strict=True) if row[0] == _SETUP_FAILED)
        verdict = StreamVerdict("setup", "every rank builds its fingerprint", problems, failed)
        coordinates = tuple((r, {"rank": r}) for r in ranks)
        return VerifyReport(me, len(ranks), (verdict,), coordinates, "unknown (setup failed)")
    assert fingerprint is not None  # every rank's status is 0, this one's included
    return _judge(table, ranks, fingerprint, me=me)


def _collective_device(group: Any, platform: Platform | str | None) -> torch.device:
    """Where the fingerprints travel: the CPU for gloo, else the platform's device."""
    import torch.distributed as dist

    if dist.get_backend(group) == "gloo":
        return torch.device("cpu")
    plan = current_seeding()
    if platform is None and plan is not None:
        platform = plan.platform
    return resolve_platform(platform).device()


def _gather_words(words: list[int], device: torch.device, group: Any) -> list[list[int]]:
    import torch.distributed as dist

    payload = torch.tensor(np.array(words, dtype=np.uint32).view(np.int64))
    gathered = [torch.empty_like(payload, device=device) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, payload.to(device), group=group)
    return [g.cpu().numpy().view(np.uint32).tolist() for g in gathered]


def _gather_message(message: str, device: torch.device, group: Any) -> list[str]:
    """Every rank's setup error (empty where none), in one more fixed-size all_gather."""
    import torch.distributed as dist

    data = message.encode("utf-8")[:MESSAGE_BYTES]
    buffer = np.zeros(MESSAGE_BYTES, dtype=np.uint8)
    buffer[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    payload = torch.from_numpy(buffer).to(device)
    gathered = [torch.empty_like(payload) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, payload, group=group)
    return [
        bytes(g.cpu().numpy().tobytes()).rstrip(b"\0").decode("utf-8", errors="replace")
        for g in gathered
    ]


def _coordinate(rank: int, layout: MeshLayout | None, key: int) -> Any:
    if layout is not None:
        found = layout.coordinate(rank)
        if found is not None:
            return dict(zip(layout.names, found, strict=True))
    return {"index": key}


def _who(ranks: Sequence[int], coordinates: dict[int, Any]) -> str:
    return ", ".join(f"rank {r} {coordinates[r]}" for r in ranks)


def _judge(
    table: list[list[int]], ranks: list[int], mine: _Fingerprint, *, me: int
) -> VerifyReport:
    rows = dict(zip(ranks, table, strict=True))
    replica = {r: row[3] | row[4] << 32 for r, row in rows.items()}
    coordinates = {r: _coordinate(r, mine.layout, replica[r]) for r in ranks}

    def report(verdicts: list[StreamVerdict]) -> VerifyReport:
        return VerifyReport(
            me, len(ranks), tuple(verdicts), tuple(coordinates.items()), mine.plan_words
        )

    setup = _minorities(
        {r: row[1] for r, row in rows.items()}, "the streams they have", coordinates
    )
    if setup:
        return report([StreamVerdict("setup", "every rank checks the same streams", *setup)])
    plan = _minorities({r: row[2] for r, row in rows.items()}, "the seed plan", coordinates)
    if not plan:
        plan = _group_problems(rows, mine.group_terms, coordinates)
    if plan:
        return report([StreamVerdict("plan", "every rank holds the same seed plan", *plan)])
    first = _HEADER_WORDS + mine.group_terms
    dtensor_mesh = {r: (row[5], row[6]) for r, row in rows.items()}
    dtensor_seed = {r: row[6] for r, row in rows.items()}
    verdicts: list[StreamVerdict] = []
    for position, stream in enumerate(mine.chosen):
        digests = {r: row[first + position] for r, row in rows.items()}
        unjudged = ""
        if stream.expectation == _DTENSOR:
            problems, offenders = _find_agreement_violations(
                digests, dtensor_mesh, dtensor_seed, coordinates
            )
        elif stream.expectation == _SHARDS_DIFFER:
            problems, offenders = _find_agreement_violations(digests, None, replica, coordinates)
            if mine.preset is not None and len(set(replica.values())) < len(ranks):
                unjudged = (
                    f"ranks that {mine.preset} does not tell apart were not compared, so a "
                    "state with one seed on every tensor-parallel rank passes; to judge it, "
                    "pass mesh= and sharded_dims= with streams=[this state]"
                )
        else:
            problems, offenders = _find_agreement_violations(digests, replica, replica, coordinates)
        verdicts.append(
            StreamVerdict(
                stream.name, stream.expectation, tuple(problems), tuple(offenders), unjudged
            )
        )
    return report(verdicts)


def _minorities(
    values: dict[int, int], what: str, coordinates: dict[int, Any]
) -> tuple[tuple[str, ...], tuple[int, ...]] | None:
    """``(problems, ranks)`` naming the ranks off the most common value, or ``None``."""
    groups = _group_by(values)
    if len(groups) < 2:
        return None
    ordered = sorted(groups.values(), key=lambda members: (-len(members), min(members)))
    minority = sorted(r for members in ordered[1:] for r in members)
    if len(ordered[0]) == len(ordered[1]):
        minority = sorted(values)
    return (f"ranks disagree on {what}: {_who(minority, coordinates)}",), tuple(minority)


def _group_problems(
    rows: dict[int, list[int]], terms: int, coordinates: dict[int, Any]
) -> tuple[tuple[str, ...], tuple[int, ...]] | None:
    """Each process group of the plan must be held by exactly its members."""
    problems: list[str] = []
    offenders: set[int] = set()
    for term in range(terms):
        claims = _group_by({r: row[_HEADER_WORDS + term] for r, row in rows.items()})
        for digest, members in claims.items():
            if _members_digest(members) != digest:
                offenders.update(members)
                problems.append(
                    f"groups[{term}] of {_who(sorted(members), coordinates)} is not the group "
                    "its other members hold (a rank seeded with another rank's process group?)"
                )
    return (tuple(problems), tuple(sorted(offenders))) if problems else None


def _group_by(values: dict[int, Any]) -> dict[Any, list[int]]:
    groups: dict[Any, list[int]] = {}
    for rank, value in values.items():
        groups.setdefault(value, []).append(rank)
    return groups


def _find_agreement_violations(
    digests: dict[int, int],
    agree: dict[int, Any] | None,
    apart: dict[int, int],
    coordinates: dict[int, Any],
) -> tuple[list[str], list[int]]:
    """Violations among ranks that should agree (equal ``agree`` keys) or differ (``apart``).

    Within an ``agree`` key, ranks should agree: those off the group's most
    common digest are named (``agree=None``: no two ranks need agree). Ranks
    whose ``apart`` keys differ must not share a digest: each agreement
    group's common digest counts, so a lone odd replica is not blamed twice.
    """
    problems: list[str] = []
    offenders: set[int] = set()
    compared: dict[int, int] = {}
    if agree is None:
        compared.update(digests)
    else:
        for members in _group_by(agree).values():
            by_digest = _group_by({r: digests[r] for r in members})
            ranked = sorted(by_digest.items(), key=lambda item: (-len(item[1]), min(item[1])))
            compared.update({r: ranked[0][0] for r in ranked[0][1]})
            if len(ranked) > 1 and len(ranked[0][1]) == len(ranked[1][1]):
                offenders.update(members)
                problems.append(
                    f"replicas disagree, with no majority to tell which is right: "
                    f"{_who(sorted(members), coordinates)}"
                )
            elif len(ranked) > 1:
                odd = sorted(r for _, rs in ranked[1:] for r in rs)
                offenders.update(odd)
                problems.append(
                    f"replicas disagree: {_who(odd, coordinates)} differ from "
                    f"{_who(ranked[0][1][:2], coordinates)}"
                )
    for members in _group_by(compared).values():
        sharing = sorted({apart[r] for r in members})
        if len(sharing) > 1:
            named = sorted(min(r for r in members if apart[r] == k) for k in sharing)
            offenders.update(members)
            problems.append(
                f"shards draw alike: {_who(named, coordinates)}"
                + (" (and their replicas)" if len(members) > len(named) else "")
            )
    return problems, sorted(offenders)

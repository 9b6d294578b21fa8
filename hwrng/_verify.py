"""``hwrng.verify``: prove at run time that replicas agree and shards differ, stream by stream.

Long on purpose: the fingerprint layout below, how each stream is fingerprinted
and how the gathered fingerprints are judged are one wire format that every
rank must read alike.

Every rank sends one fingerprint of 64 bytes -- 16 words of 32 bits -- in a
single ``all_gather``, and nothing else:

====== =================================================================
word   content
====== =================================================================
0      digest of the names of the streams checked (all ranks must agree)
1      digest of the plan: the job's seed and the sharded dims
2, 3   the *replica key*: ranks with equal keys should be replicas
4, 5   the *DTensor key*: ranks with equal keys should share DTensor draws
6..15  one 32-bit digest per stream (ten streams at most)
====== =================================================================

The keys come from the plan, not from the streams: the replica key is this
rank's index over the sharded dims (``rank_seed - seed``, or the linear index
of its coordinate over ``sharded_dims`` when they are given), the DTensor key
the seed DTensor ops on ``mesh`` should use. A stream's digest is read without
drawing and without changing anything: torch's generators by their state
bytes (so a replica that drew one number more is caught), ``random`` and NumPy
by their state, named states by theirs, and the DTensor stream by the seed and
offset DTensor ops would use next.

Expected relations: torch CPU, the devices, ``random`` and NumPy agree within
replica keys and differ across them; the DTensor stream agrees within DTensor
keys and differs across them; a named state differs across replica keys (it may
differ between replicas too: Megatron's tensor-parallel stream does).
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
from hwrng._mesh import MeshLayout, linear_index, require_known
from hwrng._plan import Seeding
from hwrng._platform import Platform
from hwrng._registry import resolve_platform
from hwrng._seeding import current_seeding
from hwrng._states import live_trackers
from hwrng._validation import SEED_MODULUS, check_dim_names

if TYPE_CHECKING:
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["MAX_STREAMS", "PAYLOAD_BYTES", "StreamVerdict", "VerifyReport", "verify"]

PAYLOAD_BYTES = 64
_WORDS = PAYLOAD_BYTES // 4
_HEADER_WORDS = 6
MAX_STREAMS = _WORDS - _HEADER_WORDS

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
    """

    stream: str
    expectation: str
    problems: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()

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

    def describe(self) -> str:
        """A readable report: one line per stream, then each problem."""
        lines = [f"hwrng verify: {self.world_size} rank(s); plan: {self.plan}"]
        for verdict in self.streams:
            if verdict.ok:
                lines.append(f"  {verdict.stream:<32} ok      {verdict.expectation}")
            else:
                lines.append(f"  {verdict.stream:<32} FAILED  expected: {verdict.expectation}")
            lines.extend(f"      {problem}" for problem in verdict.problems)
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


def _dtensor_stream(platform: Platform, seeding: Seeding | None, mesh: Any) -> tuple[_Stream, int]:
    """The DTensor stream's digest, and the DTensor key the plan expects."""
    generator = platform.generator()
    own_seed, offset = platform.counter.peek(generator)
    if seeding is None:
        expected = 0  # seeded by other means: DTensor ops should agree across the mesh
        actual = own_seed
    else:
        expected = seeding.dtensor_seed(mesh) if mesh is not None else seeding.seed
        actual = expected if own_seed == seeding.rank_seed else own_seed
    digest = _digest32(actual.to_bytes(8, "little"), offset.to_bytes(8, "little"))
    return _Stream("dtensor", _DTENSOR, digest), expected


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


def _select(streams: list[_Stream], chosen: Iterable[str] | None) -> list[_Stream]:
    if chosen is None:
        selected = streams
    else:
        if isinstance(chosen, (str, bytes)):
            raise InvalidArgumentError(f"streams must be a list of names, not {chosen!r}")
        wanted = list(chosen)
        known = {s.name for s in streams}
        unknown = [name for name in wanted if name not in known]
        if unknown:
            raise InvalidArgumentError(
                f"unknown stream(s) {unknown}; this rank has {sorted(known)}"
            )
        selected = [s for s in streams if s.name in wanted]
    if len(selected) > MAX_STREAMS:
        selected = _fold_devices(selected)
    if len(selected) > MAX_STREAMS:
        raise InvalidArgumentError(
            f"{len(selected)} streams do not fit in one {PAYLOAD_BYTES}-byte fingerprint "
            f"(at most {MAX_STREAMS}); choose some with streams=[...] "
            f"(this rank has {[s.name for s in selected]})"
        )
    return selected


def _keys(
    seeding: Seeding | None, mesh: Any, sharded_dims: Sequence[str] | None
) -> tuple[int, int, str, MeshLayout | None]:
    """``(replica key, plan digest, plan in words, layout)`` from the plan or the arguments."""
    if sharded_dims is not None:
        dims = check_dim_names(sharded_dims)
        if mesh is None:
            raise MeshError("sharded_dims name dims of a mesh: pass the mesh too")
        layout = MeshLayout.of(mesh)
        require_known(dims, layout.names)
        coordinate = mesh.get_coordinate()
        if coordinate is None:
            raise MeshError("this rank is not part of the mesh given to verify")
        sizes = dict(zip(layout.names, layout.shape, strict=True))
        position = dict(zip(layout.names, coordinate, strict=True))
        key = linear_index([position[d] for d in dims], [sizes[d] for d in dims])
        words = f"sharded {', '.join(dims) or 'along no dim'} over {layout.describe()}"
        return key, _digest32(repr((layout.names, layout.shape, dims)).encode()), words, layout
    if seeding is None:
        raise MeshError(
            "no seed plan is in force (seeded by other means than hwrng.manual_seed or a "
            "preset): pass mesh= and sharded_dims= to say which ranks should be replicas"
        )
    key = (seeding.rank_seed - seeding.seed) % SEED_MODULUS
    identity = (seeding.seed, [(d.name, d.weight, d.size) for d in seeding.dims], seeding.source)
    known = seeding.layout if mesh is None else MeshLayout.of(mesh)
    return key, _digest32(repr(identity).encode()), seeding.describe(), known


def _split64(value: int) -> tuple[int, int]:
    return value & 0xFFFFFFFF, value >> 32


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
    streams are read, never drawn from.

    Parameters
    ----------
    mesh
        The DeviceMesh DTensor ops run on (each rank passes its own, e.g. its
        pipeline stage's submesh); ranks are named by their coordinates in it.
        By default the mesh the plan was made for.
    sharded_dims
        Dims of ``mesh`` along which ranks should differ, when no plan is in
        force (ranks seeded by other means) or to check another expectation.
        By default the plan's.
    streams
        The stream names to check (see :class:`StreamVerdict`); by default
        every one: torch CPU, each device of the platform, ``random``, NumPy,
        every named state of every live :class:`~hwrng.RNGStatesTracker`, and
        the DTensor stream. Ten at most: several devices are folded into one.
    group
        The process group to check over; by default the whole world.
    platform
        Whose devices to read; by default the plan's platform, else
        :func:`hwrng.get_platform`'s choice.

    Returns
    -------
    VerifyReport
        The same report on every rank; ``report.raise_if_failed()`` raises.

    Raises
    ------
    DistributedError
        If ``torch.distributed`` is not initialised.
    MeshError
        If no plan is in force and no ``sharded_dims`` are given, or a dim is unknown.
    InvalidArgumentError
        For unknown stream names, or more than ten streams.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise DistributedError("verify is a collective: initialise torch.distributed first")
    seeding = current_seeding()
    if platform is None and seeding is not None:
        platform = seeding.platform
    resolved = resolve_platform(platform)
    replica_key, plan_digest, plan_words, layout = _keys(seeding, mesh, sharded_dims)
    dtensor, dtensor_key = _dtensor_stream(resolved, seeding, mesh)
    everything = [
        *_host_and_device_streams(resolved),
        *_library_streams(),
        *_named_streams(),
        dtensor,
    ]
    chosen = _select(everything, streams)
    names_digest = _digest32(repr([s.name for s in chosen]).encode())
    words = [names_digest, plan_digest, *_split64(replica_key), *_split64(dtensor_key)]
    words += [s.digest for s in chosen]
    words += [0] * (_WORDS - len(words))
    payload = torch.tensor(np.array(words, dtype=np.uint32).view(np.int64))
    backend = dist.get_backend(group)
    device = torch.device("cpu") if backend == "gloo" else resolved.device()
    gathered = [torch.empty_like(payload, device=device) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, payload.to(device), group=group)
    table = [g.cpu().numpy().view(np.uint32).tolist() for g in gathered]
    ranks = list(range(len(table))) if group is None else dist.get_process_group_ranks(group)
    return _judge(table, ranks, chosen, layout=layout, plan_words=plan_words, me=dist.get_rank())


def _coordinate(rank: int, layout: MeshLayout | None, key: int) -> Any:
    if layout is not None:
        found = layout.coordinate(rank)
        if found is not None:
            return dict(zip(layout.names, found, strict=True))
    return {"index": key}


def _who(ranks: Sequence[int], coordinates: dict[int, Any]) -> str:
    return ", ".join(f"rank {r} {coordinates[r]}" for r in ranks)


def _judge(
    table: list[list[int]],
    ranks: list[int],
    chosen: list[_Stream],
    *,
    layout: MeshLayout | None,
    plan_words: str,
    me: int,
) -> VerifyReport:
    replica = {r: row[2] | row[3] << 32 for r, row in zip(ranks, table, strict=True)}
    dtensor_keys = {r: row[4] | row[5] << 32 for r, row in zip(ranks, table, strict=True)}
    coordinates = {r: _coordinate(r, layout, replica[r]) for r in ranks}
    verdicts: list[StreamVerdict] = []
    setup = []
    for word, what in ((0, "the streams they have"), (1, "the seed plan")):
        groups = _group_by({r: row[word] for r, row in zip(ranks, table, strict=True)})
        if len(groups) > 1:
            minority = sorted(
                r for members in sorted(groups.values(), key=len)[:-1] for r in members
            )
            setup.append(f"ranks disagree on {what}: {_who(minority, coordinates)}")
    if setup:
        verdicts.append(StreamVerdict("setup", "every rank checks the same streams", tuple(setup)))
        return VerifyReport(me, len(ranks), tuple(verdicts), tuple(coordinates.items()), plan_words)
    for position, stream in enumerate(chosen):
        digests = {r: row[_HEADER_WORDS + position] for r, row in zip(ranks, table, strict=True)}
        keys = dtensor_keys if stream.expectation == _DTENSOR else replica
        problems, offenders = _check(digests, keys, stream.expectation, coordinates)
        verdicts.append(
            StreamVerdict(stream.name, stream.expectation, tuple(problems), tuple(offenders))
        )
    return VerifyReport(me, len(ranks), tuple(verdicts), tuple(coordinates.items()), plan_words)


def _group_by(values: dict[int, int]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for rank, value in values.items():
        groups.setdefault(value, []).append(rank)
    return groups


def _check(
    digests: dict[int, int], keys: dict[int, int], expectation: str, coordinates: dict[int, Any]
) -> tuple[list[str], list[int]]:
    """Violations of ``expectation`` among ranks grouped by ``keys``, and who commits them.

    Within a key, ranks should agree (unless only "shards differ" is expected):
    those off the group's most common digest are named. Across keys, no digest
    may be shared: for "shards differ" any two ranks count; otherwise each
    group's common digest, so a lone odd replica is not blamed twice.
    """
    problems: list[str] = []
    offenders: set[int] = set()
    compared: dict[int, int] = {}
    for members in _group_by(keys).values():
        by_digest = _group_by({r: digests[r] for r in members})
        ranked = sorted(by_digest.items(), key=lambda item: (-len(item[1]), min(item[1])))
        if expectation == _SHARDS_DIFFER:
            compared.update({r: digests[r] for r in members})
            continue
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
        sharing = sorted({keys[r] for r in members})
        if len(sharing) > 1:
            named = sorted(min(r for r in members if keys[r] == k) for k in sharing)
            offenders.update(members)
            problems.append(
                f"shards draw alike: {_who(named, coordinates)}"
                + (" (and their replicas)" if len(members) > len(named) else "")
            )
    return problems, sorted(offenders)

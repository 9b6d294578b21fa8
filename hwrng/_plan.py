"""Seed plans, pure: which seed each rank gets, and which seed a DTensor op uses.

The seed of a rank is ``seed + the linear index of its coordinate over the
sharded dims``, the first listed dim varying slowest, modulo ``2**64``. Ranks
that differ only along unsharded dims (replicas) share a seed. For a mesh
``dp=2, pp=2, tp=2`` and seed 123, sharded ``["pp", "tp"]`` gives ranks 0..7
the seeds 123, 124, 125, 126, 123, 124, 125, 126; ``["tp", "pp"]`` gives
123, 125, 124, 126, 123, 125, 124, 126 (the PyTorch RFC for
``torch.distributed.manual_seed(seed, sharded_groups=...)``).

A :class:`Seeding` records one rank's plan as a sum ``seed + sum(weight *
coordinate)`` over its dims, which also covers the trainers' formulas (Megatron's
``seed + 100 * pp``). :meth:`Seeding.dtensor_seed` keeps only the dims that lie
outside a DTensor's mesh: every rank of the mesh gets the same seed (so replicas
draw equal numbers and shards are told apart by their offsets), while ranks of
other pipeline stages still differ. Nothing here communicates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hwrng._exceptions import MeshError
from hwrng._mesh import (
    MeshLayout,
    check_sizes,
    linear_index,
    mesh_ranks,
    mesh_sizes,
    require_known,
    strides,
)
from hwrng._validation import SEED_MODULUS, check_dim_names, check_index, check_seed

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = [
    "ANY_STATE",
    "DEVICE_STREAMS",
    "PLAN_RANK_LIMIT",
    "SeedDim",
    "Seeding",
    "generation_seed",
    "plan_for_groups",
    "plan_for_mesh",
    "rank_seed",
    "seed_plan",
]

#: The key of :attr:`Seeding.named` that holds the expectation of every other named state.
ANY_STATE = "*"
#: The key of :attr:`Seeding.named` that holds the dims the devices' default generators are
#: seeded along, where a preset seeds them apart from the plan's terms (slapo's
#: ``always_enable_tp_seed``: the tensor-parallel seed); see :meth:`Seeding.device_dims`.
DEVICE_STREAMS = "<devices>"

#: :func:`seed_plan` lists every rank; past this many it refuses (use :func:`rank_seed`).
PLAN_RANK_LIMIT = 2**24


def _sharded_weights(sizes: Mapping[str, int], dims: Sequence[str]) -> dict[str, int]:
    """The weight of each sharded dim in the linear index (first dim slowest)."""
    return dict(zip(dims, strides([sizes[d] for d in dims]), strict=True))


def rank_seed(
    seed: int,
    coordinate: Mapping[str, int],
    sizes: Mapping[str, int],
    sharded_dims: Sequence[str],
) -> int:
    """Return the seed of the rank at ``coordinate``. Pure: touches no RNG.

    Parameters
    ----------
    seed
        The job's seed, in ``[0, 2**64)``.
    coordinate
        The rank's coordinate, dim name to index (it must name every sharded dim).
    sizes
        The size of each mesh dim, dim name to size.
    sharded_dims
        The dims along which ranks hold different data, first varying slowest.

    Returns
    -------
    int
        ``(seed + linear index of coordinate over sharded_dims) % 2**64``: seeds
        near the top of the range wrap around to 0.

    Raises
    ------
    InvalidSeedError
        If ``seed`` is outside ``[0, 2**64)``.
    MeshError
        If a sharded dim is unknown or repeated, or the coordinate is missing
        a sharded dim or lies outside the mesh.

    Examples
    --------
    >>> rank_seed(123, {"dp": 1, "pp": 1, "tp": 0}, {"dp": 2, "pp": 2, "tp": 2}, ["pp", "tp"])
    125
    """
    value = check_seed(seed)
    checked_sizes = check_sizes(sizes)
    dims = check_dim_names(sharded_dims)
    require_known(dims, list(checked_sizes))
    if not isinstance(coordinate, Mapping):
        raise MeshError(f"coordinate must map dim name to index, got {type(coordinate).__name__}")
    position: dict[str, int] = {}
    for name, index in coordinate.items():
        if name not in checked_sizes:
            raise MeshError(
                f"coordinate names dim {name!r}, which is not in the mesh "
                f"(its dims: {', '.join(map(repr, checked_sizes))})"
            )
        position[name] = check_index(index, f"the coordinate of dim {name!r}")
        if position[name] >= checked_sizes[name]:
            raise MeshError(
                f"coordinate {name}={position[name]} lies outside the mesh ({name} has size "
                f"{checked_sizes[name]})"
            )
    missing = [name for name in dims if name not in position]
    if missing:
        raise MeshError(
            f"coordinate {dict(coordinate)} has no entry for sharded dim {missing[0]!r}"
        )
    index = linear_index([position[d] for d in dims], [checked_sizes[d] for d in dims])
    return (value + index) % SEED_MODULUS


def seed_plan(seed: int, mesh: Mapping[str, int] | DeviceMesh, sharded_dims: Sequence[str]) -> Any:
    """Return the seed of every rank of ``mesh``, vectorised. Pure: touches no RNG.

    Parameters
    ----------
    seed
        The job's seed, in ``[0, 2**64)``.
    mesh
        An ordered mapping dim name to size (``{"dp": 2, "pp": 2, "tp": 2}``)
        or a :class:`~torch.distributed.device_mesh.DeviceMesh` (its dim names
        are used; an unnamed mesh's dims are called ``dim0``, ``dim1``, ...).
    sharded_dims
        The dims along which ranks hold different data, first varying slowest.

    Returns
    -------
    numpy.ndarray
        ``uint64`` seeds, one per mesh position in row-major order of the mesh
        dims -- entry ``r`` is global rank ``r``'s seed for a mapping; for a
        DeviceMesh, entry ``i`` belongs to rank ``mesh.mesh.flatten()[i]``.

    Raises
    ------
    MeshError
        Also for a mesh of more than :data:`PLAN_RANK_LIMIT` ranks, which would
        not fit in memory: compute single ranks with :func:`rank_seed`.

    Examples
    --------
    >>> seed_plan(123, {"dp": 2, "pp": 2, "tp": 2}, ["tp", "pp"]).tolist()
    [123, 125, 124, 126, 123, 125, 124, 126]
    """
    value = check_seed(seed)
    sizes = mesh_sizes(mesh)
    dims = check_dim_names(sharded_dims)
    require_known(dims, list(sizes))
    world = math.prod(sizes.values())
    if world > PLAN_RANK_LIMIT:
        raise MeshError(
            f"seed_plan lists every rank; a mesh of {world:,} ranks is more than "
            f"{PLAN_RANK_LIMIT:,}: compute single ranks with hwrng.rank_seed"
        )
    names = list(sizes)
    mesh_strides = dict(zip(names, strides(list(sizes.values())), strict=True))
    ranks = np.arange(world, dtype=np.uint64)
    seeds = np.full(world, value, dtype=np.uint64)
    for name, weight in _sharded_weights(sizes, dims).items():
        coordinate = (ranks // np.uint64(mesh_strides[name])) % np.uint64(sizes[name])
        seeds += coordinate * np.uint64(weight)  # uint64 arithmetic wraps modulo 2**64
    return seeds


@dataclass(frozen=True)
class SeedDim:
    """One term of a rank's seed: ``weight * coordinate`` along a dim.

    Attributes
    ----------
    name
        The mesh dim's name (``"tp"``), ``"groups[i]"`` for the i-th process
        group, or a trainer's own name for a preset (``"pp"``).
    coordinate
        This rank's index along the dim.
    weight
        What one step along the dim adds to the seed; 0 for a coordinate a
        preset was given but does not seed with (Megatron's ``tp_rank``),
        recorded so that :func:`hwrng.verify` can judge named states along it.
    size
        The dim's size, when known.
    members
        For a process-group dim: the global ranks of this rank's group.
    """

    name: str
    coordinate: int
    weight: int
    size: int | None = None
    members: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain values for a checkpoint."""
        return {
            "name": self.name,
            "coordinate": self.coordinate,
            "weight": self.weight,
            "size": self.size,
            "members": None if self.members is None else list(self.members),
        }


@dataclass(frozen=True)
class Seeding:
    """The seed plan in force on this process: what the last seeding call did.

    :func:`hwrng.manual_seed` and the presets record one;
    :func:`hwrng.current_seeding` returns it. The DTensor adapter derives the
    seed of each DTensor op from it, :func:`hwrng.verify` checks the ranks
    against it, and checkpoints carry it.

    Attributes
    ----------
    seed
        The job's seed, as the caller passed it.
    dims
        The terms of this rank's seed, in the order given (first slowest).
    platform
        The name of the platform whose devices were seeded.
    source
        What recorded it: ``"manual_seed"``, ``"groups"``, ``"megatron"``, ...
    layout
        The mesh the plan was made for, when it was made for a DeviceMesh.
    generation
        How many times a resume re-derived the streams (``on_mismatch="reseed"``):
        0 for a plan made by seeding. Streams a resume cannot continue are
        keyed by :func:`generation_seed` of their seed and this number, so they
        never repeat what an earlier generation drew.
    named
        What named states should differ along, for a preset that knows:
        ``(("tracker/state", ("pp", "tp")), ...)``, with :data:`ANY_STATE` for
        every state not listed, and :data:`DEVICE_STREAMS` for the devices'
        default generators where a preset seeds them along other dims than the
        plan's terms. Empty: along the plan's dims.
    """

    seed: int
    dims: tuple[SeedDim, ...]
    platform: str
    source: str
    layout: MeshLayout | None = None
    generation: int = 0
    named: tuple[tuple[str, tuple[str, ...]], ...] = ()
    _dtensor_seeds: dict[tuple[int, ...], int] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @property
    def rank_seed(self) -> int:
        """The seed of this rank: ``(seed + sum(weight * coordinate)) % 2**64``."""
        return self._seed_over(self.dims)

    @property
    def sharded_dims(self) -> tuple[str, ...]:
        """The names of the dims, in order."""
        return tuple(dim.name for dim in self.dims)

    def _seed_over(self, dims: Sequence[SeedDim]) -> int:
        return (self.seed + sum(d.weight * d.coordinate for d in dims)) % SEED_MODULUS

    def dtensor_seed(self, mesh: DeviceMesh) -> int:
        """The seed every rank of ``mesh`` uses for DTensor random ops. Pure, cached.

        Keeps the dims that lie outside ``mesh``, decided by the mesh's ranks
        alone, never by its dim names: a dim is inside when the mesh's ranks
        differ along it (for a plan made on a DeviceMesh, whose layout gives
        every rank's coordinate), or when this rank's group along it shares
        another rank with the mesh (for process groups). A preset knows only
        this rank's coordinates (``pp_rank=...``), not where the other ranks
        sit: its dims are inside a mesh of every rank of the job (so replicas
        anywhere on it share a seed) and outside any smaller mesh, which is
        taken to lie within one pipeline stage or replica (so stages differ, as
        the trainer's ``seed + 100 * pp`` does). :func:`hwrng.verify` catches a
        smaller mesh that spans stages.
        """
        return self.dtensor_seed_of(mesh_ranks(mesh))

    def dtensor_seed_of(self, ranks: Sequence[int]) -> int:
        """:meth:`dtensor_seed` of a mesh over ``ranks`` (global ranks, any order). Pure, cached."""
        key = tuple(int(r) for r in ranks)
        found = self._dtensor_seeds.get(key)
        if found is None:
            whole = len(set(key)) >= _world_size(len(key))
            outside = [d for d in self.dims if not self._inside(d, key, whole=whole)]
            found = self._dtensor_seeds[key] = self._seed_over(outside)
        return found

    def _inside(self, dim: SeedDim, ranks: tuple[int, ...], *, whole: bool) -> bool:
        if dim.members is not None:
            return len(set(dim.members) & set(ranks)) > 1
        layout = self.layout
        if layout is not None and dim.name in layout.names:
            axis = layout.names.index(dim.name)
            seen = {c[axis] for c in map(layout.coordinate, ranks) if c is not None}
            return len(seen) > 1
        return whole

    def named_dims(self, state: str) -> tuple[str, ...] | None:
        """The dims the named state ``"tracker/state"`` should differ along, if the plan says."""
        found = dict(self.named)
        return found.get(state, found.get(ANY_STATE))

    def device_dims(self) -> tuple[str, ...] | None:
        """The dims the devices' default generators were seeded along, where not the plan's terms.

        slapo's ``always_enable_tp_seed`` seeds them with the tensor-parallel
        seed (along ``pp``, ``dp`` and ``tp``) while torch's CPU generator,
        ``random`` and NumPy take the plan's; ``None`` where the devices take
        the plan's seed too.
        """
        return dict(self.named).get(DEVICE_STREAMS)

    def describe(self) -> str:
        """One line: ``seed 123 + pp*2 + tp (this rank: 125), manual_seed on cpu``.

        Coordinates the plan records without seeding by them follow the rank's
        seed (``this rank: 1334; tp=1``), then the dims the devices are seeded
        along where a preset seeds them apart (``devices along pp, tp``), and a
        resume generation comes last.
        """
        terms = "".join(
            f" + {d.name}" if d.weight == 1 else f" + {d.name}*{d.weight}"
            for d in self.dims
            if d.weight
        )
        known = "".join(f"; {d.name}={d.coordinate}" for d in self.dims if not d.weight)
        devices = self.device_dims()
        if devices is not None:
            known += f"; devices along {', '.join(devices)}"
        generation = f", resume generation {self.generation}" if self.generation else ""
        return (
            f"seed {self.seed}{terms} (this rank: {self.rank_seed}{known}), "
            f"{self.source} on {self.platform}{generation}"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain values (ints, strings, lists, ``None``) for a checkpoint."""
        return {
            "seed": self.seed,
            "dims": [d.to_dict() for d in self.dims],
            "platform": self.platform,
            "source": self.source,
            "layout": None if self.layout is None else self.layout.to_dict(),
            "generation": self.generation,
            "named": [[state, list(dims)] for state, dims in self.named],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Seeding:
        """Rebuild a plan from :meth:`to_dict` (KeyError/TypeError/ValueError if malformed)."""
        dims = tuple(
            SeedDim(
                name=str(d["name"]),
                coordinate=int(d["coordinate"]),
                weight=int(d["weight"]),
                size=None if d["size"] is None else int(d["size"]),
                members=None if d["members"] is None else tuple(int(m) for m in d["members"]),
            )
            for d in data["dims"]
        )
        layout = data["layout"]
        generation = int(data["generation"])
        if generation < 0:
            raise ValueError(f"a resume generation cannot be negative, got {generation}")
        return cls(
            seed=check_seed(data["seed"]),
            dims=dims,
            platform=str(data["platform"]),
            source=str(data["source"]),
            layout=None if layout is None else MeshLayout.from_dict(layout),
            generation=generation,
            named=tuple((str(state), tuple(str(d) for d in dims)) for state, dims in data["named"]),
        )


def generation_seed(seed: int, generation: int) -> int:
    """The seed a stream of ``seed`` takes in resume generation ``generation``. Pure.

    Generation 0 is the seed itself. Later generations hash ``(seed,
    generation)`` through NumPy's ``SeedSequence`` into 64 bits: a stream
    re-derived after a resume starts afresh instead of replaying what the
    saved job drew, while ranks that shared a seed still share one.

    Examples
    --------
    >>> generation_seed(123, 0)
    123
    >>> generation_seed(123, 1) == generation_seed(123, 1) != generation_seed(123, 2)
    True
    """
    value = check_seed(seed)
    if generation == 0:
        return value
    sequence = np.random.SeedSequence(entropy=value, spawn_key=(check_index(generation, "g"),))
    low, high = (int(w) for w in sequence.generate_state(2, dtype=np.uint32))
    return low | high << 32


def _world_size(default: int) -> int:
    """The job's number of ranks (``default`` without an initialised process group)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_world_size())
    return default


def _this_rank(mesh: DeviceMesh) -> tuple[int, ...]:
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        raise MeshError(
            "this rank is not part of the mesh, so it has no place to seed for; "
            "seed it with a mesh that contains it"
        )
    return tuple(int(c) for c in coordinate)


def plan_for_mesh(
    seed: int, mesh: object, dims: tuple[str, ...], platform: str, source: str
) -> Seeding:
    """The plan of this rank of ``mesh`` (a DeviceMesh), sharded along ``dims``.

    ``seed`` and ``dims`` are checked by the caller.
    """
    from torch.distributed.device_mesh import DeviceMesh

    if not isinstance(mesh, DeviceMesh):
        raise MeshError(
            f"mesh must be a torch DeviceMesh, got {type(mesh).__name__}; for a plain "
            "mapping of dim sizes use hwrng.rank_seed or hwrng.seed_plan"
        )
    if dims and mesh.mesh_dim_names is None:
        raise MeshError("sharded_dims needs a DeviceMesh with mesh_dim_names")
    layout = MeshLayout.of(mesh)
    require_known(dims, layout.names)
    coordinate = dict(zip(layout.names, _this_rank(mesh), strict=True))
    sizes = dict(zip(layout.names, layout.shape, strict=True))
    weights = _sharded_weights(sizes, dims)
    terms = tuple(SeedDim(d, coordinate[d], weights[d], sizes[d]) for d in dims)
    return Seeding(seed, terms, platform, source, layout)


def plan_for_groups(seed: int, groups: object, platform: str) -> Seeding:
    """The plan of this rank over process ``groups`` (the RFC's ``sharded_groups``).

    ``seed`` is checked by the caller.
    """
    import torch.distributed as dist

    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
        raise MeshError(f"groups must be a list of ProcessGroups, got {type(groups).__name__}")
    chosen = list(groups)
    if not (dist.is_available() and dist.is_initialized()):
        raise MeshError("groups need torch.distributed to be initialised")
    sizes: list[int] = []
    coordinates: list[int] = []
    members: list[tuple[int, ...]] = []
    for position, group in enumerate(chosen):
        if group is dist.GroupMember.NON_GROUP_MEMBER:
            raise MeshError(
                f"this rank is not a member of groups[{position}] (torch.distributed.new_group "
                "gives ranks outside a group a placeholder, not the group)"
            )
        if not isinstance(group, dist.ProcessGroup):
            raise MeshError(f"groups[{position}] is {type(group).__name__}, not a ProcessGroup")
        if any(group is other for other in chosen[:position]):
            raise MeshError(f"groups[{position}] repeats an earlier group")
        rank = dist.get_rank(group)
        if rank < 0:
            raise MeshError(f"this rank is not a member of groups[{position}]")
        sizes.append(dist.get_world_size(group))
        coordinates.append(rank)
        members.append(tuple(dist.get_process_group_ranks(group)))
    terms = tuple(
        SeedDim(f"groups[{i}]", coordinates[i], weight, sizes[i], members[i])
        for i, weight in enumerate(strides(sizes))
    )
    return Seeding(seed, terms, platform, "groups")

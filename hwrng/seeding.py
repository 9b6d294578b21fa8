"""Mesh-aware seeding of every RNG, with no collective communication.

The seed of a rank is ``seed + the linear index of its coordinate over the
sharded dims``, the first listed dim varying slowest, modulo ``2**64``. Ranks
that differ only along unsharded dims (replicas) share a seed. For a mesh
``dp=2, pp=2, tp=2`` and seed 123, sharded ``["pp", "tp"]`` gives ranks 0..7
the seeds 123, 124, 125, 126, 123, 124, 125, 126; ``["tp", "pp"]`` gives
123, 125, 124, 126, 123, 125, 124, 126 (the PyTorch RFC for
``torch.distributed.manual_seed(seed, sharded_groups=...)``).

Every rank computes its own seed from the mesh or groups it is given; nothing
is broadcast, so seeding can never hang or seed the wrong group.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hwrng.counters import mersenne_state
from hwrng.errors import MeshError
from hwrng.platform import Platform
from hwrng.registry import resolve_platform
from hwrng.validation import SEED_MODULUS, check_flag, check_seed

if TYPE_CHECKING:
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

__all__ = [
    "SeedRecord",
    "last_seed",
    "manual_seed",
    "rank_seed",
    "seed_everything",
    "seed_plan",
]


@dataclass(frozen=True)
class SeedRecord:
    """What :func:`manual_seed` (or a preset) last did on this process.

    Attributes
    ----------
    seed
        The seed this rank's RNGs received.
    base_seed
        The seed the caller passed, before the rank's offset.
    platform
        The name of the platform whose devices were seeded.
    """

    seed: int
    base_seed: int
    platform: str


_last: SeedRecord | None = None


def last_seed() -> SeedRecord | None:
    """Return what the last :func:`manual_seed` on this process did, or ``None``."""
    return _last


def _check_dim_names(sharded_dims: Sequence[str], what: str = "sharded_dims") -> tuple[str, ...]:
    if isinstance(sharded_dims, (str, bytes)):
        raise MeshError(
            f"{what} must be a sequence of dim names such as [{sharded_dims!r}], "
            f"not the string {sharded_dims!r}"
        )
    if not isinstance(sharded_dims, Sequence):
        raise MeshError(
            f"{what} must be an ordered sequence (a list or tuple) of dim names, got "
            f"{type(sharded_dims).__name__}: the order decides which dim varies slowest, "
            "and a set's order differs from process to process"
        )
    dims = tuple(sharded_dims)
    for dim in dims:
        if not isinstance(dim, str):
            raise MeshError(f"{what} must hold dim names (str), got {dim!r}")
    repeated = sorted({dim for dim in dims if dims.count(dim) > 1})
    if repeated:
        raise MeshError(f"{what} lists {', '.join(map(repr, repeated))} more than once")
    return dims


def _check_sizes(sizes: Mapping[str, int]) -> dict[str, int]:
    if not isinstance(sizes, Mapping):
        raise MeshError(f"mesh sizes must map dim name to size, got {type(sizes).__name__}")
    checked: dict[str, int] = {}
    for name, size in sizes.items():
        if not isinstance(name, str):
            raise MeshError(f"mesh dim names must be strings, got {name!r}")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise MeshError(f"mesh dim {name!r} must have a positive integer size, got {size!r}")
        checked[name] = int(size)
    return checked


def _require_known(dims: Sequence[str], known: Sequence[str]) -> None:
    unknown = [dim for dim in dims if dim not in known]
    if unknown:
        raise MeshError(
            f"sharded dim(s) {', '.join(map(repr, unknown))} not in the mesh "
            f"(its dims: {', '.join(map(repr, known)) or 'none'})"
        )


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
    checked_sizes = _check_sizes(sizes)
    dims = _check_dim_names(sharded_dims)
    _require_known(dims, list(checked_sizes))
    if not isinstance(coordinate, Mapping):
        raise MeshError(f"coordinate must map dim name to index, got {type(coordinate).__name__}")
    for name, position in coordinate.items():
        if name not in checked_sizes:
            raise MeshError(
                f"coordinate names dim {name!r}, which is not in the mesh "
                f"(its dims: {', '.join(map(repr, checked_sizes))})"
            )
        if isinstance(position, bool) or not isinstance(position, (int, np.integer)):
            raise MeshError(f"coordinate of dim {name!r} must be an integer, got {position!r}")
        if not 0 <= position < checked_sizes[name]:
            raise MeshError(
                f"coordinate {name}={position} lies outside the mesh ({name} has size "
                f"{checked_sizes[name]})"
            )
    index = 0
    for name in dims:
        if name not in coordinate:
            raise MeshError(f"coordinate {dict(coordinate)} has no entry for sharded dim {name!r}")
        index = index * checked_sizes[name] + int(coordinate[name])
    return (value + index) % SEED_MODULUS


def _mesh_sizes(mesh: Mapping[str, int] | DeviceMesh) -> dict[str, int]:
    if isinstance(mesh, Mapping):
        return _check_sizes(mesh)
    names = getattr(mesh, "mesh_dim_names", None)
    shape = getattr(mesh, "shape", None)
    if shape is None:
        raise MeshError(
            f"mesh must be a mapping of dim name to size or a DeviceMesh, got {type(mesh).__name__}"
        )
    if names is None:
        names = tuple(f"dim{i}" for i in range(len(shape)))
    return _check_sizes(dict(zip(names, shape, strict=True)))


def seed_plan(
    seed: int, mesh: Mapping[str, int] | DeviceMesh, sharded_dims: Sequence[str]
) -> np.ndarray:
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

    Examples
    --------
    >>> seed_plan(123, {"dp": 2, "pp": 2, "tp": 2}, ["tp", "pp"]).tolist()
    [123, 125, 124, 126, 123, 125, 124, 126]
    """
    value = check_seed(seed)
    sizes = _mesh_sizes(mesh)
    dims = _check_dim_names(sharded_dims)
    _require_known(dims, list(sizes))
    names = list(sizes)
    world = math.prod(sizes.values())
    ranks = np.arange(world, dtype=np.uint64)
    index = np.zeros(world, dtype=np.uint64)
    for name in dims:
        stride = math.prod(sizes[n] for n in names[names.index(name) + 1 :])
        position = (ranks // np.uint64(stride)) % np.uint64(sizes[name])
        index = index * np.uint64(sizes[name]) + position
    seeds: np.ndarray = index + np.uint64(value)  # uint64 arithmetic wraps modulo 2**64
    return seeds


def _mesh_index(mesh: Any, dims: tuple[str, ...]) -> int:
    from torch.distributed.device_mesh import DeviceMesh

    if not isinstance(mesh, DeviceMesh):
        raise MeshError(
            f"mesh must be a torch DeviceMesh, got {type(mesh).__name__}; for a plain "
            "mapping of dim sizes use hwrng.rank_seed or hwrng.seed_plan"
        )
    names = tuple(mesh.mesh_dim_names or ())
    if dims and not names:
        raise MeshError("sharded_dims needs a DeviceMesh with mesh_dim_names")
    _require_known(dims, names)
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        raise MeshError(
            "this rank is not part of the mesh, so it has no place to seed for; "
            "seed it with a mesh that contains it"
        )
    sizes = dict(zip(names, mesh.shape, strict=True))
    index = 0
    for name in dims:
        index = index * sizes[name] + int(coordinate[names.index(name)])
    return index


def _groups_index(groups: Sequence[dist.ProcessGroup]) -> int:
    import torch.distributed as dist

    given: object = groups
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise MeshError(f"groups must be a list of ProcessGroups, got {type(given).__name__}")
    if not (dist.is_available() and dist.is_initialized()):
        raise MeshError("groups need torch.distributed to be initialised")
    index = 0
    for position, group in enumerate(groups):
        if not isinstance(group, dist.ProcessGroup):
            raise MeshError(f"groups[{position}] is {type(group).__name__}, not a ProcessGroup")
        if any(group is other for other in groups[:position]):
            raise MeshError(f"groups[{position}] repeats an earlier group")
        rank = dist.get_rank(group)
        if rank < 0:
            raise MeshError(f"this rank is not a member of groups[{position}]")
        index = index * dist.get_world_size(group) + rank
    return index


def _seed_numpy_legacy(seed: int) -> None:
    if seed < 2**32:
        np.random.seed(seed)
    else:  # the legacy seeder takes a 32-bit integer or an array of 32-bit words
        np.random.seed(np.array([seed & 0xFFFFFFFF, seed >> 32], dtype=np.uint32))


def seed_everything(seed: int, platform: Platform | str | None = None) -> Platform:
    """Seed torch's CPU generator, every device of ``platform``, ``random`` and NumPy.

    Also sets ``PYTHONHASHSEED`` to ``seed % 2**32``. Python reads that
    variable only when an interpreter starts: it fixes hashing in child
    processes started afterwards (DataLoader workers under ``spawn``,
    subprocesses), never in the running one.

    The CPU generator is keyed with all 64 bits of ``seed`` (torch's own CPU
    seeding keeps only the low 32); for seeds below ``2**32`` it is exactly
    ``torch.manual_seed(seed)``. NumPy's legacy global generator gets
    ``numpy.random.seed(seed)`` below ``2**32`` and the seed's two 32-bit
    words above.

    Returns
    -------
    Platform
        The platform whose devices were seeded.
    """
    value = check_seed(seed)
    resolved = resolve_platform(platform)
    resolved.require_available()
    torch.default_generator.set_state(mersenne_state(value, 0))
    resolved.manual_seed_all(value)
    random.seed(value)
    _seed_numpy_legacy(value)
    os.environ["PYTHONHASHSEED"] = str(value % 2**32)
    return resolved


def manual_seed(
    seed: int,
    mesh: DeviceMesh | None = None,
    *,
    sharded_dims: Sequence[str] = (),
    groups: Sequence[dist.ProcessGroup] | None = None,
    platform: Platform | str | None = None,
    deterministic: bool = False,
) -> int:
    """Seed this rank for its place in the mesh, and return its seed.

    Seeds torch's CPU generator, every device of the platform, Python's
    ``random``, NumPy's legacy global generator and ``PYTHONHASHSEED`` (see
    :func:`seed_everything`) with :func:`rank_seed` of this rank. Uses no
    collective: each rank reads its own coordinate.

    Parameters
    ----------
    seed
        The job's seed, the same on every rank, in ``[0, 2**64)``.
    mesh
        A :class:`~torch.distributed.device_mesh.DeviceMesh` containing this
        rank; ``sharded_dims`` name its dims.
    sharded_dims
        Mesh dims along which ranks hold different data (different shards or
        pipeline stages), first varying slowest. Ranks that differ only along
        other dims are replicas and share a seed.
    groups
        Instead of ``mesh``: the process groups along which ranks differ,
        first varying slowest (the RFC's ``sharded_groups``).
    platform
        Whose devices to seed: a :class:`~hwrng.Platform`, a name, or ``None``
        for :func:`hwrng.get_platform`'s choice.
    deterministic
        Also call ``torch.use_deterministic_algorithms(True)`` and the
        platform's own switches (:meth:`~hwrng.Platform.enable_determinism`:
        cuDNN and ``CUBLAS_WORKSPACE_CONFIG`` on CUDA). ``False`` leaves those
        settings as they are.

    Returns
    -------
    int
        This rank's seed.

    Raises
    ------
    InvalidSeedError
        If ``seed`` is outside ``[0, 2**64)``.
    MeshError
        If both ``mesh`` and ``groups`` are given, ``sharded_dims`` are given
        without a mesh, a dim is unknown or repeated, or this rank is outside
        the mesh or a group.
    BackendError
        If the platform cannot be found or is unavailable.

    All checks run before any generator is touched.
    """
    value = check_seed(seed)
    dims = _check_dim_names(sharded_dims)
    check_flag(deterministic, "deterministic")
    if mesh is not None and groups is not None:
        raise MeshError("give either mesh (with sharded_dims) or groups, not both")
    if mesh is not None:
        index = _mesh_index(mesh, dims)
    elif groups is not None:
        if dims:
            raise MeshError(
                "sharded_dims name dims of a mesh; with groups, the groups are the dims"
            )
        index = _groups_index(groups)
    else:
        if dims:
            raise MeshError("sharded_dims needs a mesh whose dims they name")
        index = 0
    resolved = resolve_platform(platform)
    resolved.require_available()
    this_seed = (value + index) % SEED_MODULUS
    seed_everything(this_seed, resolved)
    if deterministic:
        torch.use_deterministic_algorithms(True)
        resolved.enable_determinism()
    global _last
    _last = SeedRecord(seed=this_seed, base_seed=value, platform=resolved.name)
    return this_seed

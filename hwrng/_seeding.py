"""Seeding every RNG of this process for its place in the mesh, with no collective.

:func:`manual_seed` computes this rank's plan with the pure functions of
``_plan`` (each rank reads its own coordinate; nothing is broadcast, so
seeding can never hang or seed the wrong group), writes every stream once,
and records the plan as the one in force (:func:`current_seeding`).

Recording a plan tells the registry its platform
(:func:`hwrng._registry.platform_in_force`, the one rule for what
``platform=None`` means at every entry point: the plan's platform while a plan
is in force, else the registry's choice).
"""

from __future__ import annotations

import os
import random
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from hwrng._exceptions import MeshError
from hwrng._host import seed_host
from hwrng._plan import Seeding, plan_for_groups, plan_for_mesh
from hwrng._platform import Platform
from hwrng._registry import hold_planned_platform, platform_in_force
from hwrng._validation import check_dim_names, check_flag, check_seed

if TYPE_CHECKING:
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

__all__ = [
    "apply_seeding",
    "current_seeding",
    "manual_seed",
    "record_seeding",
    "seed_everything",
    "seed_streams",
    "seeded_mesh",
]

_lock = threading.Lock()
_in_force: Seeding | None = None
# The DeviceMesh the plan in force was made on (verify compares ranks along its dims), held
# weakly: a mesh kept alive past destroy_process_group keeps its process groups alive too,
# and gloo then aborts at interpreter exit ("terminate called without an active exception").
_mesh: weakref.ref[DeviceMesh] | None = None


def current_seeding() -> Seeding | None:
    """Return the seed plan in force on this process, or ``None``.

    :func:`manual_seed` and the presets record one; :func:`seed_everything`
    (a seed computed by other means) and ``torch.manual_seed`` leave no plan
    hwrng can know, so after ``seed_everything`` this is ``None``.

    Returns
    -------
    Seeding or None
        The plan: the job's seed, the terms of this rank's seed, the platform,
        and the mesh it was made for.
    """
    return _in_force


def seeded_mesh() -> DeviceMesh | None:
    """The DeviceMesh the plan in force was made on, while this process holds it.

    hwrng keeps only a weak reference: once the job drops its mesh, this is ``None``.
    """
    return _mesh() if _mesh is not None else None


def record_seeding(seeding: Seeding | None, mesh: DeviceMesh | None = None) -> None:
    """Make ``seeding`` the plan in force (``None``: no plan is known).

    ``mesh`` is the DeviceMesh the plan was made on. Without one, a plan whose
    layout is that of the mesh already held (a plan restored from a
    checkpoint on the mesh it was made on) keeps that mesh.
    """
    global _in_force, _mesh
    from hwrng._mesh import MeshLayout

    held = seeded_mesh()
    if mesh is None and held is not None and seeding is not None and seeding.layout is not None:
        mesh = held if MeshLayout.of(held) == seeding.layout else None
    with _lock:
        _in_force = seeding
        _mesh = None if mesh is None else weakref.ref(mesh)
        hold_planned_platform(None if seeding is None else seeding.platform)


def _seed_numpy_legacy(seed: int) -> None:
    if seed < 2**32:
        np.random.seed(seed)
    else:
        # Not the seed's 32-bit words through ``numpy.random.seed``: that is how
        # ``random.seed`` keys its own Mersenne Twister, so both would draw one stream.
        np.random.set_state(dict(np.random.MT19937(seed).state))


def seed_streams(seed: int, platform: Platform) -> None:
    """Seed the host generator, every device of ``platform``, random, NumPy, PYTHONHASHSEED.

    Arguments are checked by the caller. A platform whose devices draw from
    the host generator (the CPU) is not seeded twice.
    """
    seed_host(seed)
    if not platform.uses_host_generator:
        platform.manual_seed_all(seed)
    random.seed(seed)
    _seed_numpy_legacy(seed)
    os.environ["PYTHONHASHSEED"] = str(seed % 2**32)


def seed_everything(seed: int, platform: Platform | str | None = None) -> Platform:
    """Seed torch's CPU generator, every device of ``platform``, ``random`` and NumPy.

    Also sets ``PYTHONHASHSEED`` to ``seed % 2**32``. Python reads that
    variable only when an interpreter starts: it fixes hashing in child
    processes started afterwards (DataLoader workers under ``spawn``,
    subprocesses), never in the running one.

    The CPU generator is keyed with all 64 bits of ``seed`` (torch's own CPU
    seeding keeps only the low 32); for seeds below ``2**32`` it is exactly
    ``torch.manual_seed(seed)``. NumPy's legacy global generator gets
    ``numpy.random.seed(seed)`` below ``2**32``; above, the state of
    ``numpy.random.MT19937(seed)`` (NumPy's own hashed seeding of a big integer:
    the seed's 32-bit words, which ``random.seed`` uses, would make ``random``
    and NumPy draw the same stream).

    The seed is one you computed, so hwrng knows no plan behind it:
    afterwards :func:`current_seeding` is ``None`` (DTensor ops then draw from
    each rank's own seed, and :func:`hwrng.verify` needs ``sharded_dims``).

    Returns
    -------
    Platform
        The platform whose devices were seeded.
    """
    value = check_seed(seed)
    resolved = platform_in_force(platform)
    resolved.require_available()
    seed_streams(value, resolved)
    record_seeding(None)
    return resolved


def apply_seeding(
    seeding: Seeding,
    platform: Platform,
    *,
    deterministic: bool = False,
    mesh: DeviceMesh | None = None,
) -> int:
    """Seed every stream with ``seeding.rank_seed``, record the plan, return the seed."""
    seed = seeding.rank_seed
    seed_streams(seed, platform)
    if deterministic:
        torch.use_deterministic_algorithms(True)
        platform.enable_determinism()
    record_seeding(seeding, mesh)
    return seed


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
    :func:`seed_everything`) with :func:`rank_seed` of this rank, and records
    the plan (:func:`current_seeding`), from which DTensor random ops take a
    seed common to their mesh. Uses no collective: each rank reads its own
    coordinate.

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
        for the platform in force (the plan's, else
        :func:`hwrng.get_platform`'s choice).
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
    dims = check_dim_names(sharded_dims)
    check_flag(deterministic, "deterministic")
    if mesh is not None and groups is not None:
        raise MeshError("give either mesh (with sharded_dims) or groups, not both")
    if mesh is None and dims:
        raise MeshError(
            "sharded_dims name dims of a mesh; with groups, the groups are the dims"
            if groups is not None
            else "sharded_dims needs a mesh whose dims they name"
        )
    resolved = platform_in_force(platform)
    resolved.require_available()
    if mesh is not None:
        seeding = plan_for_mesh(value, mesh, dims, resolved.name, "manual_seed")
    elif groups is not None:
        seeding = plan_for_groups(value, groups, resolved.name)
    else:
        seeding = Seeding(value, (), resolved.name, "manual_seed")
    return apply_seeding(seeding, resolved, deterministic=deterministic, mesh=mesh)

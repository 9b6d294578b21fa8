"""hwrng in torchtitan: seed on its mesh and save every rank's RNG state in its checkpoints.

torchtitan alone: ``set_determinism`` seeds torch's CPU generator and DTensor's
tracker (the seed plus the rank's index along ``distinct_seed_mesh_dims``) but
not ``random``, NumPy or the device generators, and its ``CheckpointManager``
saves no RNG state: a resumed run draws other numbers than the uninterrupted one.

With hwrng, next to torchtitan's own calls (``set_determinism`` first, for its
determinism flags; hwrng's seeding then replaces its seeds)::

    set_determinism(parallel_dims, device, debug_config, distinct_seed_mesh_dims=["pp"])
    hwrng_titan.seed(parallel_dims.get_mesh("pp"), 1234, sharded_dims=["pp"])
    checkpointer = CheckpointManager(config, ..., states={"train_state": trainer})
    hwrng_titan.attach(checkpointer)  # every rank's streams saved and loaded with the rest

Requires ``pip install "hwrng[torchtitan]"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torchtitan  # noqa: F401  # the extra must be installed: fail here, not at first use

from hwrng._checkpoint import OnMismatch
from hwrng._dcp import RNGState
from hwrng._exceptions import InvalidValueError
from hwrng._platform import Platform
from hwrng._seeding import manual_seed
from hwrng._verify import verify as verify_streams
from hwrng.dtensor import install

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["attach", "seed"]

KEY = "hwrng_rng"


def seed(
    mesh: DeviceMesh,
    seed: int,
    *,
    sharded_dims: Sequence[str],
    verify: bool = True,
    platform: Platform | str | None = None,
) -> int:
    """Seed this rank on torchtitan's mesh, install the DTensor adapter, and verify.

    Parameters
    ----------
    mesh
        A DeviceMesh of the job with named dims, e.g. ``parallel_dims.get_mesh("pp")``
        (torchtitan 0.3.0's ``world_mesh`` is flat: one dim named ``world``).
    seed
        The job's seed, the same on every rank.
    sharded_dims
        Dims of ``mesh`` along which ranks hold different data or stages
        (torchtitan's ``distinct_seed_mesh_dims``, plus the data-parallel dims
        if local randomness should differ per batch); replicas along the other
        dims share a seed, and DTensor ops give replicas equal values and
        shards distinct ones whatever the seeds.
    verify
        Run :func:`hwrng.verify` (a collective) and raise if any stream is wrong.
    platform
        Whose devices to seed; by default :func:`hwrng.get_platform`'s choice.

    Returns
    -------
    int
        This rank's seed.
    """
    mine = manual_seed(seed, mesh, sharded_dims=sharded_dims, platform=platform)
    install(platform)
    if verify:
        verify_streams(mesh).raise_if_failed()
    return mine


def attach(
    checkpointer: Any,
    *,
    key: str = KEY,
    on_mismatch: OnMismatch = "error",
    mesh: DeviceMesh | None = None,
    platform: Platform | str | None = None,
) -> RNGState:
    """Add an :class:`hwrng.RNGState` to a torchtitan ``CheckpointManager``'s states.

    torchtitan saves and loads every entry of ``checkpointer.states`` through
    DCP; :class:`~hwrng.RNGState` holds every rank's streams under one key, so
    each rank gets its own back, or every rank gets a
    :class:`~hwrng.CheckpointError` before any rank changes anything. A
    checkpoint written without it fails to load (DCP finds no ``key``): list
    ``key`` in ``checkpoint.exclude_from_loading`` to load such a checkpoint.

    Raises
    ------
    InvalidValueError
        If checkpointing is disabled (the manager then has no states) or
        ``key`` is already taken.
    """
    if not getattr(checkpointer, "enable", False) or not hasattr(checkpointer, "states"):
        raise InvalidValueError("the CheckpointManager is disabled (checkpoint.enable=False)")
    if key in checkpointer.states:
        raise InvalidValueError(f"the CheckpointManager already has a state named {key!r}")
    state = RNGState(on_mismatch=on_mismatch, mesh=mesh, platform=platform)
    checkpointer.states[key] = state
    return state

"""hwrng in torchtitan: seed on its mesh and save every rank's RNG state in its checkpoints.

torchtitan alone: ``set_determinism`` seeds torch's CPU generator and DTensor's
tracker (the seed plus the rank's index along ``distinct_seed_mesh_dims``) but
not ``random``, NumPy or the device generators, and its ``CheckpointManager``
saves no RNG state: a resumed run draws other numbers than the uninterrupted one.

With hwrng the manager saves every rank's streams through DCP (each rank its
own key), and loads them through :class:`hwrng.RNGLoadPlanner`, so that a
checkpoint of fewer ranks, or one written without hwrng, reaches hwrng's vote
(refused, or re-derived under ``on_mismatch="reseed"``) instead of stopping in
DCP. A restored ``StatefulDataLoader`` (torchtitan's ``ParallelAwareDataloader``)
makes its iterator before the streams come back: making it draws a base seed
that the loader then replaces with its saved one, and drawn after the restore
that draw put the resumed run one draw off.

With hwrng, next to torchtitan's own calls (``set_determinism`` first, for its
determinism flags; hwrng's seeding then replaces its seeds)::

    set_determinism(parallel_dims, device, debug_config, distinct_seed_mesh_dims=["pp"])
    hwrng_titan.seed(parallel_dims.get_mesh("pp"), 1234, sharded_dims=["pp"])
    checkpointer = CheckpointManager(config, ..., states={"train_state": trainer})
    hwrng_titan.attach(checkpointer)  # every rank's streams saved and loaded with the rest

Requires ``pip install "hwrng[torchtitan]"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchtitan.components.checkpointer.base import DATALOADER, MODEL

from hwrng._exceptions import InvalidValueError
from hwrng._platform import Platform
from hwrng._seeding import manual_seed
from hwrng.checkpoint import OnMismatch, RNGLoadPlanner, RNGState
from hwrng.dtensor import install
from hwrng.integrations._world import refuse_persistent_workers
from hwrng.verify import verify as verify_streams

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
        Whose devices to seed; by default the platform in force (the seed
        plan's, else :func:`hwrng.get_platform`'s choice).

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
    DCP; :class:`~hwrng.RNGState` gives each rank a key of its own, so each
    rank gets its own streams back, or every rank gets a
    :class:`~hwrng.CheckpointError` before any rank changes anything. The
    manager then loads through :class:`hwrng.RNGLoadPlanner` (torchtitan takes
    no planner, so its ``dcp_load`` is wrapped on this instance): a checkpoint
    of fewer ranks, or one written without hwrng, is refused by hwrng, or
    re-derived under ``on_mismatch="reseed"``.

    The manager's data loader (``states["dataloader"]``) is restored before
    the streams (DCP loads keys in sorted order, so ``key`` must sort after
    ``"dataloader"``); a loader with ``persistent_workers=True`` is refused
    on load, since its workers' streams cannot be given back.

    Raises
    ------
    InvalidValueError
        If checkpointing is disabled (the manager then has no states), ``key``
        is already taken, or ``key`` sorts before ``"dataloader"``.
    """
    if not getattr(checkpointer, "enable", False) or not hasattr(checkpointer, "states"):
        raise InvalidValueError("the CheckpointManager is disabled (checkpoint.enable=False)")
    if key in checkpointer.states:
        raise InvalidValueError(f"the CheckpointManager already has a state named {key!r}")
    if DATALOADER in checkpointer.states and key < DATALOADER:
        raise InvalidValueError(
            f"key {key!r} sorts before {DATALOADER!r}: DCP loads keys in sorted order, and the "
            "data loader must be restored before the RNG streams"
        )
    state = _TitanRNGState(checkpointer, on_mismatch=on_mismatch, mesh=mesh, platform=platform)
    checkpointer.states[key] = state
    _load_through_the_planner(checkpointer)
    return state


def _load_through_the_planner(checkpointer: Any) -> None:
    """Make this manager's ``dcp_load`` pass :class:`hwrng.RNGLoadPlanner` (torchtitan 0.3.0)."""
    if getattr(checkpointer, "_hwrng_planner", False):
        return
    original = checkpointer.dcp_load

    def dcp_load(
        state_dict: dict[str, Any], checkpoint_id: str, from_hf: bool, from_quantized: bool
    ) -> None:
        if from_hf:  # a Hugging Face model checkpoint holds no RNG state to plan for
            original(
                state_dict,
                checkpoint_id=checkpoint_id,
                from_hf=from_hf,
                from_quantized=from_quantized,
            )
            return
        from torch.distributed.checkpoint.state_dict_loader import load

        load(state_dict, checkpoint_id=checkpoint_id, planner=RNGLoadPlanner())
        # The manager flattens the model's state into the dict it loads: hand it back.
        if MODEL in checkpointer.states:
            checkpointer.states[MODEL].load_state_dict(state_dict)

    checkpointer.dcp_load = dcp_load
    checkpointer._hwrng_planner = True


def _prime_loader(loader: Any) -> None:
    """Make a restored ``StatefulDataLoader``'s iterator now, before the streams come back.

    Loading it only keeps the saved iterator state; the next ``iter()`` makes
    the iterator, whose construction draws a base seed from the default
    generator (torch's ``_BaseDataLoaderIter``) that the loader then replaces
    with the saved one. ``StatefulDataLoader.state_dict()`` without an
    iterator makes it from the saved state and keeps it for the next ``iter()``.
    """
    from torchdata.stateful_dataloader import StatefulDataLoader

    if (
        isinstance(loader, StatefulDataLoader)
        and getattr(loader, "_iterator", None) is None
        and getattr(loader, "next_iter_state", None) is not None
    ):
        StatefulDataLoader.state_dict(loader)


class _TitanRNGState(RNGState):
    """An RNGState that restores the manager's data loader's iterator first."""

    def __init__(self, checkpointer: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._checkpointer = checkpointer

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Vote (every rank), prime the loader, then carry out the verdict."""
        restore = self.check(state_dict)
        loader = self._checkpointer.states.get(DATALOADER)
        if loader is not None:
            refuse_persistent_workers([loader], "hwrng.integrations.torchtitan")
            _prime_loader(loader)
        restore()

"""hwrng in Hugging Face accelerate: seed, verify and checkpoint with ``save_state``/``load_state``.

accelerate alone: ``set_seed(seed, device_specific=True)`` adds the process
index to the seed, and ``save_state`` writes one ``random_states_<i>.pkl`` per
process (``random``, NumPy, torch CPU and the *current* CUDA device only);
``load_state`` logs a failed RNG load at INFO and carries on. It has no mesh:
replicas of a tensor-parallel group cannot share a seed while shards differ.

With hwrng::

    accelerator = Accelerator(
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=1234)
    )
    prepare_rng(accelerator, 1234)  # seeds, verifies, registers every rank's RNG state
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    accelerator.save_state(path)    # ... later, in fresh processes: accelerator.load_state(path)

Requires ``pip install "hwrng[accelerate]"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hwrng._checkpoint import OnMismatch
from hwrng._dcp import RNGState
from hwrng._exceptions import InvalidValueError
from hwrng._platform import Platform
from hwrng.integrations._world import MeshLike, check_world, seed_world

__all__ = ["prepare_rng"]


def _check_sampler(accelerator: Any) -> None:
    config = accelerator.dataloader_config
    if not config.use_seedable_sampler:
        raise InvalidValueError(
            "prepare_rng needs Accelerator(dataloader_config=DataLoaderConfiguration("
            "use_seedable_sampler=True, data_seed=<seed>)): without it a shuffling loader's "
            "order comes from a sampler generator that save_state does not restore"
        )
    if config.data_seed is None:
        raise InvalidValueError(
            "prepare_rng needs DataLoaderConfiguration(data_seed=<seed>): the seedable sampler "
            "otherwise shuffles with torch.initial_seed(), which hwrng makes different on each "
            "rank, so ranks would draw overlapping samples"
        )


def prepare_rng(
    accelerator: Any,
    seed: int,
    *,
    mesh: MeshLike = None,
    sharded_dims: Sequence[str] | None = None,
    verify: bool = True,
    on_mismatch: OnMismatch = "error",
    platform: Platform | str | None = None,
) -> RNGState:
    """Seed each process for its place in the mesh, verify, and checkpoint every rank's streams.

    Call it on every process, before ``accelerator.prepare``, in place of
    ``accelerate.utils.set_seed``.

    Parameters
    ----------
    accelerator
        The ``accelerate.Accelerator``, built with ``use_seedable_sampler=True``
        and a ``data_seed`` (refused otherwise, before anything changes).
    seed
        The job's seed, the same on every process.
    mesh, sharded_dims
        A DeviceMesh (or a function building one) and the dims along which
        ranks differ; by default a 1-D ``("dp",)`` mesh, each process its own seed.
    verify
        Check every stream of every process with :func:`hwrng.verify` (a collective).
    on_mismatch, platform
        As for :func:`hwrng.load_state_dict`.

    Returns
    -------
    RNGState
        The :class:`hwrng.RNGState` registered with
        ``accelerator.register_for_checkpointing``: ``save_state`` stores every
        process's streams in ``custom_checkpoint_<n>.pkl`` (written by the main
        process), and ``load_state`` restores each its own, after accelerate's
        own RNG files, or raises :class:`~hwrng.CheckpointError` on every
        process (when any one refuses) before any changes anything.

    Raises
    ------
    InvalidValueError
        If the accelerator's data loaders would not shuffle reproducibly.
    """
    _check_sampler(accelerator)
    seeded = seed_world(seed, mesh, sharded_dims, platform)
    if verify:
        check_world(seeded)
    state = RNGState(on_mismatch=on_mismatch, mesh=seeded, platform=platform)
    accelerator.register_for_checkpointing(state)
    return state

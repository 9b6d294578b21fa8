"""hwrng in Hugging Face accelerate: seed, verify and checkpoint with ``save_state``/``load_state``.

accelerate alone: ``set_seed(seed, device_specific=True)`` adds the process
index to the seed, and ``save_state`` writes one ``random_states_<i>.pkl`` per
process (``random``, NumPy, torch CPU and the *current* CUDA device only);
``load_state`` logs a failed RNG load at INFO and carries on. It has no mesh:
replicas of a tensor-parallel group cannot share a seed while shards differ.

With hwrng each process writes its own entry beside accelerate's files, in the
checkpoint folder's ``hwrng/save-<nonce>/rank-<r>.pt``, a new set per save
(accelerate's save and load pre-hooks give every process the folder), and the
main process's ``custom_checkpoint`` holds the small entry all share, which
names the set; the sets of earlier saves to the folder go once ``save_state``
has returned on every process, and ``total_limit`` removes them with the folder.

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

import os
import warnings
from collections.abc import Sequence
from typing import Any

from hwrng._exceptions import CheckpointError, HwrngWarning, InvalidValueError
from hwrng._platform import Platform
from hwrng._validation import check_flag
from hwrng.checkpoint import OnMismatch, RNGState
from hwrng.integrations._world import (
    MeshLike,
    check_world,
    refuse_persistent_workers,
    seed_world,
)

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


def _in_an_epoch(accelerator: Any) -> bool:
    """Whether a prepared loader is being iterated and has a batch of this epoch left.

    accelerate's loaders fetch a batch ahead; on an epoch's last batch the
    fetch found none (``end_of_dataloader``), so nothing was drawn for a next.
    """
    mine = accelerator._dataloaders  # a loop of another accelerator, or one cut short, is not
    iterating = [
        loader
        for loader in accelerator.gradient_state.dataloader_references
        if loader is not None and any(loader is own for own in mine)
    ]
    return any(not getattr(loader, "end_of_dataloader", False) for loader in iterating)


def prepare_rng(
    accelerator: Any,
    seed: int,
    *,
    mesh: MeshLike = None,
    sharded_dims: Sequence[str] | None = None,
    verify: bool = True,
    on_mismatch: OnMismatch = "error",
    mid_epoch: bool = False,
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
        As for :func:`hwrng.load_state_dict`; ``"reseed"`` also re-derives the
        streams on another number of processes and for a checkpoint written
        without ``prepare_rng``.
    mid_epoch
        Allow ``save_state`` in the middle of an epoch. Refused by default: an
        accelerate loader fetches one batch ahead, drawing that batch's
        augmentation (without workers) or its iterator's base seed (with
        workers, on resume) from the ranks' streams, so a resumed run is
        shifted by one batch (measured: 0 of 12 steps alike). Allow it when
        your loaders draw from no global stream: ``DataLoader(generator=...)``
        of its own, and augmentation seeded per sample. A save on the last
        batch of an epoch (every loader being iterated has no batch left) is
        an epoch end, and accepted.

    Returns
    -------
    RNGState
        The :class:`hwrng.RNGState` registered with
        ``accelerator.register_for_checkpointing``: ``save_state`` stores every
        process's own entry in a new set in the checkpoint folder's ``hwrng/``
        and the shared one in ``custom_checkpoint_<n>.pkl`` (this accelerator's
        ``save_state`` then removes the sets of earlier saves, once it has
        returned on every process), and ``load_state``
        restores each process its own, after accelerate's own RNG files, or
        raises :class:`~hwrng.CheckpointError` on every process (when any one
        refuses) before any changes anything. A prepared loader with
        ``persistent_workers=True`` is refused at ``load_state``: its workers'
        streams cannot be given back.

    Raises
    ------
    InvalidValueError
        If the accelerator's data loaders would not shuffle reproducibly.
    """
    _check_sampler(accelerator)
    check_flag(mid_epoch, "mid_epoch")
    seeded = seed_world(seed, mesh, sharded_dims, platform)
    if verify:
        check_world(seeded)
    state = RNGState(on_mismatch=on_mismatch, mesh=seeded, platform=platform)
    objects: list[Any] = accelerator._custom_objects
    unregistered: list[int] = []  # where the state was while a load without it ran
    saving: list[str] = []  # the file of the save under way that holds the shared entry

    def registered() -> int:
        while unregistered:  # a load of a checkpoint without hwrng's entry took it out
            objects.insert(unregistered.pop(), state)
        return next(i for i, obj in enumerate(objects) if obj is state)

    def save_hook(models: Any, weights: Any, output_dir: str) -> None:
        del models, weights
        index = registered()
        if _in_an_epoch(accelerator) and not mid_epoch:
            raise CheckpointError(
                "prepare_rng: refusing save_state in the middle of an epoch: accelerate's "
                "loader has already drawn the next batch from the ranks' streams, so a resumed "
                "run would be shifted by one batch; save at the end of an epoch (on its last "
                "batch, or after the loop), or pass "
                "prepare_rng(mid_epoch=True) when your loaders draw from no global stream"
            )
        state.directory = os.path.join(output_dir, "hwrng")
        saving[:] = [os.path.join(output_dir, f"custom_checkpoint_{index}.pkl")]

    def load_hook(models: Any, input_dir: str) -> None:
        del models
        index = registered()
        refuse_persistent_workers(accelerator._dataloaders, "prepare_rng")
        state.directory = os.path.join(input_dir, "hwrng")
        if os.path.exists(os.path.join(input_dir, f"custom_checkpoint_{index}.pkl")):
            return
        # Written without prepare_rng: accelerate itself refuses a folder with fewer custom
        # checkpoints than registered objects, so the vote on "no entry" runs here.
        state.check({})()  # refuses on every process, or starts new streams under reseed
        unregistered.append(index)
        del objects[index]
        warnings.warn(
            "hwrng: accelerate restores its own random_states_<i>.pkl of this checkpoint "
            "after this (random, NumPy, torch CPU, the current device); the other streams "
            "are hwrng's new ones",
            HwrngWarning,
            stacklevel=2,
        )

    save_state = accelerator.save_state

    def save_and_commit(*args: Any, **kwargs: Any) -> Any:
        saving.clear()
        location = save_state(*args, **kwargs)
        # every process is past its writes: sets no file in reach names can go (retention rule)
        state.commit(saving[0] if saving else None)
        return location

    accelerator.save_state = save_and_commit
    accelerator.register_save_state_pre_hook(save_hook)
    accelerator.register_load_state_pre_hook(load_hook)
    accelerator.register_for_checkpointing(state)
    return state

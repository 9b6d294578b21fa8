"""What each rank runs in test_integration_accelerate.py (importable by the spawned ranks)."""

from __future__ import annotations

import os
from typing import Any

import torch
import trainer_data
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, set_seed

import hwrng
from hwrng.integrations.accelerate import prepare_rng

SEED = 1234


def _run(
    directory: str,
    epochs: int,
    with_hwrng: bool,
    save_after: int | None,
    load: bool,
    on_mismatch: str = "error",
    save_mid_epoch: bool = False,
    save_on_last_batch: bool = False,
) -> Any:
    # The pool's processes are the ranks; accelerate joins their process group.
    os.environ["LOCAL_RANK"] = os.environ["RANK"]
    os.environ["LOCAL_WORLD_SIZE"] = os.environ["WORLD_SIZE"]
    accelerator = Accelerator(
        cpu=True,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=SEED),
    )
    if with_hwrng:
        prepare_rng(accelerator, SEED, on_mismatch=on_mismatch)  # type: ignore[arg-type]
        worker_init_fn: Any = hwrng.worker_init_fn
    else:
        set_seed(SEED, device_specific=True)  # accelerate's own per-process seeds
        worker_init_fn = None
    loader = torch.utils.data.DataLoader(
        trainer_data.Augmented(),
        batch_size=trainer_data.BATCH,
        shuffle=True,
        num_workers=2,
        worker_init_fn=worker_init_fn,
    )
    net = trainer_data.model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    net, optimizer, loader = accelerator.prepare(net, optimizer, loader)
    first = 0
    if load:
        accelerator.load_state(directory)
        first = (save_after or 0) + 1
    losses = []
    for epoch in range(first, epochs):
        loader.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(net(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            if save_mid_epoch:
                accelerator.save_state(directory)
            last = step == len(loader) - 1
            if save_on_last_batch and last and epoch == save_after and not load:
                accelerator.save_state(directory)  # the usual "save every N steps" loop
        if epoch == save_after and not load and not save_on_last_batch:
            accelerator.save_state(directory)
    accelerator.wait_for_everyone()
    accelerator.free_memory()
    return losses


def train(directory: str, epochs: int, save_after: int, with_hwrng: bool) -> list[float]:
    """The uninterrupted run; ``save_state`` after epoch ``save_after``."""
    return _run(directory, epochs, with_hwrng, save_after, load=False)


def train_saving_on_the_last_batch(directory: str, epochs: int, save_after: int) -> list[float]:
    """The uninterrupted run, saving inside the loop on epoch ``save_after``'s last batch."""
    return _run(directory, epochs, True, save_after, load=False, save_on_last_batch=True)


def resume(directory: str, epochs: int, save_after: int, with_hwrng: bool) -> list[float]:
    """Fresh processes: ``load_state`` and train the remaining epochs."""
    return _run(directory, epochs, with_hwrng, save_after, load=True)


def save_in_the_middle_of_an_epoch(directory: str) -> str:
    """``save_state`` inside the loop: refused on every process, before anything is written."""
    import os as _os

    try:
        _run(directory, 1, True, None, load=False, save_mid_epoch=True)
    except hwrng.CheckpointError as error:
        written = sorted(_os.listdir(directory)) if _os.path.isdir(directory) else []
        return f"refused: {error}; written: {written}"
    return "saved"


def resume_without_hwrng_entry(
    directory: str, epochs: int, save_after: int, on_mismatch: str
) -> Any:
    """Load a folder accelerate saved without prepare_rng, with prepare_rng."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            losses = _run(directory, epochs, True, save_after, load=True, on_mismatch=on_mismatch)
        except hwrng.CheckpointError as error:
            return f"refused: {error}", []
    warned = [str(w.message) for w in caught if issubclass(w.category, hwrng.HwrngWarning)]
    return f"trained {len(losses)} steps", warned

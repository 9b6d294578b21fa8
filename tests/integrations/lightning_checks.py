"""What each rank runs in test_integration_lightning.py (importable by the spawned ranks)."""

from __future__ import annotations

import os
import random
import shutil
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import trainer_data

import hwrng
from hwrng.integrations.lightning import HwrngCallback

SEED = 1234


class Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = trainer_data.model()
        self.losses: list[float] = []
        self.draws: list[float] = []  # the main process's random and NumPy draws, per step

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.draws += [random.random(), float(np.random.rand())]
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _fit(
    directory: str,
    epochs: int,
    with_hwrng: bool,
    ckpt_path: str | None,
    *,
    on_mismatch: str = "error",
    persistent_workers: bool = False,
    module: Module | None = None,
    checkpoints: list[pl.Callback] | None = None,
) -> list[float]:
    # The pool's processes are the ranks: Lightning sees LOCAL_RANK and launches none of its own.
    os.environ["LOCAL_RANK"] = os.environ["RANK"]
    os.environ["NODE_RANK"] = "0"
    callbacks: list[pl.Callback] = checkpoints or [
        pl.callbacks.ModelCheckpoint(dirpath=directory, filename="{epoch}", save_top_k=-1),
        pl.callbacks.ModelCheckpoint(
            dirpath=directory, filename="{step}", every_n_train_steps=1, save_top_k=-1
        ),
    ]
    if with_hwrng:
        callbacks.insert(0, HwrngCallback(SEED, on_mismatch=on_mismatch))  # type: ignore[arg-type]
        worker_init_fn: Any = hwrng.worker_init_fn
    else:
        pl.seed_everything(SEED, workers=True)  # Lightning's own worker seeding
        worker_init_fn = None
    module = module if module is not None else Module()
    loader = torch.utils.data.DataLoader(
        trainer_data.Augmented(),
        batch_size=trainer_data.BATCH,
        shuffle=True,
        num_workers=2,
        worker_init_fn=worker_init_fn,
        persistent_workers=persistent_workers,
    )
    world = torch.distributed.get_world_size()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=world,
        strategy="ddp" if world > 1 else "auto",
        max_epochs=epochs,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=True,
    )
    trainer.fit(module, loader, ckpt_path=ckpt_path)
    return module.losses


def train(directory: str, epochs: int, with_hwrng: bool) -> tuple[list[float], list[float]]:
    """The uninterrupted run; it checkpoints at the end of every epoch. Losses and draws."""
    module = Module()
    _fit(directory, epochs, with_hwrng, None, module=module)
    return module.losses, module.draws


def resume(directory: str, after_epoch: int, epochs: int, with_hwrng: bool) -> list[float]:
    """Fresh processes: resume from the checkpoint of ``after_epoch`` and train to ``epochs``."""
    path = str(Path(directory) / f"epoch={after_epoch}.ckpt")
    return _fit(directory + "-resumed", epochs, with_hwrng, path)


class KeepByHand(pl.Callback):
    """What users do with checkpoint files as training goes on (rank 0; every rank waits):
    copy the best one, back up ``last.ckpt``, rename one to keep it."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        folder = self.directory
        if trainer.is_global_zero and trainer.current_epoch == 1:
            shutil.copy(folder / "epoch=0.ckpt", folder / "best.ckpt")
        if trainer.is_global_zero and trainer.current_epoch == 2:
            shutil.copy(folder / "last.ckpt", folder / "last-backup.ckpt")
            os.rename(folder / "epoch=1.ckpt", folder / "keep-1.ckpt")
        trainer.strategy.barrier()


def train_keeping_copies(directory: str, epochs: int) -> list[float]:
    """Top-k by a monitor (the newest epoch alone) and ``last.ckpt``, with copies kept by hand:
    Lightning later removes ``epoch=0.ckpt`` and (renamed away) ``epoch=1.ckpt``, and
    saves ``last.ckpt`` over. The losses of every step."""
    checkpoints: list[pl.Callback] = [
        pl.callbacks.ModelCheckpoint(
            dirpath=directory,
            filename="{epoch}",
            monitor="step",
            mode="max",
            save_top_k=1,
            save_last=True,
        ),
        KeepByHand(directory),
    ]
    return _fit(directory, epochs, True, None, checkpoints=checkpoints)


def resume_from(path: str, epochs: int) -> list[float]:
    """Fresh processes: resume from the checkpoint file ``path`` and train to ``epochs``."""
    return _fit(path + "-resumed", epochs, True, path)


def resume_refused_on_rank_1(directory: str, after_epoch: int, epochs: int) -> str:
    """Rank 1 alone holds a named state the checkpoint lacks: what ``fit`` raised on this rank.

    The callback's vote runs when Lightning hands it the checkpoint, so every rank must
    raise there, before training (a rank training on alone would hang in DDP's all-reduce).
    """
    tracker = hwrng.RNGStatesTracker("cpu", name="lightning-only-on-rank-1")
    if os.environ["RANK"] == "1":
        tracker.add("extra", 99)
    try:
        resume(directory, after_epoch, epochs, True)
    except hwrng.CheckpointError as error:
        return f"refused: {error}"
    return "trained"


def resume_another_world(
    directory: str, after_epoch: int, epochs: int, on_mismatch: str
) -> tuple[str, list[float], list[str]]:
    """Resume on this pool's world size (another than the saving one): outcome, draws, warnings."""
    path = str(Path(directory) / f"epoch={after_epoch}.ckpt")
    module = Module()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            _fit(directory + "-w", epochs, True, path, on_mismatch=on_mismatch, module=module)
        except hwrng.CheckpointError as error:
            return f"refused: {error}", [], []
    warned = [str(w.message) for w in caught if issubclass(w.category, hwrng.HwrngWarning)]
    return "trained", module.draws, warned


def resume_without_hwrng_entry(
    directory: str, after_epoch: int, epochs: int, on_mismatch: str
) -> tuple[str, list[float], list[str]]:
    """Resume a checkpoint Lightning wrote without HwrngCallback, with the callback."""
    return resume_another_world(directory, after_epoch, epochs, on_mismatch)


def resume_with_persistent_workers(directory: str, after_epoch: int, epochs: int) -> str:
    """Resume with a loader whose workers persist across epochs: refused on every rank."""
    path = str(Path(directory) / f"epoch={after_epoch}.ckpt")
    try:
        _fit(directory + "-p", epochs, True, path, persistent_workers=True)
    except hwrng.CheckpointError as error:
        return f"refused: {error}"
    return "trained"


def resume_mid_epoch(directory: str, step: int, epochs: int) -> list[str]:
    """Resume from a checkpoint in the middle of an epoch: the warnings hwrng gave."""
    path = str(Path(directory) / f"step={step}.ckpt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(directory + "-m", epochs, True, path)
    return [str(w.message) for w in caught if issubclass(w.category, hwrng.HwrngWarning)]

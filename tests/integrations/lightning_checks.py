"""What each rank runs in test_integration_lightning.py (importable by the spawned ranks)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
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

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _fit(directory: str, epochs: int, with_hwrng: bool, ckpt_path: str | None) -> list[float]:
    # The pool's processes are the ranks: Lightning sees LOCAL_RANK and launches none of its own.
    os.environ["LOCAL_RANK"] = os.environ["RANK"]
    os.environ["NODE_RANK"] = "0"
    callbacks: list[pl.Callback] = [
        pl.callbacks.ModelCheckpoint(dirpath=directory, filename="{epoch}", save_top_k=-1)
    ]
    if with_hwrng:
        callbacks.insert(0, HwrngCallback(SEED))
        worker_init_fn: Any = hwrng.worker_init_fn
    else:
        pl.seed_everything(SEED, workers=True)  # Lightning's own worker seeding
        worker_init_fn = None
    module = Module()
    loader = torch.utils.data.DataLoader(
        trainer_data.Augmented(),
        batch_size=trainer_data.BATCH,
        shuffle=True,
        num_workers=2,
        worker_init_fn=worker_init_fn,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=epochs,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=True,
    )
    trainer.fit(module, loader, ckpt_path=ckpt_path)
    return module.losses


def train(directory: str, epochs: int, with_hwrng: bool) -> list[float]:
    """The uninterrupted run; it checkpoints at the end of every epoch."""
    return _fit(directory, epochs, with_hwrng, None)


def resume(directory: str, after_epoch: int, epochs: int, with_hwrng: bool) -> list[float]:
    """Fresh processes: resume from the checkpoint of ``after_epoch`` and train to ``epochs``."""
    path = str(Path(directory) / f"epoch={after_epoch}.ckpt")
    return _fit(directory + "-resumed", epochs, with_hwrng, path)


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

"""What each rank runs in test_integration_fabric.py (importable by the spawned ranks)."""

from __future__ import annotations

import os
from typing import Any

import lightning as L
import torch
import trainer_data

import hwrng
from hwrng.integrations.lightning import fabric_rng_state, load_fabric, seed_fabric

SEED = 1234


def _run(path: str, epochs: int, save_after: int, with_hwrng: bool, load: bool) -> list[float]:
    os.environ["LOCAL_RANK"] = os.environ["RANK"]  # the pool's processes are the ranks
    os.environ["NODE_RANK"] = "0"
    fabric = L.Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    if with_hwrng:
        seed_fabric(SEED)
        worker_init_fn: Any = hwrng.worker_init_fn
    else:
        fabric.seed_everything(SEED + fabric.global_rank, workers=True)
        worker_init_fn = None
    net = trainer_data.model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    net, optimizer = fabric.setup(net, optimizer)
    loader = fabric.setup_dataloaders(
        torch.utils.data.DataLoader(
            trainer_data.Augmented(),
            batch_size=trainer_data.BATCH,
            shuffle=True,
            num_workers=2,
            worker_init_fn=worker_init_fn,
        )
    )
    state: dict[str, Any] = {"model": net, "optimizer": optimizer}
    if with_hwrng:
        state["rng"] = fabric_rng_state(path)  # each rank's own entry beside the checkpoint
    first = 0
    if load:
        load_fabric(fabric, path, state)
        first = save_after + 1
    losses = []
    for epoch in range(first, epochs):
        # Fabric sets the sampler's epoch from its own count of iter() calls, overriding
        # set_epoch, and a resumed run restarts that count at 0 (replaying epoch 0's order,
        # measured with lightning 2.6.6): carry the epoch into that private count.
        loader._num_iter_calls = epoch
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(net(x), y)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        if epoch == save_after and not load:
            fabric.save(path, state)
    fabric.barrier()
    return losses


def train(path: str, epochs: int, save_after: int, with_hwrng: bool) -> list[float]:
    """The uninterrupted run; ``fabric.save`` after epoch ``save_after``."""
    return _run(path, epochs, save_after, with_hwrng, load=False)


def resume(path: str, epochs: int, save_after: int, with_hwrng: bool) -> list[float]:
    """Fresh processes: ``fabric.load`` and train the remaining epochs."""
    return _run(path, epochs, save_after, with_hwrng, load=True)

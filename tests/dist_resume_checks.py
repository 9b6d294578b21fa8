"""What each rank runs in test_resume_dist.py: a small training loop with every kind of
randomness, checkpointed and resumed (importable by the spawned ranks)."""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

import hwrng

STEPS_PER_EPOCH = 2


class Augmented(torch.utils.data.Dataset[torch.Tensor]):
    """Eight items; each worker adds noise from torch, random and NumPy (seeded per worker)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        noise = torch.rand(8) + random.random() + float(np.random.rand())
        return torch.full((8,), float(index)) + noise


def _setup() -> dict[str, Any]:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    hwrng.manual_seed(2024, mesh, sharded_dims=["dp", "tp"], platform="cpu")
    tracker = hwrng.RNGStatesTracker("cpu", name="train")
    tracker.add("model-parallel-rng", 2024 + 2718 + dist.get_rank())
    init = torch.Generator().manual_seed(0)  # the same weights on every rank
    model = torch.nn.Linear(8, 8)
    with torch.no_grad():
        model.weight.copy_(torch.randn(8, 8, generator=init) * 0.3)
        model.bias.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(
        Augmented(),
        batch_size=4,
        shuffle=True,
        num_workers=2,
        worker_init_fn=hwrng.worker_init_fn,
        multiprocessing_context="fork",
    )
    hwrng.dtensor.install("cpu")
    return {"mesh": mesh, "tracker": tracker, "model": model, "optim": optimizer, "loader": loader}


def _epoch(run: dict[str, Any]) -> list[float]:
    losses = []
    for batch in run["loader"]:
        x = batch / 8 * (1 + 0.01 * random.random()) + 0.01 * float(np.random.rand())
        h = run["model"](x)
        # dropout as a DTensor op (rows sharded along dp) through the adapter ...
        h = DTensor.from_local(h, run["mesh"], [Shard(0), Replicate()], run_check=False)
        h = torch.nn.functional.dropout(h, p=0.3).to_local()
        # ... and in a named state, as a tensor-parallel layer would
        with run["tracker"].fork():
            h = torch.nn.functional.dropout(h, p=0.2)
        loss = (h**2).mean()
        run["optim"].zero_grad()
        loss.backward()
        for param in run["model"].parameters():  # data parallel: the replicas stay identical
            assert param.grad is not None
            dist.all_reduce(param.grad)
            param.grad /= dist.get_world_size()
        run["optim"].step()
        losses.append(loss.item())
    return losses


def _save(run: dict[str, Any], directory: str, mode: str) -> None:
    if mode == "dcp":
        import torch.distributed.checkpoint as dcp

        state = {"model": run["model"].state_dict(), "optim": run["optim"].state_dict()}
        dcp.save({**state, "rng": hwrng.RNGState()}, checkpoint_id=os.path.join(directory, "dcp"))
    else:
        rank = dist.get_rank()
        torch.save(
            {"model": run["model"].state_dict(), "optim": run["optim"].state_dict()},
            os.path.join(directory, f"train-{rank}.pt"),
        )
        hwrng.save(os.path.join(directory, f"rng-{rank}.pt"))


def _load(run: dict[str, Any], directory: str, mode: str) -> None:
    if mode == "dcp":
        import torch.distributed.checkpoint as dcp

        state = {
            "model": run["model"].state_dict(),
            "optim": run["optim"].state_dict(),
            "rng": hwrng.RNGState(),
        }
        dcp.load(state, checkpoint_id=os.path.join(directory, "dcp"))
        run["model"].load_state_dict(state["model"])
        run["optim"].load_state_dict(state["optim"])
    else:
        rank = dist.get_rank()
        saved = torch.load(os.path.join(directory, f"train-{rank}.pt"), weights_only=True)
        run["model"].load_state_dict(saved["model"])
        run["optim"].load_state_dict(saved["optim"])
        hwrng.load(os.path.join(directory, f"rng-{rank}.pt"))


def train_and_checkpoint(directory: str, epochs_before: int, epochs_after: int) -> list[float]:
    """Train, checkpoint both ways, train on: the losses after the checkpoint."""
    run = _setup()
    try:
        for _ in range(epochs_before):
            _epoch(run)
        _save(run, directory, "dcp")
        _save(run, directory, "torch")
        return [loss for _ in range(epochs_after) for loss in _epoch(run)]
    finally:
        hwrng.dtensor.uninstall()


def resume(directory: str, mode: str, epochs_after: int) -> list[float]:
    """In fresh processes: set up as the job does, load, train on."""
    run = _setup()
    try:
        _load(run, directory, mode)
        return [loss for _ in range(epochs_after) for loss in _epoch(run)]
    finally:
        hwrng.dtensor.uninstall()


def load_another_ranks_file(directory: str) -> str:
    """Rank 2 loads rank 1's file: refused, and nothing changes."""
    _setup()
    hwrng.dtensor.uninstall()
    if dist.get_rank() != 2:
        return ""
    before = hwrng.state_dict()
    try:
        hwrng.load(os.path.join(directory, "rng-1.pt"))
    except hwrng.CheckpointError as error:
        after = hwrng.state_dict()
        unchanged = before["digest"] == after["digest"]
        return f"{'unchanged' if unchanged else 'CHANGED'}: {error}"
    return "loaded"

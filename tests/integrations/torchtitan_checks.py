"""What each rank runs in test_integration_torchtitan.py (importable by the spawned ranks).

torchtitan's Trainer needs its own model registry and an accelerator; its seeding
(``set_determinism`` on a ``ParallelDims`` mesh) and its ``CheckpointManager`` are
exercised directly around the same small training loop as the other trainers.
"""

from __future__ import annotations

from typing import Any

import torch
import trainer_data
from torch.distributed.checkpoint.state_dict import (
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torchtitan.components.checkpointer.dcp import CheckpointManager
from torchtitan.config import DebugConfig
from torchtitan.distributed.parallel_dims import ParallelDims
from torchtitan.distributed.utils import set_determinism

import hwrng
from hwrng.integrations import torchtitan as hwrng_titan

SEED = 1234


class Optimizers:
    """The optimizer as a DCP Stateful, as torchtitan's OptimizersContainer is."""

    def __init__(self, net: torch.nn.Module) -> None:
        self.net = net
        self.optimizer = torch.optim.SGD(net.parameters(), lr=0.05)

    def state_dict(self) -> dict[str, Any]:
        return get_optimizer_state_dict(self.net, self.optimizer)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_optimizer_state_dict(self.net, self.optimizer, state_dict)


class NoSchedulers:
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        del state_dict


def _loader(with_hwrng: bool, sampler: Any, kind: str, workers: int) -> Any:
    """A plain DataLoader, or torchtitan's own (a torchdata StatefulDataLoader)."""
    options: dict[str, Any] = {"batch_size": trainer_data.BATCH, "sampler": sampler}
    if workers:
        options.update(
            num_workers=workers, worker_init_fn=hwrng.worker_init_fn if with_hwrng else None
        )
    if kind == "titan":
        from torchtitan.components.dataloader import ParallelAwareDataloader

        rank = torch.distributed.get_rank()
        return ParallelAwareDataloader(
            trainer_data.Augmented(), dp_rank=rank, dp_world_size=2, **options
        )
    return torch.utils.data.DataLoader(trainer_data.Augmented(), **options)


def _run(
    directory: str,
    steps: int,
    save_at: int,
    with_hwrng: bool,
    load: bool,
    kind: str = "plain",
    workers: int = 2,
) -> list[float]:
    # On the CPU, set_determinism's DTensor seeding fails inside torch (device_count() is 0);
    # its pipeline-only path (world size == pp) seeds per stage and skips DTensor: use that.
    dims = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=2, ep=1, world_size=2)
    set_determinism(dims, torch.device("cpu"), DebugConfig(seed=SEED), ["pp"])
    if with_hwrng:
        hwrng_titan.seed(dims.get_mesh("pp"), SEED, sharded_dims=["pp"])
    net = trainer_data.model()
    # data parallel: every rank holds the same weights (DCP saves a replicated key once)
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    optimizers = Optimizers(net)
    sampler = torch.utils.data.DistributedSampler(trainer_data.Augmented(), seed=SEED)
    loader = _loader(with_hwrng, sampler, kind, workers)
    checkpointer = CheckpointManager(
        CheckpointManager.Config(
            enable=True,
            folder="ckpt",
            interval=save_at,
            keep_latest_k=0,
            last_save_model_only=False,
        ),
        dataloader=loader if kind == "titan" else None,
        model_parts=[net],
        optimizers=optimizers,
        lr_schedulers=NoSchedulers(),
        states={},
        sd_adapter=None,
        base_folder=directory,
    )
    if with_hwrng:
        hwrng_titan.attach(checkpointer)
    step, losses = 0, []
    per_epoch = trainer_data.ITEMS // (2 * trainer_data.BATCH)
    if load:
        # torchtitan's loader makes its iterator as it is restored (before the streams come
        # back): the sampler's epoch must be set before the load, not after it
        sampler.set_epoch(save_at // per_epoch)
        assert checkpointer.load(step=save_at)
        step = save_at
    while step < steps:
        epoch = step // per_epoch
        sampler.set_epoch(epoch)
        for x, y in loader:
            step += 1
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            optimizers.optimizer.step()
            optimizers.optimizer.zero_grad()
            losses.append(loss.item())
            if not load:
                checkpointer.save(step)
    checkpointer.close()
    return losses


def train(
    directory: str,
    steps: int,
    save_at: int,
    with_hwrng: bool,
    kind: str = "plain",
    workers: int = 2,
) -> list[float]:
    """The uninterrupted run; torchtitan's checkpointer saves at step ``save_at``."""
    return _run(directory, steps, save_at, with_hwrng, False, kind, workers)


def resume(
    directory: str,
    steps: int,
    save_at: int,
    with_hwrng: bool,
    kind: str = "plain",
    workers: int = 2,
) -> list[float]:
    """Fresh processes: load step ``save_at`` through the checkpointer and train on."""
    return _run(directory, steps, save_at, with_hwrng, True, kind, workers)

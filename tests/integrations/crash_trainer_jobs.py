"""The trainers' save paths the kill matrix cuts (importable by the forked ranks).

As in tests/crash_jobs.py: each ``*_save`` saves twice to the same place as
the trainer's users do (Lightning's ``last.ckpt``, Fabric's one path,
accelerate's one folder; torchtitan's step folders), counting the second
save's file events, and returns each rank's draws after each save;
``*_resume`` resumes a fresh job as a user would; ``*_present`` reads, from
the trainer's own files, which save its checkpoint holds.
"""

from __future__ import annotations

import os
import random
import shutil
from typing import Any

import lightning as L
import lightning.pytorch as pl
import numpy as np
import torch
import torch.distributed as dist
from crash_harness import SavePath, arm, count_event, disarm
from crash_jobs import draws, save_twice

import hwrng
from hwrng.integrations.lightning import HwrngCallback

SEED = 1234
ITEMS, BATCH = 8, 2  # 2 ranks: 2 steps an epoch


def _data() -> torch.utils.data.TensorDataset:
    return torch.utils.data.TensorDataset(torch.arange(ITEMS, dtype=torch.float32).reshape(-1, 1))


def _net() -> torch.nn.Module:
    init = torch.Generator().manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 1))
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=init))
    return net


# -- Lightning's Trainer: ModelCheckpoint(save_last=True) writes last.ckpt every epoch -------


class _Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = _net()
        self.epochs: dict[int, list[Any]] = {}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        self.epochs.setdefault(self.current_epoch, []).append(
            [random.random(), float(np.random.rand()), torch.rand(2).tolist()]
        )
        return self.net(x).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class _ArmSecondSave(pl.Callback):
    """Count the file events of the checkpoints written at the end of the second epoch."""

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch == 1:
            arm()
        else:
            disarm()


def _fit(root: str, module: _Module, ckpt_path: str | None) -> None:
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=dist.get_world_size(),
        strategy="ddp",
        max_epochs=3,
        callbacks=[
            HwrngCallback(SEED, verify=False),
            pl.callbacks.ModelCheckpoint(dirpath=root, save_last=True),
            _ArmSecondSave(),
        ],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=True,
        num_sanity_val_steps=0,
    )
    loader = torch.utils.data.DataLoader(_data(), batch_size=BATCH, shuffle=True)
    trainer.fit(module, loader, ckpt_path=ckpt_path)


def lightning_save(root: str) -> dict[int, Any]:
    """Train 3 epochs; the checkpoints after epochs 0 and 1 are saves 1 and 2."""
    module = _Module()
    _fit(root, module, None)
    return {1: module.epochs[1], 2: module.epochs[2]}


def lightning_resume(root: str) -> Any:
    """``fit(ckpt_path=last.ckpt)``: the draws of the first epoch trained."""
    module = _Module()
    _fit(root + "-resumed", module, os.path.join(root, "last.ckpt"))
    return module.epochs[min(module.epochs)] if module.epochs else []  # none after the last


def lightning_present(root: str) -> int | None:
    """The epoch ``last.ckpt`` was saved after, plus one (0 -> save 1)."""
    path = os.path.join(root, "last.ckpt")
    if not os.path.exists(path):
        return None
    return int(torch.load(path, weights_only=False)["epoch"]) + 1


LIGHTNING = SavePath(
    "Lightning Trainer, `last.ckpt`", lightning_save, lightning_resume, lightning_present
)


# -- Fabric: save_fabric to one path --------------------------------------------------------


def _fabric() -> Any:
    from hwrng.integrations.lightning import seed_fabric

    fabric = L.Fabric(accelerator="cpu", devices=dist.get_world_size(), strategy="ddp")
    fabric.launch()
    seed_fabric(SEED, verify=False)
    return fabric


def fabric_save(root: str) -> dict[int, Any]:
    """``save_fabric`` twice to ``state.ckpt``."""
    from hwrng.integrations.lightning import fabric_rng_state, save_fabric

    fabric = _fabric()
    path = os.path.join(root, "state.ckpt")
    return save_twice(
        lambda step: save_fabric(fabric, path, {"step": step, "rng": fabric_rng_state(path)})
    )


def fabric_resume(root: str) -> Any:
    """``load_fabric`` from ``state.ckpt``."""
    from hwrng.integrations.lightning import fabric_rng_state, load_fabric

    fabric = _fabric()
    path = os.path.join(root, "state.ckpt")
    load_fabric(fabric, path, {"step": 0, "rng": fabric_rng_state(path)})
    return draws()


def fabric_present(root: str) -> int | None:
    """The step in ``state.ckpt``."""
    path = os.path.join(root, "state.ckpt")
    if not os.path.exists(path):
        return None
    return int(torch.load(path, weights_only=False)["step"])


FABRIC = SavePath("Fabric, one path", fabric_save, fabric_resume, fabric_present)


# -- accelerate: save_state to one folder ---------------------------------------------------


def _accelerator() -> Any:
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration

    from hwrng.integrations.accelerate import prepare_rng

    accelerator = Accelerator(
        cpu=True,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=SEED),
    )
    prepare_rng(accelerator, SEED, verify=False)
    net = _net()
    accelerator.prepare(net, torch.optim.SGD(net.parameters(), lr=0.01))
    return accelerator


def _count_safetensors() -> None:
    """accelerate writes the model with safetensors, whose file no Python call opens."""
    from accelerate.utils import other

    write = other.safe_save_file

    def counted(tensors: Any, filename: Any, *args: Any, **kwargs: Any) -> Any:
        count_event("safetensors", filename)
        return write(tensors, filename, *args, **kwargs)

    other.safe_save_file = counted


def accelerate_save(root: str) -> dict[int, Any]:
    """``save_state`` twice to ``state``; rank 0 keeps the first hwrng entry's bytes aside."""
    _count_safetensors()
    accelerator = _accelerator()
    folder = os.path.join(root, "state")

    def keep_first_entry(step: int) -> None:
        if step == 1 and dist.get_rank() == 0:
            shutil.copyfile(os.path.join(folder, "custom_checkpoint_0.pkl"), root + ".entry-1")
        dist.barrier()

    return save_twice(lambda step: accelerator.save_state(folder), keep_first_entry)


def accelerate_resume(root: str) -> Any:
    """``load_state`` from ``state``."""
    accelerator = _accelerator()
    accelerator.load_state(os.path.join(root, "state"))
    return draws()


def accelerate_present(root: str) -> int | None:
    """Which save wrote the folder's hwrng entry (by its bytes), if any."""
    path = os.path.join(root, "state", "custom_checkpoint_0.pkl")
    if not os.path.exists(path):
        return None
    with open(path, "rb") as now, open(root + ".entry-1", "rb") as first:
        return 1 if now.read() == first.read() else 2


ACCELERATE = SavePath(
    "accelerate, one folder", accelerate_save, accelerate_resume, accelerate_present
)


# -- torchtitan: CheckpointManager's step folders -------------------------------------------


class _Stateless:
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        del state_dict


def _titan(root: str) -> Any:
    from torchtitan.components.checkpointer.dcp import CheckpointManager
    from torchtitan.config import DebugConfig
    from torchtitan.distributed.parallel_dims import ParallelDims
    from torchtitan.distributed.utils import set_determinism

    from hwrng.integrations import torchtitan as hwrng_titan

    # with LOCAL_RANK set, DeviceMesh selects a CUDA device for torchtitan's "cuda" default
    os.environ.pop("LOCAL_RANK", None)
    world = dist.get_world_size()
    dims = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=world, ep=1, world_size=world)
    set_determinism(dims, torch.device("cpu"), DebugConfig(seed=SEED), ["pp"])  # builds the mesh
    hwrng_titan.seed(dims.get_mesh("pp"), SEED, sharded_dims=["pp"], verify=False)
    net = _net()
    checkpointer = CheckpointManager(
        CheckpointManager.Config(enable=True, folder="ckpt", interval=1, keep_latest_k=0),
        dataloader=None,
        model_parts=[net],
        optimizers=_Stateless(),
        lr_schedulers=_Stateless(),
        states={},
        sd_adapter=None,
        base_folder=root,
    )
    hwrng_titan.attach(checkpointer)
    return checkpointer


def torchtitan_save(root: str) -> dict[int, Any]:
    """The manager saves steps 1 and 2."""
    checkpointer = _titan(root)
    after = save_twice(checkpointer.save)
    checkpointer.close()
    return after


def torchtitan_resume(root: str) -> Any:
    """The manager loads the latest step."""
    checkpointer = _titan(root)
    if not checkpointer.load():
        raise FileNotFoundError(f"torchtitan found no checkpoint in {root}")
    result = draws()
    checkpointer.close()
    return result


def torchtitan_present(root: str) -> int | None:
    """The latest ``step-<n>`` with DCP's ``.metadata`` (the manager's own rule)."""
    folder = os.path.join(root, "ckpt")
    steps = [
        int(name.split("-")[1])
        for name in (os.listdir(folder) if os.path.isdir(folder) else [])
        if name.startswith("step-") and os.path.isfile(os.path.join(folder, name, ".metadata"))
    ]
    return max(steps, default=None)


TORCHTITAN = SavePath(
    "torchtitan, step folders", torchtitan_save, torchtitan_resume, torchtitan_present
)

__all__ = ["ACCELERATE", "FABRIC", "LIGHTNING", "TORCHTITAN", "hwrng"]

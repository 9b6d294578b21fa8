"""Forward and backward of an MLP block with dropout, on DTensors of a one-device mesh.

What the adapter costs a training step: torch's own DTensor RNG handling (the
baseline), ``hwrng.dtensor.install()`` and ``install(invariant=True)``, and the
same block on plain tensors for reference. Each dropout runs in a tracked
region; the block has two.
"""

from __future__ import annotations

import warnings

import torch
from _timing import Result, measure, one_rank_group
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, distribute_module, distribute_tensor

import hwrng
import hwrng.dtensor


class Block(nn.Module):
    """LayerNorm, Linear, GELU, dropout, Linear, dropout, residual: a transformer's MLP half."""

    def __init__(self, width: int, p: float = 0.1) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output for ``x`` of shape ``(..., width)``."""
        hidden = nn.functional.dropout(nn.functional.gelu(self.up(self.norm(x))), self.p)
        return x + nn.functional.dropout(self.down(hidden), self.p)


def run(platform: hwrng.Platform, quick: bool) -> list[Result]:
    """Time one step (forward, backward) of the block, batch 8 x 128 tokens x width 256."""
    device = platform.device()
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    torch.manual_seed(0)
    plain = Block(256).to(device)
    x = torch.randn(8, 128, 256, device=device)
    with one_rank_group("nccl" if device.type == "cuda" else "gloo"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that CPU meshes' RNG support is partial
        mesh = init_device_mesh(device.type, (1,))
        hwrng.manual_seed(0, mesh, platform=platform)
        model = distribute_module(Block(256).to(device), mesh)
        dx = distribute_tensor(x, mesh, [Replicate()])

        def step(module: nn.Module, inputs: torch.Tensor) -> None:
            module(inputs).sum().backward()

        try:
            return measure(
                "MLP block step, 8x128x256, two dropouts",
                {
                    "DTensor, torch's RNG handling": lambda: step(model, dx),
                    "DTensor, hwrng.dtensor.install()": lambda: step(model, dx),
                    "DTensor, hwrng.dtensor.install(invariant=True)": lambda: step(model, dx),
                    "plain tensors": lambda: step(plain, x),
                },
                baseline="DTensor, torch's RNG handling",
                inner=5 if quick else 20,
                samples=5 if quick else 11,
                sync=sync,
                before={
                    "DTensor, torch's RNG handling": hwrng.dtensor.uninstall,
                    "DTensor, hwrng.dtensor.install()": lambda: hwrng.dtensor.install(platform),
                    "DTensor, hwrng.dtensor.install(invariant=True)": lambda: hwrng.dtensor.install(
                        platform, invariant=True
                    ),
                },
                notes={
                    "DTensor, torch's RNG handling": (
                        "on a CPU mesh torch tracks no offsets (its tracker is CUDA-like only)"
                        if device.type == "cpu"
                        else ""
                    ),
                },
            )
        finally:
            hwrng.dtensor.uninstall()

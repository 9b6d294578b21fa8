"""What every trainer's test trains: a small model with dropout on augmented data
(importable by the spawned ranks)."""

from __future__ import annotations

import random

import numpy as np
import torch

ITEMS = 16  # 2 ranks x batch 4 -> 2 steps per epoch
BATCH = 4


class Augmented(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each item gets noise from torch, ``random`` and NumPy, drawn in the loader's workers."""

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.full((8,), index / ITEMS)
        x = x + 0.1 * torch.rand(8) + 0.1 * random.random() + 0.1 * float(np.random.rand())
        return x, torch.tensor([float(index % 3)])


def model() -> torch.nn.Module:
    """The same weights on every rank and in every process, whatever the seeding."""
    init = torch.Generator().manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)
    )
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=init) * 0.3)
    return net

"""Token data made in the script, and a sampler whose global batches do not depend on ``dp``.

Sample ``i`` is an arithmetic progression of tokens (modulo the vocabulary)
whose start and stride come from ``i`` alone; the model learns to continue it.
Each epoch its input is corrupted (a tenth of the tokens replaced), keyed by
the sample and the epoch, so that a sample looks the same whichever rank and
worker load it -- and on any layout.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
import torch.utils.data

#: What the sampler hands the dataset: (epoch, sample index).
Key = tuple[int, int]


class Progressions(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """``size`` token sequences of ``seq + 1`` tokens; item ``(epoch, i)`` is sample ``i``."""

    def __init__(self, size: int, seq: int, vocab: int, seed: int, corrupt: float = 0.1) -> None:
        self.size, self.seq, self.vocab, self.seed, self.corrupt = size, seq, vocab, seed, corrupt

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: Key) -> dict[str, torch.Tensor]:
        epoch, index = key
        own = np.random.default_rng([self.seed, index])
        start, stride = int(own.integers(self.vocab)), int(own.integers(1, 8))
        tokens = (start + stride * np.arange(self.seq + 1)) % self.vocab
        # the augmentation: a function of (seed, epoch, sample), never of the worker's stream
        noise = np.random.default_rng([self.seed, epoch, index])
        inputs = tokens[:-1].copy()
        hit = noise.random(self.seq) < self.corrupt
        inputs[hit] = noise.integers(self.vocab, size=int(hit.sum()))
        return {
            "inputs": torch.from_numpy(inputs),
            "labels": torch.from_numpy(tokens[1:].copy()),
            "sample": torch.tensor(index),
        }


class GlobalBatches(torch.utils.data.Sampler[list[Key]]):
    """A ``dp`` rank's part of each global batch, from ``start`` (a step) on.

    The epoch's order is a permutation drawn from ``(seed, epoch)``; global batch
    ``t`` is its ``t``-th run of ``global_batch`` samples, and ``dp`` rank ``r``
    takes the ``r``-th contiguous slice of it. So the global batch of each step,
    in order, is the same for any number of ``dp`` ranks, and a resume starts it
    at any step.
    """

    def __init__(  # noqa: PLR0917 - DistributedSampler's positional style
        self,
        size: int,
        global_batch: int,
        dp_rank: int,
        dp_size: int,
        seed: int,
        epoch: int,
        start: int = 0,
    ) -> None:
        if global_batch % dp_size:
            raise ValueError(f"global batch {global_batch} does not split over {dp_size} dp ranks")
        self.size, self.global_batch, self.seed, self.epoch = size, global_batch, seed, epoch
        self.local = global_batch // dp_size
        self.first = dp_rank * self.local
        self.start = start

    def __len__(self) -> int:
        return self.size // self.global_batch - self.start

    def __iter__(self) -> Iterator[list[Key]]:
        order = torch.randperm(
            self.size, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        ).tolist()
        for step in range(self.start, self.size // self.global_batch):
            begin = step * self.global_batch + self.first
            yield [(self.epoch, i) for i in order[begin : begin + self.local]]

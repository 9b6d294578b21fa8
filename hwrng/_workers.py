"""Seeding DataLoader workers so that no two workers of any two ranks repeat.

torch seeds each worker's torch, ``random`` and NumPy generators from
``base_seed + worker_id``, where ``base_seed`` is drawn from the rank's own
generator when an iterator is created. (Before torch 1.9 NumPy was left as the
fork copied it, so every worker repeated the same augmentations,
pytorch#5059.) What remains: data-parallel replicas share their seed, so their
``base_seed`` -- and every worker's augmentations -- coincide across ranks
(tested: two ranks, identical streams).

:data:`worker_init_fn` derives each worker's seeds with NumPy's
``SeedSequence`` from the worker's torch seed (which comes from the rank's
seeded generator, and changes every epoch), the global rank and the worker id.

The rank is bound where it is known. Workers started by ``spawn`` or
``forkserver`` (the default on macOS and Windows, and what ``mp.spawn``-ed
ranks use) receive the function pickled by their parent, which binds the
parent's rank then; workers started by ``fork`` read the parent's
``torch.distributed`` state, which they inherit. After a resume the rank's
generator is restored, so the workers' seeds are those the uninterrupted run
would have used.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils.data

from hwrng._exceptions import MeshError, NestingError
from hwrng._host import seed_host
from hwrng._validation import check_index

__all__ = ["WorkerInitFn", "WorkerSeeds", "worker_init_fn", "worker_seeds"]

RANK_VARIABLES = ("RANK", "HWRNG_RANK")


@dataclass(frozen=True)
class WorkerSeeds:
    """The seeds one DataLoader worker receives.

    Attributes
    ----------
    torch_seed
        For torch's CPU generator, 64 bits.
    python_seed
        For Python's ``random``, 128 bits.
    numpy_words
        Four 32-bit words for NumPy's legacy global generator.
    """

    torch_seed: int
    python_seed: int
    numpy_words: tuple[int, int, int, int]


def worker_seeds(base: int, rank: int, worker_id: int) -> WorkerSeeds:
    """Derive a worker's seeds. Pure: touches no RNG.

    Parameters
    ----------
    base
        The worker's torch seed as the DataLoader set it (``base_seed + worker_id``).
    rank
        The global rank of the process that owns the DataLoader.
    worker_id
        The worker's id.

    Returns
    -------
    WorkerSeeds
        Independent streams for every distinct ``(base, rank, worker_id)``.

    Examples
    --------
    >>> worker_seeds(7, rank=0, worker_id=1) == worker_seeds(7, rank=0, worker_id=1)
    True
    >>> worker_seeds(7, rank=0, worker_id=1) == worker_seeds(7, rank=1, worker_id=1)
    False
    """
    entropy = check_index(base, "base")
    spawn_key = (check_index(rank, "rank"), check_index(worker_id, "worker_id"))
    sequence = np.random.SeedSequence(entropy=entropy, spawn_key=spawn_key)
    words = [int(word) for word in sequence.generate_state(10, dtype=np.uint32)]
    torch_seed = words[0] | words[1] << 32
    python_seed = words[2] | words[3] << 32 | words[4] << 64 | words[5] << 96
    numpy_words = (words[6], words[7], words[8], words[9])
    return WorkerSeeds(torch_seed, python_seed, numpy_words)


def process_rank() -> int | None:
    """The global rank of this process if known: torch.distributed's, ``RANK``, ``HWRNG_RANK``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    for variable in RANK_VARIABLES:
        value = os.environ.get(variable)
        if value is not None:
            try:
                return check_index(int(value), variable)
            except (ValueError, MeshError):
                raise MeshError(
                    f"environment variable {variable}={value!r} is not a rank"
                ) from None
    return None


@dataclass(frozen=True)
class WorkerInitFn:
    """A DataLoader ``worker_init_fn`` that seeds torch, ``random`` and NumPy per worker.

    Parameters
    ----------
    rank
        The rank the workers are keyed by: by default the global rank of the
        process that owns the DataLoader. Under tensor parallelism pass the
        data-parallel rank (``mesh.get_local_rank("dp")``): the ranks of one
        data-parallel rank must load the same samples, augmented alike. By
        default the rank is found where it is known: for ``spawn``/``forkserver`` workers, in the
        parent when the DataLoader sends this function to them (torch.distributed's
        rank if initialised there, else ``RANK`` or ``HWRNG_RANK``); for ``fork``
        workers, from the parent's state they inherit. A parent with none of
        these is a single process: rank 0.

    Examples
    --------
    >>> loader = torch.utils.data.DataLoader(range(8), num_workers=2,
    ...                                      worker_init_fn=hwrng.worker_init_fn)  # doctest: +SKIP
    """

    rank: int | None = None

    def __reduce__(self) -> tuple[Any, tuple[int | None]]:
        # Pickled in the parent (spawn/forkserver workers): bind the rank known there.
        return (WorkerInitFn, (self.rank if self.rank is not None else process_rank(),))

    def __call__(self, worker_id: int) -> None:
        """Seed the calling DataLoader worker."""
        info = torch.utils.data.get_worker_info()
        if info is None:
            raise NestingError("worker_init_fn must run inside a DataLoader worker process")
        rank = self.rank if self.rank is not None else process_rank()
        seeds = worker_seeds(info.seed, 0 if rank is None else rank, worker_id)
        seed_host(seeds.torch_seed)
        random.seed(seeds.python_seed)
        np.random.seed(np.array(seeds.numpy_words, dtype=np.uint32))


#: Pass as ``DataLoader(worker_init_fn=hwrng.worker_init_fn)``.
worker_init_fn = WorkerInitFn()

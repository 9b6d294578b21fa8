"""What each rank runs in test_verify_soundness_dist.py (importable by the spawned ranks)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import verify_oracle
from torch.distributed.device_mesh import init_device_mesh

import hwrng

STREAMS = ("torch.cpu", "random", "numpy", "state:soundness/tp-rng")


def seeded_by_other_means(names: tuple[str, ...], job: verify_oracle.Job) -> dict[str, Any]:
    """Seed torch, random, NumPy and a named state with the job's (maybe buggy) seeds; verify
    against the job's plan; then draw from every stream, for the test's oracle."""
    mesh = init_device_mesh("cpu", job.sizes, mesh_dim_names=names)
    seed = job.seed(dist.get_rank())
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    tracker = hwrng.RNGStatesTracker("cpu", name="soundness")
    tracker.add("tp-rng", seed + 2718)
    try:
        report = hwrng.verify(
            mesh, sharded_dims=[names[d] for d in job.sharded], streams=STREAMS, platform="cpu"
        )
        with tracker.fork("tp-rng"):
            named = torch.rand(4).tolist()
    finally:
        del tracker
    return {
        "verdicts": {v.stream: (v.ok, sorted(v.ranks)) for v in report.streams},
        "draws": {
            "torch.cpu": torch.rand(4).tolist(),
            "random": [random.random() for _ in range(4)],
            "numpy": np.random.rand(4).tolist(),
            "state:soundness/tp-rng": named,
        },
    }

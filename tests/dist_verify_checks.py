"""What each rank runs in test_verify_dist.py (importable by the spawned ranks)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

import hwrng

NAMES = ("dp", "tp")


def _snapshot() -> tuple[Any, ...]:
    numpy_state: Any = np.random.get_state()
    return (
        torch.get_rng_state(),
        random.getstate(),
        numpy_state[1].tolist(),
        numpy_state[2:],
    )


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return bool(torch.equal(a[0], b[0])) and a[1:] == b[1:]


def scenario(fault: str, sharded: list[str]) -> dict[str, Any]:
    """Seed (dp=4, tp=2) sharded along ``sharded``, run DTensor and local ops, break one
    thing on some ranks (``fault``), then verify; report what verify said and whether it
    changed any state."""
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = init_device_mesh("cpu", (4, 2), mesh_dim_names=NAMES)
    rank = dist.get_rank()
    tracker = hwrng.RNGStatesTracker("cpu", name="verify-check")
    if fault == "other means":
        hwrng.seed_everything(1000 + rank, "cpu")
    else:
        hwrng.manual_seed(42, mesh, sharded_dims=sharded, platform="cpu")
    dp = mesh.get_coordinate()[0]  # type: ignore[index]
    # Megatron-like: a stream of its own on every rank; the fault: one seed along tp
    tracker.add("model-parallel-rng", 5000 + (dp if fault == "same named seed" else rank))
    hwrng.dtensor.install("cpu")
    try:
        distribute_tensor(torch.zeros(8, 4), mesh, [Replicate(), Shard(0)]).uniform_()
        torch.nn.functional.dropout(distribute_tensor(torch.ones(16), mesh, [Replicate()] * 2))
    finally:
        hwrng.dtensor.uninstall()
    torch.rand(3), random.random(), np.random.rand()  # local draws, equal in number
    with tracker.fork():
        torch.rand(2)
    if fault == "reseeded" and rank == 5:
        torch.manual_seed(999)
    if fault == "numpy unseeded" and rank == 2:
        np.random.seed(None)
    if fault == "extra draw" and rank == 6:
        torch.rand(1)
    before = _snapshot()
    with CommDebugMode() as comms:
        report = hwrng.verify(mesh, sharded_dims=sharded if fault == "other means" else None)
    unchanged = _same(before, _snapshot())
    try:
        report.raise_if_failed()
        raised = ""
    except hwrng.VerificationError as error:
        raised = str(error) if error.report is report else "a report other than verify's"
    del tracker
    return {
        "ok": report.ok,
        "failures": {v.stream: (list(v.ranks), list(v.problems)) for v in report.failures},
        "streams": [v.stream for v in report.streams],
        "raised": raised,
        "unchanged": unchanged,
        "collectives": {str(op): n for op, n in comms.get_comm_counts().items()},
        "text": report.describe(),
    }

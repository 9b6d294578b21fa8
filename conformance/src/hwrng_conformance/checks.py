"""What each rank runs for the multi-process rules (see ``suite/test_multiprocess.py``).

Every function runs on all ranks of a :class:`~hwrng.testing.DistributedPool`
and returns plain data; the rule in the parent compares the ranks' answers,
so the expectations are computed independently of the code under test.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

import hwrng
import hwrng.dtensor
from hwrng_conformance.helpers import draw_default

__all__ = ["broadcast_from_each_rank", "dtensor_random_ops", "seeded_draws"]


def broadcast_from_each_rank(platform_name: str) -> list[list[float]]:
    """Broadcast a rank-specific tensor from every rank in turn; return what arrived."""
    platform = hwrng.get_platform(platform_name)
    # A group on the platform's own backend carries device tensors; the gloo fallback
    # hwrng.collective_backend picks where devices are too few carries CPU tensors.
    on_device = dist.get_backend() == platform.dist_backend
    device = platform.device() if on_device else torch.device("cpu")
    received = []
    for src in range(dist.get_world_size()):
        tensor = torch.full((3,), float(dist.get_rank() * 10 + 1), device=device)
        platform.broadcast(tensor, src=src)
        received.append(tensor.cpu().tolist())
    return received


def seeded_draws(platform_name: str, seed: int, mesh_shape: tuple[int, int]) -> dict[str, Any]:
    """Seed with ``hwrng.manual_seed`` on a ``("dp", "tp")`` mesh, sharded along tp; draw."""
    import random

    import numpy as np
    from torch.distributed.device_mesh import init_device_mesh

    platform = hwrng.get_platform(platform_name)
    mesh = init_device_mesh(platform.device_type, mesh_shape, mesh_dim_names=("dp", "tp"))
    rank_seed = hwrng.manual_seed(seed, mesh, sharded_dims=["tp"], platform=platform)
    coordinate = mesh.get_coordinate()
    assert coordinate is not None
    return {
        "coordinate": tuple(coordinate),
        "seed": rank_seed,
        "device": draw_default(platform).tolist(),
        "cpu": torch.rand(8).tolist(),
        "random": [random.random() for _ in range(4)],
        "numpy": np.random.rand(4).tolist(),
        "counter": platform.get_seed_offset(platform.generator()),
    }


def dtensor_random_ops(
    platform_name: str, seed: int, mesh_shape: tuple[int, ...]
) -> dict[str, Any]:
    """Fill DTensors with random ops through hwrng's adapter; report shards and offsets."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard

    platform = hwrng.get_platform(platform_name)
    names = tuple(f"m{i}" for i in range(len(mesh_shape)))
    mesh = init_device_mesh(platform.device_type, mesh_shape, mesh_dim_names=names)
    placements = [Replicate()] * (len(mesh_shape) - 1) + [Shard(0)]
    coordinate = mesh.get_coordinate()
    assert coordinate is not None
    shape = torch.Size((12, 3))
    local_shape = hwrng.ShardSpec(shape, mesh_shape, tuple(placements), coordinate).local_shape
    hwrng.dtensor.install(platform)
    try:
        platform.manual_seed(seed)
        # from_local needs no collective, so the rule holds on any dist backend
        local = torch.zeros(local_shape, device=platform.device())
        tensor = DTensor.from_local(
            local, mesh, placements, run_check=False, shape=shape, stride=(3, 1)
        )
        tensor.uniform_()
        counter = platform.get_seed_offset(platform.generator())
    finally:
        hwrng.dtensor.uninstall()
    return {
        "coordinate": tuple(coordinate),
        "local": tensor.to_local().cpu().tolist(),
        "counter": counter,
    }

"""What each rank runs in test_plan_state_dist.py (issue 17, items 6, 7 and 9): the seed plan
across fork_rng/isolate_rng, preset DTensor seeds on meshes of any dim names, and invariant
rand_like/randn_like (importable by the spawned ranks)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.placement_types import _StridedShard

import hwrng
from hwrng import presets

SEED = 5


def _replicated_draw(mesh: DeviceMesh) -> list[float]:
    tensor = distribute_tensor(torch.zeros(6), mesh, [Replicate()] * mesh.ndim)
    return tensor.uniform_().to_local().tolist()  # type: ignore[no-any-return]


def plan_across_block(context: str) -> dict[str, Any]:
    """dp=2 x tp=2 sharded along tp, adapter installed: a replicated uniform_ before and after a
    ``with context(): hwrng.seed_everything(0)`` block, and the plan on either side."""
    mesh = DeviceMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("dp", "tp"))
    hwrng.dtensor.install("cpu")
    try:
        hwrng.manual_seed(SEED, mesh, sharded_dims=["tp"], platform="cpu")
        plan = hwrng.current_seeding()
        before = _replicated_draw(mesh)
        forks = {"isolate_rng": hwrng.isolate_rng, "fork_rng": hwrng.fork_rng}
        with forks[context](platform="cpu"):
            hwrng.seed_everything(0, platform="cpu")
            inside = hwrng.current_seeding()
        after = _replicated_draw(mesh)
        raised_plan: object = "not reached"
        try:
            with forks[context](platform="cpu"):
                hwrng.seed_everything(1, platform="cpu")
                raise KeyError("inside")
        except KeyError:
            raised_plan = hwrng.current_seeding()
        return {
            "before": before,
            "after": after,
            "inside_is_none": inside is None,
            "restored": hwrng.current_seeding() is plan,
            "restored_on_error": raised_plan is plan,
        }
    finally:
        hwrng.dtensor.uninstall()


def megatron_meshes(order: list[int]) -> dict[str, Any]:
    """pp=2 x tp=2 seeded by megatron_manual_seed; replicated uniform_ on two meshes over the
    same ranks, named ("stage", "tensor") and ("pp", "tp"), used in ``order``; then on each
    stage's tensor submesh."""
    rank = dist.get_rank()
    ranks = torch.arange(4).reshape(2, 2)
    meshes = [
        DeviceMesh("cpu", ranks, mesh_dim_names=("stage", "tensor")),
        DeviceMesh("cpu", ranks, mesh_dim_names=("pp", "tp")),
    ]
    hwrng.dtensor.install("cpu")
    try:
        presets.megatron_manual_seed(1234, pp_rank=rank // 2, tp_rank=rank % 2, platform="cpu")
        seeding = hwrng.current_seeding()
        assert seeding is not None
        draws: dict[int, list[float]] = {}
        seeds: dict[int, int] = {}
        for which in order:
            seeds[which] = seeding.dtensor_seed(meshes[which])
            draws[which] = _replicated_draw(meshes[which])
        stage_mesh = meshes[order[0]][meshes[order[0]].mesh_dim_names[1]]  # type: ignore[index]
        return {
            "draws": [draws[0], draws[1]],
            "seeds": [seeds[0], seeds[1]],
            "stage_seed": seeding.dtensor_seed(stage_mesh),
            "stage_draw": _replicated_draw(stage_mesh),
        }
    finally:
        hwrng.dtensor.uninstall()


def _placement(code: str) -> Any:
    if code == "R":
        return Replicate()
    if code.startswith("SS"):  # SS<dim>/<split factor>
        dim, split = code[2:].split("/")
        return _StridedShard(int(dim), split_factor=int(split))
    return Shard(int(code[1:]))


def random_like(
    mesh_shape: list[int], codes: list[str], shape: list[int], dtype: str, normal: bool
) -> dict[str, Any]:
    """``torch.rand_like``/``randn_like`` of a DTensor in invariant mode (with and without a
    ``dtype=``): the full tensors, their dtypes, and the generator's offset after."""
    mesh = DeviceMesh("cpu", torch.arange(4).reshape(mesh_shape))
    hwrng.dtensor.install("cpu", invariant=True)
    try:
        hwrng.manual_seed(SEED, mesh, platform="cpu")
        source = distribute_tensor(
            torch.zeros(shape, dtype=getattr(torch, dtype)), mesh, [_placement(c) for c in codes]
        )
        like = torch.randn_like if normal else torch.rand_like
        first = like(source)
        second = like(source, dtype=torch.float64)
        offset = hwrng.get_platform("cpu").counter.peek(torch.default_generator)[1]
        return {
            "first": first.full_tensor().to(torch.float64).flatten().tolist(),
            "first_dtype": str(first.dtype),
            "first_placements": [str(p) for p in first.placements],
            "second": second.full_tensor().flatten().tolist(),
            "second_dtype": str(second.dtype),
            "offset": offset,
        }
    finally:
        hwrng.dtensor.uninstall()

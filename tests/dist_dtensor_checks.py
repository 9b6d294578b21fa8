"""What each rank runs in test_dtensor_dist.py (importable by the spawned ranks)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

import hwrng

PLACEMENTS: dict[str, Any] = {"R": Replicate(), "P": Partial()}


def _placements(codes: list[str]) -> list[Any]:
    return [PLACEMENTS[c] if c in PLACEMENTS else Shard(int(c[1:])) for c in codes]


@contextmanager
def _adapter(enabled: bool) -> Iterator[hwrng.Platform]:
    platform = hwrng.get_platform("cpu")
    if enabled:
        hwrng.dtensor.install(platform)
    try:
        yield platform
    finally:
        if enabled:
            hwrng.dtensor.uninstall()


def _report(tensor: DTensor, platform: hwrng.Platform, mesh: Any) -> dict[str, Any]:
    coordinate = mesh.get_coordinate()
    return {
        "rank": dist.get_rank(),
        "coordinate": tuple(coordinate),
        "local": tensor.to_local().flatten().tolist(),
        "local_shape": tuple(tensor.to_local().shape),
        "counter": platform.get_seed_offset(torch.default_generator),
    }


def _ops() -> dict[str, Callable[[DTensor], DTensor]]:
    return {
        "uniform": lambda t: t.uniform_(),
        "normal": lambda t: t.normal_(),
        "kaiming": lambda t: torch.nn.init.kaiming_uniform_(torch.nn.Parameter(t)).data,
        "xavier_normal": lambda t: torch.nn.init.xavier_normal_(torch.nn.Parameter(t)).data,
        # torch 2.13 samples trunc_normal_ by rejection, looping on a per-rank test of the
        # local values: ranks can run different numbers of random ops (see the test)
        "trunc_normal": lambda t: torch.nn.init.trunc_normal_(torch.nn.Parameter(t)).data,
        "dropout": lambda t: torch.nn.functional.dropout(t + 1, p=0.5),
    }


def random_op(
    mesh_shape: list[int],
    codes: list[str],
    shape: list[int],
    op: str,
    seed: int = 7,
    adapter: bool = True,
    times: int = 1,
) -> list[dict[str, Any]]:
    """Run ``op`` ``times`` times on a zero DTensor; report every result on this rank."""
    names = tuple(f"m{i}" for i in range(len(mesh_shape)))
    mesh = init_device_mesh("cpu", tuple(mesh_shape), mesh_dim_names=names)
    with _adapter(adapter) as platform:
        hwrng.manual_seed(seed, platform="cpu")
        reports = []
        for _ in range(times):
            tensor = distribute_tensor(torch.zeros(shape), mesh, _placements(codes))
            reports.append(_report(_ops()[op](tensor), platform, mesh))
    return reports


def dtensor_rand(mesh_shape: list[int], codes: list[str], shape: list[int]) -> dict[str, Any]:
    mesh = init_device_mesh("cpu", tuple(mesh_shape))
    with _adapter(True) as platform:
        hwrng.manual_seed(3, platform="cpu")
        tensor = torch.distributed.tensor.rand(
            shape, device_mesh=mesh, placements=_placements(codes)
        )
        return _report(tensor, platform, mesh)


def user_generator(mesh_shape: list[int], codes: list[str], shape: list[int]) -> dict[str, Any]:
    mesh = init_device_mesh("cpu", tuple(mesh_shape))
    with _adapter(True) as platform:
        hwrng.manual_seed(1, platform="cpu")
        default_before = torch.get_rng_state()
        generator = torch.Generator()
        platform.set_seed_offset(generator, 555, 0)
        tensor = distribute_tensor(torch.zeros(shape), mesh, _placements(codes))
        tensor.uniform_(generator=generator)
        report = _report(tensor, platform, mesh)
        report["default_unchanged"] = torch.equal(default_before, torch.get_rng_state())
        report["user_counter"] = platform.get_seed_offset(generator)
        return report

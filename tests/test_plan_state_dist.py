"""Issue 17, items 6, 7 and 9, over 4 real gloo ranks: fork_rng/isolate_rng put the seed plan
back; a preset's DTensor seed depends on the mesh's ranks, not on its dim names or on which mesh
came first; invariant rand_like/randn_like equal the single-device values bit for bit."""

from __future__ import annotations

from typing import Any

import dist_plan_state_checks as checks
import pytest
import torch
from helpers import pool_fixture
from torch.distributed.tensor import Replicate

import hwrng
from hwrng import invariant
from hwrng.testing import DistributedPool

pool = pool_fixture(4, timeout=180)


@pytest.mark.parametrize("context", ["isolate_rng", "fork_rng"])
def test_forks_put_the_seed_plan_back(pool: DistributedPool, context: str) -> None:
    reports = pool.run(checks.plan_across_block, context)
    assert all(r["inside_is_none"] for r in reports), "seed_everything leaves no plan inside"
    assert all(r["restored"] and r["restored_on_error"] for r in reports)
    assert len({tuple(r["before"]) for r in reports}) == 1, "replicas equal before the block"
    assert len({tuple(r["after"]) for r in reports}) == 1, "and after it"
    assert reports[0]["after"] != reports[0]["before"], "the op advanced the stream"


@pytest.mark.parametrize("order", [[0, 1], [1, 0]], ids=["stage-tensor first", "pp-tp first"])
def test_preset_dtensor_seed_ignores_dim_names_and_order(
    pool: DistributedPool, order: list[int]
) -> None:
    reports = pool.run(checks.megatron_meshes, order)
    for which in (0, 1):
        assert {r["seeds"][which] for r in reports} == {1234}, "one seed over the whole mesh"
        assert len({tuple(r["draws"][which]) for r in reports}) == 1, "replicas equal"
    # Each stage's tensor submesh: Megatron's seed + 100 * pp, equal within a stage only.
    assert [r["stage_seed"] for r in reports] == [1234, 1234, 1334, 1334]
    stage_draws = [tuple(r["stage_draw"]) for r in reports]
    assert stage_draws[0] == stage_draws[1] and stage_draws[2] == stage_draws[3]
    assert stage_draws[0] != stage_draws[2]


def _one_device(shape: list[int], dtype: torch.dtype, normal: bool, skip: int) -> list[float]:
    """The single-device values with no DTensor at all: hwrng.invariant on a whole tensor,
    after ``skip`` earlier invariant ops of the same size."""
    spec = hwrng.ShardSpec(tuple(shape), (1,), (Replicate(),), (0,))
    hwrng.manual_seed(checks.SEED, platform="cpu")
    fill = invariant.normal_ if normal else invariant.uniform_
    for _ in range(skip):
        fill(torch.empty(shape, dtype=dtype), spec)
    out = fill(torch.empty(shape, dtype=dtype), spec)
    return out.to(torch.float64).flatten().tolist()


LAYOUTS = [
    ([4], ["S0"]),
    ([4], ["R"]),
    ([2, 2], ["S1", "S0"]),
    ([2, 2], ["R", "S1"]),
    ([2, 2], ["SS0/2", "S0"]),
]


@pytest.mark.parametrize("normal", [False, True], ids=["rand_like", "randn_like"])
@pytest.mark.parametrize(
    ("shape", "dtype"),
    [([7, 3], "float32"), ([5], "float64"), ([4, 2, 3], "bfloat16"), ([9, 2], "float16")],
)
def test_invariant_random_like(
    pool: DistributedPool, normal: bool, shape: list[int], dtype: str
) -> None:
    torch_dtype = getattr(torch, dtype)
    first = _one_device(shape, torch_dtype, normal, 0)
    second = _one_device(shape, torch.float64, normal, 1)
    for mesh_shape, codes in LAYOUTS:
        if len(shape) < 2 and any(c.endswith("1") for c in codes):
            continue
        if codes[0].startswith("SS") and shape[0] % 4:
            continue  # torch's distribute_tensor splits _StridedShard evenly only
        reports: list[Any] = pool.run(checks.random_like, mesh_shape, codes, shape, dtype, normal)
        assert all(r == reports[0] for r in reports), f"{codes}: ranks disagree"
        report = reports[0]
        assert report["first_dtype"] == str(torch_dtype)
        assert report["second_dtype"] == "torch.float64"
        assert report["first"] == first, f"{codes}: rand_like differs from one device"
        assert report["second"] == second, f"{codes}: rand_like(dtype=) differs from one device"

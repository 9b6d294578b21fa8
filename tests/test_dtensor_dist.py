"""The DTensor adapter over real processes: 2-D and 3-D gloo meshes of 8 ranks."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace
from typing import Any

import dist_dtensor_checks as checks
import pytest
from helpers import held_indices, pool_fixture

import hwrng
from hwrng.testing import DistributedPool

pool = pool_fixture(8, timeout=120)


def assert_consistent(
    reports: list[dict[str, Any]], mesh_shape: list[int], codes: list[str], shape: list[int]
) -> None:
    """Replicas equal, shards share no value, every rank at one offset afterwards."""
    placements = tuple(checks._placements(codes))
    held = {
        r["rank"]: held_indices(tuple(shape), tuple(mesh_shape), placements, r["coordinate"])
        for r in reports
    }
    for a, b in itertools.combinations(reports, 2):
        if held[a["rank"]] == held[b["rank"]]:
            assert a["local"] == b["local"], f"replicas {a['rank']} and {b['rank']} differ"
        elif a["local"] and b["local"]:
            shared = set(a["local"]) & set(b["local"]) - {0.0}
            assert not shared, f"shards on ranks {a['rank']} and {b['rank']} share values"
    for r in reports:
        assert len(r["local"]) == len(held[r["rank"]])
    assert len({r["counter"] for r in reports}) == 1, "every rank ends at the same offset"


CASES = {
    "2-D, uneven shape": ([2, 4], ["S1", "R"], [5, 7]),
    "2-D, replicate and shard": ([2, 4], ["R", "S0"], [12, 3]),
    "3-D, one dim over two mesh dims": ([2, 2, 2], ["R", "S0", "S0"], [12, 3]),
    "3-D, two tensor dims": ([2, 2, 2], ["S1", "R", "S0"], [6, 10]),
    "fewer elements than shards": ([2, 4], ["S0", "S0"], [3]),
    "2-D, tiny and uneven": ([4, 2], ["S1", "S0"], [3, 5]),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("op", ["uniform", "normal"])
def test_replicas_equal_shards_distinct(pool: DistributedPool, case: str, op: str) -> None:
    mesh_shape, codes, shape = CASES[case]
    results = pool.run(checks.random_op, mesh_shape, codes, shape, op)
    assert_consistent([r[0] for r in results], mesh_shape, codes, shape)


@pytest.mark.parametrize("op", ["kaiming", "xavier_normal", "dropout"])
def test_init_and_dropout_on_sharded_parameters(pool: DistributedPool, op: str) -> None:
    mesh_shape, codes, shape = [2, 4], ["S0", "R"], [16, 8]
    results = pool.run(checks.random_op, mesh_shape, codes, shape, op)
    reports = [r[0] for r in results]
    if op == "dropout":  # compare masks: which elements were kept
        for r in reports:
            r["local"] = [float(v != 0) + i * 1e-6 for i, v in enumerate(r["local"])]
        by_shard: dict[int, list[list[float]]] = {}
        for r in reports:
            by_shard.setdefault(r["coordinate"][0], []).append(r["local"])
        assert all(m == masks[0] for masks in by_shard.values() for m in masks)
        assert by_shard[0][0] != by_shard[1][0], "the two shards must not share a mask"
        assert len({r["counter"] for r in reports}) == 1
    else:
        assert_consistent(reports, mesh_shape, codes, shape)


def test_trunc_normal_runs_a_data_dependent_number_of_ops(pool: DistributedPool) -> None:
    """A finding, not an hwrng rule: torch 2.13's trunc_normal_ rejects samples in a loop
    whose exit tests each rank's own values, so shards can draw a different number of
    times and leave their generators at different offsets -- no tracker can prevent it."""
    results = pool.run(checks.random_op, [2, 4], ["S0", "R"], [16, 8], "trunc_normal")
    reports = [r[0] for r in results]
    by_shard: dict[int, set[tuple[int, int]]] = {}
    for r in reports:
        by_shard.setdefault(r["coordinate"][0], set()).add(r["counter"])
    assert all(len(counters) == 1 for counters in by_shard.values()), "replicas stay together"
    placements = tuple(checks._placements(["S0", "R"]))
    held = {r["rank"]: held_indices((16, 8), (2, 4), placements, r["coordinate"]) for r in reports}
    for a, b in itertools.combinations(reports, 2):
        if held[a["rank"]] == held[b["rank"]]:
            assert a["local"] == b["local"]


def test_two_consecutive_ops_share_no_values(pool: DistributedPool) -> None:
    mesh_shape, codes, shape = [2, 2, 2], ["R", "S0", "R"], [8, 4]
    results = pool.run(checks.random_op, mesh_shape, codes, shape, "uniform", times=2)
    first = {v for r in results for v in r[0]["local"]}
    second = {v for r in results for v in r[1]["local"]}
    assert not first & second
    assert_consistent([r[1] for r in results], mesh_shape, codes, shape)
    assert results[0][1]["counter"][1] > results[0][0]["counter"][1]


def test_without_the_adapter_every_cpu_shard_is_identical(pool: DistributedPool) -> None:
    """The control, i.e. torch's behaviour on a CPU mesh: no tracker, so shards repeat."""
    import warnings

    from torch.distributed.tensor._random import is_rng_supported_mesh

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if is_rng_supported_mesh(SimpleNamespace(device_type="cpu")):  # type: ignore[arg-type]
            pytest.skip("this torch supports DTensor RNG on CPU meshes")
    results = pool.run(checks.random_op, [2, 4], ["R", "S0"], [12, 3], "uniform", adapter=False)
    locals_ = [r[0]["local"] for r in results]
    assert all(local == locals_[0] for local in locals_), "torch gives every shard the same numbers"


def test_distributed_rand(pool: DistributedPool) -> None:
    mesh_shape, codes, shape = [2, 4], ["S0", "S1"], [6, 9]
    reports = pool.run(checks.dtensor_rand, mesh_shape, codes, shape)
    assert_consistent(reports, mesh_shape, codes, shape)


def test_user_generator_advances_and_default_is_untouched(pool: DistributedPool) -> None:
    mesh_shape, codes, shape = [2, 4], ["R", "S0"], [10, 2]
    reports = pool.run(checks.user_generator, mesh_shape, codes, shape)
    assert_consistent(reports, mesh_shape, codes, shape)
    spec = hwrng.ShardSpec(
        tuple(shape), tuple(mesh_shape), tuple(checks._placements(codes)), (0, 0)
    )
    end = hwrng.shard_offsets(spec)[1]
    assert all(r["default_unchanged"] for r in reports)
    assert {r["user_counter"] for r in reports} == {(555, end)}
    assert math.prod(shape) <= end


def _same(a: dict[str, Any], b: dict[str, Any], dims: list[str]) -> bool:
    return all(a["coordinate"][d] == b["coordinate"][d] for d in dims)


def check_recipe(
    reports: list[dict[str, Any] | None], names: list[str], sharded: list[str], op_dims: list[str]
) -> None:
    """Within one DTensor mesh: replicas equal, shards distinct, one offset; across meshes
    that differ on a sharded dim outside them (pipeline stages, or dp for a model on the
    tp submesh): different numbers; local draws follow each rank's own seed."""
    ran = [r for r in reports if r is not None]
    tp_dim = op_dims[-1]
    outside_op = [d for d in names if d not in op_dims]
    outside_tp = [d for d in names if d != tp_dim]
    model_keys = ("params", "row_bias", "output")
    for a, b in itertools.combinations(ran, 2):
        pair = (a["rank"], b["rank"])
        if _same(a, b, outside_op):  # one DTensor mesh
            for key in ("replicated", "dropout", "offset"):
                assert a[key] == b[key], (key, pair)
            assert (a["shard"] == b["shard"]) == _same(a, b, [tp_dim]), ("shard", pair)
            if a["shard"] != b["shard"]:
                assert not set(a["shard"]) & set(b["shard"]), ("shards share values", pair)
        elif not _same(a, b, [d for d in sharded if d in outside_op]):
            assert a["replicated"] != b["replicated"], ("stages draw alike", pair)
        if _same(a, b, outside_tp):  # one tensor-parallel mesh: the model's
            for key in model_keys:
                assert a[key] == b[key], (key, pair)
        elif not _same(a, b, [d for d in sharded if d in outside_tp]):
            assert a["params"] != b["params"], ("models alike across a sharded dim", pair)
        else:
            assert a["params"] == b["params"], ("replicas of the model differ", pair)
        assert (a["local"] == b["local"]) == _same(a, b, sharded), ("local stream", pair)


RECIPES = {
    "dp2 x tp4, sharded []": ([[0, 1, 2, 3], [4, 5, 6, 7]], ["dp", "tp"], [], None),
    "dp2 x tp4, sharded tp": ([[0, 1, 2, 3], [4, 5, 6, 7]], ["dp", "tp"], ["tp"], None),
    "dp2 x tp4, sharded dp": ([[0, 1, 2, 3], [4, 5, 6, 7]], ["dp", "tp"], ["dp"], None),
    "dp2 x tp4, sharded dp,tp": ([[0, 1, 2, 3], [4, 5, 6, 7]], ["dp", "tp"], ["dp", "tp"], None),
    "dp2 x tp4, sharded tp,dp": ([[0, 1, 2, 3], [4, 5, 6, 7]], ["dp", "tp"], ["tp", "dp"], None),
    "4 ranks, dp2 x tp2, sharded tp": ([[0, 1], [2, 3]], ["dp", "tp"], ["tp"], None),
    "4 ranks, dp2 x tp2, sharded dp,tp": ([[0, 1], [2, 3]], ["dp", "tp"], ["dp", "tp"], None),
    "pp2 x dp2 x tp2, sharded pp,tp, stage meshes": (
        [[[0, 1], [2, 3]], [[4, 5], [6, 7]]],
        ["pp", "dp", "tp"],
        ["pp", "tp"],
        ["dp", "tp"],
    ),
    "pp2 x dp2 x tp2, sharded tp,pp,dp, whole mesh": (
        [[[0, 1], [2, 3]], [[4, 5], [6, 7]]],
        ["pp", "dp", "tp"],
        ["tp", "pp", "dp"],
        None,
    ),
}


@pytest.mark.parametrize("case", list(RECIPES))
def test_the_readme_recipe_holds_under_any_seeding(pool: DistributedPool, case: str) -> None:
    layout, names, sharded, op_dims = RECIPES[case]
    reports = pool.run(checks.recipe, layout, names, sharded, op_dims)
    check_recipe(reports, names, sharded, op_dims or names)


@pytest.mark.parametrize("sharded", [["tp"], ["dp", "tp"]], ids=["tp", "dp,tp"])
def test_activation_checkpointing_recomputes_the_dtensor_mask(
    pool: DistributedPool, sharded: list[str]
) -> None:
    results = pool.run(checks.checkpointed_dropout, sharded)
    for result in results:
        assert len(result["masks"]) == 2 and result["masks"][0] == result["masks"][1]
        assert result["grad_is_mask"]
    for a, b in itertools.combinations(results, 2):
        same_shard = a["coordinate"][1] == b["coordinate"][1]
        assert (a["masks"][0] == b["masks"][0]) == same_shard


@pytest.mark.parametrize("op", ["log_normal_", "exponential_", "geometric_", "cauchy_", "random_"])
def test_random_ops_torch_leaves_out_are_routed(pool: DistributedPool, op: str) -> None:
    reports = pool.run(checks.extra_random_ops, op)
    assert all(r["collectives"] == 0 for r in reports), "a random op issued a collective"
    by_shard: dict[int, list[list[float]]] = {}
    for r in reports:
        by_shard.setdefault(r["coordinate"][1], []).append(r["local"])
    assert all(a == b for replicas in by_shard.values() for a, b in itertools.pairwise(replicas))
    firsts = [replicas[0] for replicas in by_shard.values()]
    assert all(a != b for a, b in itertools.combinations(firsts, 2)), "shards drew alike"
    assert len({r["counter"][1] for r in reports}) == 1, "every rank ends at one offset"


def test_dtensor_manual_seed_seeds_on_a_cpu_mesh(pool: DistributedPool) -> None:
    results = pool.run(checks.dtensor_manual_seed_on_a_cpu_mesh, 31)
    assert results == [{"seed": 31, "supported": True}] * 8


@pytest.mark.parametrize("how", ["tp", "fsdp"])
def test_meta_device_init_goes_through_the_adapter(pool: DistributedPool, how: str) -> None:
    results = pool.run(checks.meta_init, how)
    assert all(r["collectives"] == 0 for r in results), "initialisation issued a collective"
    for name, placement in results[0]["placements"].items():
        by_tp: dict[int, set[tuple[float, ...]]] = {}
        for r in results:
            by_tp.setdefault(r["coordinate"][1], set()).add(tuple(r["locals"][name]))
        assert all(len(values) == 1 for values in by_tp.values()), f"{name}: dp replicas differ"
        distinct = {next(iter(values)) for values in by_tp.values()}
        if "Shard" in placement:
            assert len(distinct) == len(by_tp), f"{name} ({placement}): tp shards drew alike"
        else:
            assert len(distinct) == 1, f"{name} ({placement}): replicated values differ"


def test_local_tensor_mode_draws_what_real_ranks_draw(pool: DistributedPool) -> None:
    """Simulated ranks (torch's LocalTensorMode, which torch's own tests use) match real ones."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    real = pool.run(checks.real_ranks_for_local_tensor_mode)[:4]
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), *sys.path])}
    result = subprocess.run(
        [sys.executable, "-c", checks.LOCAL_TENSOR_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    simulated = json.loads(result.stdout.strip().splitlines()[-1])
    for rank in range(4):
        assert simulated[str(rank)] == real[rank], f"rank {rank}"
    assert real[0]["uniform"] == real[2]["uniform"] != real[1]["uniform"]

"""Placement invariance over real gloo processes: DTensor random ops in invariant mode give the
same full tensor on 1, 2, 4 and 8 ranks and under every placement; a (dp, tp) model trains to
bit-identical parameters and losses at every world size."""

from __future__ import annotations

from typing import Any

import dist_invariant_checks as checks
import pytest
import torch
from helpers import pool_fixture

import hwrng
from hwrng import invariant
from hwrng.testing import DistributedPool

LAYOUTS = {
    "1 rank": ([1], ["S0"]),
    "2 ranks, Shard(0)": ([2], ["S0"]),
    "2 ranks, Shard(1)": ([2], ["S1"]),
    "4 ranks, 2-D": ([2, 2], ["S1", "S0"]),
    "4 ranks, Shard(0) twice": ([2, 2], ["S0", "S0"]),
    "8 ranks, uneven": ([8], ["S1"]),
    "8 ranks, 2-D with Partial": ([2, 4], ["P", "S0"]),
    "8 ranks, strided (FSDP2 + TP)": ([2, 4], ["SS0/4", "S0"]),
}
SHAPE = [16, 10]


pool = pool_fixture(8, timeout=180)


def _one_device(op: str) -> list[float]:
    """The single-device answer, with no DTensor at all: hwrng.invariant on a whole tensor."""
    spec = hwrng.ShardSpec(tuple(SHAPE), (1,), (torch.distributed.tensor.Replicate(),), (0,))
    hwrng.manual_seed(checks.SEED, platform="cpu")
    torch.rand(3)
    tensor = torch.zeros(SHAPE)
    fills = {
        "uniform": lambda: invariant.uniform_(tensor, spec, -2.0, 3.0),
        "normal": lambda: invariant.normal_(tensor, spec, 1.0, 2.0),
        "bernoulli": lambda: invariant.bernoulli_(tensor, spec, 0.3),
        "rand": lambda: invariant.uniform_(tensor, spec),
    }
    return fills[op]().flatten().tolist()


@pytest.mark.parametrize(
    "op",
    [
        "uniform",
        "normal",
        "bernoulli",
        "kaiming",
        "xavier_normal",
        "trunc_normal",
        "dropout",
        "rand",
    ],
)
def test_full_tensor_is_the_same_at_every_layout(pool: DistributedPool, op: str) -> None:
    results: dict[str, Any] = {}
    refused: dict[str, bool] = {}
    for name, (mesh_shape, codes) in LAYOUTS.items():
        reports = [r for r in pool.run(checks.full_after, mesh_shape, codes, SHAPE, op) if r]
        assert all(r == reports[0] for r in reports), f"{name}: ranks disagree"
        if "refused" in reports[0]:
            # torch 2.10's DTensor refuses an in-place op that would change a Partial
            # placement; only a Partial layout may meet that
            assert any(code.startswith("P") for code in codes), f"{name}: refused, not Partial"
            refused[name] = reports[0]["refused"]
            continue
        results[name] = reports[0]
    reference = results["1 rank"]["full"]
    for name, result in results.items():
        assert result["full"] == reference, f"{op}: {name} differs from one device"
        assert result["offset"] == results["1 rank"]["offset"], f"{name}: another position"
    if op in ("uniform", "normal", "bernoulli", "rand"):
        assert reference == _one_device(op), "the DTensor ops equal hwrng.invariant's"
    assert len(set(reference)) > 2 or op in ("bernoulli", "dropout")
    if refused:
        # Known open defect, said out loud rather than skipped: on torch 2.10 the invariant
        # dropout leaves an in-place division on a Partial placement, which that torch's
        # DTensor refuses (torch's own dropout, without the adapter, does not meet it).
        by_torch = [name for name, torch_too in refused.items() if torch_too]
        pytest.xfail(
            f"{op} on {sorted(refused)}: this torch's DTensor refuses the in-place op that "
            f"hwrng's invariant {op} leaves on a Partial placement (torch alone refuses too: "
            f"{sorted(by_torch)})"
        )


def test_dropout_backward_uses_the_same_mask(pool: DistributedPool) -> None:
    answers = []
    for mesh_shape, codes in ([1], ["S0"]), ([2, 4], ["S1", "S0"]):
        reports = [r for r in pool.run(checks.dropout_backward, mesh_shape, codes) if r]
        assert all(r["mask_is_grad"] for r in reports)
        answers.append(reports[0]["full"])
    assert answers[0] == answers[1]


def test_a_model_trains_bit_identically_on_1_2_4_and_8_ranks(pool: DistributedPool) -> None:
    runs = {}
    for mesh_shape in ([1], [2], [1, 4], [2, 4]):
        reports = [r for r in pool.run(checks.train, mesh_shape) if r]
        assert all(r == reports[0] for r in reports)
        runs[str(mesh_shape)] = reports[0]
    first = runs["[1]"]
    assert len(set(first["losses"])) == 3, "the losses move: training happens"
    for name, run in runs.items():
        assert run == first, f"{name} differs from one rank"

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
        "dropout": lambda: invariant.dropout(tensor + 1, spec, checks.DROPOUT_P),
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
    for name, (mesh_shape, codes) in LAYOUTS.items():
        reports = [r for r in pool.run(checks.full_after, mesh_shape, codes, SHAPE, op) if r]
        assert all(r == reports[0] for r in reports), f"{name}: ranks disagree"
        results[name] = reports[0]
    reference = results["1 rank"]["full"]
    for name, result in results.items():
        assert result["full"] == reference, f"{op}: {name} differs from one device"
        assert result["offset"] == results["1 rank"]["offset"], f"{name}: another position"
    if op in ("uniform", "normal", "bernoulli", "rand", "dropout"):
        assert reference == _one_device(op), "the DTensor ops equal hwrng.invariant's"
    assert len(set(reference)) > 2 or op in ("bernoulli", "dropout")


@pytest.mark.parametrize("inplace", [False, True], ids=["out of place", "in place"])
def test_dropout_of_a_partial_input_is_the_dropout_of_its_sum(
    pool: DistributedPool, inplace: bool
) -> None:
    """Dropout is linear: each rank scales its part by the one mask, the output stays Partial
    and its sum is the contract's dropout of the input's sum (torch's composed CPU dropout
    made the mask Partial too: torch 2.10 refused it, later torches doubled the values)."""
    reports = [r for r in pool.run(checks.partial_dropout, SHAPE, inplace) if r]
    assert len(reports) == 8
    assert all(r == reports[0] for r in reports), "ranks disagree"
    report = reports[0]
    spec = hwrng.ShardSpec(tuple(SHAPE), (1,), (torch.distributed.tensor.Replicate(),), (0,))
    hwrng.manual_seed(checks.SEED, platform="cpu")
    torch.rand(3)
    scaled_mask = invariant.dropout(torch.ones(SHAPE), spec, checks.DROPOUT_P)
    offset = hwrng.get_platform("cpu").counter.peek(torch.default_generator)[1]
    whole = torch.arange(float(scaled_mask.numel())).reshape(SHAPE)
    # the Partial sum of the two parts, each scaled on its rank
    expected = (whole - 7) * scaled_mask + torch.full(SHAPE, 7.0) * scaled_mask
    assert report["placements"] == ["P", "S0"]
    assert report["full"] == expected.flatten().tolist()
    assert report["offset"] == offset, "the generator moved as for one device's dropout"
    assert 0 < int((scaled_mask == 0).sum()) < scaled_mask.numel()
    if inplace:
        assert report["same_tensor"]
    else:
        assert report["grad"] == (whole * scaled_mask).flatten().tolist()


def test_dropout_backward_uses_the_same_mask(pool: DistributedPool) -> None:
    answers = []
    for mesh_shape, codes in ([1], ["S0"]), ([2, 4], ["S1", "S0"]):
        reports = [r for r in pool.run(checks.dropout_backward, mesh_shape, codes) if r]
        assert all(r["mask_is_grad"] for r in reports)
        answers.append(reports[0]["full"])
    assert answers[0] == answers[1]


@pytest.mark.parametrize(
    ("p", "train"),
    [(checks.DROPOUT_P, True), (0.0, True), (1.0, True), (checks.DROPOUT_P, False)],
    ids=["p=0.42", "p=0", "p=1", "evaluation"],
)
def test_native_dropout_of_a_dtensor_is_hwrng_invariant_dropout(
    pool: DistributedPool, p: float, train: bool
) -> None:
    """``aten.native_dropout`` of a bfloat16 DTensor, called directly, gives hwrng.invariant's
    dropout bit for bit (the contract's scale rounded to float32, then to bfloat16) on one
    rank and on a 2-D mesh; p = 0, p = 1 and evaluation draw nothing, as the contract says."""
    whole = torch.linspace(-3, 3, 160, dtype=torch.bfloat16).reshape(16, 10)
    spec = hwrng.ShardSpec((16, 10), (1,), (torch.distributed.tensor.Replicate(),), (0,))
    hwrng.manual_seed(checks.SEED, platform="cpu")
    torch.rand(3)
    expected = invariant.dropout(whole, spec, p, train)
    for mesh_shape, codes in ([1], ["S0"]), ([2, 4], ["S1", "S0"]):
        reports = [r for r in pool.run(checks.native_dropout, mesh_shape, codes, p, train) if r]
        assert all(r == reports[0] for r in reports), f"{mesh_shape}: ranks disagree"
        report = reports[0]
        assert report["output"] == expected.view(torch.int16).flatten().tolist()
        kept = (expected != 0) if 0.0 < p < 1.0 else torch.full_like(whole, p == 0.0 or not train)
        assert report["mask"] == kept.bool().flatten().tolist()
        moved = invariant.advance(spec) if train and 0.0 < p < 1.0 else 0
        assert report["moved"] == moved
    if train and 0.0 < p < 1.0:
        assert 0 < int((expected == 0).sum()) < expected.numel()


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

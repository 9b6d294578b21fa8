"""The invariant ops' contract: its version, the committed known answers (from an independent
reference), and the float64-free computation of every float32, float16 and bfloat16 result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from hwrng_conformance import invariant_reference as reference
from hwrng_conformance.helpers import Float64Refused, refuse_float64
from known_answers import KNOWN, bits_of, draw_case
from torch.distributed.tensor import Shard

import hwrng
from hwrng import _philox as philox
from hwrng import invariant


def case_id(case: dict[str, Any]) -> str:
    names = ("low", "high", "mean", "std", "a", "b", "p")
    parameters = [f"{case[k]:g}" for k in names if k in case]
    return f"{case['op']}-{case['dtype']}-{','.join(parameters)}"


def test_the_contract_is_versioned() -> None:
    assert invariant.CONTRACT == "hwrng-philox4x32-10-v3"
    assert invariant.CONTRACT_VERSION == 3
    assert KNOWN["contract"] == reference.CONTRACT == invariant.CONTRACT


def test_the_committed_known_answers_are_the_independent_references() -> None:
    """The reference (Python ints and NumPy float32 scalars, no torch, no hwrng) remakes the
    committed file exactly: neither was edited without the other."""
    assert reference.known_answers() == KNOWN


@pytest.mark.parametrize("case", KNOWN["cases"], ids=case_id)
def test_hwrng_draws_the_known_answers(case: dict[str, Any]) -> None:
    for start, expected in case["runs"]:
        index = torch.arange(start, start + len(expected))
        assert [f"{v:0{len(expected[0])}x}" for v in bits_of(draw_case(case, index))] == expected
    # and as a shard described by its dims: rows of a (12, 8) tensor, rows 3..8, columns 2..6
    start, expected = case["runs"][0]
    rows, columns = torch.arange(3, 9), torch.arange(2, 7)
    shard = philox.ShardIndices((rows, columns), (12, 8))
    got = bits_of(draw_case(case, shard))
    assert got == [int(expected[8 * r + c], 16) for r in range(3, 9) for c in range(2, 7)]


# -- no float64 for a float32, float16 or bfloat16 result -----------------------------------

OPS: dict[str, Callable[[philox.Indices, torch.dtype], torch.Tensor]] = {
    "uniform": lambda i, d: philox.uniform(3, 8, i, d),
    "uniform(low, high)": lambda i, d: philox.uniform(3, 8, i, d, low=-1.5, high=2.25),
    "normal": lambda i, d: philox.normal(3, 8, i, d, mean=0.5, std=2.0),
    "trunc_normal": lambda i, d: philox.trunc_normal(3, 8, i, d, a=-1.0, b=2.5),
    "trunc_normal, far tail": lambda i, d: philox.trunc_normal(3, 8, i, d, a=5.0, b=9.0),
    "bernoulli": lambda i, d: philox.bernoulli_mask(3, 8, i, 0.3).to(d),
    "bernoulli(tensor p)": lambda i, d: philox.bernoulli_mask(
        3, 8, i, torch.full(philox.index_shape(i), 0.3, dtype=d)
    ).to(d),
}
INDICES: dict[str, Callable[[], philox.Indices]] = {
    "a run": lambda: torch.arange(5, 77),
    "scattered": lambda: torch.tensor([70, 3, 2, 41, 2**40 + 1]),
    "rows": lambda: philox.ShardIndices((torch.arange(2, 5), torch.arange(9)), (6, 9)),
    "columns": lambda: philox.ShardIndices((torch.arange(6), torch.tensor([1, 4, 5])), (6, 9)),
}
HALF_AND_SINGLE = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", HALF_AND_SINGLE, ids=str)
@pytest.mark.parametrize("op", list(OPS))
def test_float32_results_never_touch_float64(op: str, dtype: torch.dtype) -> None:
    for name, index in INDICES.items():
        with refuse_float64():
            values = OPS[op](index(), dtype)
        assert values.dtype == dtype, name


@pytest.mark.parametrize("dtype", HALF_AND_SINGLE, ids=str)
def test_the_public_ops_never_touch_float64(cpu: hwrng.Platform, dtype: torch.dtype) -> None:
    spec = hwrng.ShardSpec((8, 6), (2,), (Shard(1),), (1,))
    hwrng.seed_everything(4, platform=cpu)
    fills = [
        lambda t: invariant.uniform_(t, spec, -1.0, 3.0),
        lambda t: invariant.normal_(t, spec, 1.0, 0.5),
        lambda t: invariant.bernoulli_(t, spec, 0.25),
        lambda t: invariant.trunc_normal_(t, spec, 0.0, 1.0, -2.0, 2.0),
        lambda t: t.copy_(invariant.dropout(torch.ones_like(t), spec, 0.1)),
    ]
    for fill in fills:
        with refuse_float64():
            fill(torch.empty(spec.local_shape, dtype=dtype))


def test_the_refusing_mode_refuses() -> None:
    with refuse_float64(), pytest.raises(Float64Refused):
        torch.ones(3) * torch.ones(3, dtype=torch.float64)
    with refuse_float64(), pytest.raises(Float64Refused):
        torch.zeros(2, dtype=torch.float64)
    with refuse_float64(), pytest.raises(Float64Refused):
        torch.ones(3).to(torch.float64)

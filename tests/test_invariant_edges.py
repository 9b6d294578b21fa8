"""The contract's edges, each as docs/invariant.md states it.

What dropout's dropped elements become, which dropout calls draw, dropout's scale in float64,
``uniform(low, low)``, ``SQRT(-0)`` (Box-Muller at ``u1 = 1``), the precision of ``Phi`` for the
truncated normal, the infinite and equal bounds ``nn.init.trunc_normal_`` accepts, and the end of
the positions at ``2**63``. The oracles: the contract's independent reference
(``hwrng_conformance.invariant_reference``), mpmath at 800 digits, and plain arithmetic.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest
import torch
from hwrng_conformance import invariant_reference as reference
from torch.distributed.tensor import Shard

import hwrng
from hwrng import _philox as philox
from hwrng import invariant
from hwrng._philox import _math as philox_math
from hwrng._philox import _math32

ROWS = hwrng.ShardSpec((8, 16), (2,), (Shard(0),), (1,))  # rows 4 to 7 of an (8, 16) tensor


def _bits(values: torch.Tensor) -> list[int]:
    width = values.element_size() * 8
    ints = values.view({4: torch.int32, 8: torch.int64}.get(values.element_size(), torch.int16))
    return [v & ((1 << width) - 1) for v in ints.to(torch.int64).reshape(-1).tolist()]


def _position(cpu: hwrng.Platform) -> tuple[int, int]:
    seed, offset = cpu.get_seed_offset(cpu.generator())
    return seed, offset


# -- dropout -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_dropped_elements_are_the_input_times_zero(cpu: hwrng.Platform, dtype: torch.dtype) -> None:
    specials = [-1.5, math.inf, -math.inf, math.nan, 2.0, -0.0, 0.0, -3.0]
    x = torch.tensor(specials * 16, dtype=dtype).reshape(4, 32)
    spec = hwrng.ShardSpec((8, 32), (2,), (Shard(0),), (1,))
    cpu.set_seed_offset(cpu.generator(), 99, 64)
    out = invariant.dropout(x, spec, 0.5)
    kept = philox.bernoulli_mask(99, 64, invariant.global_index(spec), 0.5)
    assert 0 < int(kept.sum()) < kept.numel()
    scale = torch.tensor(2.0, dtype=dtype)  # 1 / (1 - 0.5), exact in every dtype
    expected = torch.where(kept, x * scale, x * torch.zeros((), dtype=dtype))
    assert _bits(out) == _bits(expected)
    dropped = out[~kept]
    assert math.copysign(1.0, float(dropped[x[~kept] == -1.5][0])) == -1.0  # -0
    assert torch.isnan(dropped[torch.isinf(x[~kept]) | torch.isnan(x[~kept])]).all()


def test_dropout_draws_only_when_there_is_something_to_draw(cpu: hwrng.Platform) -> None:
    # as torch's dropout: training=False and p = 0 return the input, p = 1 the input times 0,
    # and none of them moves the generator; any other p advances it by the tensor's size
    x = torch.randn(4, 16)
    generator = cpu.generator()
    cpu.set_seed_offset(generator, 5, 40)
    assert invariant.dropout(x, ROWS, 0.0) is x
    assert invariant.dropout(x, ROWS, 0.5, training=False) is x
    assert _bits(invariant.dropout(x, ROWS, 1.0)) == _bits(x * 0.0)
    assert _position(cpu) == (5, 40)
    invariant.dropout(x, ROWS, 0.25)
    assert _position(cpu) == (5, 40 + invariant.advance(ROWS))
    with pytest.raises(hwrng.InvalidArgumentError, match="ShardSpec"):
        invariant.dropout(x, (8, 16), 0.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("dtype", "scale"),
    [
        (torch.float64, 1.0 / 0.7),  # the float64 quotient itself
        (torch.float32, float(np.float32(1.0 / 0.7))),
        (torch.bfloat16, float(torch.tensor(float(np.float32(1.0 / 0.7))).to(torch.bfloat16))),
    ],
)
def test_dropout_scales_by_the_float64_quotient_in_the_dtype(
    cpu: hwrng.Platform, dtype: torch.dtype, scale: float
) -> None:
    ones = torch.ones(4, 16, dtype=dtype)
    cpu.set_seed_offset(cpu.generator(), 3, 0)
    out = invariant.dropout(ones, ROWS, 0.3)
    kept = philox.bernoulli_mask(3, 0, invariant.global_index(ROWS), 0.7)
    assert set(out[kept].tolist()) == {scale}
    assert set(out[~kept].tolist()) == {0.0}


# -- uniform(low, low) and SQRT(-0) ---------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_uniform_of_equal_bounds_is_low_and_advances(
    cpu: hwrng.Platform, dtype: torch.dtype
) -> None:
    cpu.set_seed_offset(cpu.generator(), 8, 0)
    out = invariant.uniform_(torch.empty(4, 16, dtype=dtype), ROWS, 0.3, 0.3)
    assert _position(cpu) == (8, invariant.advance(ROWS))
    name = str(dtype).removeprefix("torch.")
    expected = reference.uniform(8, 0, 70, name, low=0.3, high=0.3)
    assert set(_bits(out)) == {expected}
    # float64: low itself; the others: low rounded to float32, then to the dtype
    low = 0.3 if dtype == torch.float64 else float(torch.tensor(np.float32(0.3)).to(dtype))
    assert float(out[0, 0]) == low


def test_sqrt_of_minus_zero_is_plus_zero() -> None:
    zeros = [0.0, -0.0]
    assert _bits(_math32.sqrt(torch.tensor(zeros))) == [0, 0]
    assert _bits(philox_math.sqrt(torch.tensor(zeros, dtype=torch.float64))) == [0, 0]
    for zero in zeros:
        assert math.copysign(1.0, float(reference.sqrt32(np.float32(zero)))) == 1.0
        assert math.copysign(1.0, reference.sqrt64(zero)) == 1.0
    # and where it arises: -2 LN(1) is -0
    assert _bits(_math32.ln(torch.tensor([1.0])).mul_(-2.0)) == [0x80000000]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_box_muller_at_u1_one_draws_the_mean(dtype: torch.dtype) -> None:
    # word 2 of block 242583 at seed 1, position 0 is 0xffffffca: u1 = f32(a + 1) * 2**-32 = 1,
    # so elements 970334 and 970335 are 0 * cos and 0 * sin, then times std plus mean
    # (contract 2 drew about 3.4e18 there)
    assert reference.words(1, 0, 242583)[2] == 0xFFFFFFCA
    index = torch.arange(970328, 970336)
    values = philox.normal(1, 0, index, dtype, mean=-0.0, std=3.0)
    name = str(dtype).removeprefix("torch.")
    expected = [reference.normal(1, 0, e, name, mean=-0.0, std=3.0) for e in index.tolist()]
    assert _bits(values) == expected
    assert values[6:].abs().max() == 0
    assert values[:6].abs().max() < 10


# -- the truncated normal -------------------------------------------------------------------


def _nearest(value: mpmath.mpf) -> float:
    """The double nearest the mpmath value (Fraction's float() rounds correctly)."""
    mantissa, exponent = value.man_exp if value else (0, 0)
    return float(Fraction(int(mantissa)) * Fraction(2) ** int(exponent))


PHI_PAIRS = [
    (-2.0, 2.0),
    (-1e-300, 2e-300),  # Phi(beta) - Phi(alpha) cancels 300 digits
    (0.3, 0.3 + 2**-50),  # close bounds
    (-38.5, -38.4),  # far in the lower tail
    (-40.0, 39.0),  # 1 - Phi(beta) near 1e-333
    (-9.0, -7.5),
    (-0.4, 0.1),
]


@pytest.mark.parametrize(("alpha", "beta"), PHI_PAIRS)
def test_phi_of_the_bounds_is_the_nearest_double(alpha: float, beta: float) -> None:
    with mpmath.workdps(800):
        low, high = mpmath.ncdf(alpha), mpmath.ncdf(beta)
        upper = mpmath.ncdf(-beta)  # 1 - Phi(beta), without cancellation
        base, width = philox_math.phi_interval(alpha, beta)
        assert (base, width) == (_nearest(low), _nearest(high - low))
        scaled = philox_math.tail_scale(alpha, beta)
        scale = mpmath.mpf(2) ** scaled.shift

        def f32(value: mpmath.mpf) -> float:
            rounded = float(np.float32(_nearest(value)))
            return 0.0 if rounded < 2.0**-100 else rounded

        assert scaled.base == f32(low * scale)
        assert scaled.width == f32((high - low) * scale)
        assert scaled.upper == (f32(upper) if scaled.shift == 0 else 0.0)
    assert reference.tail_constants(alpha, beta) == (
        scaled.shift,
        np.float32(scaled.base),
        np.float32(scaled.width),
        np.float32(scaled.upper),
    )


TRUNCATIONS = [
    (0.0, 1.0, -math.inf, math.inf),
    (0.5, 2.0, -math.inf, 1.0),
    (0.0, 1.0, 1.5, math.inf),  # mirrored
    (1.0, 0.5, 1.25, 1.25),  # a == b: every value is a
]


@pytest.mark.parametrize(("mean", "std", "a", "b"), TRUNCATIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_trunc_normal_takes_the_bounds_torch_accepts(
    cpu: hwrng.Platform, dtype: torch.dtype, mean: float, std: float, a: float, b: float
) -> None:
    cpu.set_seed_offset(cpu.generator(), 21, 8)
    out = invariant.trunc_normal_(torch.empty(4, 16, dtype=dtype), ROWS, mean, std, a, b)
    assert _position(cpu) == (21, 8 + invariant.advance(ROWS))
    name = str(dtype).removeprefix("torch.")
    index = invariant.global_index(ROWS).reshape(-1).tolist()
    parameters: dict[str, Any] = {"mean": mean, "std": std, "a": a, "b": b}
    assert _bits(out) == [reference.trunc_normal(21, 8, e, name, **parameters) for e in index]
    assert bool(torch.isfinite(out).all()) and bool(((out >= a) & (out <= b)).all())
    if a == b:
        assert set(out.reshape(-1).tolist()) == {a}


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        (1.0, 0.5, "a <= b"),
        (math.inf, math.inf, "a <= b"),
        (-math.inf, -math.inf, "a <= b"),
        (math.nan, 1.0, "a <= b"),
        (0.1, 0.1, "no torch.bfloat16 value"),  # a == b must be a value of the dtype
    ],
)
def test_trunc_normal_refuses_bounds_without_values(
    cpu: hwrng.Platform, a: float, b: float, message: str
) -> None:
    generator = cpu.generator()
    cpu.set_seed_offset(generator, 4, 12)
    with pytest.raises(hwrng.InvalidValueError, match=message):
        invariant.trunc_normal_(torch.zeros(4, 16, dtype=torch.bfloat16), ROWS, 0.0, 1.0, a, b)
    assert _position(cpu) == (4, 12)


# -- the end of the positions ---------------------------------------------------------------


def test_positions_end_below_2_63(cpu: hwrng.Platform) -> None:
    # an op at position P moves the generator to P + advance, which must stay below 2**63;
    # the last op may draw at 2**63 - 4
    generator = cpu.generator()
    last = 2**63 - 4
    cpu.set_seed_offset(generator, 6, last - invariant.advance(ROWS))
    invariant.uniform_(torch.empty(4, 16), ROWS)  # to 2**63 - 4
    assert _position(cpu) == (6, last)
    with pytest.raises(hwrng.InvalidOffsetError, match="would pass 2"):
        invariant.normal_(torch.empty(4, 16), ROWS)
    assert _position(cpu) == (6, last)
    values = philox.uniform(6, last, torch.arange(64, 68), torch.float32)
    assert _bits(values) == [
        reference.uniform(6, last, e, "float32", low=0.0, high=1.0) for e in range(64, 68)
    ]
    with pytest.raises(hwrng.InvalidValueError, match="position"):
        philox.uniform(6, 2**63, torch.arange(4), torch.float32)

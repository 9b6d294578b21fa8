"""The float32 arithmetic of the invariant ops (float32, float16 and bfloat16 results): the
accuracy of hwrng's own float32 ``sqrt``, ``ln``, ``sin``/``cos`` and inverse normal CDF against
exact values, and the distributions of the values they make.

The bounds are the measured maxima (``benchmarks/invariant_accuracy.py`` measures them on every
float32 of each domain; here a sample), rounded up a little. The exact values are float64
evaluations, within 2**-26 float32 ulp of the truth.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hwrng import _philox as philox
from hwrng._philox import _math as math64
from hwrng._philox import _math32 as m32

# scipy is in hwrng's test extra (the README's install and every CI cell have it); without it
# (a machine that cannot install anything) these tests say why they skip
scipy_special = pytest.importorskip(
    "scipy.special", reason="scipy is missing: pip install -e '.[test]' installs it"
)

RNG = np.random.default_rng(20261125)


def ulp_error(got: torch.Tensor | np.ndarray, exact: np.ndarray) -> np.ndarray:
    """The error of float32 ``got`` in units in the last place of the float32 exact value."""
    values = got.numpy() if isinstance(got, torch.Tensor) else got
    spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return np.abs(values.astype(np.float64) - exact) / spacing


def float32s(low_bits: int, high_bits: int, count: int) -> np.ndarray:
    """``count`` float32 values drawn uniformly among the bit patterns in ``[low, high)``."""
    return RNG.integers(low_bits, high_bits, count).astype(np.int32).view(np.float32)


def test_sqrt_is_within_three_quarters_of_an_ulp() -> None:
    x = np.concatenate([float32s(0x00800000, 0x7F000000, 200_000), [1.0, 2.0, 4.0, 0.25]])
    x = x.astype(np.float32)
    got = m32.sqrt(torch.from_numpy(x))
    assert ulp_error(got, np.sqrt(x.astype(np.float64))).max() <= 0.75
    assert m32.sqrt(torch.tensor([0.0, 4.0, 9.0])).tolist() == [0.0, 2.0, 3.0]


def test_ln_is_within_0_83_ulp() -> None:
    """Measured on every float32 of [2**-32, 1]: 0.826 ulp."""
    x = np.concatenate([float32s(0x2F800000, 0x3F800001, 400_000), [1.0, 0.5, 2.0**-32]])
    x = x.astype(np.float32)
    got = m32.ln(torch.from_numpy(x))
    assert ulp_error(got, np.log(x.astype(np.float64))).max() <= 0.83
    assert m32.ln(torch.tensor([1.0])).item() == 0.0
    # with the exponent moved: ln(x * 2**-300) for x in the float32 range
    shifted = m32.ln(torch.from_numpy(x[:50_000]), -300)
    exact = np.log(x[:50_000].astype(np.float64)) - 300 * math.log(2)
    assert ulp_error(shifted, exact).max() <= 0.83


def test_sin_and_cos_of_a_turn_are_within_1_21_ulp() -> None:
    k = np.concatenate([RNG.integers(0, 2**24, 300_000), [0, 1, 2**21, 2**22 - 1, 2**22, 2**23]])
    sin, cos = m32.sincos_turns(torch.from_numpy(k))
    quadrant, m = k >> 22, k & 0x3FFFFF
    near = np.sin(np.pi / 2 * (m / 2**22))
    far = np.sin(np.pi / 2 * ((2**22 - m) / 2**22))  # cos of the quarter-turn fraction, exactly
    exact_sin = np.select([quadrant == 0, quadrant == 1, quadrant == 2], [near, far, -near], -far)
    exact_cos = np.select([quadrant == 0, quadrant == 1, quadrant == 2], [far, -near, -far], near)
    assert ulp_error(sin, exact_sin).max() <= 1.21
    assert ulp_error(cos, exact_cos).max() <= 1.21
    # exact where the exact value is a float: 0, +-1 on the axes
    sin, cos = m32.sincos_turns(torch.tensor([0, 2**22, 2**23, 3 * 2**22]))
    assert sin.tolist() == [0.0, 1.0, 0.0, -1.0] and cos.tolist() == [1.0, 0.0, -1.0, 0.0]


def test_inverse_normal_cdf_is_within_6_ulp() -> None:
    """Measured on 2**24 points: 5.7 ulp (central), 5.4 ulp (tail); torch's own float32
    ``special.ndtri`` has 4.2 and 3.3 on the same points."""
    q = torch.from_numpy(RNG.uniform(-0.425, 0.425, 300_000).astype(np.float32))
    exact = scipy_special.ndtri(0.5 + q.numpy().astype(np.float64))
    assert ulp_error(m32.ndtri_central(q), exact).max() <= 6.0
    p = np.ldexp(RNG.random(300_000) + 0.5, -RNG.integers(4, 126, 300_000)).astype(np.float32)
    t = m32.sqrt(m32.ln(torch.from_numpy(p)).neg_())
    exact = -scipy_special.ndtri(p.astype(np.float64))
    assert ulp_error(m32.ndtri_tail(t), exact).max() <= 6.0


def test_normal_values_are_within_3_1_ulp_of_box_muller() -> None:
    """The whole float32 normal: sqrt(-2 ln u1) times the cosine or sine of the angle, against
    the exact value of the same u1 and angle."""
    count = 1 << 18
    index = torch.arange(count)
    got = philox.normal(9, 12, index, torch.float32)
    words = philox.block_words(9, 12, torch.arange(count // 4))
    a = torch.stack([words[0], words[2]], 1).reshape(-1).numpy()
    b = torch.stack([words[1], words[3]], 1).reshape(-1).numpy()
    u1 = (a + 1).astype(np.float32).astype(np.float64) * 2.0**-32
    angle = 2 * np.pi * (b >> 8).astype(np.float64) / 2**24
    radius = np.sqrt(-2 * np.log(u1))
    exact = np.stack([radius * np.cos(angle), radius * np.sin(angle)], 1).reshape(-1)
    assert ulp_error(got, exact).max() <= 3.1


def test_the_float64_sqrt_is_within_an_ulp() -> None:
    x = RNG.integers(0x0010000000000000, 0x7FE0000000000000, 100_000).view(np.float64)
    got = math64.sqrt(torch.from_numpy(x.copy())).numpy()
    assert (np.abs(got - np.sqrt(x)) <= np.spacing(np.sqrt(x))).all()
    assert math64.sqrt(torch.tensor([0.0, 4.0], dtype=torch.float64)).tolist() == [0.0, 2.0]


# -- the distributions of the float32, float16 and bfloat16 values ---------------------------

N = 2**16
# sqrt(n) D > 2.23 has probability about 1e-4 for a sample of the right distribution
KS_BOUND = 2.23 / math.sqrt(N)
SIGMAS = 5.0


def ks_statistic(samples: np.ndarray, cdf: np.ndarray) -> float:
    """The Kolmogorov-Smirnov statistic of sorted ``samples`` with CDF values ``cdf``."""
    n = samples.size
    return float(max((np.arange(1, n + 1) / n - cdf).max(), (cdf - np.arange(n) / n).max()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_normal_of_half_types(dtype: torch.dtype) -> None:
    values = np.sort(philox.normal(31, 8, torch.arange(N), dtype).double().numpy())
    assert abs(values.mean()) < SIGMAS / math.sqrt(N)
    assert abs(values.var() - 1) < SIGMAS * math.sqrt(2 / N)
    rounding = 2.0**-8 if dtype == torch.bfloat16 else 2.0**-11
    assert ks_statistic(values, scipy_special.ndtr(values)) < KS_BOUND + rounding


def test_the_normal_tail_reaches_six_sigma() -> None:
    """u1 keeps 32 bits (rounded to float32): the radius reaches sqrt(64 ln 2) = 6.66, so the
    float32 path is not cut at the 5.8 sigma of a 24-bit u1."""
    z = philox.normal(5, 0, torch.arange(2**22), torch.float32)
    assert float(z.abs().max()) > 5.0
    assert float(z.abs().max()) <= math.sqrt(64 * math.log(2)) + 1e-5


@pytest.mark.parametrize(
    ("a", "b", "dtype"),
    [
        (-2.0, 2.0, torch.bfloat16),
        (3.0, 6.0, torch.float32),  # the mirrored upper tail, probabilities scaled by 2**8
        (-9.0, -7.5, torch.float32),  # deep in the lower tail: scaled by 2**43
        (-30.0, -29.0, torch.float32),  # beyond any float32 probability: scaled by 2**654
        (-6.0, 5.5, torch.float32),  # both tails, the upper one from the complement
    ],
)
def test_trunc_normal_float32_distribution(a: float, b: float, dtype: torch.dtype) -> None:
    values = philox.trunc_normal(3, 0, torch.arange(N), dtype, a=a, b=b).double().numpy()
    assert (values >= a).all() and (values <= b).all()
    values = np.sort(values)
    # the CDF from the side that keeps its relative precision
    if a + b > 0:
        mass = scipy_special.ndtr(-a) - scipy_special.ndtr(-b)
        cdf = (scipy_special.ndtr(-a) - scipy_special.ndtr(-values)) / mass
    else:
        log_mass = np.log(-np.expm1(scipy_special.log_ndtr(a) - scipy_special.log_ndtr(b)))
        log_top = scipy_special.log_ndtr(b) + log_mass
        cdf = np.exp(scipy_special.log_ndtr(values) - log_top) - np.exp(
            scipy_special.log_ndtr(a) - log_top
        )
    rounding = 2.0**-7 if dtype == torch.bfloat16 else 2e-5
    assert ks_statistic(values, cdf) < KS_BOUND + rounding

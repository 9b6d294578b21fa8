"""The counter-based generator of the placement-invariant ops (``hwrng._philox``).

Philox4x32-10 against Random123's known answers and an independent scalar oracle,
the counter layout and the bit-to-float mapping against scalar re-computations,
placement invariance at the kernel, distributions, the accuracy of the elementary
functions, determinism, argument checks, and the fused Triton kernel against the
generic path where Triton is installed.
"""

from __future__ import annotations

import doctest
import importlib.util
import math
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from hwrng_conformance import invariant_reference as reference
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from philox_cases import FLOAT_NAMES, op_cases

import hwrng
from hwrng import _philox as philox
from hwrng._philox import _distributions as generic_path
from hwrng._philox import _math as philox_math

# -- oracles written from the paper, independent of the tensor code ------------------------


def oracle_philox(
    counter: tuple[int, ...], key: tuple[int, int], rounds: int = 10
) -> tuple[int, ...]:
    """Philox4x32-R for one counter (Salmon et al., SC'11), on Python integers."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) % 2**32, (k1 + 0xBB67AE85) % 2**32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 % 2**32, (p0 >> 32) ^ c3 ^ k1, p0 % 2**32
    return c0, c1, c2, c3


def oracle_words(seed: int, position: int, block: int) -> tuple[int, ...]:
    """The block's words in the module's counter layout."""
    counter = (block % 2**32, block >> 32, position % 2**32, (position >> 32) | 0x80000000)
    return oracle_philox(counter, (seed % 2**32, seed >> 32))


def bits53(a: int, b: int) -> int:
    return (a >> 5) * 2**26 + (b >> 6)


# Random123 tests/kat_vectors, lines 24-29 (github.com/DEShawResearch/random123 at commit
# 9545ff6413f258be2f04c1d319d99aaef7521150): name, rounds, counter (4), key (2), expected (4).
KAT_VECTORS = """
philox4x32 7 00000000 00000000 00000000 00000000 00000000 00000000   5f6fb709 0d893f64 4f121f81 4f730a48
philox4x32 7 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   5207ddc2 45165e59 4d8ee751 8c52f662
philox4x32 7 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   4dfccaba 190a87f0 c47362ba b6b5242a
philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000   6627e8d5 e169c58d bc57ac4c 9b00dbd8
philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   408f276d 41c83b0e a20bc7c6 6d5451fd
philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   d16cfe09 94fdcceb 5001e420 24126ea1
"""  # noqa: E501
KAT = [
    (int(r), tuple(int(w, 16) for w in ws[:4]), tuple(int(w, 16) for w in ws[4:6]),
     tuple(int(w, 16) for w in ws[6:]))
    for _, r, *ws in (line.split() for line in KAT_VECTORS.strip().splitlines())
]  # fmt: skip


@pytest.mark.parametrize(("rounds", "counter", "key", "expected"), KAT)
def test_known_answers(
    rounds: int, counter: tuple[int, ...], key: tuple[int, int], expected: tuple[int, ...]
) -> None:
    assert oracle_philox(counter, key, rounds) == expected
    if rounds == 10:
        c0, c1, c2, c3 = (torch.tensor([v]) for v in counter)
        got = philox.philox4x32_10(c0, c1, c2, c3, *key)
        assert tuple(int(w) for w in got) == expected


word = st.integers(0, 2**32 - 1)


@settings(max_examples=40, deadline=None)
@given(
    counters=st.lists(st.tuples(word, word, word, word), min_size=1, max_size=6),
    key=st.tuples(word, word),
)
def test_the_tensor_code_equals_the_oracle(
    counters: list[tuple[int, int, int, int]], key: tuple[int, int]
) -> None:
    c0, c1, c2, c3 = (torch.tensor(column) for column in zip(*counters, strict=True))
    got = philox.philox4x32_10(c0, c1, c2, c3, *key)
    for i, counter in enumerate(counters):
        assert tuple(int(w[i]) for w in got) == oracle_philox(counter, key)
    # the inputs are left alone, and a scalar word broadcasts
    assert c0.tolist() == [c[0] for c in counters]
    again = philox.philox4x32_10(c0, c1, c2, torch.tensor(counters[0][3]), *key)
    assert tuple(int(w[0]) for w in again) == oracle_philox(counters[0], key)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**64 - 1),
    position=st.integers(0, 2**63 - 1),
    blocks=st.lists(st.integers(0, 2**62), min_size=1, max_size=5),
)
def test_the_counter_layout(seed: int, position: int, blocks: list[int]) -> None:
    got = philox.block_words(seed, position, torch.tensor(blocks))
    for i, block in enumerate(blocks):
        assert tuple(int(w[i]) for w in got) == oracle_words(seed, position, block)


# -- the bit-to-float mapping, element by element, against the independent reference ------

SEED, POSITION = 2**63 + 12345, 2**33 + 4096
ELEMENTS = [0, 1, 2, 3, 4, 5, 6, 7, 1_000_003, 2**40 + 6, 2**40 + 7, 2**61 + 5]
_INT_OF = {torch.float32: torch.int32, torch.float64: torch.int64}


def value_bits(values: torch.Tensor) -> list[int]:
    """Each value's bit pattern as a non-negative int."""
    width = values.element_size() * 8
    ints = values.view(_INT_OF.get(values.dtype, torch.int16)).to(torch.int64).tolist()
    return [v & ((1 << width) - 1) for v in ints]


@settings(max_examples=60, deadline=None)
@given(
    case=op_cases(("uniform", "normal", "trunc_normal")),
    seed=st.integers(0, 2**64 - 1),
    position=st.integers(0, 2**63 - 1),
    elements=st.lists(st.integers(0, 2**61), min_size=1, max_size=6),
)
def test_every_value_is_the_independent_references(
    case: tuple[str, torch.dtype, dict[str, float]],
    seed: int,
    position: int,
    elements: list[int],
) -> None:
    """Any op, dtype, parameters, seed, position and element: the values hwrng draws are those of
    ``hwrng_conformance.invariant_reference`` (Python ints and NumPy float32 scalars, written
    from the contract in docs/invariant.md), bit for bit."""
    op, dtype, parameters = case
    try:
        got = getattr(philox, op)(seed, position, torch.tensor(elements), dtype, **parameters)
    except hwrng.InvalidValueError:  # e.g. no float16 value inside [a, b]
        assume(False)
    element = getattr(reference, op)
    with np.errstate(all="ignore"):
        expected = [element(seed, position, e, FLOAT_NAMES[dtype], **parameters) for e in elements]
    assert value_bits(got) == expected


@pytest.mark.parametrize("dtype", list(FLOAT_NAMES))
@pytest.mark.parametrize(("low", "high"), [(0.0, 1.0), (-1.5, 2.25), (0.1, 0.7)])
def test_uniform_stays_inside_the_interval(dtype: torch.dtype, low: float, high: float) -> None:
    got = philox.uniform(SEED, POSITION, torch.tensor(ELEMENTS), dtype, low=low, high=high)
    assert bool((got.double() >= low).all() and (got.double() < high).all())


def test_uniform_never_reaches_high() -> None:
    # [1, 1 + 2**-23): half the float64 values round up to 1 + 2**-23 in float32
    index = torch.arange(4096)
    values = philox.uniform(1, 0, index, torch.float32, low=1.0, high=1.0 + 2**-23)
    assert bool((values == 1.0).all())
    values = philox.uniform(1, 0, index, torch.bfloat16, low=0.1, high=0.2)
    assert bool((values.double() >= 0.1).all() and (values.double() < 0.2).all())
    assert philox.uniform(1, 0, index, torch.float16, low=2.0, high=2.0).eq(2.0).all()


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 2**-32, 1 - 2**-33, 1.0])
def test_bernoulli_mapping(p: float) -> None:
    index = torch.tensor(ELEMENTS)
    got = philox.bernoulli_mask(SEED, POSITION, index, p)
    threshold = min(round(p * 2**32), 2**32)
    expected = [oracle_words(SEED, POSITION, e // 4)[e % 4] < threshold for e in ELEMENTS]
    assert got.tolist() == expected
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        probabilities = torch.full(index.shape, p, dtype=dtype)
        if float(probabilities[0]) == p:  # p itself, not a rounding of it
            assert philox.bernoulli_mask(SEED, POSITION, index, probabilities).tolist() == expected


# -- placement invariance at the kernel ----------------------------------------------------


@contextmanager
def chunk_size(blocks: int) -> Iterator[None]:
    """Batches of ``blocks`` Philox blocks (values must not depend on it)."""
    saved = generic_path._CPU_BLOCKS
    generic_path._CPU_BLOCKS = blocks
    try:
        yield
    finally:
        generic_path._CPU_BLOCKS = saved


@st.composite
def dim_slices(draw: st.DrawFn, size: int) -> list[int]:
    """Global positions along one dim: a range, several ranges (a strided shard), any subset."""
    kind = draw(st.sampled_from(["all", "range", "ranges", "subset", "shuffled"]))
    if kind == "all":
        return list(range(size))
    if kind == "range":
        start = draw(st.integers(0, size - 1))
        return list(range(start, draw(st.integers(start + 1, size))))
    if kind == "ranges":
        pieces = draw(st.integers(1, 3))
        bounds = sorted(
            draw(st.lists(st.integers(0, size), min_size=2 * pieces, max_size=2 * pieces))
        )
        picked = [
            i for lo, hi in zip(bounds[::2], bounds[1::2], strict=True) for i in range(lo, hi)
        ]
        return picked or [0]
    subset = sorted(draw(st.sets(st.integers(0, size - 1), min_size=1)))
    return draw(st.permutations(subset)) if kind == "shuffled" else subset


FILLS: list[Callable[[int, torch.Tensor], torch.Tensor]] = [
    lambda s, i: philox.uniform(s, 64, i, torch.float32),
    lambda s, i: philox.uniform(s, 64, i, torch.bfloat16, low=-2.0, high=0.5),
    lambda s, i: philox.uniform(s, 64, i, torch.float64, low=-3.0, high=5.0),
    lambda s, i: philox.normal(s, 64, i, torch.float32, mean=1.0, std=2.0),
    lambda s, i: philox.normal(s, 64, i, torch.float64),
    lambda s, i: philox.bernoulli_mask(s, 64, i, 0.4),
    lambda s, i: philox.trunc_normal(s, 64, i, torch.float16, a=-1.0, b=2.0),
]


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    data=st.data(),
    seed=st.integers(0, 2**64 - 1),
    chunk=st.sampled_from([1 << 17, 1, 5, 16]),
)
def test_a_shard_draws_the_shard_of_the_whole(
    shape: list[int], data: st.DataObject, seed: int, chunk: int
) -> None:
    picks = [torch.tensor(data.draw(dim_slices(n))) for n in shape]
    part = philox.flat_index(picks, shape)
    assert part.shape == tuple(len(p) for p in picks)
    whole_index = torch.arange(math.prod(shape)).reshape(shape)
    assert torch.equal(part, whole_index[torch.meshgrid(*picks, indexing="ij")])
    fill = data.draw(st.sampled_from(FILLS))
    whole = fill(seed, whole_index)
    with chunk_size(chunk):
        shard = fill(seed, part)
        described = fill(seed, philox.ShardIndices(tuple(picks), tuple(shape)))  # type: ignore[arg-type]
    expected = whole[torch.meshgrid(*picks, indexing="ij")]
    assert torch.equal(shard, expected)
    assert torch.equal(described, expected)


def test_chunks_and_index_order_do_not_change_values() -> None:
    index = torch.arange(10**6 - 37, 10**6 + 1000)
    for fill in FILLS:
        whole = fill(3, index)
        for blocks in (1, 7, 64):
            with chunk_size(blocks):
                assert torch.equal(fill(3, index), whole)
        order = torch.randperm(index.numel(), generator=torch.Generator().manual_seed(0))
        assert torch.equal(fill(3, index[order]), whole[order])
        assert torch.equal(fill(3, index.to(torch.int32)), whole)


def test_flat_index() -> None:
    dims = [torch.tensor([2, 0]), torch.tensor([1]), torch.tensor([3, 4, 0])]
    got = philox.flat_index(dims, (3, 2, 5))
    assert got.tolist() == [[[28, 29, 25]], [[8, 9, 5]]]
    assert philox.flat_index([], ()).tolist() == 0
    assert philox.flat_index(
        [torch.tensor([], dtype=torch.int64), torch.arange(3)], (4, 3)
    ).shape == (0, 3)
    with pytest.raises(ValueError, match="lie in"):
        philox.flat_index([torch.tensor([3])], (3,))
    with pytest.raises(ValueError, match="index vectors"):
        philox.flat_index([torch.tensor([0])], (3, 1))
    with pytest.raises(TypeError, match="integer"):
        philox.flat_index([torch.tensor([0.0])], (3,))


# -- distributions: a wrong bit mapping fails these ----------------------------------------

N = 2**16
# sqrt(n) * D exceeds 2.23 with probability 2 * sum_k (-1)**(k-1) exp(-2 k**2 c**2) ~ 1e-4
# for a sample of the right distribution (Kolmogorov); the inputs are fixed, so each check
# is deterministic, and would fail about once in 10**4 seeds if the generator were perfect.
KS_BOUND = 2.23 / math.sqrt(N)
SIGMAS = 5.0  # mean and variance checks: false failure below 1e-6 each


def ks_statistic(samples: torch.Tensor, cdf: Callable[[torch.Tensor], torch.Tensor]) -> float:
    """The Kolmogorov-Smirnov statistic of ``samples`` against the exact CDF ``cdf``."""
    x = torch.sort(samples.double().reshape(-1)).values
    n = x.numel()
    f = cdf(x)
    above = torch.arange(1, n + 1, dtype=torch.float64) / n - f
    below = f - torch.arange(0, n, dtype=torch.float64) / n
    return max(above.max().item(), below.max().item())


def normal_cdf(x: torch.Tensor) -> torch.Tensor:
    return torch.special.ndtr(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_uniform_distribution(dtype: torch.dtype) -> None:
    low, high = -1.0, 3.0
    values = philox.uniform(99, 4, torch.arange(N), dtype, low=low, high=high).double()
    assert bool((values >= low).all() and (values < high).all())
    sd = (high - low) / math.sqrt(12)
    assert abs(values.mean().item() - 1.0) < SIGMAS * sd / math.sqrt(N)
    # the sample variance's standard error is sqrt((mu4 - sd**4) / n), mu4 = 9 sd**4 / 5
    assert abs(values.var().item() - sd**2) < SIGMAS * sd**2 * math.sqrt(0.8 / N)
    # a dtype with m bits puts the mass on a grid of (high - low) * 2**-m
    step = (high - low) * 2.0 ** -{torch.float16: 11, torch.bfloat16: 8}.get(dtype, 24)
    assert ks_statistic(values, lambda x: (x - low) / (high - low)) < KS_BOUND + step / (high - low)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_normal_distribution(dtype: torch.dtype) -> None:
    mean, std = 2.0, 3.0
    values = philox.normal(7, 128, torch.arange(N), dtype, mean=mean, std=std).double()
    assert abs(values.mean().item() - mean) < SIGMAS * std / math.sqrt(N)
    assert abs(values.var().item() / std**2 - 1) < SIGMAS * math.sqrt(2 / N)
    rounding = 2.0**-8 if dtype == torch.bfloat16 else 0.0  # bf16 moves values by < 2**-9 rel
    assert ks_statistic((values - mean) / std, normal_cdf) < KS_BOUND + rounding
    z = (values - mean) / std
    # the two halves of a Box-Muller pair, and neighbouring pairs, are uncorrelated
    for lag in (1, 2, 4):
        r = torch.corrcoef(torch.stack([z[:-lag], z[lag:]]))[0, 1].item()
        assert abs(r) < SIGMAS / math.sqrt(N), lag
    # and every 4th sample is normal (a wrong lane choice would repeat or skew one lane)
    for lane in range(4):
        assert ks_statistic(z[lane::4], normal_cdf) < 2.23 / math.sqrt(N / 4)


def test_tails_of_the_normal() -> None:
    z = philox.normal(11, 0, torch.arange(2**18), torch.float32).double()
    # P(|z| > 3) = 2.70e-3 and P(|z| > 4) = 6.33e-5: counts within 5 sigma (Poisson)
    for threshold, p in ((3.0, 2.6998e-3), (4.0, 6.3342e-5)):
        expected = p * z.numel()
        count = int((z.abs() > threshold).sum())
        assert abs(count - expected) < SIGMAS * math.sqrt(expected) + 1, threshold


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_bernoulli_rate(p: float) -> None:
    mask = philox.bernoulli_mask(5, 8, torch.arange(N), p)
    assert abs(mask.double().mean().item() - p) < SIGMAS * math.sqrt(p * (1 - p) / N)
    for lane in range(4):
        rate = mask[lane::4].double().mean().item()
        assert abs(rate - p) < SIGMAS * math.sqrt(p * (1 - p) / (N / 4))


def test_bernoulli_edges_and_per_element_probabilities() -> None:
    index = torch.arange(N).reshape(256, 256)
    assert not philox.bernoulli_mask(5, 8, index, 0.0).any()
    assert philox.bernoulli_mask(5, 8, index, 1.0).all()
    rows = torch.linspace(0, 1, 256).reshape(256, 1)
    mask = philox.bernoulli_mask(5, 8, index, rows)
    assert not mask[0].any() and mask[-1].all()
    rates = mask.double().mean(dim=1)
    assert abs(rates.mean().item() - 0.5) < SIGMAS * math.sqrt(0.25 / N)
    columns = philox.bernoulli_mask(5, 8, index, torch.full((256,), 0.25, dtype=torch.bfloat16))
    assert torch.equal(columns, philox.bernoulli_mask(5, 8, index, 0.25))


@pytest.mark.parametrize(
    ("mean", "std", "a", "b", "dtype"),
    [
        (0.0, 1.0, -2.0, 2.0, torch.float32),
        (0.0, 1.0, -0.5, 2.0, torch.float64),
        (1.0, 0.02, 0.99, 1.1, torch.float32),
        (0.0, 1.0, 3.0, 6.0, torch.float64),  # far tail: the mirrored lower tail
        (0.0, 1.0, -9.0, -7.5, torch.float64),
    ],
)
def test_trunc_normal_distribution(
    mean: float, std: float, a: float, b: float, dtype: torch.dtype
) -> None:
    values = philox.trunc_normal(
        3, 0, torch.arange(N), dtype, mean=mean, std=std, a=a, b=b
    ).double()
    assert bool((values >= a).all() and (values <= b).all())
    nd = statistics.NormalDist()
    alpha, beta = (a - mean) / std, (b - mean) / std
    mass = philox_math.phi_interval(alpha, beta)[1]
    t_mean = mean + std * (nd.pdf(alpha) - nd.pdf(beta)) / mass
    t_var = std**2 * (
        1
        + (alpha * nd.pdf(alpha) - beta * nd.pdf(beta)) / mass
        - ((nd.pdf(alpha) - nd.pdf(beta)) / mass) ** 2
    )
    assert abs(values.mean().item() - t_mean) < SIGMAS * math.sqrt(t_var / N)

    # the CDF from the tail that keeps its relative precision (ndtr near 1 does not)
    if alpha + beta > 0:
        top = philox_math.phi(-alpha)

        def cdf(x: torch.Tensor) -> torch.Tensor:
            return (top - normal_cdf((mean - x) / std)) / mass
    else:
        bottom = philox_math.phi(alpha)

        def cdf(x: torch.Tensor) -> torch.Tensor:
            return (normal_cdf((x - mean) / std) - bottom) / mass

    # float32 rounding moves a value by < 6e-8 relative: the CDF by < 1e-5 here
    slack = 1e-5 if dtype == torch.float32 else 0.0
    assert ks_statistic(values, cdf) < KS_BOUND + slack


# -- the elementary functions, against Python's math module --------------------------------


def test_ln_is_within_one_ulp_of_math_log() -> None:
    rng = np.random.default_rng(1)
    # measured: at most 1 ulp from math.log (within 0.74 ulp of the exact value, mpmath)
    x = np.concatenate(
        [
            rng.random(20_000),
            np.ldexp(rng.random(20_000) + 0.5, rng.integers(-1074, 1024, 20_000)),
            1 - np.arange(1, 500) * 2.0**-53,
            1 + np.arange(1, 500) * 2.0**-52,
            [5e-324, 2.0**-1022, 2.0**-1022 * (1 - 2**-52), 1.0, 2.0, 0.5, 1.7976931348623157e308],
        ]
    )
    x = x[x > 0]
    got = philox_math.ln(torch.from_numpy(x)).numpy()
    exact = np.array([math.log(v) for v in x])
    ulps = np.abs(got - exact) / np.array([math.ulp(v) for v in exact])
    assert ulps.max() <= 1.0
    assert philox_math.ln(torch.tensor([1.0], dtype=torch.float64)).item() == 0.0


@pytest.mark.parametrize("bits", [32, 53])
def test_sincos_of_turns(bits: int) -> None:
    rng = np.random.default_rng(2)
    # measured: within 3.4e-16 of math on the octant-reduced angle (2.9e-16 of the exact value)
    k = np.concatenate([
        rng.integers(0, 2**bits, 20_000, dtype=np.int64),
        np.array([0, 1, 2 ** (bits - 3), 2 ** (bits - 2), 2 ** (bits - 1), 3 * 2 ** (bits - 2),
                  2**bits - 1], dtype=np.int64),
    ])  # fmt: skip
    sin, cos = philox_math.sincos_turns(torch.from_numpy(k), bits)
    quarter = 2 ** (bits - 2)
    for kk, s, c in zip(k.tolist(), sin.tolist(), cos.tolist(), strict=True):
        q, r = divmod(kk, quarter)
        t = r / quarter
        near = (math.sin(math.pi / 2 * t), math.cos(math.pi / 2 * t)) if t <= 0.5 else (
            math.cos(math.pi / 2 * (1 - t)), math.sin(math.pi / 2 * (1 - t)))  # fmt: skip
        sn, cs = [near, (near[1], -near[0]), (-near[0], -near[1]), (-near[1], near[0])][q]
        assert abs(s - sn) <= 4.5e-16 and abs(c - cs) <= 4.5e-16, kk
    # exact at the quadrant points
    sin, cos = philox_math.sincos_turns(torch.tensor([0, quarter, 2 * quarter, 3 * quarter]), bits)
    assert sin.abs().tolist()[::2] == [0.0, 0.0] and cos.abs().tolist()[1::2] == [0.0, 0.0]


def test_inverse_normal_cdf() -> None:
    rng = np.random.default_rng(3)
    # measured: within 9.2e-16 relative of statistics.NormalDist.inv_cdf (AS241 in Python
    # floats) and within 7.6e-16 of the exact value (mpmath), subnormal tails included
    p = np.concatenate(
        [
            rng.random(20_000),
            np.ldexp(rng.random(5_000) + 0.5, -rng.integers(2, 1070, 5_000)),
            1 - np.ldexp(rng.random(2_000) + 0.5, -rng.integers(2, 52, 2_000)),
            [0.075, 0.925, 0.5 + 2**-30, 1e-300, 1e-310],
        ]
    )
    p = p[(p > 0) & (p < 1) & (p != 0.5)]
    got = philox_math.ndtri(torch.from_numpy(p)).numpy()
    nd = statistics.NormalDist()
    exact = np.array([nd.inv_cdf(v) for v in p])
    assert (np.abs(got - exact) / np.abs(exact)).max() < 2e-15
    edges = philox_math.ndtri(torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)).tolist()
    assert edges[1] == 0.0 and -38.5 < edges[0] < -38 and 8 < edges[2] < 38.5


def test_the_normal_cdf_is_exact() -> None:
    rng = np.random.default_rng(4)
    # correctly rounded values (mpmath, 50 digits)
    assert philox_math.phi(-1.0) == 0.15865525393145705
    assert philox_math.phi(-3.0) == 0.0013498980316300946
    assert philox_math.phi(-10.0) == 7.619853024160525e-24
    assert philox_math.phi(-37.5) == 4.605353009581955e-308
    assert philox_math.phi(0.5) == 0.6914624612740131
    assert philox_math.phi(0.0) == 0.5
    assert philox_math.phi(-50.0) == 0.0 and philox_math.phi(50.0) == 1.0
    # and close to math's erfc (whose argument -x / sqrt(2) is itself rounded)
    for x in rng.uniform(-8, 8, 300).tolist():
        assert philox_math.phi(x) == pytest.approx(0.5 * math.erfc(-x / math.sqrt(2)), rel=2e-14)


# -- determinism, shapes, devices, arguments -----------------------------------------------


def test_determinism_and_distinctness() -> None:
    index = torch.arange(256).reshape(16, 16)
    for fill in (philox.uniform, philox.normal):
        a = fill(1, 8, index, torch.float32)
        assert a.shape == (16, 16) and a.dtype == torch.float32
        assert torch.equal(a, fill(1, 8, index, torch.float32))
        assert not torch.equal(a, fill(1, 12, index, torch.float32)), "another position"
        assert not torch.equal(a, fill(2, 8, index, torch.float32)), "another seed"
        assert not torch.equal(a, fill(2**32 + 1, 8, index, torch.float32)), "the seed's high word"
        assert not torch.equal(a, fill(1, 8 + 2**32, index, torch.float32)), "position's high word"
    # neighbouring positions draw unrelated numbers, not shifted copies
    a = philox.uniform(1, 0, torch.arange(64), torch.float32)
    b = philox.uniform(1, 4, torch.arange(64), torch.float32)
    assert not any(torch.equal(a[k:], b[: 64 - k]) for k in range(0, 16))


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 5, 2)])
def test_empty_and_scalar_indices(shape: tuple[int, ...]) -> None:
    empty = torch.empty(shape, dtype=torch.int64)
    assert philox.uniform(1, 0, empty, torch.float16).shape == shape
    assert philox.normal(1, 0, empty, torch.float64).shape == shape
    assert philox.bernoulli_mask(1, 0, empty, 0.5).shape == shape
    assert philox.trunc_normal(1, 0, empty, torch.float32).shape == shape
    scalar = philox.uniform(1, 0, torch.tensor(5), torch.float32)
    assert (
        scalar.shape == ()
        and scalar.item() == philox.uniform(1, 0, torch.tensor([5]), torch.float32).item()
    )


def test_extreme_seeds_positions_and_indices() -> None:
    index = torch.tensor([0, 2**62, 2**63 - 1])
    for seed, position in ((0, 0), (2**64 - 1, 2**63 - 1)):
        values = philox.uniform(seed, position, index, torch.float64).tolist()
        for e, value in zip(index.tolist(), values, strict=True):
            w = oracle_words(seed, position, e // 2)
            assert value == bits53(w[2 * (e % 2)], w[2 * (e % 2) + 1]) * 2.0**-53


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: philox.uniform(-1, 0, torch.arange(2), torch.float32), ValueError),
        (lambda: philox.uniform(2**64, 0, torch.arange(2), torch.float32), ValueError),
        (lambda: philox.uniform(1, 2**63, torch.arange(2), torch.float32), ValueError),
        (lambda: philox.uniform(1.5, 0, torch.arange(2), torch.float32), TypeError),
        (lambda: philox.uniform(1, 0, torch.arange(2), torch.int32), TypeError),
        (lambda: philox.uniform(1, 0, torch.arange(2.0), torch.float32), TypeError),
        (lambda: philox.uniform(1, 0, torch.tensor([-1, 2]), torch.float32), ValueError),
        (lambda: philox.uniform(1, 0, torch.tensor([2, -1, 7]), torch.float32), ValueError),
        (lambda: philox.uniform(1, 0, torch.arange(2), torch.float32, low=2, high=1), ValueError),
        (lambda: philox.uniform(1, 0, torch.arange(2), torch.float32, high=math.inf), ValueError),
        (lambda: philox.uniform(1, 0, torch.arange(2), torch.float16, high=1e5), ValueError),
        (lambda: philox.normal(1, 0, torch.arange(2), torch.float32, std=-1), ValueError),
        (lambda: philox.normal(1, 0, torch.arange(2), torch.float32, mean=math.nan), ValueError),
        (lambda: philox.bernoulli_mask(1, 0, torch.arange(2), 1.5), ValueError),
        (
            lambda: philox.bernoulli_mask(1, 0, torch.arange(2), torch.tensor([0.5, -0.1])),
            ValueError,
        ),
        (lambda: philox.bernoulli_mask(1, 0, torch.arange(2), torch.tensor([1, 0])), TypeError),
        (lambda: philox.bernoulli_mask(1, 0, torch.arange(2), torch.rand(3)), ValueError),
        (lambda: philox.trunc_normal(1, 0, torch.arange(2), torch.float32, a=1, b=0), ValueError),
        (lambda: philox.trunc_normal(1, 0, torch.arange(2), torch.float32, std=0), ValueError),
        (
            lambda: philox.philox4x32_10(*[torch.zeros(1, dtype=torch.int64)] * 4, 2**32, 0),
            ValueError,
        ),
        (lambda: philox.block_words(1, 0, torch.tensor([-4])), ValueError),
    ],
)
def test_bad_arguments(call: Callable[[], object], error: type[Exception]) -> None:
    with pytest.raises(error):
        call()


@pytest.mark.parametrize("module", ["_bits", "_index", "_choose"])
def test_the_docstring_examples(module: str) -> None:
    failed, attempted = doctest.testmod(
        importlib.import_module(f"hwrng._philox.{module}"), optionflags=doctest.ELLIPSIS
    )
    assert attempted > 0 and failed == 0


@pytest.mark.parametrize("columns", [2**14, 100])
def test_a_shard_of_long_or_short_runs_draws_the_shard_of_the_whole(columns: int) -> None:
    """Rows of a wide shard are long runs, drawn one by one; a narrow shard's many short runs
    are drawn as one index set: either way the values of those elements."""
    shape = (5, 2 * columns)
    dims = (torch.tensor([0, 2, 3, 4]), torch.arange(columns // 2, columns // 2 + columns))
    index = philox.flat_index(list(dims), shape)
    for draw in FILLS:
        with chunk_size(1024):
            assert torch.equal(draw(7, philox.ShardIndices(dims, shape)), draw(7, index))  # type: ignore[arg-type]

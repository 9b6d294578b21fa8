"""The placement-invariant generator: Philox4x32-10 against known answers and an independent
scalar oracle, the bit-to-float mapping, slicing invariance, distributions and accuracy."""

from __future__ import annotations

import importlib.util
import math
import statistics
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hwrng import _philox as philox

# Random123's kat_vectors (philox4x32 10), as copied into DEShawResearch/fs123
# core123/ut/ut_philox.cpp: counter, key -> output.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


def _scalar_philox(counter: tuple[int, ...], key: tuple[int, int]) -> tuple[int, ...]:
    """Philox4x32-10 for one counter, from the paper: an oracle independent of the tensor code."""
    c = list(counter)
    k0, k1 = key
    for round_ in range(10):
        if round_:
            k0, k1 = (k0 + 0x9E3779B9) % 2**32, (k1 + 0xBB67AE85) % 2**32
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 % 2**32, (p0 >> 32) ^ c[3] ^ k1, p0 % 2**32]
    return tuple(c)


@pytest.mark.parametrize(("counter", "key", "expected"), KAT)
def test_known_answers(
    counter: tuple[int, ...], key: tuple[int, int], expected: tuple[int, ...]
) -> None:
    tensors = tuple(torch.tensor([v], dtype=torch.int64) for v in counter)
    got = philox.philox4x32_10(tensors, key)  # type: ignore[arg-type]
    assert tuple(int(w) for w in got) == expected
    assert _scalar_philox(counter, key) == expected


words = st.integers(0, 2**32 - 1)


@settings(max_examples=60, deadline=None)
@given(
    counters=st.lists(st.tuples(words, words, words, words), min_size=1, max_size=8),
    key=st.tuples(words, words),
)
def test_tensor_code_equals_the_scalar_oracle(
    counters: list[tuple[int, int, int, int]], key: tuple[int, int]
) -> None:
    columns = tuple(
        torch.tensor(column, dtype=torch.int64) for column in zip(*counters, strict=True)
    )
    got = philox.philox4x32_10(columns, key)  # type: ignore[arg-type]
    for i, counter in enumerate(counters):
        assert tuple(int(w[i]) for w in got) == _scalar_philox(counter, key)


def _oracle_word(seed: int, position: int, block: int, lane: int) -> int:
    counter = (block % 2**32, block >> 32, position % 2**32, (position >> 32) | 0x80000000)
    return _scalar_philox(counter, (seed % 2**32, seed >> 32))[lane]


@pytest.mark.parametrize("element", [0, 1, 2, 3, 4, 5, 1_000_003, 2**40 + 7])
def test_the_bit_to_float_mapping(element: int) -> None:
    seed, position = 2**63 + 12345, 4096
    index = torch.tensor([element])
    word = _oracle_word(seed, position, element // 4, element % 4)
    assert philox.uniform(seed, position, index, torch.float32).item() == (word >> 8) * 2.0**-24
    assert philox.uniform(seed, position, index, torch.bfloat16).item() == (word >> 24) * 2.0**-8
    assert philox.uniform(seed, position, index, torch.float16).item() == (word >> 21) * 2.0**-11
    w0 = _oracle_word(seed, position, element // 2, 2 * (element % 2))
    w1 = _oracle_word(seed, position, element // 2, 2 * (element % 2) + 1)
    expected64 = ((w0 >> 5) * 2**26 + (w1 >> 6)) * 2.0**-53
    assert philox.uniform(seed, position, index, torch.float64).item() == expected64
    assert philox.bernoulli_mask(seed, position, index, 0.3).item() == (word < round(0.3 * 2**32))
    trig = math.cos if element % 2 == 0 else math.sin
    pair = (element % 4) // 2 * 2
    u1 = ((_oracle_word(seed, position, element // 4, pair) >> 8) + 1) * 2.0**-24
    u2 = (_oracle_word(seed, position, element // 4, pair + 1) >> 8) * 2.0**-24
    z = math.sqrt(-2 * math.log(u1)) * trig(2 * math.pi * u2)
    assert philox.normal(seed, position, index, torch.float32).item() == pytest.approx(z, rel=1e-6)
    block = [_oracle_word(seed, position, element // 2, lane) for lane in range(4)]
    u1 = 1 - ((block[0] >> 5) * 2**26 + (block[1] >> 6)) * 2.0**-53
    u2 = ((block[2] >> 5) * 2**26 + (block[3] >> 6)) * 2.0**-53
    z = math.sqrt(-2 * math.log(u1)) * trig(2 * math.pi * u2)
    assert philox.normal(seed, position, index, torch.float64).item() == pytest.approx(z, rel=1e-13)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 7), min_size=1, max_size=3),
    data=st.data(),
    seed=st.integers(0, 2**64 - 1),
)
def test_a_slice_draws_the_slice_of_the_whole(
    shape: list[int], data: st.DataObject, seed: int
) -> None:
    """Placement invariance at the kernel: a shard's values are the shard of the full tensor's."""
    full_index = torch.arange(math.prod(shape)).reshape(shape)
    picks = [
        torch.tensor(sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1)))) for n in shape
    ]
    part_index = philox.flat_index(picks, shape)
    for fill in (
        lambda i: philox.uniform(seed, 64, i, torch.float32),
        lambda i: philox.uniform(seed, 64, i, torch.float64, low=-3, high=5),
        lambda i: philox.normal(seed, 64, i, torch.float32, mean=1, std=2),
        lambda i: philox.normal(seed, 64, i, torch.float64),
        lambda i: philox.bernoulli_mask(seed, 64, i, 0.4),
        lambda i: philox.trunc_normal(seed, 64, i, torch.float32, a=-1.0, b=2.0),
    ):
        whole = fill(full_index)
        expected = whole[torch.meshgrid(*picks, indexing="ij")]
        assert torch.equal(fill(part_index), expected)


def _ks_statistic(samples: torch.Tensor, cdf: object) -> float:
    values = sorted(samples.double().tolist())
    n = len(values)
    return max(max(abs((i + 1) / n - cdf(v)), abs(i / n - cdf(v))) for i, v in enumerate(values))  # type: ignore[operator]


N = 2**15
# A sample of N from the right distribution has KS statistic above 1.95/sqrt(N) with
# probability ~0.001 (Kolmogorov); the inputs are fixed, so the check is deterministic.
KS_BOUND = 1.95 / math.sqrt(N)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_uniform_distribution(dtype: torch.dtype) -> None:
    values = philox.uniform(99, 0, torch.arange(N), dtype, low=-1.0, high=3.0)
    assert values.dtype == dtype and bool((values >= -1).all()) and bool((values < 3).all())
    assert abs(values.double().mean().item() - 1.0) < 0.03
    assert abs(values.double().var().item() - 16 / 12) < 0.05
    assert _ks_statistic(values, lambda v: (v + 1) / 4) < KS_BOUND + (
        2**-8 if dtype == torch.bfloat16 else 0
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normal_distribution(dtype: torch.dtype) -> None:
    values = philox.normal(7, 128, torch.arange(N), dtype, mean=2.0, std=3.0)
    standard = statistics.NormalDist(2.0, 3.0)
    assert abs(values.double().mean().item() - 2.0) < 0.1
    assert abs(values.double().std().item() - 3.0) < 0.06
    assert _ks_statistic(values, standard.cdf) < KS_BOUND


def test_trunc_normal_stays_in_bounds_with_the_right_mean() -> None:
    a, b = -0.5, 2.0
    values = philox.trunc_normal(3, 0, torch.arange(N), torch.float64, mean=0.0, std=1.0, a=a, b=b)
    assert bool((values >= a).all()) and bool((values <= b).all())
    phi = statistics.NormalDist()
    mass = phi.cdf(b) - phi.cdf(a)
    truncated_mean = (phi.pdf(a) - phi.pdf(b)) / mass
    assert abs(values.mean().item() - truncated_mean) < 0.02
    assert _ks_statistic(values, lambda v: (phi.cdf(v) - phi.cdf(a)) / mass) < KS_BOUND


def test_bernoulli_rate_and_the_edges() -> None:
    index = torch.arange(N)
    assert abs(philox.bernoulli_mask(5, 8, index, 0.3).double().mean().item() - 0.3) < 0.015
    assert not philox.bernoulli_mask(5, 8, index, 0.0).any()
    assert philox.bernoulli_mask(5, 8, index, 1.0).all()
    probabilities = torch.linspace(0, 1, N)
    mask = philox.bernoulli_mask(5, 8, index, probabilities)
    assert abs(mask.double().mean().item() - 0.5) < 0.015 and not mask[0] and mask[-1]


def test_the_elementary_functions_are_accurate() -> None:
    extras = torch.tensor([1e-300, 2.0**-53, 1.0], dtype=torch.float64)
    x = torch.cat([torch.rand(4000, dtype=torch.float64).clamp_min(1e-12), extras])
    ln = philox._ln(x)
    exact = torch.tensor([math.log(v) for v in x.tolist()], dtype=torch.float64)
    assert ((ln - exact).abs() <= exact.abs() * 1e-15 + 1e-300).all()  # 3 ulp measured
    u = torch.rand(4000, dtype=torch.float64)
    sin, cos = philox._sincos_turns(u)
    exact_sin = torch.tensor([math.sin(2 * math.pi * v) for v in u.tolist()], dtype=torch.float64)
    assert (sin - exact_sin).abs().max() < 1e-15
    exact_cos = torch.tensor([math.cos(2 * math.pi * v) for v in u.tolist()], dtype=torch.float64)
    assert (cos - exact_cos).abs().max() < 1e-15
    edges = torch.tensor([1e-12, 0.02425, 1 - 1e-12], dtype=torch.float64)
    p = torch.cat([torch.rand(4000, dtype=torch.float64).clamp(1e-12, 1 - 1e-12), edges])
    inverse = philox._ndtri(p)
    exact = torch.tensor(
        [statistics.NormalDist().inv_cdf(v) for v in p.tolist()], dtype=torch.float64
    )
    assert ((inverse - exact).abs() <= exact.abs() * 1.2e-9 + 1e-12).all()


def test_determinism_and_distinctness() -> None:
    index = torch.arange(64)
    a = philox.uniform(1, 8, index, torch.float32)
    assert torch.equal(a, philox.uniform(1, 8, index, torch.float32))
    assert not torch.equal(a, philox.uniform(1, 12, index, torch.float32)), "another position"
    assert not torch.equal(a, philox.uniform(2, 8, index, torch.float32)), "another seed"
    empty = torch.empty(0, dtype=torch.int64)
    assert philox.uniform(1, 8, empty, torch.float32).shape == (0,)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: philox.uniform(-1, 0, torch.arange(2), torch.float32), ValueError),
        (lambda: philox.uniform(1, 2**63, torch.arange(2), torch.float32), ValueError),
        (lambda: philox.uniform(1, 0, torch.arange(2), torch.int32), TypeError),
        (lambda: philox.uniform(1, 0, torch.arange(2), torch.float32, low=2, high=1), ValueError),
        (lambda: philox.normal(1, 0, torch.arange(2), torch.float32, std=-1), ValueError),
        (lambda: philox.bernoulli_mask(1, 0, torch.arange(2), 1.5), ValueError),
        (lambda: philox.trunc_normal(1, 0, torch.arange(2), torch.float32, a=1, b=0), ValueError),
    ],
)
def test_bad_arguments(call: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        call()  # type: ignore[operator]


FUSED_CHECK = """
import os, torch
os.environ["TRITON_INTERPRET"] = "1"
from hwrng import _philox, _philox_triton as fused
T = torch.tensor
cases = [
    ([T([0, 2, 3]), torch.arange(1, 6)], (4, 7)),
    ([torch.arange(5)], (5,)),
    ([T([1]), T([0, 3]), T([2, 5, 6]), torch.arange(2), T([1, 4])], (2, 4, 7, 3, 5)),
    ([torch.arange(0, 40, 3), T([0, 1, 8, 9])], (41, 10)),
]
seed, position = 2**63 + 5, 4096
for dims, shape in cases:
    index = _philox.flat_index(dims, shape)
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        generic = _philox.uniform(seed, position, index, dtype, low=-1.0, high=2.5)
        fast = fused.uniform(seed, position, dims, shape, dtype, low=-1.0, high=2.5)
        assert torch.equal(generic, fast), (shape, dtype)
    for p in (0.0, 0.3, 1.0):
        generic = _philox.bernoulli_mask(7, 8, index, p)
        assert torch.equal(generic, fused.bernoulli_mask(7, 8, dims, shape, p)), (shape, p)
print("ok")
"""


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None,
    reason="Triton is not installed: the fused CUDA kernel is checked in Triton's interpreter "
    "where it is (and on a GPU, where the CUDA tests run)",
)
def test_the_fused_kernel_equals_the_generic_path() -> None:
    result = subprocess.run(
        [sys.executable, "-c", FUSED_CHECK], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]

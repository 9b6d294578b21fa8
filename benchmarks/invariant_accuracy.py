"""The accuracy of the invariant ops' float32 arithmetic: max ulp error against exact values.

Usage::

    python3 benchmarks/invariant_accuracy.py           # the full measurement (minutes)
    python3 benchmarks/invariant_accuracy.py --quick   # fewer points

Each row is the largest error, in units in the last place of the float32
result, of hwrng's float32 computation (``hwrng._philox._math32`` and the
ops of ``hwrng._philox._distributions``) against the exact value of the same
function at the same float32 input. The exact values are float64 evaluations
of NumPy's and SciPy's functions (within about 1e-15 relative of the truth,
below 2**-26 float32 ulp: negligible here); the worst case of each row is
recomputed with mpmath at 40 digits when mpmath is installed. Inputs: every
float32 where the domain allows (``sqrt`` on ``[1, 4)``, whose error repeats
with the exponent; ``sin``/``cos`` on all 2**24 angles; ``ln`` on every
float32 of ``[2**-32, 1]`` in full mode), else the values the ops draw.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

from hwrng import _philox as philox
from hwrng._philox import _distributions as generic
from hwrng._philox import _math32 as m32

try:
    from scipy import special
except ImportError:  # pragma: no cover - scipy is optional
    special = None


def ulp32(x: np.ndarray) -> np.ndarray:
    """The float32 ulp at each float64 value (of the float32 nearest it)."""
    return np.spacing(np.abs(x).astype(np.float32)).astype(np.float64)


def worst(got: np.ndarray, exact: np.ndarray) -> tuple[float, int]:
    """The largest error in ulp of ``got`` (float32) against ``exact`` (float64), and where."""
    err = np.abs(got.astype(np.float64) - exact) / ulp32(exact)
    i = int(np.argmax(err))
    return float(err[i]), i


def check_mpmath(label: str, function: object, argument: float, got: float) -> str:
    """The worst case's error against mpmath at 40 digits, if mpmath is installed."""
    try:
        import mpmath
    except ImportError:
        return ""
    mpmath.mp.dps = 40
    exact = float(function(mpmath.mpf(argument)))  # type: ignore[operator]
    ulp = float(np.spacing(np.float32(abs(exact))))
    return f" (mpmath: {abs(got - exact) / ulp:.3f})"


def ln_rows(quick: bool) -> list[tuple[str, float, str]]:
    step = 97 if quick else 1
    lo, hi = 0x2F800000, 0x3F800000  # [2**-32, 1]
    best, where, note = 0.0, 0.0, ""
    for start in range(lo, hi + 1, 1 << 24):
        bits = np.arange(start, min(start + (1 << 24), hi + 1), step, dtype=np.int64)
        x = bits.astype(np.int32).view(np.float32)
        got = m32.ln(torch.from_numpy(x.copy())).numpy()
        e, i = worst(got, np.log(x.astype(np.float64)))
        if e > best:
            best, where, value = e, float(x[i]), float(got[i])
    note = check_mpmath("ln", lambda v: __import__("mpmath").log(v), where, value)
    return [("ln(x), every float32 x in [2**-32, 1]" + (" (1 in 97)" if quick else ""), best, note)]


def sqrt_rows() -> list[tuple[str, float, str]]:
    bits = np.arange(0x3F800000, 0x40800000, dtype=np.int64).astype(np.int32)
    x = bits.view(np.float32)
    got = m32.sqrt(torch.from_numpy(x.copy())).numpy()
    e, i = worst(got, np.sqrt(x.astype(np.float64)))
    note = check_mpmath("sqrt", lambda v: __import__("mpmath").sqrt(v), float(x[i]), float(got[i]))
    return [("sqrt(x), every float32 x in [1, 4) (repeats with the exponent)", e, note)]


def _exact_sincos(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The float64 sine and cosine of 2 pi k / 2**24, from the exact reduction to a quarter turn.

    So the axes are exactly 0 and 1, as they are.
    """
    quadrant, m = k >> 22, k & 0x3FFFFF
    near = np.sin(np.pi / 2 * (m / 2**22))
    far = np.sin(np.pi / 2 * ((2**22 - m) / 2**22))
    sin = np.select([quadrant == 0, quadrant == 1, quadrant == 2], [near, far, -near], -far)
    cos = np.select([quadrant == 0, quadrant == 1, quadrant == 2], [far, -near, -far], near)
    return sin, cos


def sincos_rows() -> list[tuple[str, float, str]]:
    k = np.arange(1 << 24, dtype=np.int64)
    sin, cos = (t.numpy() for t in m32.sincos_turns(torch.from_numpy(k)))
    ref_sin, ref_cos = _exact_sincos(k)
    rows = []
    for name, got, ref in (("sin", sin, ref_sin), ("cos", cos, ref_cos)):
        e, _ = worst(got, ref)
        rows.append((f"{name}(2 pi k / 2**24), all 2**24 k", e, ""))
    return rows


def ndtri_rows(quick: bool) -> list[tuple[str, float, str]]:
    if special is None:
        return [("inverse normal CDF", math.nan, " (scipy not installed)")]
    rng = np.random.default_rng(7)
    n = 1 << (18 if quick else 24)
    central = rng.uniform(0.075, 0.925, n).astype(np.float32)
    tails = np.ldexp(rng.random(n) + 0.5, -rng.integers(4, 126, n)).astype(np.float32)
    q = torch.from_numpy(central.copy()) - 0.5
    got_c = m32.ndtri_central(q).numpy()
    exact_c = special.ndtri(0.5 + q.numpy().astype(np.float64))
    t = m32.sqrt(m32.ln(torch.from_numpy(tails.copy())).neg_())
    got_t = m32.ndtri_tail(t).numpy()
    exact_t = -special.ndtri(tails.astype(np.float64))
    return [
        ("Phi^-1(1/2 + q), |q| <= 0.425 (of the float32 q)", worst(got_c, exact_c)[0], ""),
        ("-Phi^-1(p), p in [2**-126, 0.075) (tail, from float32 p)", worst(got_t, exact_t)[0], ""),
    ]


def op_rows(quick: bool) -> list[tuple[str, float, str]]:
    """The ops' float32 values against the exact transform of the same drawn integers."""
    n = 1 << (20 if quick else 24)
    index = torch.arange(n)
    words = torch.stack(philox.block_words(5, 64, torch.arange(n // 4)), 1).reshape(-1).numpy()
    rows = []
    low, high = -1.5, 2.25
    got = generic.uniform(5, 64, index, torch.float32, low=low, high=high).numpy()
    u = (words >> 8).astype(np.float64) * 2.0**-24
    exact = np.minimum(u * (high - low) + low, np.nextafter(np.float32(high), np.float32(-10)))
    scale = float(np.spacing(np.float32(max(abs(low), abs(high)))))
    absolute = float(np.abs(got.astype(np.float64) - exact).max())
    rows.append(
        (
            f"uniform({low}, {high}) against u (high - low) + low: in ulp of max(|low|, |high|)",
            absolute / scale,
            f" (at most {worst(got, exact)[0]:.0f} ulp of a result near 0)",
        )
    )
    got = generic.normal(5, 64, index, torch.float32).numpy()
    pair = words.reshape(-1, 2)
    a, b = pair[:, 0], pair[:, 1]
    u1 = (a + 1).astype(np.float32).astype(np.float64) * 2.0**-32
    radius = np.sqrt(-2 * np.log(u1))
    sin, cos = _exact_sincos(b >> 8)
    exact = np.stack([radius * cos, radius * sin], 1).reshape(-1)
    rows.append(
        ("normal(0, 1) against sqrt(-2 ln u1) cos/sin(2 pi k / 2**24)", *_worst_abs(got, exact))
    )
    if special is not None:
        for a_, b_ in ((-2.0, 2.0), (3.0, 6.0)):
            got = generic.trunc_normal(5, 64, index, torch.float32, a=a_, b=b_).numpy()
            u = (2 * words + 1).astype(np.float32).astype(np.float64) * 2.0**-33
            lo, hi = special.ndtr(a_), special.ndtr(b_)
            if a_ + b_ > 0:
                lo_m, hi_m = special.ndtr(-b_), special.ndtr(-a_)
                exact = -special.ndtri(lo_m + u * (hi_m - lo_m))
            else:
                exact = special.ndtri(lo + u * (hi - lo))
            away = np.abs(exact) >= 1.0
            absolute = float(np.abs(got.astype(np.float64) - exact).max())
            rows.append(
                (
                    f"trunc_normal(0, 1, {a_}, {b_}) against Phi^-1 of the same u, |x| >= 1",
                    worst(got[away], exact[away])[0],
                    f" (largest absolute error, any x: {absolute:.2e})",
                )
            )
    return rows


def _worst_abs(got: np.ndarray, exact: np.ndarray) -> tuple[float, str]:
    """Normal values near 0 (a cosine near its root): ulp of the result, and absolute error."""
    e, _ = worst(got, exact)
    absolute = float(np.abs(got.astype(np.float64) - exact).max())
    return e, f" (largest absolute error {absolute:.2e})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows = ln_rows(args.quick) + sqrt_rows() + sincos_rows() + ndtri_rows(args.quick)
    rows += op_rows(args.quick)
    print("| function | max error (float32 ulp) |")
    print("| --- | ---: |")
    for name, error, note in rows:
        print(f"| {name} | {error:.3f}{note} |")


if __name__ == "__main__":
    main()

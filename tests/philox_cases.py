"""Hypothesis cases of the Philox ops: an op, a dtype, and parameters the op accepts.

Shared by the tensor ops' tests (``test_philox.py``) and the compiled path's
(``test_philox_compiled.py``), which draw the same kinds of cases.
"""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import assume
from hypothesis import strategies as st

#: the ops' float dtypes, and their names in ``hwrng_conformance.invariant_reference``
FLOAT_NAMES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
}
OPS = ["uniform", "normal", "trunc_normal", "bernoulli", "dropout"]
FINITE = st.floats(-50.0, 50.0, allow_nan=False, allow_infinity=False)


@st.composite
def op_cases(
    draw: st.DrawFn, ops: tuple[str, ...] = tuple(OPS)
) -> tuple[str, torch.dtype, dict[str, Any]]:
    """An op of ``ops``, a dtype and parameters it accepts (within float16's range)."""
    op = draw(st.sampled_from(ops))
    dtype = draw(st.sampled_from(list(FLOAT_NAMES)))
    if op in ("bernoulli", "dropout"):
        p = draw(st.one_of(st.sampled_from([0.5, 2**-32, 1 - 2**-33]), st.floats(0.0, 1.0)))
        assume(0.0 < p < 1.0 or op == "bernoulli")
        return op, dtype, {"p": p}
    if op == "uniform":
        if draw(st.booleans()):
            return op, dtype, {"low": 0.0, "high": 1.0}
        low, high = sorted([draw(FINITE), draw(FINITE)])
        assume(low < high and (high - low) > 1e-3 * max(abs(low), abs(high), 1.0))
        return op, dtype, {"low": low, "high": high}
    mean, std = draw(FINITE), draw(st.floats(1e-3, 20.0))
    if op == "normal":
        return op, dtype, {"mean": mean, "std": std}
    a, b = sorted([mean + std * draw(st.floats(-12, 12)), mean + std * draw(st.floats(-12, 12))])
    assume(b - a > 0.05 * std)
    return op, dtype, {"mean": mean, "std": std, "a": a, "b": b}

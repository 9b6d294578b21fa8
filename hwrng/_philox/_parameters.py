"""Checks of the Philox ops' arguments: seeds, positions, indices, dtypes, parameters.

Every op checks its input here before it computes anything, so the generic
path and the fused kernel refuse the same input with the same error.
"""

from __future__ import annotations

import functools
import math
import operator
import struct
from collections.abc import Callable, Sequence

import torch

from hwrng._exceptions import InvalidArgumentError, InvalidValueError

__all__ = [
    "FLOAT_DTYPES",
    "PRECISION",
    "check_dtype",
    "check_parameters",
    "checked_index",
    "checked_seed_position",
    "checked_word",
    "dropout_parameters",
    "normal_parameters",
    "probabilities_broadcast",
    "probability",
    "trunc_normal_parameters",
    "uniform_parameters",
]

#: precision in bits of the 32-bit-word dtypes (float64 takes 53 bits from two words)
PRECISION = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}
#: the dtypes the ops fill
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def checked_word(name: str, value: int, bound: int) -> int:
    """``value`` as an int once checked to lie in ``[0, bound)``; or raise."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be an int, got a bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{name} must be an int, got {type(value).__name__}") from None
    if not 0 <= value < bound:
        raise InvalidValueError(f"{name} must lie in [0, {bound:#x}), got {value}")
    return value


def checked_seed_position(seed: int, position: int) -> tuple[int, int]:
    """A 64-bit seed and a position in ``[0, 2**63)`` as ints; or raise."""
    return checked_word("seed", seed, 2**64), checked_word("position", position, 2**63)


def checked_index(index: torch.Tensor, name: str = "index") -> torch.Tensor:
    """An integer tensor of indices as int64; or raise."""
    if not isinstance(index, torch.Tensor):
        raise InvalidArgumentError(f"{name} must be a tensor, got {type(index).__name__}")
    if index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
        raise InvalidArgumentError(f"{name} must be an integer tensor, got {index.dtype}")
    return index.to(torch.int64)


def check_dtype(dtype: torch.dtype) -> None:
    """Raise unless ``dtype`` is one the ops fill."""
    if not isinstance(dtype, torch.dtype):
        raise InvalidArgumentError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    if dtype not in FLOAT_DTYPES:
        raise InvalidArgumentError(
            f"dtype must be float32, float64, float16 or bfloat16, got {dtype}"
        )


def _finite_floats(**values: float) -> dict[str, float]:
    checked = {}
    for name, given in values.items():
        if isinstance(given, bool):
            raise InvalidArgumentError(f"{name} must be a real number, got a bool")
        try:
            value = float(given)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"{name} must be a real number, got {given!r}") from None
        if not math.isfinite(value):
            raise InvalidValueError(f"{name} must be finite, got {value}")
        checked[name] = value
    return checked


def _to_dtype(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype`` as the ops round (via float32 for the half types).

    On the host, without a float64 tensor (a float32 result never needs one).
    """
    if dtype == torch.float64:
        return value
    single: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return float(torch.tensor(single, dtype=torch.float32).to(dtype))


def _step(value: float, dtype: torch.dtype, *, up: bool) -> float:
    """The neighbour of ``value`` (a value of ``dtype``) towards +inf (``up``) or -inf."""
    towards = math.inf if up else -math.inf
    if dtype == torch.float64:
        return math.nextafter(value, towards)
    t = torch.tensor(value, dtype=dtype)
    return float(torch.nextafter(t, torch.tensor(towards, dtype=dtype)))


def _dtype_values_within(
    low: float, high: float, dtype: torch.dtype, open_high: bool
) -> tuple[float, float]:
    """The smallest and largest values of ``dtype`` in ``[low, high)`` (or ``[low, high]``).

    Remembered by the bounds' exact bits (``float.hex`` tells -0.0 from 0.0, which
    compare and hash alike): every op computes them on the host, a few tensors each.
    """
    return _dtype_values_within_exact(low.hex(), high.hex(), dtype, open_high)


@functools.lru_cache(maxsize=256)
def _dtype_values_within_exact(
    low_bits: str, high_bits: str, dtype: torch.dtype, open_high: bool
) -> tuple[float, float]:
    low, high = float.fromhex(low_bits), float.fromhex(high_bits)
    lo = _to_dtype(low, dtype)
    if lo < low:
        lo = _step(lo, dtype, up=True)
    hi = _to_dtype(high, dtype)
    if hi > high or (open_high and hi == high):
        hi = _step(hi, dtype, up=False)
    if lo > hi:
        raise InvalidValueError(
            f"no {dtype} value lies in [{low}, {high}{')' if open_high else ']'}"
        )
    return lo, hi


def _check_within_dtype_range(dtype: torch.dtype, **values: float) -> None:
    limit = torch.finfo(dtype).max
    for name, value in values.items():
        if abs(value) > limit:
            raise InvalidValueError(f"{name}={value} is outside the finite range of {dtype}")


def probabilities_broadcast(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Whether a probability tensor of ``shape`` broadcasts to exactly ``target``."""
    if len(shape) > len(target):
        return False
    return all(n in (1, m) for n, m in zip(reversed(shape), reversed(target), strict=False))


def uniform_parameters(
    dtype: torch.dtype, low: float, high: float
) -> tuple[float, float, float, float]:
    """``low``, ``high`` as floats and the dtype's least value >= low and greatest < high."""
    check_dtype(dtype)
    bounds = _finite_floats(low=low, high=high)
    low, high = bounds["low"], bounds["high"]
    if low > high:
        raise InvalidValueError(f"uniform needs low <= high, got low={low}, high={high}")
    _check_within_dtype_range(dtype, low=low, high=high)
    if low == high:
        return low, high, low, high
    if not math.isfinite(high - low):
        raise InvalidValueError(f"high - low overflows float64: low={low}, high={high}")
    lo, hi = _dtype_values_within(low, high, dtype, open_high=True)
    return low, high, lo, hi


def normal_parameters(dtype: torch.dtype, mean: float, std: float) -> tuple[float, float]:
    """``mean`` and ``std`` as floats, once checked (finite, ``std >= 0``); or raise."""
    check_dtype(dtype)
    params = _finite_floats(mean=mean, std=std)
    if params["std"] < 0:
        raise InvalidValueError(f"normal needs std >= 0, got {params['std']}")
    return params["mean"], params["std"]


def probability(p: float | torch.Tensor) -> float:
    """``p`` as a float, or 0.0 for a tensor of probabilities, once checked to lie in [0, 1]."""
    if isinstance(p, torch.Tensor):
        if not p.dtype.is_floating_point:
            raise InvalidArgumentError(
                f"a probability tensor must be floating point, got {p.dtype}"
            )
        if p.numel() and not bool(((p >= 0) & (p <= 1)).all()):
            raise InvalidValueError("probabilities must lie in [0, 1]")
        return 0.0
    value = _finite_floats(p=p)["p"]
    if not 0.0 <= value <= 1.0:
        raise InvalidValueError(f"p must lie in [0, 1], got {value}")
    return value


def _real(name: str, given: float) -> float:
    if isinstance(given, bool):
        raise InvalidArgumentError(f"{name} must be a real number, got a bool")
    try:
        return float(given)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{name} must be a real number, got {given!r}") from None


def dropout_parameters(dtype: torch.dtype, p: float) -> tuple[float, int]:
    """Dropout's scale in ``dtype`` and its Bernoulli threshold for ``0 < p < 1``; or raise.

    The scale is ``1 / (1 - p)`` in float64, rounded to float32, then to the
    dtype (float64: as it is): what multiplying a 0/1 mask of the dtype by the
    Python number gives. The threshold is Bernoulli's of ``f64(1 - p)``.
    """
    check_dtype(dtype)
    value = _finite_floats(p=p)["p"]
    if not 0.0 < value < 1.0:
        raise InvalidValueError(f"dropout draws for 0 < p < 1, got {value}")
    keep = 1.0 - value
    return _to_dtype(1.0 / keep, dtype), round(keep * 2**32)


def trunc_normal_parameters(
    dtype: torch.dtype, mean: float, std: float, a: float, b: float
) -> tuple[float, float, float, float, float, float]:
    """``mean, std, a, b`` as floats and the dtype values nearest inside ``[a, b]``; or raise.

    As ``torch.nn.init.trunc_normal_`` where its result is well defined: ``a``
    may be ``-inf`` and ``b`` ``+inf`` (a bound that does not bound), and
    ``a == b`` (every value is ``a``, which must then be a value of the
    dtype). Refused: ``a > b``, ``a = +inf``, ``b = -inf`` (no value lies
    within; torch raises or fills infinities), NaN, a bound beyond the dtype's
    finite range, non-finite ``mean`` or ``std``, and ``std <= 0`` (torch
    divides by it).
    """
    check_dtype(dtype)
    params = _finite_floats(mean=mean, std=std)
    mean, std = params["mean"], params["std"]
    a, b = _real("a", a), _real("b", b)
    if not std > 0:
        raise InvalidValueError(f"trunc_normal needs std > 0, got {std}")
    if math.isnan(a) or math.isnan(b) or not a <= b or a == math.inf or b == -math.inf:
        raise InvalidValueError(
            f"trunc_normal needs a <= b with a < +inf and b > -inf, got a={a}, b={b}"
        )
    _check_within_dtype_range(dtype, **{k: v for k, v in (("a", a), ("b", b)) if math.isfinite(v)})
    lo, hi = _dtype_values_within(a, b, dtype, open_high=False)
    if a == b and lo != a:
        raise InvalidValueError(f"trunc_normal with a == b needs a value of {dtype}, got {a}")
    return mean, std, a, b, lo, hi


def check_parameters(op: str, dtype: torch.dtype, **parameters: float | torch.Tensor) -> None:
    """Raise what ``op`` (uniform, normal, bernoulli, trunc_normal) would for these parameters.

    Lets a caller refuse bad input before it moves a generator to draw.
    """
    checks: dict[str, Callable[..., object]] = {
        "uniform": uniform_parameters,
        "normal": normal_parameters,
        "trunc_normal": trunc_normal_parameters,
    }
    if op == "bernoulli":
        probability(**parameters)
    elif op in checks:
        checks[op](dtype, **parameters)
    else:
        raise InvalidArgumentError(f"unknown op {op!r}")

"""The Philox ops on the CPU, compiled by numba: the generic path's values, bit for bit, faster.

The generic path (:mod:`hwrng._philox._distributions`) computes each value by
tensor ops, a few hundred passes over a batch; here each value is computed in
registers by a kernel that numba compiles from :mod:`._numba_kernels` (LLVM,
no C compiler at run time), one Philox block for the values it yields, one
thread. Where numba imports and the values live on the CPU, :mod:`._choose`
takes this path; the generic path stays the reference, and the fallback:

* ``HWRNG_INVARIANT_CPU=tensor`` forces the generic path (for debugging, and
  for tests of the reference); ``compiled`` requires this one (an op refuses
  to run without numba); ``auto`` (the default) takes it where numba imports;
* a call this path does not serve -- an output that is not a plain contiguous
  CPU tensor of the values' shape, a dropout input that is not contiguous,
  either requiring grad while grad is enabled, a fake or tracing dispatch
  mode in force (its tensors are not memory), an op with nothing to draw --
  goes to the generic path, which computes (or refuses) it as always.

numba compiles a kernel on its first call in a process, or loads it from its
on-disk cache (``cache=True``: ``__pycache__`` beside the kernels' module, or,
where that is read-only, numba's per-user cache directory; ``NUMBA_CACHE_DIR``
overrides both). Where no directory is writable the kernels compile in every
process (:func:`describe` says so). float16 and bfloat16 values are computed
in float32 and rounded by torch's conversion, as the generic path rounds them.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import torch

from hwrng._exceptions import InvalidValueError
from hwrng._philox import _distributions as generic
from hwrng._philox import _math, _math32
from hwrng._philox._bits import DOMAIN_FLAG, MASK32
from hwrng._philox._index import Indices, ShardIndices, flat_index, index_shape
from hwrng._philox._parameters import (
    PRECISION,
    checked_seed_position,
    normal_parameters,
    probability,
    trunc_normal_parameters,
    uniform_parameters,
)

__all__ = [
    "SETTING",
    "bernoulli_mask",
    "check_setting",
    "describe",
    "dropout",
    "normal",
    "serves",
    "trunc_normal",
    "uniform",
    "why_unavailable",
]

#: the environment variable that picks the CPU path: auto (default), compiled or tensor
SETTING = "HWRNG_INVARIANT_CPU"
_CHOICES = ("auto", "compiled", "tensor")
_INSTALL = "pip install 'hwrng[fast]'"


def check_setting() -> str:
    """The value of :data:`SETTING` (``auto`` when unset); an unknown one is refused.

    Raises
    ------
    InvalidValueError
        For a value other than ``auto``, ``compiled`` and ``tensor``, or for
        ``compiled`` where numba cannot be imported.
    """
    value = os.environ.get(SETTING, "").strip().lower() or "auto"
    if value not in _CHOICES:
        raise InvalidValueError(
            f"{SETTING}={os.environ[SETTING]!r}: the invariant ops' CPU path is one of "
            f"{', '.join(_CHOICES)}"
        )
    if value == "compiled":
        reason = _import_error()
        if reason is not None:
            raise InvalidValueError(
                f"{SETTING}=compiled, but the compiled CPU path cannot run: {reason} ({_INSTALL})"
            )
    return value


@functools.cache
def _kernels_or_error() -> tuple[ModuleType | None, str | None]:
    """The kernels' module once numba imports (compiling nothing yet), or why it does not."""
    if importlib.util.find_spec("numba") is None:
        return None, "numba is not installed"
    try:
        module = importlib.import_module("hwrng._philox._numba_kernels")
    except Exception as error:  # a broken install (numba against another NumPy) is as good as none
        return None, f"numba cannot be imported ({type(error).__name__}: {error})"
    return module, None


def _import_error() -> str | None:
    return _kernels_or_error()[1]


def _kernels() -> Any:
    module, reason = _kernels_or_error()
    assert module is not None, reason
    return module


def why_unavailable(device: torch.device | str | None = None) -> str | None:
    """Why the compiled path does not serve ``device`` (default: the CPU), or None when it does.

    Imports numba the first time it is asked about the CPU (about half a
    second), and so never at ``import hwrng``.
    """
    if check_setting() == "tensor":
        return f"{SETTING}=tensor"
    where = torch.device("cpu" if device is None else device)
    if where.type != "cpu":
        return f"the compiled kernels run on the CPU, not {where.type}"
    return _import_error()


def describe() -> str:
    """Which path the invariant ops take on the CPU, and why, in words (``hwrng backends``).

    Refuses (:class:`~hwrng.InvalidValueError`) an unknown :data:`SETTING`, as an op would.
    """
    setting = check_setting()
    if setting == "tensor":
        return f"tensor ops ({SETTING}=tensor)"
    reason = _import_error()
    if reason is not None:
        return f"tensor ops ({reason}; for the compiled path: {_INSTALL})"
    version = importlib.metadata.version("numba")
    kernels = _kernels()
    if kernels.cache_error is not None:
        return f"compiled with numba {version} (not cached: {kernels.cache_error})"
    return f"compiled with numba {version} (cached in {kernels.cache_dir})"


def serves(index: object) -> bool:
    """Whether this path computes the values of ``index``: on the CPU, with numba, in memory.

    Under a dispatch mode whose tensors are not plain tensors (a fake or
    tracing mode: no memory to write), the generic path serves instead.
    """
    if not isinstance(index, (torch.Tensor, ShardIndices)):
        return False  # the generic path refuses it
    if why_unavailable(index.device) is not None:
        return False
    return not torch._C._len_torch_dispatch_stack() or type(torch.empty(0)) is torch.Tensor


# -- the shard as runs, the output's buffer ----------------------------------------------------


def _runs(index: Indices) -> tuple[np.ndarray[Any, Any], int]:
    """The elements of a checked ``index`` (not empty) as runs: ``(starts, length)``.

    A shard's description gives its runs from its per-dim vectors
    (:meth:`ShardIndices.run_layout`); an index tensor is one run when its
    indices are consecutive, else runs of one element each.
    """
    if isinstance(index, ShardIndices):
        outer, first, length = index.run_layout()
        if outer == 0:
            starts = torch.tensor([first], dtype=torch.int64)
        else:
            row = 1
            for n in index.shape[outer:]:
                row *= n
            starts = flat_index(list(index.dims[:outer]), index.shape[:outer]).reshape(-1)
            starts = starts.mul_(row).add_(first)
        return starts.numpy(), length
    flat = index.reshape(-1)
    if int(flat.min()) < 0:
        raise InvalidValueError("global indices must be >= 0")
    count = flat.numel()
    first = int(flat[0])
    if int(flat[-1]) - first == count - 1 and (
        count <= 2 or torch.equal(flat, torch.arange(first, first + count, dtype=torch.int64))
    ):
        return np.array([first], dtype=np.int64), count
    return flat.contiguous().numpy(), 1


def _fits(out: torch.Tensor | None, shape: tuple[int, ...]) -> bool:
    """Whether ``out`` is absent, or a plain contiguous CPU tensor of ``shape`` to write into.

    A tensor autograd would refuse to write in place (a leaf that requires
    grad, with grad enabled) goes to the generic path, which refuses it as
    torch does.
    """
    return out is None or (
        type(out) is torch.Tensor
        and out.device.type == "cpu"
        and tuple(out.shape) == shape
        and out.is_contiguous()
        and not (out.requires_grad and torch.is_grad_enabled())
    )


def _draw(
    index: Indices,
    dtype: torch.dtype,
    native: torch.dtype,
    out: torch.Tensor | None,
    kernel: Callable[..., None],
    *operands: object,
) -> torch.Tensor:
    """``kernel``'s values for ``index`` into ``out`` (or a new tensor of ``dtype``).

    The kernel is called on the flat output buffer (a NumPy array), the runs, and
    ``operands`` (the key's words, then the op's parameters). It writes values of
    ``native`` (float32 for float16 and bfloat16: rounded into the result by torch's
    conversion, as the generic path rounds them); into ``out`` itself where it is of that
    dtype.
    """
    shape = index_shape(index)
    result = torch.empty(shape, dtype=dtype) if out is None else out
    if result.numel() == 0:
        return result
    buffer = result if result.dtype == native else torch.empty(shape, dtype=native)
    starts, length = _runs(index)
    kernel(buffer.detach().view(-1).numpy(), starts, length, *operands)
    if buffer is not result:
        result.copy_(buffer)
    elif out is not None and not out.is_inference():
        # written through NumPy: tell autograd, as an in-place op would (a tensor saved for a
        # backward pass and then refilled is then refused there, not silently used)
        torch.autograd.graph.increment_version(out)
    return result


def _key(seed: int, position: int) -> tuple[np.uint64, np.uint64, np.uint64, np.uint64]:
    """The key and the constant counter words of the counter layout (``_bits``)."""
    return (
        np.uint64(seed & MASK32),
        np.uint64(seed >> 32),
        np.uint64(position & MASK32),
        np.uint64((position >> 32) | DOMAIN_FLAG),
    )


# -- the ops, as the generic path's ----------------------------------------------------------


def uniform(
    seed: int,
    position: int,
    index: Indices,
    dtype: torch.dtype,
    *,
    low: float = 0.0,
    high: float = 1.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`hwrng._philox._distributions.uniform`, compiled (same arguments, same values)."""
    seed, position = checked_seed_position(seed, position)
    index = generic.checked_indices(index)
    low, high, lo, hi = uniform_parameters(dtype, low, high)
    if low == high or not _fits(out, index_shape(index)):
        return generic.uniform(seed, position, index, dtype, low=low, high=high, out=out)
    key = _key(seed, position)
    kernels = _kernels()
    unit = low == 0.0 and high == 1.0
    if dtype == torch.float64:
        width, offset = (1.0, 0.0) if unit else (high - low, low)
        return _draw(
            index,
            dtype,
            torch.float64,
            out,
            kernels.uniform64,
            *key,
            np.float64(width),
            np.float64(offset),
            np.float64(hi),
        )
    # the generic path's float32 table: u * W as (w & top) * f32(W * 2**-32) where that is
    # exact, else (w & top) * 2**-32 * W; the unit interval as (w & top) * 2**-32 alone
    top = MASK32 ^ ((1 << (32 - PRECISION[dtype])) - 1)
    scale, offset32 = _math32.f32(high - low), _math32.f32(low)
    if unit:
        first, second, offset32 = 2.0**-32, 1.0, 0.0
    elif scale >= 2.0**-94:
        first, second = _math32.f32(scale * 2.0**-32), 1.0
    else:
        first, second = 2.0**-32, scale
    f32 = np.float32
    return _draw(
        index,
        dtype,
        torch.float32,
        out,
        kernels.uniform32,
        *key,
        np.uint64(top),
        f32(first),
        f32(second),
        f32(offset32),
        f32(lo),
        f32(hi),
    )


def normal(
    seed: int,
    position: int,
    index: Indices,
    dtype: torch.dtype,
    *,
    mean: float = 0.0,
    std: float = 1.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`hwrng._philox._distributions.normal`, compiled (same arguments, same values)."""
    seed, position = checked_seed_position(seed, position)
    index = generic.checked_indices(index)
    mean, std = normal_parameters(dtype, mean, std)
    if not _fits(out, index_shape(index)):
        return generic.normal(seed, position, index, dtype, mean=mean, std=std, out=out)
    key = _key(seed, position)
    kernels = _kernels()
    if dtype == torch.float64:
        return _draw(
            index,
            dtype,
            torch.float64,
            out,
            kernels.normal64,
            *key,
            np.float64(std),
            np.float64(mean),
        )
    scale, offset = np.float32(_math32.f32(std)), np.float32(_math32.f32(mean))
    return _draw(
        index,
        dtype,
        torch.float32,
        out,
        kernels.normal32,
        *key,
        scale,
        offset,
    )


def bernoulli_mask(
    seed: int,
    position: int,
    index: Indices,
    p: float | torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`hwrng._philox._distributions.bernoulli_mask`, compiled (same values)."""
    seed, position = checked_seed_position(seed, position)
    index = generic.checked_indices(index)
    single = probability(p)
    shape = index_shape(index)
    if not _fits(out, shape):
        return generic.bernoulli_mask(seed, position, index, p, out=out)
    key = _key(seed, position)
    kernels = _kernels()
    if isinstance(p, torch.Tensor):  # a threshold an element: compared as the generic path does
        limits = generic.thresholds(p, shape, torch.device("cpu"))
        words = _draw(
            index,
            torch.int64,
            torch.int64,
            None,
            kernels.words,
            *key,
        )
        mask = words < limits
        return mask if out is None else out.copy_(mask)
    threshold = np.uint64(round(single * 2**32))
    return _draw(
        index,
        torch.bool,
        torch.bool,
        out,
        kernels.bernoulli,
        *key,
        threshold,
    )


def dropout(
    seed: int, position: int, index: Indices, source: torch.Tensor, p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`hwrng._philox._distributions.dropout`, compiled (same values, same mask)."""
    scale = generic.dropout_scale(source, p, index)
    if (
        source.device.type != "cpu"
        or type(source) is not torch.Tensor
        or not source.is_contiguous()
        or (source.requires_grad and torch.is_grad_enabled())  # its output joins the graph
    ):
        return generic.dropout(seed, position, index, source, p)
    kept = bernoulli_mask(seed, position, index, 1.0 - p)
    x = source.detach()
    if x.dtype == torch.float64:
        native, factor = x, np.float64(scale)
    else:  # the products are exact in float32; rounded to the dtype as torch's own product
        native, factor = x.to(torch.float32), np.float32(scale)
    values = torch.empty_like(native)
    if values.numel():
        _kernels().apply_mask(
            values.view(-1).numpy(), native.reshape(-1).numpy(), kept.view(-1).numpy(), factor
        )
    return values.to(source.dtype), kept


def trunc_normal(
    seed: int,
    position: int,
    index: Indices,
    dtype: torch.dtype,
    *,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`hwrng._philox._distributions.trunc_normal`, compiled (same values)."""
    seed, position = checked_seed_position(seed, position)
    index = generic.checked_indices(index)
    mean, std, a, b, lo, hi = trunc_normal_parameters(dtype, mean, std, a, b)
    if a == b or not _fits(out, index_shape(index)):
        return generic.trunc_normal(
            seed, position, index, dtype, mean=mean, std=std, a=a, b=b, out=out
        )
    alpha, beta, mirror = _math.standard_bounds(mean, std, a, b)
    key = _key(seed, position)
    kernels = _kernels()
    if dtype == torch.float64:
        base, width = _math.phi_interval(alpha, beta)
        f64 = np.float64
        return _draw(
            index,
            dtype,
            torch.float64,
            out,
            kernels.trunc64,
            *key,
            f64(width),
            f64(base),
            mirror,
            f64(std),
            f64(mean),
            f64(a),
            f64(b),
            f64(lo),
            f64(hi),
        )
    scaled = _math.tail_scale(alpha, beta)
    f32 = np.float32
    return _draw(
        index,
        dtype,
        torch.float32,
        out,
        kernels.trunc32,
        *key,
        f32(scaled.width),
        f32(scaled.base),
        f32(scaled.upper),
        scaled.shift,
        mirror,
        f32(_math32.f32(std)),
        f32(_math32.f32(mean)),
        f32(lo),
        f32(hi),
    )

"""The Philox ops as the rest of hwrng calls them: the one place that chooses the path.

A shard described by :class:`~hwrng._philox._index.ShardIndices` goes to the
fused Triton kernel where it can serve the shard's device; values on the CPU
go to the kernels numba compiles (:mod:`hwrng._philox._compiled`) where numba
imports and ``HWRNG_INVARIANT_CPU`` does not say ``tensor``; everything else
takes the generic path of tensor ops, the reference. All give the same
values, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hwrng._philox import _compiled as compiled
from hwrng._philox import _distributions as generic
from hwrng._philox import _triton as fused
from hwrng._philox._index import Indices, ShardIndices
from hwrng._philox._parameters import check_parameters

__all__ = [
    "Draw",
    "bernoulli_mask",
    "check_cpu_path",
    "cpu_path",
    "drawer",
    "dropout",
    "normal",
    "trunc_normal",
    "uniform",
]

#: what :func:`drawer` returns: ``draw(seed, position, index, out=None)``
Draw = Callable[..., torch.Tensor]


def cpu_path() -> str:
    """Which path the ops take for values on the CPU, and why, in words (``hwrng backends``).

    ``compiled with numba X.Y (...)`` or ``tensor ops (why)``: see
    :mod:`hwrng._philox._compiled`. Imports numba where it is installed.
    """
    return compiled.describe()


def check_cpu_path() -> None:
    """Refuse an unknown ``HWRNG_INVARIANT_CPU`` (or ``compiled`` without numba), before an op.

    The ops read the setting as they draw; a caller that moves a generator
    first (``hwrng.invariant``) calls this before it does.
    """
    compiled.check_setting()


def _dispatch(
    index: Indices,
    on_shard: Callable[[ShardIndices], torch.Tensor],
    compiled_path: Callable[[Indices], torch.Tensor],
    generic_path: Callable[[Indices], torch.Tensor],
    out: torch.Tensor | None,
) -> torch.Tensor:
    """``on_shard(index)``, or the compiled CPU path, or the generic path: the first that serves.

    The fused kernel serves a described shard on its device; the compiled path
    values on the CPU where numba imports (``_compiled.serves``). The fused
    kernel's values are copied into ``out`` when one is given; the other paths
    write into it directly.
    """
    if isinstance(index, ShardIndices) and fused.available(index.device):
        values = on_shard(index)
        return values if out is None else out.copy_(values)
    if compiled.serves(index):
        return compiled_path(index)
    return generic_path(index)


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
    """Uniform values in ``[low, high)`` for the elements at global flat indices ``index``.

    Parameters
    ----------
    seed : int
        The 64-bit seed, in ``[0, 2**64)``.
    position : int
        The op's position, in ``[0, 2**63)``.
    index : torch.Tensor or ShardIndices
        Global flat element indices (integers ``>= 0``, any shape, any device),
        or a shard's description by per-dim index vectors.
    dtype : torch.dtype
        float32, float64, float16 or bfloat16.
    low, high : float
        Finite bounds within the dtype's range, ``low <= high``.
    out : torch.Tensor, optional
        Where to write the values: contiguous, of ``index``'s shape and device
        (and, but for the mask, of ``dtype``).

    Returns
    -------
    torch.Tensor
        Values of ``dtype`` on ``index``'s device, in ``index``'s shape; see the
        bit-to-float mapping of :mod:`hwrng._philox._distributions`.

    Examples
    --------
    >>> uniform(0, 0, torch.arange(3), torch.float32).tolist()
    [0.8660249710083008, 0.5133486986160278, 0.7006868720054626]
    """
    return _dispatch(
        index,
        lambda s: fused.uniform(
            seed, position, s.dims, s.shape, dtype, low=low, high=high, ranges=s.ranges
        ),
        lambda i: compiled.uniform(seed, position, i, dtype, low=low, high=high, out=out),
        lambda i: generic.uniform(seed, position, i, dtype, low=low, high=high, out=out),
        out,
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
    """Normal values (Box-Muller within a block) for the elements at global flat indices ``index``.

    Parameters
    ----------
    seed : int
        The 64-bit seed, in ``[0, 2**64)``.
    position : int
        The op's position, in ``[0, 2**63)``.
    index : torch.Tensor or ShardIndices
        Global flat element indices (integers ``>= 0``, any shape, any device),
        or a shard's description by per-dim index vectors.
    dtype : torch.dtype
        float32, float64, float16 or bfloat16.
    mean, std : float
        Finite; ``std >= 0``.
    out : torch.Tensor, optional
        Where to write the values: contiguous, of ``index``'s shape and device
        (and, but for the mask, of ``dtype``).

    Returns
    -------
    torch.Tensor
        Values of ``dtype`` on ``index``'s device, in ``index``'s shape; see the
        bit-to-float mapping of :mod:`hwrng._philox._distributions`.
    """
    return _dispatch(
        index,
        lambda s: fused.normal(
            seed, position, s.dims, s.shape, dtype, mean=mean, std=std, ranges=s.ranges
        ),
        lambda i: compiled.normal(seed, position, i, dtype, mean=mean, std=std, out=out),
        lambda i: generic.normal(seed, position, i, dtype, mean=mean, std=std, out=out),
        out,
    )


def bernoulli_mask(
    seed: int,
    position: int,
    index: Indices,
    p: float | torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """A boolean mask, true with probability ``p``, for the elements at global indices ``index``.

    Parameters
    ----------
    seed : int
        The 64-bit seed, in ``[0, 2**64)``.
    position : int
        The op's position, in ``[0, 2**63)``.
    index : torch.Tensor or ShardIndices
        Global flat element indices (integers ``>= 0``, any shape, any device),
        or a shard's description by per-dim index vectors.
    p : float or torch.Tensor
        The probability of true, in ``[0, 1]``: one number, or a floating tensor
        of per-element probabilities that broadcasts to ``index``'s shape.
    out : torch.Tensor, optional
        Where to write the values: contiguous, of ``index``'s shape and device
        (and, but for the mask, of ``dtype``).

    Returns
    -------
    torch.Tensor
        bool, on ``index``'s device, in ``index``'s shape: ``w < round(p * 2**32)``
        for each element's word ``w`` (``p = 0``: all false; ``p = 1``: all true).
    """
    return _dispatch(
        index,
        lambda s: fused.bernoulli_mask(seed, position, s.dims, s.shape, p, ranges=s.ranges),
        lambda i: compiled.bernoulli_mask(seed, position, i, p, out=out),
        lambda i: generic.bernoulli_mask(seed, position, i, p, out=out),
        out,
    )


def dropout(
    seed: int, position: int, index: Indices, source: torch.Tensor, p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dropout of ``source`` (``0 < p < 1``), the values at ``index``: the output and its mask.

    In one launch of the fused kernel where it serves the shard (the input
    read, the mask drawn and the output written in one pass), else by the
    compiled CPU path or the generic path. See :func:`hwrng._philox._distributions.dropout`.
    """
    if isinstance(index, ShardIndices) and fused.available(index.device):
        return fused.dropout(
            seed, position, index.dims, index.shape, source, p, ranges=index.ranges
        )
    if compiled.serves(index):
        return compiled.dropout(seed, position, index, source, p)
    return generic.dropout(seed, position, index, source, p)


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
    """Normal values truncated to ``[a, b]``, by inverse CDF (one draw an element, no rejection).

    As ``torch.nn.init.trunc_normal_``: ``a`` and ``b`` are absolute bounds.
    When ``[a, b]`` lies more than about 38 standard deviations from the mean,
    float64 cannot tell the probabilities apart and the values collapse onto
    the bound nearer the mean.

    Parameters
    ----------
    seed : int
        The 64-bit seed, in ``[0, 2**64)``.
    position : int
        The op's position, in ``[0, 2**63)``.
    index : torch.Tensor or ShardIndices
        Global flat element indices (integers ``>= 0``, any shape, any device),
        or a shard's description by per-dim index vectors.
    dtype : torch.dtype
        float32, float64, float16 or bfloat16.
    mean, std, a, b : float
        Finite; ``std > 0`` and ``a < b``.
    out : torch.Tensor, optional
        Where to write the values: contiguous, of ``index``'s shape and device
        (and, but for the mask, of ``dtype``).

    Returns
    -------
    torch.Tensor
        Values of ``dtype`` in ``[a, b]``, on ``index``'s device, in ``index``'s
        shape; see the bit-to-float mapping of :mod:`hwrng._philox._distributions`.
    """
    return _dispatch(
        index,
        lambda s: fused.trunc_normal(
            seed, position, s.dims, s.shape, dtype, mean=mean, std=std, a=a, b=b, ranges=s.ranges
        ),
        lambda i: compiled.trunc_normal(
            seed, position, i, dtype, mean=mean, std=std, a=a, b=b, out=out
        ),
        lambda i: generic.trunc_normal(
            seed, position, i, dtype, mean=mean, std=std, a=a, b=b, out=out
        ),
        out,
    )


def drawer(op: str, dtype: torch.dtype, **parameters: float | torch.Tensor) -> Draw:
    """Check ``op``'s parameters for ``dtype`` now; return what draws its values later.

    ``op`` is ``"uniform"``, ``"normal"``, ``"trunc_normal"`` or ``"bernoulli"``
    (whose 0/1 mask is cast to ``dtype``). The returned function takes ``(seed,
    position, index, out=None)``: with ``out`` (contiguous, of ``dtype`` and
    the index's shape) it writes the values there. Checking up front lets a
    caller refuse bad input before it moves a generator to draw.
    """
    check_parameters(op, dtype, **parameters)
    check_cpu_path()
    if op == "bernoulli":
        p = parameters["p"]

        def mask(
            seed: int, position: int, index: Indices, out: torch.Tensor | None = None
        ) -> torch.Tensor:
            if out is not None:
                return bernoulli_mask(seed, position, index, p, out=out)
            return bernoulli_mask(seed, position, index, p).to(dtype)

        return mask
    fills: dict[str, Callable[..., torch.Tensor]] = {
        "uniform": uniform,
        "normal": normal,
        "trunc_normal": trunc_normal,
    }
    fill = fills[op]

    def draw(
        seed: int, position: int, index: Indices, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        return fill(seed, position, index, dtype, out=out, **parameters)

    return draw

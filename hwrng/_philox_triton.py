"""The fused CUDA path of the invariant ops: one Triton kernel per op, bit-identical to ``_philox``.

The generic path materialises a shard's global indices and runs the Philox
rounds as a chain of tensor ops; this kernel computes each element's global
index from the shard's per-dim index vectors, runs the ten rounds in
registers (``tl.umulhi``), and writes the value -- one pass over memory. It
mirrors the generic path's float64 operation order, and runs with FP
contraction off, so every value is the same bit for bit.

Served here: uniform (every float dtype) and the Bernoulli mask (dropout);
normal and truncated normal take the generic path. Used only on CUDA devices
with Triton importable; with ``TRITON_INTERPRET=1`` the kernel also runs on
the CPU, which is how the tests check it against the generic path.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["MAX_DIMS", "available", "bernoulli_mask", "uniform"]

#: The kernel reads up to this many per-dim index vectors (shapes are collapsed to fit).
MAX_DIMS = 4
_BLOCK = 1024
_PRECISION = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8, torch.float64: 53}


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def available(device: torch.device) -> bool:
    """Whether the fused kernel can serve tensors on ``device``."""
    if importlib.util.find_spec("triton") is None:
        return False
    return device.type == "cuda" or (device.type == "cpu" and _interpreting())


@functools.cache
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def philox_fill(  # noqa: PLR0917 - a kernel takes its arguments positionally
        out,
        idx0,
        idx1,
        idx2,
        idx3,
        size1,
        size2,
        size3,
        stride0,
        stride1,
        stride2,
        stride3,
        numel,
        key0,
        key1,
        pos0,
        pos1,
        low,
        span,
        threshold,
        MODE: tl.constexpr,
        BITS: tl.constexpr,
        PER_BLOCK: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        k = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = k < numel
        # unravel the local element number, then map every local index to its global one
        i3 = k % size3
        rest = k // size3
        i2 = rest % size2
        rest = rest // size2
        i1 = rest % size1
        i0 = rest // size1
        g = (
            tl.load(idx0 + i0, mask=live, other=0) * stride0
            + tl.load(idx1 + i1, mask=live, other=0) * stride1
            + tl.load(idx2 + i2, mask=live, other=0) * stride2
            + tl.load(idx3 + i3, mask=live, other=0) * stride3
        )
        block = g // PER_BLOCK
        lane = g % PER_BLOCK
        c0 = (block & 0xFFFFFFFF).to(tl.uint32)
        c1 = (block >> 32).to(tl.uint32)
        c2 = tl.zeros_like(c0) + pos0.to(tl.uint32)
        c3 = tl.zeros_like(c0) + pos1.to(tl.uint32)
        k0 = tl.zeros_like(c0) + key0.to(tl.uint32)
        k1 = tl.zeros_like(c0) + key1.to(tl.uint32)
        for r in tl.static_range(10):
            if r > 0:
                k0 = k0 + 0x9E3779B9
                k1 = k1 + 0xBB67AE85
            a0 = c0 * 0xD2511F53
            h0 = tl.umulhi(c0, 0xD2511F53)
            a2 = c2 * 0xCD9E8D57
            h2 = tl.umulhi(c2, 0xCD9E8D57)
            c0, c1, c2, c3 = h2 ^ c1 ^ k0, a2, h0 ^ c3 ^ k1, a0
        if PER_BLOCK == 4:
            w = tl.where(lane == 0, c0, tl.where(lane == 1, c1, tl.where(lane == 2, c2, c3)))
            if MODE == 0:  # uniform, 32-bit types: (w >> (32 - bits)) * 2**-bits, in float64
                u = (w >> (32 - BITS)).to(tl.float64) * (1.0 / (1 << BITS))
                tl.store(out + k, u * span + low, mask=live)
            else:  # Bernoulli: w < threshold, as 0/1
                tl.store(out + k, (w.to(tl.int64) < threshold).to(tl.int8), mask=live)
        else:  # float64 uniform: two words per element
            hi = tl.where(lane == 0, c0, c2)
            lo = tl.where(lane == 0, c1, c3)
            whole = (hi >> 5).to(tl.int64) * 67108864 + (lo >> 6).to(tl.int64)
            u = whole.to(tl.float64) * (1.0 / 9007199254740992.0)
            tl.store(out + k, u * span + low, mask=live)

    return philox_fill


def _layout(
    dim_indices: Sequence[torch.Tensor], global_shape: Sequence[int], device: torch.device
) -> tuple[list[torch.Tensor], list[int], list[int]]:
    """Pad (or collapse leading dims of) the description to exactly MAX_DIMS dims."""
    strides = []
    stride = 1
    for size in reversed(global_shape):
        strides.append(stride)
        stride *= int(size)
    strides.reverse()
    vectors = [v.to(device=device, dtype=torch.int64) for v in dim_indices]
    if len(vectors) > MAX_DIMS:  # fold the leading dims into one (their product of indices)
        from hwrng._philox import flat_index

        lead = len(vectors) - MAX_DIMS + 1
        folded = flat_index(vectors[:lead], global_shape[:lead]).reshape(-1) * strides[lead - 1]
        vectors = [folded, *vectors[lead:]]
        strides = [1, *strides[lead:]]
    zero = torch.zeros(1, dtype=torch.int64, device=device)
    while len(vectors) < MAX_DIMS:
        vectors.insert(0, zero)
        strides.insert(0, 0)
    sizes = [int(v.numel()) for v in vectors]
    return vectors, sizes, strides


def _launch(
    out: torch.Tensor,
    dim_indices: Sequence[torch.Tensor],
    global_shape: Sequence[int],
    seed: int,
    position: int,
    *,
    mode: int,
    bits: int,
    per_block: int,
    low: float = 0.0,
    span: float = 0.0,
    threshold: int = 0,
) -> None:
    numel = out.numel()
    if numel == 0:
        return
    vectors, sizes, strides = _layout(dim_indices, global_shape, out.device)
    grid = ((numel + _BLOCK - 1) // _BLOCK,)
    _kernel()[grid](
        out,
        *vectors,
        sizes[1],
        sizes[2],
        sizes[3],
        *strides,
        numel,
        seed & 0xFFFFFFFF,
        seed >> 32,
        position & 0xFFFFFFFF,
        (position >> 32) | 0x80000000,
        low,
        span,
        threshold,
        MODE=mode,
        BITS=bits,
        PER_BLOCK=per_block,
        BLOCK=_BLOCK,
        enable_fp_fusion=False,
    )


def uniform(
    seed: int,
    position: int,
    dim_indices: Sequence[torch.Tensor],
    global_shape: Sequence[int],
    dtype: torch.dtype,
    *,
    low: float = 0.0,
    high: float = 1.0,
) -> torch.Tensor:
    """:func:`hwrng._philox.uniform` of the shard the index vectors describe, fused."""
    shape = tuple(int(v.numel()) for v in dim_indices)
    device = dim_indices[0].device if dim_indices else torch.device("cuda")
    values = torch.empty(shape, dtype=torch.float64, device=device)
    wide = dtype == torch.float64
    _launch(
        values,
        dim_indices,
        global_shape,
        seed,
        position,
        mode=0,
        bits=_PRECISION[dtype],
        per_block=2 if wide else 4,
        low=low,
        span=high - low,
    )
    from hwrng._philox import _below, _round_to

    return _below(_round_to(values, dtype), dtype, low, high)


def bernoulli_mask(
    seed: int,
    position: int,
    dim_indices: Sequence[torch.Tensor],
    global_shape: Sequence[int],
    p: float,
) -> torch.Tensor:
    """:func:`hwrng._philox.bernoulli_mask` (a float ``p``) of the described shard, fused."""
    shape = tuple(int(v.numel()) for v in dim_indices)
    device = dim_indices[0].device if dim_indices else torch.device("cuda")
    mask = torch.empty(shape, dtype=torch.int8, device=device)
    _launch(
        mask,
        dim_indices,
        global_shape,
        seed,
        position,
        mode=1,
        bits=32,
        per_block=4,
        threshold=round(p * 2**32),
    )
    return mask.bool()

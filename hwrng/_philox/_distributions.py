"""The generic path of the Philox ops: uniform, normal, Bernoulli and truncated normal.

Every value is a pure function of (seed, position, element index), computed
in plain torch ops, so it runs on every torch device and gives the same bits
on all of them. The words come from :mod:`hwrng._philox._bits` (the counter
layout); the float kernels from :mod:`hwrng._philox._math32` (float32,
float16 and bfloat16 results, in float32 and integer operations only) and
:mod:`hwrng._philox._math` (float64 results). The bit-to-float mapping is the
contract written out in ``docs/invariant.md`` ("The contract"), version
:data:`~hwrng._philox._contract.CONTRACT_VERSION`; in short, for an element
of global flat index ``e``:

* float32/float16/bfloat16: block ``e // 4``, its word ``e % 4`` (normal: the
  pair ``(e % 4) // 2``, Box-Muller); every float operation in float32, the
  result rounded to the dtype last;
* float64: block ``e // 2``, two words an element, float64 operations;
* Bernoulli: ``w < round(p * 2**32)`` on the word of float32 uniform.

How the work is laid out does not enter the values: the blocks of a batch
are computed together (six tensor ops a Philox round for the whole batch), in
batches (chunks) that keep the temporaries in the CPU's cache; values depend
on the element's index only, so the chunk size never changes them (tested).
No op here creates a float64 tensor for a float32, float16 or bfloat16
result (tested with a dispatch mode that refuses them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from hwrng._exceptions import InvalidValueError
from hwrng._philox import _math32 as m32
from hwrng._philox._bits import MASK32, Rounds, layout_words
from hwrng._philox._index import Indices, ShardIndices, index_shape
from hwrng._philox._math import (
    TailScale,
    ln,
    ndtri,
    phi_interval,
    sincos_turns,
    sqrt,
    standard_bounds,
    tail_scale,
)
from hwrng._philox._operands import Maker, Operand, on_the_host
from hwrng._philox._parameters import (
    PRECISION,
    checked_index,
    checked_seed_position,
    dropout_parameters,
    normal_parameters,
    probabilities_broadcast,
    probability,
    trunc_normal_parameters,
    uniform_parameters,
)

__all__ = [
    "bernoulli_mask",
    "checked_indices",
    "dropout",
    "dropout_scale",
    "normal",
    "thresholds",
    "trunc_normal",
    "uniform",
]

#: writes the values of a batch of ``n`` blocks, from their ``(4, n)`` words (high halves
#: garbage, free to overwrite), into ``dest`` of shape ``(n, per_block)``
_Table = Callable[[torch.Tensor, torch.Tensor], None]
_F32 = torch.float32

# Blocks per batch. On the CPU a batch's state and temporaries stay in a core's cache (its L2:
# 2**16 blocks ran twice as slowly as 2**14 on the development machine) while each op is
# still long enough for its fixed cost (about 2 us) not to dominate; elsewhere batches only
# bound the temporaries' memory.
_CPU_BLOCKS = 1 << 14
_DEVICE_BLOCKS = 1 << 20
# a run of consecutive indices at least this long is drawn on its own
_LONG_RUN = 1 << 14


def _batch_blocks(device: torch.device) -> int:
    host = torch.default_generator.device.type  # the host's memory: batches sized to its cache
    return _CPU_BLOCKS if device.type == host else _DEVICE_BLOCKS


def _settle_the_allocator() -> None:
    """Have glibc serve a batch's temporaries (1 to 4 MB each) from its heap.

    glibc ``malloc`` maps a block of at least its threshold with ``mmap`` and
    unmaps it when freed, and trims its heap above twice that threshold, so in
    a fresh process each temporary costs fresh pages and their page faults
    (half the normal op's time on the development machine, and most of its
    run-to-run variance); the thresholds rise with the largest block freed.
    Freeing one 30 MB block, never touched, raises them above every temporary
    for the rest of the process -- what any job that frees a tensor of that
    size does anyway, so in a training job it is usually done already. With
    another allocator this is one allocation and nothing more.
    """
    global _settled
    if not _settled:
        block = torch.empty(30 << 20, dtype=torch.uint8)
        del block
        _settled = True


_settled = False


@contextlib.contextmanager
def _one_intra_op_thread() -> Iterator[None]:
    """Run the enclosed torch ops of this thread on one intra-op thread, then restore the count.

    The generic path is a few hundred short tensor ops a batch. With several
    intra-op threads each op is a parallel region whose threads meet at a
    barrier, and where more threads are busy than there are cores (ranks
    sharing a host, ``hwrng check``'s 8 processes on 2 cores) a barrier waits
    for a descheduled thread: measured, 8 processes on 2 cores drew 30 to 160
    times slower than on one thread each (``benchmarks/bench_invariant_load.py``).
    On one thread the ops cost the same alone and under load, and the CPU
    generators torch compares with (``rand``, ``randn``) draw on one thread
    anyway. (torch's thread count is per thread of the process here: OpenMP's
    setting is the calling thread's own.)
    """
    threads = torch.get_num_threads()
    if _INTRA_OP_THREADS is None or threads == _INTRA_OP_THREADS:
        yield
        return
    torch.set_num_threads(_INTRA_OP_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


#: the generic path's intra-op threads on the CPU (None: the calling thread's count, as
#: torch's own ops; benchmarks/bench_invariant_load.py compares the two)
_INTRA_OP_THREADS: int | None = 1


def _contiguous_run(e: torch.Tensor) -> bool:
    """Whether the 1-D indices ``e`` (non-empty) are ``first, first + 1, ...``."""
    count = e.numel()
    first, last = int(e[0]), int(e[-1])
    return (
        first >= 0
        and last - first == count - 1
        and (
            count <= 2
            or torch.equal(e, torch.arange(count, dtype=torch.int64, device=e.device).add_(first))
        )
    )


def _run_values(
    out: torch.Tensor,
    first: int,
    *,
    seed: int,
    position: int,
    shift: int,
    table: _Table,
    rounds: Rounds,
) -> None:
    """Fill ``out`` (1-D) with the values of elements ``first, first + 1, ...``, batch by batch."""
    per_block = 1 << shift
    count = out.numel()
    batch = _batch_blocks(out.device) << shift
    start = 0
    while start < count:
        # batches end on multiples of the batch size in global indices, so all but the
        # first and the last cover whole blocks and are written without a copy
        e = first + start
        stop = min(count, (e // batch + 1) * batch - first)
        low, high = e >> shift, (first + stop - 1) >> shift
        words = layout_words(
            seed, position, rounds.block_range(low, high + 1), rounds=rounds, largest=high
        )
        offset = e - (low << shift)
        target = out[start:stop]
        if offset == 0 and target.numel() == (high + 1 - low) << shift:
            table(words, target.view(-1, per_block))
        else:  # a batch that starts or ends inside a block
            values = torch.empty((high + 1 - low, per_block), dtype=out.dtype, device=out.device)
            table(words, values)
            target.copy_(values.view(-1)[offset : offset + target.numel()])
        start = stop


def _scattered_values(
    out: torch.Tensor, e: torch.Tensor, *, seed: int, position: int, shift: int, table: _Table
) -> None:
    """Fill ``out`` with the values of elements ``e`` (1-D, any order), each block once."""
    per_block = 1 << shift
    blocks, where = torch.unique_consecutive(e >> shift, return_inverse=True)
    low, high = torch.aminmax(blocks)
    if int(low) < 0:
        raise InvalidValueError("global indices must be >= 0")
    words = layout_words(seed, position, blocks, largest=int(high))
    values = torch.empty((blocks.numel(), per_block), dtype=out.dtype, device=out.device)
    table(words, values)
    out.copy_(values.view(-1).take((where << shift).add_(e & (per_block - 1))))


def _draw(
    seed: int,
    position: int,
    index: Indices,
    per_block: int,
    *,
    dtype: torch.dtype,
    table: _Table,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The values of every element of ``index``, in its shape: into ``out``, or a new tensor.

    A shard given by its per-dim vectors is drawn run by run when it is runs
    of consecutive indices (rows of a row-major tensor), without building its
    index tensor; any other index set block by block, each block once.
    """
    shape = index_shape(index)
    device = index.device
    if out is None:
        out = torch.empty(shape, dtype=dtype, device=device)
    elif tuple(out.shape) != shape or not out.is_contiguous() or out.device != device:
        raise InvalidValueError(
            f"out must be a contiguous tensor of shape {shape} on {device}, got "
            f"{tuple(out.shape)} on {out.device}"
        )
    flat_out = out.view(-1)
    if flat_out.numel() == 0:
        return out
    shift = per_block.bit_length() - 1
    if device.type != torch.default_generator.device.type:
        _draw_into(
            flat_out, index, seed=seed, position=position, shift=shift, table=table, device=device
        )
        return out
    _settle_the_allocator()  # the host's memory
    with _one_intra_op_thread():
        _draw_into(
            flat_out, index, seed=seed, position=position, shift=shift, table=table, device=device
        )
    return out


def _draw_into(
    flat_out: torch.Tensor,
    index: Indices,
    *,
    seed: int,
    position: int,
    shift: int,
    table: _Table,
    device: torch.device,
) -> None:
    """:func:`_draw`'s work: the values of ``index`` into ``flat_out`` (its flat view)."""
    rounds = Rounds(seed & MASK32, seed >> 32, device)
    if isinstance(index, ShardIndices):
        runs = index.runs()
        # long runs one by one; many short ones (a column shard) as one index set, whose
        # neighbours share blocks, rather than one batch of tensor ops per short run
        if runs is not None and (len(runs) == 1 or runs[0][1] >= _LONG_RUN):
            length = runs[0][1]
            for i, (start, _) in enumerate(runs):
                target = flat_out[i * length : (i + 1) * length]
                _run_values(
                    target,
                    start,
                    seed=seed,
                    position=position,
                    shift=shift,
                    table=table,
                    rounds=rounds,
                )
            return
        index = index.flat()
    flat = index.reshape(-1)
    if _contiguous_run(flat):
        _run_values(
            flat_out,
            int(flat[0]),
            seed=seed,
            position=position,
            shift=shift,
            table=table,
            rounds=rounds,
        )
        return
    batch = _batch_blocks(device) << shift
    for start in range(0, flat.numel(), batch):
        part = flat[start : start + batch]
        target = flat_out[start : start + part.numel()]
        _scattered_values(target, part, seed=seed, position=position, shift=shift, table=table)


def checked_indices(index: Indices) -> Indices:
    """An index tensor as int64, or a shard's per-dim vectors, once checked; or raise."""
    if isinstance(index, ShardIndices):
        index.check()
        return index
    return checked_index(index)


def _filled(
    index: Indices, value: float, dtype: torch.dtype, out: torch.Tensor | None
) -> torch.Tensor:
    """Every element ``value`` (rounded to ``dtype``): an op with nothing to draw."""
    if out is None:
        return torch.full(index_shape(index), value, dtype=dtype, device=index.device)
    return out.fill_(value)


def _clamp(x: torch.Tensor, lo: Operand, hi: Operand) -> torch.Tensor:
    """``x`` clamped in place to ``[lo, hi]``, constants as :mod:`_operands` makes them."""
    if isinstance(lo, torch.Tensor) and isinstance(hi, torch.Tensor):
        return x.clamp_(lo, hi)
    assert not isinstance(lo, torch.Tensor)
    assert not isinstance(hi, torch.Tensor)
    return x.clamp_(lo, hi)


def _makers(device: torch.device) -> tuple[Maker, Maker]:
    """Operands for int64 and float32 ops on ``device``'s tensors."""
    cpu = on_the_host(device)
    return Maker(torch.int64, cpu), Maker(_F32, cpu)


def _words(words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch's words ``w0, w1, w2, w3`` (its rows are ``w0, w2, w1, w3``), masked to 32 bits."""
    w0, w2, w1, w3 = words.bitwise_and_(MASK32)
    return w0, w1, w2, w3


def _to_lanes(rows: torch.Tensor, dest: torch.Tensor) -> None:
    """Per-word values, in the words' row order ``w0, w2, w1, w3``, into ``dest`` ``(n, 4)``.

    Element ``4 b + j`` takes word ``j`` of block ``b``: the even words' rows
    go to lanes 0 and 2, the odd words' to lanes 1 and 3, one copy a lane (a
    strided write along the whole batch: copying two lanes at once makes torch
    loop over the pair innermost, four times slower on the CPU).
    """
    for lane, row in zip((0, 2, 1, 3), rows, strict=True):
        dest[:, lane].copy_(row)


def _single(dest: torch.Tensor) -> torch.Tensor:
    """Where a table computes float32 values for ``dest``: ``dest`` itself, or a float32 buffer."""
    if dest.dtype == _F32:
        return dest
    return torch.empty(dest.shape, dtype=_F32, device=dest.device)


def _finish(single: torch.Tensor, dest: torch.Tensor) -> None:
    """The float32 values of :func:`_single` rounded into ``dest`` (if they are not in it)."""
    if single is not dest:
        dest.copy_(single)


def _store_rows(rows: torch.Tensor, dest: torch.Tensor) -> None:
    """``(per_block, n)`` rows of values into ``dest``, ``(n, per_block)``."""
    dest.copy_(rows.t())


def _bits53(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The 53-bit integer ``(a >> 5) * 2**26 + (b >> 6)`` of two words."""
    return (a >> 5).bitwise_left_shift_(26).bitwise_or_(b >> 6)


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
        Where to write the values (contiguous, of ``index``'s shape and device).

    Returns
    -------
    torch.Tensor
        Values of ``dtype`` (or ``out``) on ``index``'s device, in ``index``'s
        shape; see the module's bit-to-float mapping.

    Examples
    --------
    >>> uniform(0, 0, torch.arange(3), torch.float32).tolist()
    [0.8660249710083008, 0.5133486986160278, 0.7006868720054626]
    """
    seed, position = checked_seed_position(seed, position)
    index = checked_indices(index)
    low, high, lo, hi = uniform_parameters(dtype, low, high)
    if low == high:
        return _filled(index, low, dtype, out)
    width = high - low
    unit = low == 0.0 and high == 1.0

    if dtype == torch.float64:

        def table(words: torch.Tensor, dest: torch.Tensor) -> None:
            w0, w1, w2, w3 = _words(words)
            u = torch.stack((_bits53(w0, w1), _bits53(w2, w3))).to(torch.float64)
            u.mul_(2.0**-53)
            if not unit:
                u.mul_(width).add_(low).clamp_(max=hi)
            _store_rows(u, dest)

        return _draw(seed, position, index, 2, dtype=dtype, table=table, out=out)

    # u = k * 2**-m with k the word's top m bits; v = f32(f32(u * W) + L), W = f32(high - low),
    # L = f32(low). u = (w & top) * 2**-32 exactly; and (w & top) * (W * 2**-32) rounds as
    # u * W does whenever W * 2**-32 is exact (W >= 2**-94), which saves a pass.
    top = MASK32 ^ ((1 << (32 - PRECISION[dtype])) - 1)
    scale, offset = m32.f32(width), m32.f32(low)
    folded = scale >= 2.0**-94
    word, single = _makers(index.device)
    k_top, k_scale, k_offset, k_lo, k_hi = (
        word(top),
        single(scale),
        single(offset),
        single(lo),
        single(hi),
    )
    k_unit, k_folded = single(2.0**-32), single(scale * 2.0**-32)

    def table32(words: torch.Tensor, dest: torch.Tensor) -> None:
        u = _single(dest)
        _to_lanes(words.bitwise_and_(k_top), u)  # exact: at most 24 significant bits
        if unit:
            u.mul_(k_unit)
        else:
            if folded:
                u.mul_(k_folded)
            else:
                u.mul_(k_unit).mul_(k_scale)
            _clamp(u.add_(k_offset), k_lo, k_hi)
        _finish(u, dest)

    return _draw(seed, position, index, 4, dtype=dtype, table=table32, out=out)


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
        Where to write the values (contiguous, of ``index``'s shape and device).

    Returns
    -------
    torch.Tensor
        Values of ``dtype`` (or ``out``) on ``index``'s device, in ``index``'s
        shape; see the module's bit-to-float mapping.
    """
    seed, position = checked_seed_position(seed, position)
    index = checked_indices(index)
    mean, std = normal_parameters(dtype, mean, std)

    if dtype == torch.float64:

        def table(words: torch.Tensor, dest: torch.Tensor) -> None:
            w0, w1, w2, w3 = _words(words)
            u1 = _bits53(w0, w1).add_(1).to(torch.float64).mul_(2.0**-53)
            radius = sqrt(ln(u1, subnormal=False).mul_(-2.0))
            sin, cos = sincos_turns(_bits53(w2, w3), 53)
            _store_rows(torch.stack((cos, sin)).mul_(radius).mul_(std).add_(mean), dest)

        return _draw(seed, position, index, 2, dtype=dtype, table=table, out=out)

    scale, offset = m32.f32(std), m32.f32(mean)
    word, single = _makers(index.device)
    k_mask, k_one, k_eight, k_angle = word(MASK32), word(1), word(8), word(0xFFFFFF)
    k_unit, k_minus2, k_scale, k_offset = (
        single(2.0**-32),
        single(-2.0),
        single(scale),
        single(offset),
    )

    def table32(words: torch.Tensor, dest: torch.Tensor) -> None:
        # pairs (w0, w1) and (w2, w3): u1 from the even words (rows 0, 1), the angle from the
        # odd ones (rows 2, 3)
        even, odd = words[:2], words[2:]
        u1 = even.bitwise_and_(k_mask).add_(k_one).to(_F32).mul_(k_unit)
        radius = m32.sqrt(m32.ln(u1).mul_(k_minus2))
        sin, cos = m32.sincos_turns(odd.bitwise_right_shift_(k_eight).bitwise_and_(k_angle))
        # rows (cos of pair 0, cos of pair 1, sin of pair 0, sin of pair 1): the lanes' order of
        # the words' rows, computed in a buffer that stays in the cache, written out once
        z = torch.empty(words.shape, dtype=_F32, device=words.device)
        torch.mul(radius, cos, out=z[:2])
        torch.mul(radius, sin, out=z[2:])
        if scale != 1.0:  # (multiplying by 1 changes no bit)
            z.mul_(k_scale)
        _to_lanes(z.add_(k_offset), dest)

    return _draw(seed, position, index, 4, dtype=dtype, table=table32, out=out)


def thresholds(p: torch.Tensor, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """The int64 thresholds ``round(p * 2**32)`` (ties to even) of probabilities ``p``.

    Exact: computed in float32 unless ``p`` is float64. Refused unless ``p``
    (a checked tensor of probabilities) broadcasts to the values' ``shape``.
    """
    if not probabilities_broadcast(p.shape, shape):
        raise InvalidValueError(
            f"probabilities of shape {tuple(p.shape)} do not broadcast to the index's shape {shape}"
        )
    wide = torch.float64 if p.dtype == torch.float64 else _F32
    return torch.round(p.to(device=device, dtype=wide) * 2.0**32).to(torch.int64)


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
        Where to write the mask (contiguous, of ``index``'s shape and device,
        any dtype: true is 1).

    Returns
    -------
    torch.Tensor
        bool, on ``index``'s device, in ``index``'s shape: ``w < round(p * 2**32)``
        for each element's word ``w`` (``p = 0``: all false; ``p = 1``: all true).
    """
    seed, position = checked_seed_position(seed, position)
    index = checked_indices(index)
    single = probability(p)
    if isinstance(p, torch.Tensor):
        limits = thresholds(p, index_shape(index), index.device)
        words = _draw(
            seed,
            position,
            index,
            4,
            dtype=torch.int64,
            table=lambda w, dest: _to_lanes(w.bitwise_and_(MASK32), dest),
        )
        mask = words < limits
        return mask if out is None else out.copy_(mask)
    word, _ = _makers(index.device)
    k_mask, k_threshold = word(MASK32), word(round(single * 2**32))
    return _draw(
        seed,
        position,
        index,
        4,
        dtype=torch.bool,
        table=lambda w, dest: _to_lanes(w.bitwise_and_(k_mask).lt_(k_threshold), dest),
        out=out,
    )


def dropout_scale(source: torch.Tensor, p: float, index: Indices) -> float:
    """Dropout's scale ``1 / (1 - p)`` in ``source``'s dtype, ``p`` and ``source`` checked.

    Refused as :func:`~hwrng._philox._parameters.dropout_parameters` refuses ``p`` and the
    dtype, and (:class:`~hwrng.InvalidValueError`) where ``source`` is not of ``index``'s shape.
    """
    scale, _ = dropout_parameters(source.dtype, p)
    if tuple(source.shape) != index_shape(index):
        raise InvalidValueError(
            f"the input has shape {tuple(source.shape)}, the index {index_shape(index)}"
        )
    return scale


def dropout(
    seed: int, position: int, index: Indices, source: torch.Tensor, p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dropout of ``source``, the values at global indices ``index``: the output and its mask.

    Parameters
    ----------
    seed : int
        The 64-bit seed, in ``[0, 2**64)``.
    position : int
        The op's position, in ``[0, 2**63)``.
    index : torch.Tensor or ShardIndices
        Global flat element indices, or a shard's description by per-dim index vectors.
    source : torch.Tensor
        The input, of ``index``'s shape: float32, float64, float16 or bfloat16.
    p : float
        The probability of dropping an element, ``0 < p < 1``.

    Returns
    -------
    tuple of torch.Tensor
        ``source * m * c`` (``source * 0`` where dropped) and the mask ``m`` of
        kept elements, Bernoulli(``1 - p``); ``c`` is ``1 / (1 - p)`` in the
        dtype (see :func:`~hwrng._philox._parameters.dropout_parameters`).
    """
    scale = dropout_scale(source, p, index)
    kept = bernoulli_mask(seed, position, index, 1.0 - p)
    factor = kept.to(source.dtype).mul_(scale)  # exact: scale is a value of the dtype
    return source * factor, kept


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

    Returns
    -------
    torch.Tensor
        Values of ``dtype`` in ``[a, b]``, on ``index``'s device, in ``index``'s
        shape; see the module's bit-to-float mapping.
    """
    seed, position = checked_seed_position(seed, position)
    index = checked_indices(index)
    mean, std, a, b, lo, hi = trunc_normal_parameters(dtype, mean, std, a, b)
    if a == b:
        return _filled(index, a, dtype, out)
    alpha, beta, mirror = standard_bounds(mean, std, a, b)

    if dtype == torch.float64:
        base, width = phi_interval(alpha, beta)

        def table(words: torch.Tensor, dest: torch.Tensor) -> None:
            w0, w1, w2, w3 = _words(words)
            k = torch.stack(
                (
                    (w0 >> 6).bitwise_left_shift_(26).bitwise_or_(w1 >> 6),
                    (w2 >> 6).bitwise_left_shift_(26).bitwise_or_(w3 >> 6),
                )
            )
            u = k.mul_(2).add_(1).to(torch.float64).mul_(2.0**-53)
            x = ndtri(u.mul_(width).add_(base))
            if mirror:
                x.neg_()
            _store_rows(x.mul_(std).add_(mean).clamp_(a, b).clamp_(lo, hi), dest)

        return _draw(seed, position, index, 2, dtype=dtype, table=table, out=out)

    scaled = tail_scale(alpha, beta)
    scale, offset = m32.f32(std), m32.f32(mean)
    word, single = _makers(index.device)
    k_mask, k_two, k_one = word(MASK32), word(2), word(1)
    k_unit, k_width, k_base = single(2.0**-33), single(scaled.width), single(scaled.base)
    k_scale, k_offset, k_lo, k_hi = single(scale), single(offset), single(lo), single(hi)

    def table32(words: torch.Tensor, dest: torch.Tensor) -> None:
        w = words.bitwise_and_(k_mask)
        u = (w * k_two).add_(k_one).to(_F32).mul_(k_unit)
        p = u.mul_(k_width).add_(k_base)
        x = _ndtri32(p, w, scaled)
        if mirror:
            x.neg_()
        _to_lanes(_clamp(x.mul_(k_scale).add_(k_offset), k_lo, k_hi), dest)

    return _draw(seed, position, index, 4, dtype=dtype, table=table32, out=out)


def _ndtri32(p: torch.Tensor, w: torch.Tensor, scaled: TailScale) -> torch.Tensor:
    """``Phi^-1`` of the truncated normal's probabilities ``p * 2**-shift`` (float32).

    ``w`` are the words ``p`` came from: the upper tail is computed from the
    complement ``1 - p``, drawn from ``2**32 - 1 - w`` (the complementary
    uniform) so that it keeps float32's relative precision.
    """
    if scaled.shift:  # every p lies below 1/16: the lower tail, scaled back by 2**-shift
        t = m32.sqrt(m32.ln(p, -scaled.shift).neg_())
        return m32.ndtri_tail(t).neg_()
    word, single = _makers(p.device)
    q = p - single(0.5)
    lower = q.view(torch.int32) >> Maker(torch.int32, p.is_cpu)(31)  # -1 where q < 0 (never -0)
    complement = w.neg().add_(word(MASK32)).mul_(word(2)).add_(word(1))
    complement = complement.to(_F32).mul_(single(2.0**-33))
    complement.mul_(single(scaled.width)).add_(single(scaled.upper))
    tail_p = m32.select(lower, p, complement)
    tail = m32.negate_where(lower, m32.ndtri_tail(m32.sqrt(m32.ln(tail_p).neg_())))
    outside = m32.less_than(m32.CENTRAL_LIMIT_BITS, q)
    return m32.select(outside, tail, m32.ndtri_central(q))

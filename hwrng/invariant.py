"""Placement-invariant random ops: the same numbers at any sharding, device count and backend.

Each value is a pure function of ``(seed, op position, global element index)``
through Philox4x32-10 and a fixed bit-to-float mapping -- a versioned
contract, :data:`CONTRACT`, written out in ``docs/invariant.md`` -- so a
sharded op's shards put together equal what one device draws for the whole
tensor, at any mesh, placement and number of ranks, and any device computing
the contract draws the same bits (``hwrng conformance`` checks a backend
against the contract's known answers). float32, float16 and bfloat16 values
are computed without float64. A rank computes only its own shard's values.

These functions fill a local shard described by a :class:`~hwrng.ShardSpec`
(Megatron-style tensor parallelism without DTensor); with
``hwrng.dtensor.install(invariant=True)`` DTensor's random ops do the same.
Each op reads the generator's ``(seed, offset)`` as :class:`~hwrng.OffsetTracker`
does, draws at that position, and moves every rank's generator to ``offset +
advance(spec)``: the tensor's size rounded up to 4, the same on every layout,
so the next op's position -- and numbers -- do not depend on the sharding.
The one exception is :func:`dropout` with nothing to draw (``p = 0``, ``p = 1``
or ``training=False``, contract 3): it draws nothing and leaves the generator
where it is, as torch's dropout does, on every layout alike.
Invariant ops and ordinary tracked ops interleave safely: positions only grow,
and invariant blocks live in a counter domain of their own. (An ordinary
tracked op's advance depends on the layout, so invariance holds across layouts
for the invariant ops of a program and the local draws between them.)

The numbers are not ``torch.rand``'s: the ordinary (default) mode keeps
torch's numbers where shards are even; invariant mode gives up that
compatibility for invariance. Cost: on the CPU the ops run compiled kernels
when numba is installed (``hwrng[fast]``; ``hwrng backends`` says which path
runs, ``HWRNG_INVARIANT_CPU`` chooses) and torch tensor ops otherwise, the
same bits either way (see the benchmarks for the ratios to torch's own
kernels); the elementary functions are hwrng's own, built from correctly
rounded operations, so no library function decides a bit. The ops refuse to be
captured into a CUDA graph (a replay would repeat the numbers).

Under ``torch.compile`` every op (and :func:`global_index`) runs eagerly:
the compiled code breaks its graph at the call (the op is disabled for dynamo
on its first call, so importing this module loads no part of torch's compiler),
so the op keeps its exact contract -- the same values as eager code, the
generator advanced as in eager code -- and the code around it is compiled.
With ``fullgraph=True`` torch refuses the call with an error that names the
op and the fix. :func:`advance` is plain arithmetic and is traced.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import torch
from torch._compile import _disable_dynamo

from hwrng import _philox
from hwrng._exceptions import InvalidArgumentError, InvalidValueError, MeshError, NestingError
from hwrng._philox import _contract
from hwrng._philox._contract import record_draw
from hwrng._philox._parameters import dropout_parameters
from hwrng._platform import Platform
from hwrng._registry import platform_in_force
from hwrng._sharding import ShardSpec, chunk_size
from hwrng._tracker import OffsetTracker

__all__ = [
    "CONTRACT",
    "CONTRACT_VERSION",
    "advance",
    "bernoulli_",
    "dropout",
    "global_index",
    "normal_",
    "trunc_normal_",
    "uniform_",
]


CONTRACT: str = _contract.CONTRACT
"""The contract the ops compute: ``"hwrng-philox4x32-10-v3"``.

The counter layout and the bit-to-float mapping, written out in
``docs/invariant.md``; checkpoints of a job that drew invariant values record
it, and a resume under another contract is refused.
"""

CONTRACT_VERSION: int = _contract.CONTRACT_VERSION
"""The version number of :data:`CONTRACT` (3)."""

Ranges = list[tuple[int, int]]  # (start, length) runs whose concatenation is a dim's positions

_Op = TypeVar("_Op", bound=Callable[..., Any])


def _runs_eagerly(why: str) -> Callable[[_Op], _Op]:
    """The op as compiled code calls it: a graph break at the call, the op run eagerly.

    Dynamo cannot trace the ops faithfully: they read the generator's position
    on the host and move it, check index ranges by reading tensor values, and
    round their float parameters through ``struct`` (on which dynamo's polyfill
    recursed without end). Run eagerly, an op draws and advances exactly as in
    eager code. ``fullgraph=True`` refuses the call with torch's ``Unsupported``
    error, whose message carries the reason made here: the op, why, and the fix.

    ``torch.compiler.disable`` would import ``torch._dynamo`` (and with it torch's
    compiler stack and ``torch.distributed.tensor``) when this module loads, so the
    op is wrapped by ``torch._disable_dynamo`` instead, torch's own deferred form of
    it: the wrapper imports dynamo and disables the op on its first call, and lives
    in a module dynamo never traces, so compiled code breaks its graph at the call
    even when that call is the op's first. The two attributes below are what dynamo
    reads from a disabled function at that break: they make its message the reason
    made here, as ``torch.compiler.disable(op, reason=...)`` does (private to torch:
    tests/test_invariant_compile.py and tests/test_import_cost.py check the message).
    """

    def wrap(op: _Op) -> _Op:
        name = f"hwrng.invariant.{op.__name__}"
        eager = _disable_dynamo(op)
        eager._torchdynamo_disable = True  # type: ignore[attr-defined]
        eager._torchdynamo_disable_msg = (  # type: ignore[attr-defined]
            f"{name} {why}, so torch.compile runs it eagerly, breaking the graph at the call, "
            f"which fullgraph=True forbids: compile with fullgraph=False (the default), or call "
            f"{name} outside the compiled function"
        )
        return cast(_Op, eager)

    return wrap


_DRAWS = "reads the generator's position on the host and advances it"


def _window(ranges: Ranges, offset: int, length: int) -> Ranges:
    """Positions ``[offset, offset + length)`` of the concatenation of ``ranges``."""
    out: Ranges = []
    for start, size in ranges:
        if length <= 0:
            break
        if offset >= size:
            offset -= size
            continue
        take = min(size - offset, length)
        out.append((start + offset, take))
        offset, length = 0, length - take
    return out


def _chunk(ranges: Ranges, count: int, index: int) -> Ranges:
    """Piece ``index`` of ``count`` as DTensor's Shard splits a dim (``torch.chunk``)."""
    size = sum(length for _, length in ranges)
    full = -(-size // count)
    return _window(ranges, full * index, chunk_size(size, count, index))


def _dim_ranges(spec: ShardSpec) -> list[Ranges]:
    """The global positions along each tensor dim that this coordinate's shard holds, as runs.

    Pure integer work on a few runs per dim (one, or one per ``_StridedShard``
    piece): nothing the size of the global tensor is built.
    """
    runs: list[Ranges] = [[(0, n)] for n in spec.shape]
    for layout, size, coordinate in zip(
        spec._layout, spec.mesh_shape, spec.coordinate, strict=True
    ):
        if layout is None:
            continue
        dim, split_factor = layout
        if split_factor == 1:
            runs[dim] = _chunk(runs[dim], size, coordinate)
        else:  # _StridedShard: every one of split_factor pieces contributes its chunk
            pieces = [_chunk(runs[dim], split_factor, i) for i in range(split_factor)]
            runs[dim] = [run for piece in pieces for run in _chunk(piece, size, coordinate)]
    return runs


def _dim_indices(spec: ShardSpec, device: torch.device | None) -> list[torch.Tensor]:
    """The global positions along each tensor dim that this coordinate's shard holds."""
    return _vectors(_dim_ranges(spec), device)


def _vectors(ranges: list[Ranges], device: torch.device | None) -> list[torch.Tensor]:
    """Each dim's runs of positions as one int64 vector on ``device``."""
    vectors = []
    for runs in ranges:
        parts = [torch.arange(start, start + length, device=device) for start, length in runs]
        vectors.append(
            torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64, device=device)
        )
    return vectors


@_runs_eagerly("checks the shard's index ranges on the host")
def global_index(spec: ShardSpec, device: torch.device | str | None = None) -> torch.Tensor:
    """The global flat index of every element of this coordinate's shard, in the shard's shape.

    Examples
    --------
    >>> import hwrng
    >>> from torch.distributed.tensor import Shard
    >>> spec = hwrng.ShardSpec((4, 3), (2,), (Shard(1),), (1,))
    >>> global_index(spec).tolist()
    [[2], [5], [8], [11]]
    """
    if not isinstance(spec, ShardSpec):
        raise InvalidArgumentError(f"global_index needs a ShardSpec, got {type(spec).__name__}")
    where = None if device is None else torch.device(device)
    return _philox.flat_index(_dim_indices(spec, where), spec.shape)


def _position(
    spec: ShardSpec,
    generator: torch.Generator | None,
    platform: Platform | str | None,
    choose_seed: Callable[[int], int] | None,
) -> Any:
    """A region of ``end_increment`` from the generator's position; it yields the draw position.

    Refused while the platform's stream is captured into a graph: the position
    is read on the host and becomes part of the launch, so every replay would
    draw the same numbers.
    """
    tracker = OffsetTracker(platform_in_force(platform))
    if tracker.platform.stream_capturing():
        raise NestingError(
            "hwrng's invariant ops cannot be captured into a graph: their position is read on "
            "the host when the op is issued, so every replay would draw the same numbers; run "
            "them outside the captured region"
        )
    if generator is not None:
        tracker.platform.check_generator(generator)
    return tracker.positioned_by(
        0, advance(spec), generator, via_default=False, choose_seed=choose_seed
    )


def advance(spec: ShardSpec) -> int:
    """How far an invariant op moves the generator: the tensor's size, rounded up to 4.

    The same on every layout (unlike a tracked op's end increment, which pads
    every shard), so the position of the next op -- and its numbers -- do not
    depend on the sharding either.
    """
    return (spec.numel + 3) // 4 * 4


def _fill(
    tensor: torch.Tensor,
    spec: ShardSpec,
    generator: torch.Generator | None,
    platform: Platform | str | None,
    draw: _philox.Draw,
    *,
    choose_seed: Callable[[int], int] | None = None,
) -> torch.Tensor:
    """Fill ``tensor`` with ``draw(seed, position, indices)`` (from :func:`_philox.drawer`).

    Everything is checked before the generator moves (the drawer checked its
    parameters when it was made); an error inside ``draw`` after that (none is
    expected) would leave it advanced past the op. A contiguous ``tensor``
    receives the values directly, without a copy.
    """
    index = _shard_indices(tensor, spec)
    region = _position(spec, generator, platform, choose_seed)
    record_draw()
    with region, torch.no_grad():
        seed, position = region.position
        if tensor.is_contiguous():
            draw(seed, position, index, out=tensor)
        else:
            tensor.copy_(draw(seed, position, index))
    return tensor


def _shard_indices(tensor: torch.Tensor, spec: ShardSpec) -> _philox.ShardIndices:
    """The shard ``tensor`` holds, described for the Philox ops, once checked against ``spec``."""
    if not isinstance(spec, ShardSpec):
        raise InvalidArgumentError(f"needs a ShardSpec, got {type(spec).__name__}")
    if tuple(tensor.shape) != spec.local_shape:
        raise MeshError(
            f"the tensor has shape {tuple(tensor.shape)}, but the spec's shard is "
            f"{spec.local_shape}"
        )
    ranges = _dim_ranges(spec)
    index = _philox.ShardIndices(
        tuple(_vectors(ranges, tensor.device)),
        spec.shape,
        tuple(tuple(runs) for runs in ranges),
    )
    index.check()  # on the host: the ranges say where every dim's positions lie
    return index


@_runs_eagerly(_DRAWS)
def uniform_(
    tensor: torch.Tensor,
    spec: ShardSpec,
    low: float = 0.0,
    high: float = 1.0,
    *,
    generator: torch.Generator | None = None,
    platform: Platform | str | None = None,
) -> torch.Tensor:
    """Fill the local shard ``tensor`` of ``spec`` with invariant uniform values in ``[low, high)``.

    Parameters
    ----------
    tensor
        This rank's shard, of shape ``spec.local_shape``; filled in place.
    spec
        The sharded tensor, as this rank sees it.
    low, high
        The interval.
    generator
        The generator whose position the op takes and advances (by default the
        platform's current device's default generator).
    platform
        A :class:`~hwrng.Platform`, a name, or ``None`` for the selected one.

    Returns
    -------
    torch.Tensor
        ``tensor``.
    """
    draw = _philox.drawer("uniform", tensor.dtype, low=low, high=high)
    return _fill(tensor, spec, generator, platform, draw)


@_runs_eagerly(_DRAWS)
def normal_(
    tensor: torch.Tensor,
    spec: ShardSpec,
    mean: float = 0.0,
    std: float = 1.0,
    *,
    generator: torch.Generator | None = None,
    platform: Platform | str | None = None,
) -> torch.Tensor:
    """Fill the local shard with invariant normal values (Box-Muller within a Philox block)."""
    draw = _philox.drawer("normal", tensor.dtype, mean=mean, std=std)
    return _fill(tensor, spec, generator, platform, draw)


@_runs_eagerly(_DRAWS)
def bernoulli_(
    tensor: torch.Tensor,
    spec: ShardSpec,
    p: float = 0.5,
    *,
    generator: torch.Generator | None = None,
    platform: Platform | str | None = None,
) -> torch.Tensor:
    """Fill the local shard with invariant 0/1 values, 1 with probability ``p``."""
    draw = _philox.drawer("bernoulli", tensor.dtype, p=p)
    return _fill(tensor, spec, generator, platform, draw)


@_runs_eagerly(_DRAWS)
def trunc_normal_(  # noqa: PLR0917 - positional as in torch.nn.init.trunc_normal_
    tensor: torch.Tensor,
    spec: ShardSpec,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    *,
    generator: torch.Generator | None = None,
    platform: Platform | str | None = None,
) -> torch.Tensor:
    """Fill the local shard with invariant normal values truncated to ``[a, b]``.

    By inverse CDF, one draw per value: unlike ``torch.nn.init.trunc_normal_``,
    which samples by rejection and may loop a different number of times on
    each rank, it always ends every rank at one position.
    """
    draw = _philox.drawer("trunc_normal", tensor.dtype, mean=mean, std=std, a=a, b=b)
    return _fill(tensor, spec, generator, platform, draw)


@_runs_eagerly(_DRAWS)
def dropout(
    input: torch.Tensor,
    spec: ShardSpec,
    p: float = 0.5,
    training: bool = True,
    *,
    generator: torch.Generator | None = None,
    platform: Platform | str | None = None,
) -> torch.Tensor:
    """Invariant dropout of the local shard ``input``: keep with probability ``1 - p``, scale.

    Returns ``input * m``, where ``m`` is the invariant Bernoulli mask of
    ``1 - p`` times ``1 / (1 - p)`` (the float64 quotient rounded to float32,
    then to ``input``'s dtype; float64 inputs take it as it is); gradients
    flow through the same ``m``. A dropped element is ``input * 0``: ``-0``
    where the input is negative, NaN where it is infinite or NaN (as torch's
    dropout).

    As torch's dropout, it draws nothing, and leaves the generator where it
    is, when there is nothing to draw: ``training=False`` and ``p = 0`` return
    ``input`` itself, ``p = 1`` returns ``input * 0``. Every other ``p``
    advances the generator by :func:`advance`.
    """
    if not 0.0 <= p <= 1.0:
        raise InvalidValueError(f"dropout probability must lie in [0, 1], got {p}")
    if not isinstance(spec, ShardSpec):
        raise InvalidArgumentError(f"needs a ShardSpec, got {type(spec).__name__}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * torch.zeros((), dtype=input.dtype, device=input.device)
    scale, _ = dropout_parameters(input.dtype, p)  # refuses a dtype it cannot scale
    with _dropout_draw(input, spec, p, generator=generator, platform=platform) as draw:
        output: torch.Tensor = _Dropout.apply(input, draw, scale)  # type: ignore[no-untyped-call]
    return output


_DropoutDraw = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@contextlib.contextmanager
def _dropout_draw(
    input: torch.Tensor,
    spec: ShardSpec,
    p: float,
    *,
    generator: torch.Generator | None,
    platform: Platform | str | None,
    choose_seed: Callable[[int], int] | None = None,
) -> Iterator[_DropoutDraw]:
    """The contract's dropout of ``input`` (``0 < p < 1``) at this op's position.

    Yields ``draw(source) -> (output, mask)``, computed without autograd; the
    generator moves past the op on leaving. Every refusal (a dtype, ``p``, a
    shard that does not fit ``spec``, a graph capture) comes before it moves.
    ``hwrng.invariant.dropout`` and the DTensor adapter's ``native_dropout``
    both draw through it, so they agree bit for bit.
    """
    dropout_parameters(input.dtype, p)
    _philox.check_cpu_path()
    index = _shard_indices(input, spec)
    region = _position(spec, generator, platform, choose_seed)
    record_draw()
    with region:
        seed, position = region.position
        yield functools.partial(_philox.dropout, seed, position, index, p=p)


class _Dropout(torch.autograd.Function):
    """``draw(input)``'s output forward, the gradient times its mask times the scale backward."""

    @staticmethod
    def forward(
        ctx: Any, input: torch.Tensor, draw: Callable[..., Any], scale: float
    ) -> torch.Tensor:
        output, kept = draw(input.detach())
        ctx.save_for_backward(kept)
        ctx.scale = scale
        return output  # type: ignore[no-any-return]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (kept,) = ctx.saved_tensors
        return grad * kept.to(grad.dtype).mul_(ctx.scale), None, None

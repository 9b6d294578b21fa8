"""The recomputation oracle: a checkpointed model against the same model run plainly.

A block draws from every stream asked for -- torch's default generator, a named
state of an ``RNGStatesTracker``, ``fork_rng``, ``isolate_rng`` (Python's
``random`` and NumPy), an invariant op, a tracked region on a user's generator
and, given a mesh, a DTensor op -- and the model stacks a few. :func:`train`
runs some steps of it, each block wrapped as a flavour of activation
checkpointing asks, and returns every gradient of every step and the next
draw of every stream afterwards. The oracle is the same function with the
flavour ``"plain"`` (no checkpointing, so nothing is recomputed): a flavour is
recompute-safe for the streams when both return equal tensors, bit for bit.

A block may also draw in its *backward* (gradient noise, stochastic rounding):
the kind ``"function:<stream>"`` passes its activations through a custom
``autograd.Function`` whose backward draws through that stream, ``"hook:<stream>"``
registers a tensor hook that does; neither is a recomputation, so both must
draw what they draw without checkpointing. ``inner`` wraps the block's random
part in saved-tensor hooks of its own (a nested checkpoint, ``save_on_cpu``,
``offload_wrapper``), and ``forward_context`` runs each forward inside a
context (``fork_rng``).

Each run starts from a clean slate -- every generator seeded, the tracker's
states and the CPU counter's memory (its memo of drawn states and its anchors)
forgotten -- so that no run can borrow a position remembered by another.
"""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import torch
from torch.distributed.tensor import Shard

import hwrng
from hwrng._host import HOST_COUNTER

F = torch.nn.functional

WIDTH = 8
ROWS = 4
LAYERS = 3
STREAMS = ("default", "named", "fork_rng", "isolate_rng", "invariant", "user_region")
#: The streams a block's backward draws through in the kinds "function:..." and "hook:...".
BACKWARD_STREAMS = ("named", "fork_rng", "isolate_rng", "invariant", "user_region")
#: How a block's backward draws: a custom autograd.Function's backward, or a tensor hook.
BACKWARD_DRAWERS = ("function", "hook")
#: Saved-tensor hooks a block may push around its random part (``train(inner=...)``).
INNER = ("nested", "composable", "save_on_cpu", "offload")
#: A tracked op on a 4x8 tensor that is not sharded (one rank holds all of it).
WHOLE = hwrng.ShardSpec((ROWS, WIDTH), (1,), (Shard(0),), (0,))

FLAVOURS = (
    "reentrant",
    "non_reentrant",
    "wrapper",
    "wrapper_reentrant",
    "selective",
    "selective_saves_random",
    "composable",
    "no_preserve",
    "wrapper_no_preserve",
    "reentrant_no_preserve",
    "composable_no_preserve",
)


def forget_counter() -> None:
    """Forget what the CPU counter remembers, as a fresh process would."""
    HOST_COUNTER._memo.clear()
    HOST_COUNTER._records.clear()


class Streams:
    """Every generator a block draws from, made and seeded afresh for each run."""

    def __init__(self, seed: int, *, tracker: hwrng.RNGStatesTracker | None = None) -> None:
        forget_counter()
        hwrng.manual_seed(seed, platform="cpu")
        random.seed(seed)
        np.random.seed(seed)
        if tracker is None:
            tracker = hwrng.RNGStatesTracker("cpu")
            tracker.add("model-parallel-rng", seed + 2718)
        self.tracker = tracker
        self.user = torch.Generator().manual_seed(seed + 5)
        self.offsets = hwrng.OffsetTracker("cpu")

    def next_draws(self, spec: hwrng.ShardSpec = WHOLE) -> list[torch.Tensor]:
        """One draw of each stream: equal ones say the streams stand where the oracle's do."""
        with self.tracker.fork():
            named = torch.rand(3)
        invariant = hwrng.invariant.uniform_(torch.empty(spec.local_shape), spec)
        with self.offsets.region(spec, self.user) as generator:
            user = torch.rand(spec.local_shape, generator=generator)
        seed, offset = hwrng.get_platform("cpu").get_seed_offset(torch.default_generator)
        return [
            torch.rand(3),
            named,
            invariant,
            user,
            torch.tensor([random.random(), float(np.random.rand())]),
            torch.tensor([seed, offset], dtype=torch.float64),
        ]


def _uniform(
    streams: Streams,
    stream: str,
    spec: hwrng.ShardSpec,
    dtensor: Callable[[torch.Tensor], torch.Tensor] | None,
) -> torch.Tensor:
    """Numbers in [0, 1) of the block's shape, drawn through one stream."""
    shape = spec.local_shape
    if stream == "named":
        with streams.tracker.fork():
            return torch.rand(shape)
    if stream == "fork_rng":
        with hwrng.fork_rng(platform="cpu"):
            return torch.rand(shape)
    if stream == "isolate_rng":
        with hwrng.isolate_rng(platform="cpu"):
            rows = torch.tensor([random.random() for _ in range(shape[0])])
            return rows[:, None] * torch.from_numpy(np.random.rand(*shape)).float()
    if stream == "invariant":
        return hwrng.invariant.uniform_(torch.empty(shape), spec)
    if stream == "user_region":
        with streams.offsets.region(spec, streams.user) as generator:
            return torch.rand(shape, generator=generator)
    if stream == "dtensor":
        assert dtensor is not None
        return dtensor(torch.ones(shape)) / 2.0  # a DTensor dropout of p = 0.5: 0 or 1
    raise ValueError(f"unknown stream {stream!r}")


class _NoisyGradient(torch.autograd.Function):
    """The identity, whose backward masks the gradient with numbers drawn through a stream."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, draw: Callable[[], torch.Tensor]) -> torch.Tensor:
        ctx.draw = draw
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * (ctx.draw() > 0.3).to(grad.dtype), None


class Draws(torch.nn.Module):
    """A block's random part: a dropout-like draw from each stream asked for."""

    def __init__(
        self,
        streams: Streams,
        kinds: Sequence[str],
        spec: hwrng.ShardSpec = WHOLE,
        dtensor: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        self.streams = streams
        self.kinds = tuple(kinds)
        self.spec = spec
        self.dtensor = dtensor

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        streams = self.streams
        if "default" in self.kinds:
            h = F.dropout(h, 0.25)
        if "named" in self.kinds:
            with streams.tracker.fork():
                h = F.dropout(h, 0.5)
        if "dtensor" in self.kinds:
            assert self.dtensor is not None
            h = self.dtensor(h)
        if "fork_rng" in self.kinds:
            with hwrng.fork_rng(platform="cpu"):
                h = F.dropout(h, 0.3)
        if "isolate_rng" in self.kinds:
            with hwrng.isolate_rng(platform="cpu"):
                keep = [random.random() < 0.7 for _ in range(WIDTH)]
                scale = np.random.rand(WIDTH) + 0.5
            h = h * torch.tensor(keep, dtype=h.dtype) * torch.from_numpy(scale).to(h.dtype)
        if "invariant" in self.kinds:
            h = hwrng.invariant.dropout(h, self.spec, 0.4)
            with streams.tracker.fork():  # an invariant op drawing from the named state
                h = hwrng.invariant.dropout(h, self.spec, 0.2)
        if "user_region" in self.kinds:
            with streams.offsets.region(self.spec, streams.user) as generator:
                noise = torch.rand(self.spec.local_shape, generator=generator)
            h = h * (noise > 0.3).to(h.dtype)
        for kind in self.kinds:
            drawer, _, stream = kind.partition(":")
            draw = functools.partial(_uniform, streams, stream, self.spec, self.dtensor)
            if drawer == "function":
                h = _NoisyGradient.apply(h, draw)
            elif drawer == "hook" and h.requires_grad:  # not in a reentrant forward (no_grad)
                h.register_hook(lambda grad, draw=draw: grad * (draw() > 0.3).to(grad.dtype))
        return h


class Block(torch.nn.Module):
    """A linear layer, its random part (``Draws``), in saved-tensor hooks of its own if asked.

    ``inner``: ``"nested"`` checkpoints the random part again (non-reentrant;
    ``"nested_reentrant"``: reentrant, which pushes no saved-tensor hooks),
    ``"composable"`` does with the composable ``checkpoint(module)``,
    ``"save_on_cpu"`` runs it under ``torch.autograd.graph.save_on_cpu``,
    ``"offload"`` wraps it in torch's ``offload_wrapper`` (which does the same).
    """

    def __init__(
        self,
        streams: Streams,
        kinds: Sequence[str],
        spec: hwrng.ShardSpec = WHOLE,
        dtensor: Callable[[torch.Tensor], torch.Tensor] | None = None,
        inner: str | None = None,
    ) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(WIDTH, WIDTH)
        self.draws: torch.nn.Module = Draws(streams, kinds, spec, dtensor)
        self.inner = inner
        if inner == "offload":
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
                offload_wrapper,
            )

            self.draws = offload_wrapper(self.draws)
        elif inner == "composable":
            from torch.distributed._composable import checkpoint as composable

            composable(self.draws)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        h = torch.tanh(self.lin(x))
        if self.inner in ("nested", "nested_reentrant"):
            h = checkpoint(self.draws, h, use_reentrant=self.inner == "nested_reentrant")
        elif self.inner == "save_on_cpu":
            with torch.autograd.graph.save_on_cpu():
                h = self.draws(h)
        else:
            h = self.draws(h)
        # A tensor saved after the random part: a recomputation runs through all of it (torch
        # stops one early once the last tensor saved under its own hooks is back).
        return torch.tanh(h)


def _keeps_random_ops(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import CheckpointPolicy

    saved = op.overloadpacket in (torch.ops.aten.native_dropout, torch.ops.aten.rand)
    return CheckpointPolicy.MUST_SAVE if saved else CheckpointPolicy.PREFER_RECOMPUTE


def _keeps_matmuls(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import CheckpointPolicy

    if op in (torch.ops.aten.addmm.default, torch.ops.aten.mm.default):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def wrap(  # noqa: PLR0911 - one return per flavour reads best
    flavour: str, block: torch.nn.Module
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``block`` under one flavour of activation checkpointing (``"plain"``: none)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        checkpoint_wrapper,
    )
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    def checkpointed(**options: Any) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda x: checkpoint(block, x, **options)

    if flavour == "plain":
        return block
    if flavour == "reentrant":
        return checkpointed(use_reentrant=True)
    if flavour in ("non_reentrant", "compiled"):
        return checkpointed(use_reentrant=False)
    if flavour == "no_preserve":
        return checkpointed(use_reentrant=False, preserve_rng_state=False)
    if flavour == "reentrant_no_preserve":
        return checkpointed(use_reentrant=True, preserve_rng_state=False)
    if flavour == "wrapper":
        return checkpoint_wrapper(block)
    if flavour == "wrapper_no_preserve":  # torchtitan's apply_ac
        return checkpoint_wrapper(block, preserve_rng_state=False)
    if flavour == "wrapper_reentrant":
        return checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.REENTRANT)
    if flavour in ("selective", "selective_saves_random"):
        policy = _keeps_matmuls if flavour == "selective" else _keeps_random_ops
        contexts = functools.partial(create_selective_checkpoint_contexts, policy)
        return checkpointed(use_reentrant=False, context_fn=contexts)
    if flavour in ("composable", "composable_no_preserve"):
        from torch.distributed._composable import checkpoint as composable

        return composable(block, preserve_rng_state=flavour == "composable")
    raise ValueError(f"unknown flavour {flavour!r}")


def kinds_for(flavour: str, kinds: Sequence[str] = STREAMS) -> tuple[str, ...]:
    """The streams a flavour must keep: all but what torch itself leaves unkept.

    ``preserve_rng_state=False`` tells torch not to rewind its default
    generator, so the block's plain draws differ in the recomputation by
    torch's design. Every stream holds under ``torch.compile`` (the invariant
    ops break the graph and run eagerly, and a checkpoint whose block breaks
    the graph runs eagerly, recomputation and all).
    """
    if flavour.endswith("no_preserve"):
        return tuple(k for k in kinds if k != "default")
    return tuple(kinds)


def _between_forward_and_backward() -> None:
    """What a training loop draws between a forward and its backward (a data pipeline's
    Python and NumPy draws): torch's checkpoint rewinds neither before it recomputes."""
    random.random()
    np.random.rand()


def train(
    flavour: str,
    kinds: Sequence[str],
    *,
    steps: int = 3,
    seed: int = 11,
    tracker: hwrng.RNGStatesTracker | None = None,
    spec: hwrng.ShardSpec = WHOLE,
    dtensor: Callable[[torch.Tensor], torch.Tensor] | None = None,
    next_dtensor: Callable[[], torch.Tensor] | None = None,
    backward: Callable[[torch.Tensor], None] = torch.Tensor.backward,
    inner: str | None = None,
    forward_context: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
) -> tuple[list[list[torch.Tensor]], list[torch.Tensor]]:
    """Every gradient of every step, then the next draw of every stream.

    ``dtensor`` is the block's DTensor op (for the kind ``"dtensor"``),
    ``next_dtensor`` draws the DTensor stream once more after the steps,
    ``backward`` runs each step's backward pass from its loss, ``inner`` wraps
    each block's random part (see :class:`Block`) and each step's forward runs
    inside ``forward_context()``.
    """
    streams = Streams(seed, tracker=tracker)
    torch.manual_seed(seed)  # the weights, then the default stream again
    blocks = [Block(streams, kinds, spec, dtensor, inner) for _ in range(LAYERS)]
    hwrng.manual_seed(seed, platform="cpu")
    forget_counter()
    layers = [wrap(flavour, block) for block in blocks]

    def model(x: torch.Tensor) -> torch.Tensor:
        for layer in layers:
            x = layer(x)
        return x

    if flavour == "compiled":
        torch._dynamo.reset()  # a fresh compilation: no code cached for another run's blocks
    run = torch.compile(model, backend="aot_eager") if flavour == "compiled" else model
    grads = []
    for step in range(steps):
        x = torch.linspace(-1.0, 1.0, ROWS * WIDTH).reshape(ROWS, WIDTH) + step
        x.requires_grad_()
        with forward_context():
            loss = run(x).square().sum()
        _between_forward_and_backward()
        backward(loss)
        grads.append([x.grad.clone()] + [p.grad.clone() for b in blocks for p in b.parameters()])
        for block in blocks:
            block.zero_grad()
    extra = [] if next_dtensor is None else [next_dtensor()]
    return grads, streams.next_draws(spec) + extra


#: A 1F1B-like order of four microbatches: ("f", k) runs microbatch k's forward, ("b", k) its
#: backward, so microbatch k is recomputed after the forwards of k+1 and k+2 (and 2 last).
SCHEDULE = (("f", 0), ("f", 1), ("f", 2), ("b", 0), ("f", 3), ("b", 1), ("b", 3), ("b", 2))


def interleaved(
    flavour: str,
    kinds: Sequence[str],
    *,
    seed: int = 3,
    tracker: hwrng.RNGStatesTracker | None = None,
    spec: hwrng.ShardSpec = WHOLE,
    dtensor: Callable[[torch.Tensor], torch.Tensor] | None = None,
    next_dtensor: Callable[[], torch.Tensor] | None = None,
) -> tuple[list[list[torch.Tensor]], list[torch.Tensor]]:
    """:func:`train`'s result for four microbatches run in the order of :data:`SCHEDULE`."""
    streams = Streams(seed, tracker=tracker)
    torch.manual_seed(seed)
    blocks = [Block(streams, kinds, spec, dtensor) for _ in range(2)]
    hwrng.manual_seed(seed, platform="cpu")
    forget_counter()
    layers = [wrap(flavour, block) for block in blocks]
    inputs = [torch.full((ROWS, WIDTH), float(k), requires_grad=True) for k in range(4)]
    losses: dict[int, torch.Tensor] = {}
    for op, k in SCHEDULE:
        if op == "f":
            h = inputs[k]
            for layer in layers:
                h = layer(h)
            losses[k] = h.square().sum()
            _between_forward_and_backward()
        else:
            losses.pop(k).backward()
    grads = [[x.grad for x in inputs] + [p.grad for b in blocks for p in b.parameters()]]
    extra = [] if next_dtensor is None else [next_dtensor()]
    return grads, streams.next_draws(spec) + extra


def mismatches(
    expected: tuple[list[list[torch.Tensor]], list[torch.Tensor]],
    got: tuple[list[list[torch.Tensor]], list[torch.Tensor]],
) -> list[str]:
    """What differs between two runs of :func:`train`, bit for bit (empty: nothing)."""
    found = [
        f"step {step}: gradient {i} differs"
        for step, (want, have) in enumerate(zip(expected[0], got[0], strict=True))
        for i, (a, b) in enumerate(zip(want, have, strict=True))
        if not torch.equal(a, b)
    ]
    names = ["default", "named", "invariant", "user generator", "random/numpy", "position"]
    names += ["DTensor"] * (len(expected[1]) - len(names))
    found += [
        f"next {name} draw differs"
        for name, a, b in zip(names, expected[1], got[1], strict=True)
        if not torch.equal(a, b)
    ]
    return found

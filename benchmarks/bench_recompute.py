"""What hwrng's recompute-safety costs a checkpointed block, against the same block without it.

The block is a transformer's MLP half (LayerNorm, Linear, GELU, Linear) with
two dropouts where hwrng's streams meet activation checkpointing: one inside
a named-state fork (Megatron's tensor-parallel dropout) and one through a
tracked region (what the DTensor adapter runs every DTensor dropout in). Each
step is a forward and a backward of the block under ``torch.utils.checkpoint``,
so the backward recomputes it.

The baseline of each group is the same checkpointed step with hwrng's part
switched off -- :func:`hwrng._recompute.site` answering ``None``, as if no
checkpoint were around: no frame read, nothing journaled or replayed (what
hwrng did before, drawing other masks in the recomputation) -- measured in the
same run, interleaved sample by sample. A group without checkpointing shows
the cost of the check alone where there is nothing to journal.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from _timing import Result, measure, one_thread
from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.utils.checkpoint import checkpoint

import hwrng
from hwrng import _recompute


def _no_site() -> None:
    """As before recompute-safety: hwrng's contexts never see a checkpoint."""
    return None


class Block(nn.Module):
    """LayerNorm, Linear, GELU, dropout in a named state, Linear, dropout in a tracked region."""

    def __init__(self, width: int, states: hwrng.RNGStatesTracker, spec: hwrng.ShardSpec) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.states = states
        self.spec = spec
        self.offsets = hwrng.OffsetTracker(states.platform)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output for ``x`` of shape ``(..., width)``."""
        hidden = nn.functional.gelu(self.up(self.norm(x)))
        with self.states.fork():
            hidden = nn.functional.dropout(hidden, 0.1)
        out = self.down(hidden)
        with self.offsets.region(self.spec) as generator:
            keep = torch.rand(self.spec.local_shape, generator=generator, device=x.device) > 0.1
        return x + out * keep.reshape(out.shape) / 0.9


def _deep(depth: int, body: Callable[[], None]) -> Callable[[], None]:
    """``body`` called ``depth`` Python frames down (the stack a deep model's forks see)."""

    def call(level: int) -> None:
        if level:
            call(level - 1)
        else:
            body()

    return lambda: call(depth)


def run(platform: hwrng.Platform, quick: bool) -> list[Result]:
    """Time checkpointed block steps with hwrng's journal on and off, and one fork alone.

    torch runs on one thread here: hwrng's part is single-threaded Python, and a
    shared machine's other load moves a multi-threaded step by more than it.
    """
    with one_thread():
        return _run(platform, quick)


def _run(platform: hwrng.Platform, quick: bool) -> list[Result]:
    device = platform.device()
    width, tokens = 128, 4 * 64
    torch.manual_seed(0)
    states = hwrng.RNGStatesTracker(platform, name="bench-recompute")
    states.add("model-parallel-rng", 2718)
    spec = hwrng.ShardSpec((2 * tokens, width), (2,), (Shard(0),), (0,))
    block = Block(width, states, spec).to(device)
    x = torch.randn(4, 64, width, device=device, requires_grad=True)

    def step(reentrant: bool | None) -> Callable[[], None]:
        def body() -> None:
            if reentrant is None:
                block(x).sum().backward()
            else:
                checkpoint(block, x, use_reentrant=reentrant).sum().backward()

        return body

    site = _recompute.site

    def switch_off() -> None:
        _recompute.site = _no_site  # type: ignore[assignment]

    def switch_on() -> None:
        _recompute.site = site  # type: ignore[assignment]

    try:
        return _measure(block, x, states, platform, step, switch_off, switch_on, quick)
    finally:
        switch_on()


def _measure(  # noqa: PLR0917 - one private helper of run()
    block: Block,
    x: torch.Tensor,
    states: hwrng.RNGStatesTracker,
    platform: hwrng.Platform,
    step: Callable[[bool | None], Callable[[], None]],
    switch_off: Callable[[], None],
    switch_on: Callable[[], None],
    quick: bool,
) -> list[Result]:
    sync = torch.cuda.synchronize if platform.device().type == "cuda" else None
    samples = 7 if quick else 15
    inner = 5 if quick else 20
    width = x.shape[-1]
    results: list[Result] = []
    for label, reentrant in (("non-reentrant", False), ("reentrant", True)):
        results += measure(
            f"checkpointed MLP block step ({label}), 4x64x{width}",
            {
                "hwrng's recompute part off": step(reentrant),
                "hwrng's recompute part on": step(reentrant),
                "on, called 40 frames deep": _deep(40, step(reentrant)),
            },
            baseline="hwrng's recompute part off",
            inner=inner,
            samples=samples,
            sync=sync,
            before={
                "hwrng's recompute part off": switch_off,
                "hwrng's recompute part on": switch_on,
                "on, called 40 frames deep": switch_on,
            },
            notes={
                "hwrng's recompute part off": "before: the recomputation drew other masks",
            },
        )
    contexts = 32

    def many(kind: str, reentrant: bool) -> Callable[[], None]:
        """Forward and backward of a checkpointed function that enters ``contexts`` of ``kind``."""
        replicated = hwrng.ShardSpec((64, 64), (2,), (Replicate(),), (0,))

        def function(inputs: torch.Tensor) -> torch.Tensor:
            for _ in range(contexts):
                if kind == "fork":
                    with states.fork():
                        pass
                else:
                    with block.offsets.region(replicated):
                        pass
            return inputs * inputs  # saves a tensor: the backward recomputes

        small = torch.ones(4, requires_grad=True)
        return lambda: checkpoint(function, small, use_reentrant=reentrant).sum().backward()

    for kind in ("fork", "region"):
        for label, reentrant in (("non-reentrant", False), ("reentrant", True)):
            results += measure(
                f"{contexts} empty {kind}s in a checkpointed function, fwd+bwd ({label})",
                {
                    "hwrng's part off": many(kind, reentrant),
                    "hwrng's part on": many(kind, reentrant),
                },
                baseline="hwrng's part off",
                inner=inner,
                samples=samples,
                sync=sync,
                before={"hwrng's part off": switch_off, "hwrng's part on": switch_on},
                notes={"hwrng's part on": f"(on - off) / {contexts}: the cost of one {kind}"},
            )
    results += measure(
        f"MLP block step without checkpointing, 4x64x{width}",
        {"hwrng's check off": step(None), "hwrng's check on": step(None)},
        baseline="hwrng's check off",
        inner=inner,
        samples=samples,
        sync=sync,
        before={"hwrng's check off": switch_off, "hwrng's check on": switch_on},
    )

    def fork() -> None:
        with states.fork():
            pass

    replicated = hwrng.ShardSpec((64, 64), (2,), (Replicate(),), (0,))
    offsets = hwrng.OffsetTracker(platform)

    def region() -> None:
        with offsets.region(replicated):
            pass

    results += measure(
        "one empty fork or region, outside checkpoints",
        {
            "fork, check off": fork,
            "fork, check on": fork,
            "region, check off": region,
            "region, check on": region,
        },
        baseline="fork, check off",
        inner=200 if quick else 1000,
        samples=samples,
        sync=sync,
        before={
            "fork, check off": switch_off,
            "fork, check on": switch_on,
            "region, check off": switch_off,
            "region, check on": switch_on,
        },
    )
    return results

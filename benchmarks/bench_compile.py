"""What the graph break at an invariant op costs under torch.compile.

Under ``torch.compile`` each ``hwrng.invariant`` op runs eagerly: compiled code
breaks its graph at the call (``torch.compiler.disable``). A step of a
transformer's MLP half (Linear, GELU, dropout, Linear; forward and backward)
is timed eagerly and compiled by inductor, once with
``hwrng.invariant.dropout`` (two graphs around the eager op) and once with
torch's dropout (one graph; inductor draws its own numbers). The baseline is
the eager step with the invariant dropout, measured in the same run,
interleaved sample by sample. A second group times a graph break alone: two
multiplications of 8 values compiled as one graph, and as two graphs around a
``torch.compiler.disable``'d function that does nothing. A third times the
wrapper alone: an invariant op on 4 values called through
``torch.compiler.disable``'s wrapper and called directly.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from _timing import Result, measure, one_thread
from torch import nn
from torch.distributed.tensor import Shard

import hwrng
from hwrng import invariant


class Block(nn.Module):
    """Linear, GELU, dropout (``hwrng.invariant``'s or torch's), Linear."""

    def __init__(self, width: int, spec: hwrng.ShardSpec | None) -> None:
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.spec = spec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output for ``x`` of shape ``(tokens, width)``."""
        hidden = nn.functional.gelu(self.up(x))
        if self.spec is None:
            hidden = nn.functional.dropout(hidden, 0.1)
        else:
            hidden = invariant.dropout(hidden, self.spec, 0.1)
        return x + self.down(hidden)


def run(platform: hwrng.Platform, quick: bool) -> list[Result]:
    """Time the block's step eagerly and compiled, on one thread (see the module notes)."""
    try:
        with one_thread():
            return _run(platform, quick)
    finally:
        torch._dynamo.reset()


def _run(platform: hwrng.Platform, quick: bool) -> list[Result]:
    device = platform.device()
    width, tokens = 128, 256
    spec = hwrng.ShardSpec((tokens, 4 * width), (1,), (Shard(0),), (0,))
    torch.manual_seed(0)
    x = torch.randn(tokens, width, device=device, requires_grad=True)
    blocks = {
        kind: Block(width, spec if kind == "hwrng" else None).to(device)
        for kind in ("hwrng", "torch")
    }
    torch._dynamo.reset()
    compiled = {kind: torch.compile(block) for kind, block in blocks.items()}

    def step(model: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        return lambda: model(x).sum().backward()

    sync = torch.cuda.synchronize if device.type == "cuda" else None
    samples = 7 if quick else 15
    results = measure(
        f"MLP block step (fwd+bwd), {tokens}x{width}, inductor",
        {
            "eager, hwrng.invariant.dropout": step(blocks["hwrng"]),
            "compiled, hwrng.invariant.dropout (graph break)": step(compiled["hwrng"]),
            "eager, torch's dropout": step(blocks["torch"]),
            "compiled, torch's dropout (one graph)": step(compiled["torch"]),
        },
        baseline="eager, hwrng.invariant.dropout",
        inner=3 if quick else 10,
        samples=samples,
        sync=sync,
        notes={
            "compiled, hwrng.invariant.dropout (graph break)": "the op eager, two graphs",
            "compiled, torch's dropout (one graph)": "inductor's own random numbers",
        },
    )
    nothing = torch.compiler.disable(lambda: None)

    def one_graph(t: torch.Tensor) -> torch.Tensor:
        return t * 2 * 3

    def two_graphs(t: torch.Tensor) -> torch.Tensor:
        t = t * 2
        nothing()
        return t * 3

    values = torch.ones(8, device=device)
    fused, broken = torch.compile(one_graph), torch.compile(two_graphs)
    results += measure(
        "a graph break alone, inductor: 8 values times 2, then times 3",
        {
            "one graph": lambda: fused(values),
            "two graphs around a disabled call": lambda: broken(values),
        },
        baseline="one graph",
        inner=50 if quick else 200,
        samples=samples,
        sync=sync,
    )
    small = hwrng.ShardSpec((4,), (1,), (Shard(0),), (0,))
    local = torch.empty(4, device=device)
    direct = invariant.uniform_.__wrapped__  # type: ignore[attr-defined]
    results += measure(
        "hwrng.invariant.uniform_ of 4 values: torch.compiler.disable's wrapper",
        {
            "called directly (no wrapper)": lambda: direct(local, small),
            "called through the wrapper (the public op)": lambda: invariant.uniform_(local, small),
        },
        baseline="called directly (no wrapper)",
        inner=50 if quick else 200,
        samples=samples,
        sync=sync,
    )
    return results

"""hwrng.invariant under torch.compile: a graph break at each op, which runs eagerly.

The oracle is the same function run without torch.compile: compiled code must
return its tensors bit for bit (the values of every op, dropout's gradient),
and leave every generator where it leaves them (the next draws equal).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._dynamo.utils import counters
from torch.distributed.tensor import Shard
from torch.utils.checkpoint import checkpoint

import hwrng
from hwrng import invariant

#: Rank 1's rows of a 6x8 tensor split over two ranks.
SPEC = hwrng.ShardSpec((6, 8), (2,), (Shard(0),), (1,))
ROWS, WIDTH = SPEC.local_shape


def _step(user: torch.Generator) -> Callable[..., tuple[torch.Tensor, ...]]:
    """Every public op, in place and out of place, between traced tensor ops."""

    def step(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: Any) -> Any:
        y = x * 2
        invariant.uniform_(a, SPEC, -1.0, 2.0)
        invariant.normal_(b, SPEC, 1.0, 3.0)
        invariant.bernoulli_(c, SPEC, 0.3, generator=user)
        invariant.trunc_normal_(d, SPEC, 0.0, 1.0, -1.0, 1.5, platform="cpu")
        dropped = invariant.dropout(y, SPEC, 0.4)
        kept = invariant.dropout(y, SPEC, 0.4, training=False)  # draws nothing
        index = invariant.global_index(SPEC) + invariant.advance(SPEC)
        return dropped * 3, kept, index

    return step


def _run(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> list[torch.Tensor]:
    """Two calls with a backward each, then the next draw of every stream and the position."""
    hwrng.manual_seed(3, platform="cpu")
    user = torch.Generator().manual_seed(5)
    step = wrap(_step(user))
    x = torch.linspace(-1.0, 1.0, ROWS * WIDTH).reshape(ROWS, WIDTH).requires_grad_()
    results: list[torch.Tensor] = []
    for _ in range(2):
        filled = [
            torch.empty(ROWS, WIDTH),
            torch.empty(ROWS, WIDTH, dtype=torch.float64),
            torch.empty(ROWS, WIDTH),
            torch.empty(ROWS, WIDTH, dtype=torch.bfloat16),
        ]
        dropped, kept, index = step(x, *filled)
        dropped.sum().backward()
        assert x.grad is not None
        results += [*filled, dropped.detach(), kept.detach(), index, x.grad.clone()]
        x.grad = None
    position = hwrng.get_platform("cpu").get_seed_offset(torch.default_generator)
    return [*results, torch.rand(3), torch.rand(3, generator=user), torch.tensor(position)]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_every_op_draws_and_advances_as_eager_code(backend: str) -> None:
    """torch 2.13 hit a RecursionError in dynamo's struct polyfill tracing ``_to_dtype``."""
    torch._dynamo.reset()
    counters.clear()
    try:
        got = _run(lambda step: torch.compile(step, backend=backend, fullgraph=False))
    finally:
        torch._dynamo.reset()
    assert counters["stats"]["unique_graphs"] >= 2  # the code around the ops was compiled
    breaks = " ".join(counters["graph_break"])
    for name in ("uniform_", "normal_", "bernoulli_", "trunc_normal_", "dropout", "global_index"):
        assert f"hwrng.invariant.{name} " in breaks  # and each op broke the graph
    expected = _run(lambda step: step)
    assert len(got) == len(expected)
    differ = [
        i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if not torch.equal(a, b)
    ]
    assert differ == []
    assert not torch.equal(expected[0], expected[8]), "each call draws anew"


OPS: dict[str, Callable[[], Any]] = {
    "uniform_": lambda: invariant.uniform_(torch.empty(ROWS, WIDTH), SPEC),
    "normal_": lambda: invariant.normal_(torch.empty(ROWS, WIDTH), SPEC),
    "bernoulli_": lambda: invariant.bernoulli_(torch.empty(ROWS, WIDTH), SPEC, 0.3),
    "trunc_normal_": lambda: invariant.trunc_normal_(torch.empty(ROWS, WIDTH), SPEC),
    "dropout": lambda: invariant.dropout(torch.ones(ROWS, WIDTH), SPEC, 0.4),
    "global_index": lambda: invariant.global_index(SPEC),
}


@pytest.mark.parametrize("name", OPS)
def test_fullgraph_refuses_naming_the_op_and_the_fix(name: str) -> None:
    """A graph break is what runs the op faithfully; fullgraph=True forbids it: torch's error
    names the op and the fix, before anything is drawn."""
    hwrng.manual_seed(3, platform="cpu")
    before = torch.default_generator.get_state()
    torch._dynamo.reset()
    compiled = torch.compile(OPS[name], backend="eager", fullgraph=True)
    with pytest.raises(torch._dynamo.exc.Unsupported) as refused:
        compiled()
    torch._dynamo.reset()
    message = str(refused.value)
    assert f"hwrng.invariant.{name} " in message
    assert "fullgraph=False" in message and "outside the compiled function" in message
    assert torch.equal(torch.default_generator.get_state(), before)


def test_advance_is_traced_even_under_fullgraph() -> None:
    """Plain arithmetic on the spec: nothing to break the graph for."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: t + invariant.advance(SPEC), backend="eager", fullgraph=True)
    assert compiled(torch.zeros(1)).item() == 48  # the whole 6x8 tensor's size, a multiple of 4
    torch._dynamo.reset()


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return invariant.dropout(torch.tanh(self.lin(x)), SPEC, 0.4)


@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_a_compiled_block_inside_a_checkpoint_redraws(reentrant: bool) -> None:
    """Each block compiled (aot_eager), inside an eager checkpoint: the recomputation runs the
    compiled block again, whose invariant op redraws its forward's mask from the journal.
    (Compiled around the checkpoints instead: ``test_recompute.py::
    test_compiled_checkpoints_redraw``, every stream.)"""

    def train(checkpointed: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        blocks = [_Block() for _ in range(3)]
        hwrng.manual_seed(11, platform="cpu")
        torch._dynamo.reset()
        counters.clear()
        layers = [torch.compile(block, backend="aot_eager") for block in blocks]
        out = []
        for step in range(2):
            h = torch.linspace(-1.0, 1.0, ROWS * WIDTH).reshape(ROWS, WIDTH) + step
            h.requires_grad_()
            x = h
            for layer in layers:
                x = checkpoint(layer, x, use_reentrant=reentrant) if checkpointed else layer(x)
            x.square().sum().backward()
            out += [h.grad] + [p.grad.clone() for b in blocks for p in b.parameters()]
            for block in blocks:
                block.zero_grad()
        assert counters["stats"]["unique_graphs"] >= 1  # the blocks' linear and tanh, compiled
        torch._dynamo.reset()
        return [*out, invariant.uniform_(torch.empty(ROWS, WIDTH), SPEC), torch.rand(3)]

    plain, recomputed = train(False), train(True)
    assert all(torch.equal(a, b) for a, b in zip(plain, recomputed, strict=True))

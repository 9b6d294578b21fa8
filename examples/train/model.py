"""A small decoder-only transformer, tensor-parallel over ``tp`` and sharded by FSDP2 over ``dp``.

The layout is torchtitan's: the residual stream is sequence-parallel (each ``tp``
rank holds a slice of the sequence), attention and the feed-forward network are
column- then row-parallel, every block is activation-checkpointed, and FSDP2
shards every block's parameters over ``dp``. What is particular to this example
is :class:`MeshDropout`: dropout on an activation seen as **one DTensor over the
whole (dp, tp) mesh**, so that each element's global index -- its sample in the
global batch, its position, its feature -- is the same whatever the layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Placement, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

#: What a :class:`MeshDropout` hands each mask it draws to, with itself (the loop's record).
MaskSink = Callable[[nn.Module, DTensor], None]


@dataclass(frozen=True)
class Config:
    """The model's size: small enough for 4 CPU ranks on 2 cores."""

    vocab: int = 64
    dim: int = 64
    heads: int = 4
    hidden: int = 128
    layers: int = 2
    seq: int = 16
    dropout: float = 0.1


class MeshDropout(nn.Module):
    """Dropout of this rank's slice of an activation, drawn as one DTensor over the mesh.

    ``placements`` say where the local slice sits in the global activation: the
    batch dim sharded over ``dp``, a sequence or feature dim over ``tp``. The
    mask is drawn by DTensor's ``native_dropout``; with
    ``hwrng.dtensor.install(invariant=True)`` each element of it is a function of
    (seed, the op's position, the element's global index) alone.
    """

    def __init__(
        self, p: float, mesh: DeviceMesh, placements: Sequence[Placement], sink: MaskSink
    ) -> None:
        super().__init__()
        self.p = p
        self.mesh = mesh
        self.placements = tuple(placements)
        self.sink = sink

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Drop elements of ``x``, this rank's slice, and return the slice."""
        if not self.training or self.p == 0:
            return x
        whole = DTensor.from_local(x, self.mesh, self.placements, run_check=False)
        out, mask = torch.ops.aten.native_dropout(whole, self.p, True)
        self.sink(self, mask)
        return out.to_local()  # type: ignore[no-any-return]


def _rotary(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of ``x`` (batch, seq, heads, head_dim), no parameters."""
    seq, half = x.shape[1], x.shape[-1] // 2
    freqs = 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float32) / half))
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), freqs)
    cos, sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)


class Attention(nn.Module):
    """Causal self-attention; under tensor parallelism each rank holds ``heads / tp`` heads."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.head_dim = config.dim // config.heads
        self.wq = nn.Linear(config.dim, config.dim, bias=False)
        self.wk = nn.Linear(config.dim, config.dim, bias=False)
        self.wv = nn.Linear(config.dim, config.dim, bias=False)
        self.wo = nn.Linear(config.dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend over the whole sequence of ``x`` (replicated over ``tp`` by the plan)."""
        batch, seq = x.shape[0], x.shape[1]
        q, k, v = (w(x).view(batch, seq, -1, self.head_dim) for w in (self.wq, self.wk, self.wv))
        q, k = _rotary(q), _rotary(k)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))  # type: ignore[no-any-return]


class FeedForward(nn.Module):
    """GELU MLP with dropout on its hidden activation (sharded over ``tp`` by features)."""

    def __init__(self, config: Config, dropout: nn.Module) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.hidden, bias=False)
        self.w2 = nn.Linear(config.hidden, config.dim, bias=False)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The MLP of ``x``."""
        return self.w2(self.dropout(F.gelu(self.w1(x))))  # type: ignore[no-any-return]


class Block(nn.Module):
    """Pre-norm transformer block: dropout on the attention's output and inside the MLP."""

    def __init__(self, config: Config, mesh: DeviceMesh, sink: MaskSink) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(config.dim)
        self.attention = Attention(config)
        # the attention's output: (batch over dp, sequence over tp, features)
        self.attention_dropout = MeshDropout(config.dropout, mesh, (Shard(0), Shard(1)), sink)
        self.ffn_norm = nn.LayerNorm(config.dim)
        # the MLP's hidden activation: (batch over dp, whole sequence, features over tp)
        hidden_dropout = MeshDropout(config.dropout, mesh, (Shard(0), Shard(2)), sink)
        self.feed_forward = FeedForward(config, hidden_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block on the residual stream ``x`` (this rank's slice of the sequence)."""
        h = x + self.attention_dropout(self.attention(self.attention_norm(x)))
        return h + self.feed_forward(self.ffn_norm(h))  # type: ignore[no-any-return]


class Transformer(nn.Module):
    """Token embedding, ``layers`` blocks, a final norm and the output head."""

    def __init__(self, config: Config, mesh: DeviceMesh, sink: MaskSink) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab, config.dim)
        self.layers = nn.ModuleList(Block(config, mesh, sink) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.dim)
        self.output = nn.Linear(config.dim, config.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (batch, seq, vocab) for ``tokens`` (batch, seq), replicated over ``tp``."""
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        # a copy: FSDP2 warns of a view as its root's output (in-place ops would skip a hook)
        return self.output(self.norm(h)).clone()  # type: ignore[no-any-return]

    @torch.no_grad()
    def init_weights(self) -> None:
        """Draw every weight, in one fixed order: the random ops' positions follow it."""
        for name, parameter in self.named_parameters():
            if "norm" in name:
                nn.init.ones_(parameter) if name.endswith("weight") else nn.init.zeros_(parameter)
            else:
                nn.init.trunc_normal_(parameter, std=0.02, a=-0.04, b=0.04)


def _block_plan() -> dict[str, ParallelStyle]:
    return {
        "attention_norm": SequenceParallel(),
        "attention": PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
        ),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
        ),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
    }


def build(config: Config, mesh: DeviceMesh, sink: MaskSink) -> Transformer:
    """The model on ``mesh`` (dims ``dp``, ``tp``): parallelised, checkpointed, sharded, drawn.

    Made on the meta device, so that nothing is drawn before the parameters are
    DTensors in their final layout; :meth:`Transformer.init_weights` then draws
    every weight as DTensor random ops over the whole mesh.
    """
    with torch.device("meta"):
        model = Transformer(config, mesh, sink)
    tp = mesh["tp"]
    root_plan = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }
    parallelize_module(model, tp, root_plan)
    for index, block in enumerate(model.layers):
        parallelize_module(block, tp, _block_plan())
        model.layers[index] = checkpoint_wrapper(block)
    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    model.to_empty(device="cpu")
    model.init_weights()
    return model

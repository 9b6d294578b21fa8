"""hwrng.invariant on local shards: global indices against torch's own splitting, invariance of
every op under any sharding, positions, dropout's gradient, refusals."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard

import hwrng
from hwrng import invariant
from hwrng.backends.cpu import CPUPlatform


def _torch_local(
    index: torch.Tensor,
    mesh_shape: tuple[int, ...],
    placements: tuple[Any, ...],
    coordinate: tuple[int, ...],
) -> torch.Tensor:
    """The oracle: torch's own _split_tensor, mesh dim by mesh dim, as distribute_tensor does."""
    local = index
    for placement, size, c in zip(placements, mesh_shape, coordinate, strict=True):
        if isinstance(placement, (Shard, _StridedShard)):
            pieces, _ = placement._split_tensor(local, size, with_padding=False)
            local = pieces[c]
    return local


@st.composite
def layouts(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Any, ...]]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=ndim, max_size=ndim)))
    mesh = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    placements = tuple(
        draw(
            st.one_of(
                st.just(Replicate()), st.just(Partial()), st.builds(Shard, st.integers(0, ndim - 1))
            )
        )
        for _ in mesh
    )
    return shape, mesh, placements


@settings(max_examples=120, deadline=None)
@given(layouts())
def test_global_index_matches_torchs_split(
    case: tuple[tuple[int, ...], tuple[int, ...], tuple[Any, ...]],
) -> None:
    shape, mesh, placements = case
    index = torch.arange(math.prod(shape)).reshape(shape)
    for coordinate in itertools.product(*(range(m) for m in mesh)):
        spec = hwrng.ShardSpec(shape, mesh, placements, coordinate)
        assert torch.equal(
            invariant.global_index(spec), _torch_local(index, mesh, placements, coordinate)
        )


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 8), split=st.integers(1, 4), fsdp=st.integers(1, 3), tp=st.integers(1, 3)
)
def test_global_index_of_strided_shards(rows: int, split: int, fsdp: int, tp: int) -> None:
    rows *= split * fsdp * tp  # torch's distribute_tensor needs strided splits to be even
    placements = (_StridedShard(0, split_factor=split), Shard(0))
    index = torch.arange(rows * 3).reshape(rows, 3)
    for coordinate in itertools.product(range(fsdp), range(tp)):
        spec = hwrng.ShardSpec((rows, 3), (fsdp, tp), placements, coordinate)
        expected = _torch_local(index, (fsdp, tp), placements, coordinate)
        assert torch.equal(invariant.global_index(spec), expected)


FILLS = {
    "uniform_": lambda t, s: invariant.uniform_(t, s, -1.0, 2.0),
    "normal_": lambda t, s: invariant.normal_(t, s, 0.5, 3.0),
    "bernoulli_": lambda t, s: invariant.bernoulli_(t, s, 0.25),
    "trunc_normal_": lambda t, s: invariant.trunc_normal_(t, s, 0.0, 1.0, -1.5, 0.5),
    "dropout": lambda t, s: t.copy_(invariant.dropout(torch.ones_like(t), s, 0.4)),
}


@pytest.mark.parametrize("fill", list(FILLS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_shards_put_together_are_the_whole(
    cpu: hwrng.Platform, fill: str, dtype: torch.dtype
) -> None:
    shape = (7, 6)
    whole_spec = hwrng.ShardSpec(shape, (1,), (Replicate(),), (0,))
    hwrng.manual_seed(5, platform=cpu)
    whole = FILLS[fill](torch.empty(shape, dtype=dtype), whole_spec)
    after = cpu.counter.peek(torch.default_generator)
    for mesh, placements in (
        ((3,), (Shard(0),)),
        ((2, 4), (Shard(1), Shard(0))),
        ((4,), (Shard(1),)),
    ):
        joined = torch.full(shape, float("nan"), dtype=dtype)
        for coordinate in itertools.product(*(range(m) for m in mesh)):
            spec = hwrng.ShardSpec(shape, mesh, placements, coordinate)
            hwrng.manual_seed(5, platform=cpu)
            local = FILLS[fill](torch.empty(spec.local_shape, dtype=dtype), spec)
            joined.view(-1)[invariant.global_index(spec).flatten()] = local.flatten()
            assert cpu.counter.peek(torch.default_generator) == after, "one position everywhere"
        assert torch.equal(joined, whole), (mesh, placements)


def test_the_generator_advances_by_the_tensor_size(cpu: hwrng.Platform) -> None:
    spec = hwrng.ShardSpec((5, 3), (2,), (Shard(0),), (1,))
    user = torch.Generator()
    cpu.set_seed_offset(user, 9, 40)
    default = torch.get_rng_state()
    invariant.normal_(torch.empty(spec.local_shape), spec, generator=user)
    assert cpu.get_seed_offset(user) == (9, 40 + invariant.advance(spec)) == (9, 56)
    assert torch.equal(torch.get_rng_state(), default), "a user's generator leaves the default"


def test_dropout_gradient_is_its_mask(cpu: hwrng.Platform) -> None:
    spec = hwrng.ShardSpec((16,), (2,), (Shard(0),), (0,))
    x = torch.ones(8, requires_grad=True)
    y = invariant.dropout(x, spec, 0.5)
    y.sum().backward()
    assert x.grad is not None and torch.equal(x.grad, y.detach())
    assert invariant.dropout(x, spec, 0.5, training=False) is x


def test_refusals(cpu: hwrng.Platform) -> None:
    spec = hwrng.ShardSpec((4, 4), (2,), (Shard(0),), (0,))
    with pytest.raises(hwrng.MeshError, match="the spec's shard is \\(2, 4\\)"):
        invariant.uniform_(torch.empty(4, 4), spec)
    with pytest.raises(hwrng.InvalidArgumentError, match="ShardSpec"):
        invariant.global_index((4, 4))  # type: ignore[arg-type]
    with pytest.raises(hwrng.InvalidValueError, match="dropout probability"):
        invariant.dropout(torch.ones(2, 4), spec, 1.5)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda t, s: invariant.bernoulli_(t, s, 1.5), hwrng.InvalidValueError, "lie in"),
        (lambda t, s: invariant.uniform_(t, s, 2.0, 1.0), hwrng.InvalidValueError, "low <= high"),
        (lambda t, s: invariant.uniform_(t, s, math.nan), hwrng.InvalidValueError, "finite"),
        (lambda t, s: invariant.normal_(t, s, 0.0, -1.0), hwrng.InvalidValueError, "std"),
        (lambda t, s: invariant.trunc_normal_(t, s, 0, 1, 3, 2), hwrng.InvalidValueError, "a <= b"),
        (lambda t, s: invariant.uniform_(t.long(), s), hwrng.InvalidArgumentError, "dtype"),
    ],
)
def test_bad_values_raise_hwrng_errors_and_leave_the_generator(
    cpu: hwrng.Platform, call: Any, error: type[Exception], message: str
) -> None:
    spec = hwrng.ShardSpec((4, 4), (2,), (Shard(0),), (0,))
    generator = cpu.generator()
    before = generator.get_state()
    tensor = torch.zeros(2, 4)
    with pytest.raises(error, match=message):
        call(tensor, spec)
    assert torch.equal(generator.get_state(), before), "a refused call moved the generator"
    assert torch.equal(tensor, torch.zeros(2, 4)), "a refused call wrote into the tensor"


class _CapturingCPU(CPUPlatform):
    """The CPU platform, as if its stream were being captured into a CUDA graph."""

    def stream_capturing(self) -> bool:
        return True


def test_invariant_ops_refuse_graph_capture(cpu: hwrng.Platform) -> None:
    """Graph-safe: no. The position is read on the host when the op is issued; a captured op
    would replay the same numbers, so it is refused before anything moves."""
    spec = hwrng.ShardSpec((4, 4), (2,), (Shard(0),), (0,))
    capturing = _CapturingCPU()
    generator = torch.Generator()
    cpu.set_seed_offset(generator, 3, 8)
    before = generator.get_state()
    with pytest.raises(hwrng.NestingError, match="captured into a graph"):
        invariant.normal_(torch.empty(2, 4), spec, generator=generator, platform=capturing)
    assert torch.equal(generator.get_state(), before)


def test_invariant_mode_refuses_compiled_code() -> None:
    """torch.compile traces with fake tensors: the invariant DTensor handlers refuse them (an
    error, not other numbers), as for LocalTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from hwrng.dtensor._invariant import _refuse_unsupported

    with FakeTensorMode(), pytest.raises(hwrng.DTensorHookError, match=r"torch\.compile"):
        _refuse_unsupported("aten.uniform_")

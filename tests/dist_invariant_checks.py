"""What each rank runs in test_invariant_dist.py: invariant DTensor ops on meshes of 1, 2, 4
and 8 ranks out of an 8-rank pool (importable by the spawned ranks)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.placement_types import _StridedShard

import hwrng

SEED = 20261122
#: A dropout probability whose contract scale f32(1 / (1 - p)) is not 1 / f32(1 - p), the
#: division torch's composed (CPU, in-place) dropout makes
DROPOUT_P = 0.42


def _placements(codes: list[str]) -> list[Any]:
    known = {"R": Replicate(), "P": Partial()}
    out = []
    for code in codes:
        if code in known:
            out.append(known[code])
        elif code.startswith("SS"):  # SS<dim>/<split factor>
            dim, split = code[2:].split("/")
            out.append(_StridedShard(int(dim), split_factor=int(split)))
        else:
            out.append(Shard(int(code[1:])))
    return out


def _code(placement: Any) -> str:
    """The code :func:`_placements` reads for ``placement`` (``P`` a Partial sum)."""
    if placement.is_partial():
        return "P" if placement.reduce_op == "sum" else f"P{placement.reduce_op}"
    return f"S{placement.dim}" if placement.is_shard() else "R"


def _mesh(shape: list[int]) -> DeviceMesh:
    size = 1
    for s in shape:
        size *= s
    return DeviceMesh("cpu", torch.arange(size).reshape(shape))


OPS = {
    "uniform": lambda t: t.uniform_(-2.0, 3.0),
    "normal": lambda t: t.normal_(1.0, 2.0),
    "bernoulli": lambda t: t.bernoulli_(0.3),
    "kaiming": torch.nn.init.kaiming_uniform_,
    "xavier_normal": torch.nn.init.xavier_normal_,
    # looked up when called: invariant mode replaces trunc_normal_ at install
    "trunc_normal": lambda t: torch.nn.init.trunc_normal_(t, std=0.5, a=-0.6, b=0.4),
    "dropout": lambda t: torch.nn.functional.dropout(t + 1, p=DROPOUT_P),
}


@contextlib.contextmanager
def _seeded_invariant(mesh: DeviceMesh) -> Iterator[None]:
    """hwrng's invariant DTensor ops installed and the mesh seeded with SEED; uninstalled after."""
    hwrng.dtensor.install("cpu", invariant=True)
    try:
        hwrng.manual_seed(SEED, mesh, platform="cpu")
        yield
    finally:
        hwrng.dtensor.uninstall()


def _as_replicated(tensor: Any) -> Any:
    """Read a Partial dim's values as replicated, as random ops treat it (full_tensor of a
    Partial(sum) tensor would add them up)."""
    from torch.distributed.tensor import DTensor

    placements = [Replicate() if p.is_partial() else p for p in tensor.placements]
    return DTensor.from_local(
        tensor.to_local(),
        tensor.device_mesh,
        placements,
        run_check=False,
        shape=tensor.shape,
        stride=tensor.stride(),
    )


def full_after(mesh_shape: list[int], codes: list[str], shape: list[int], op: str) -> Any:
    """Run ``op`` on a DTensor of the given layout; every rank of the mesh returns full_tensor()."""
    mesh = _mesh(mesh_shape)
    if mesh.get_coordinate() is None:
        return None
    with _seeded_invariant(mesh):
        torch.rand(3)  # local draws first: positions must still agree
        if op == "rand":
            tensor = torch.distributed.tensor.rand(
                shape, device_mesh=mesh, placements=_placements(codes)
            )
        else:
            tensor = OPS[op](distribute_tensor(torch.zeros(shape), mesh, _placements(codes)))
        offset = hwrng.get_platform("cpu").counter.peek(torch.default_generator)[1]
        full = _as_replicated(tensor).full_tensor()
    return {"full": full.flatten().tolist(), "offset": offset}


def partial_dropout(shape: list[int], inplace: bool) -> Any:
    """Dropout of a ``(Partial, Shard(0))`` input whose two Partial halves differ: the
    whole minus 7, and 7. Every rank returns the output's placements, its full tensor (the
    Partial sum), the generator's position and, out of place, the input's gradient under
    the loss ``sum(whole * output)``."""
    from torch.distributed.tensor import DTensor

    mesh = _mesh([2, 4])
    if mesh.get_coordinate() is None:
        return None
    partial_index, shard_index = mesh.get_coordinate()  # type: ignore[misc]
    whole = torch.arange(float(_size(shape))).reshape(shape)
    part = whole - 7 if partial_index == 0 else torch.full(shape, 7.0)
    local = torch.tensor_split(part, 4)[shard_index].clone()
    with _seeded_invariant(mesh):
        torch.rand(3)
        x = DTensor.from_local(local, mesh, [Partial(), Shard(0)], run_check=False)
        report: dict[str, Any] = {}
        if inplace:
            with torch.no_grad():
                y = torch.nn.functional.dropout(x, p=DROPOUT_P, inplace=True)
            report["same_tensor"] = y is x
        else:
            x.requires_grad_()
            y = torch.nn.functional.dropout(x, p=DROPOUT_P)
        offset = hwrng.get_platform("cpu").counter.peek(torch.default_generator)[1]
        report |= {
            "placements": [_code(p) for p in y.placements],
            "full": y.full_tensor().flatten().tolist(),
            "offset": offset,
        }
        if not inplace:
            (y.full_tensor() * whole).sum().backward()
            report["grad"] = x.grad.full_tensor().flatten().tolist()  # type: ignore[union-attr]
        return report


def dropout_backward(mesh_shape: list[int], codes: list[str]) -> Any:
    """The gradient of an invariant dropout is its own mask, scaled."""
    mesh = _mesh(mesh_shape)
    if mesh.get_coordinate() is None:
        return None
    with _seeded_invariant(mesh):
        x = distribute_tensor(torch.ones(8, 6), mesh, _placements(codes)).requires_grad_()
        y = torch.nn.functional.dropout(x, p=0.5)
        y.sum().backward()
        return {
            "mask_is_grad": torch.equal(x.grad.full_tensor(), y.full_tensor()),  # type: ignore[union-attr]
            "full": y.full_tensor().flatten().tolist(),
        }


def native_dropout(mesh_shape: list[int], codes: list[str], p: float, train: bool) -> Any:
    """``aten.native_dropout`` called directly on a bfloat16 DTensor: every rank returns the
    output's and the mask's full tensors (the output's bits as int16) and the generator's
    position before and after."""
    mesh = _mesh(mesh_shape)
    if mesh.get_coordinate() is None:
        return None
    with _seeded_invariant(mesh):
        torch.rand(3)
        whole = torch.linspace(-3, 3, 160, dtype=torch.bfloat16).reshape(16, 10)
        x = distribute_tensor(whole, mesh, _placements(codes))
        before = hwrng.get_platform("cpu").counter.peek(torch.default_generator)[1]
        output, mask = torch.ops.aten.native_dropout(x, p, train)
        after = hwrng.get_platform("cpu").counter.peek(torch.default_generator)[1]
        return {
            "output": output.full_tensor().view(torch.int16).flatten().tolist(),
            "mask": mask.full_tensor().flatten().tolist(),
            "moved": after - before,
        }


def train(mesh_shape: list[int], steps: int = 3) -> Any:
    """A (dp, tp) model -- parameters sharded along tp, replicated along dp -- initialised
    and trained with dropout: parameters and losses on any number of ranks."""
    names = ("dp", "tp")[: len(mesh_shape)] if len(mesh_shape) > 1 else ("tp",)
    mesh = DeviceMesh(
        "cpu", torch.arange(_size(mesh_shape)).reshape(mesh_shape), mesh_dim_names=names
    )
    if mesh.get_coordinate() is None:
        return None
    placements = [Replicate()] * (mesh.ndim - 1) + [Shard(0)]
    with _seeded_invariant(mesh):
        weight = torch.nn.Parameter(distribute_tensor(torch.empty(16, 8), mesh, placements))
        bias = torch.nn.Parameter(distribute_tensor(torch.empty(16, 8), mesh, placements))
        torch.nn.init.kaiming_normal_(weight)
        torch.nn.init.trunc_normal_(bias, std=0.1)
        start = [weight.full_tensor().flatten().tolist(), bias.full_tensor().flatten().tolist()]
        optimizer = torch.optim.SGD([weight, bias], lr=0.1)
        x = distribute_tensor(torch.linspace(-1, 1, 128).reshape(16, 8), mesh, placements)
        losses = []
        for _ in range(steps):
            hidden = torch.nn.functional.dropout(torch.tanh(x * weight + bias), p=0.25)
            loss = (hidden.full_tensor() ** 2).mean()  # one reduction order on every layout
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return {
            "start": start,
            "losses": losses,
            "end": [weight.full_tensor().flatten().tolist(), bias.full_tensor().flatten().tolist()],
        }


def _size(shape: list[int]) -> int:
    size = 1
    for s in shape:
        size *= s
    return size


def rank_count() -> int:
    return dist.get_world_size()

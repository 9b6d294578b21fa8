"""What each rank runs in test_dtensor_dist.py (importable by the spawned ranks)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

import hwrng

PLACEMENTS: dict[str, Any] = {"R": Replicate(), "P": Partial()}


def _placements(codes: list[str]) -> list[Any]:
    return [PLACEMENTS[c] if c in PLACEMENTS else Shard(int(c[1:])) for c in codes]


@contextmanager
def _adapter(enabled: bool) -> Iterator[hwrng.Platform]:
    platform = hwrng.get_platform("cpu")
    if enabled:
        hwrng.dtensor.install(platform)
    try:
        yield platform
    finally:
        if enabled:
            hwrng.dtensor.uninstall()


def _report(tensor: DTensor, platform: hwrng.Platform, mesh: Any) -> dict[str, Any]:
    coordinate = mesh.get_coordinate()
    return {
        "rank": dist.get_rank(),
        "coordinate": tuple(coordinate),
        "local": tensor.to_local().flatten().tolist(),
        "local_shape": tuple(tensor.to_local().shape),
        "counter": platform.get_seed_offset(torch.default_generator),
    }


def _ops() -> dict[str, Callable[[DTensor], DTensor]]:
    return {
        "uniform": lambda t: t.uniform_(),
        "normal": lambda t: t.normal_(),
        "kaiming": lambda t: torch.nn.init.kaiming_uniform_(torch.nn.Parameter(t)).data,
        "xavier_normal": lambda t: torch.nn.init.xavier_normal_(torch.nn.Parameter(t)).data,
        # torch 2.13 samples trunc_normal_ by rejection, looping on a per-rank test of the
        # local values: ranks can run different numbers of random ops (see the test)
        "trunc_normal": lambda t: torch.nn.init.trunc_normal_(torch.nn.Parameter(t)).data,
        "dropout": lambda t: torch.nn.functional.dropout(t + 1, p=0.5),
    }


def random_op(
    mesh_shape: list[int],
    codes: list[str],
    shape: list[int],
    op: str,
    seed: int = 7,
    adapter: bool = True,
    times: int = 1,
) -> list[dict[str, Any]]:
    """Run ``op`` ``times`` times on a zero DTensor; report every result on this rank."""
    names = tuple(f"m{i}" for i in range(len(mesh_shape)))
    mesh = init_device_mesh("cpu", tuple(mesh_shape), mesh_dim_names=names)
    with _adapter(adapter) as platform:
        hwrng.manual_seed(seed, platform="cpu")
        reports = []
        for _ in range(times):
            tensor = distribute_tensor(torch.zeros(shape), mesh, _placements(codes))
            reports.append(_report(_ops()[op](tensor), platform, mesh))
    return reports


def dtensor_rand(mesh_shape: list[int], codes: list[str], shape: list[int]) -> dict[str, Any]:
    mesh = init_device_mesh("cpu", tuple(mesh_shape))
    with _adapter(True) as platform:
        hwrng.manual_seed(3, platform="cpu")
        tensor = torch.distributed.tensor.rand(
            shape, device_mesh=mesh, placements=_placements(codes)
        )
        return _report(tensor, platform, mesh)


def user_generator(mesh_shape: list[int], codes: list[str], shape: list[int]) -> dict[str, Any]:
    mesh = init_device_mesh("cpu", tuple(mesh_shape))
    with _adapter(True) as platform:
        hwrng.manual_seed(1, platform="cpu")
        default_before = torch.get_rng_state()
        generator = torch.Generator()
        platform.set_seed_offset(generator, 555, 0)
        tensor = distribute_tensor(torch.zeros(shape), mesh, _placements(codes))
        tensor.uniform_(generator=generator)
        report = _report(tensor, platform, mesh)
        report["default_unchanged"] = torch.equal(default_before, torch.get_rng_state())
        report["user_counter"] = platform.get_seed_offset(generator)
        return report


def _tp_model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8), torch.nn.Dropout(0.5)
    )


def recipe(
    layout: list[list[int]] | list[int],
    names: list[str],
    sharded: list[str],
    op_dims: list[str] | None = None,
    seed: int = 123,
) -> dict[str, Any] | None:
    """The README recipe: seed sharded along any dims, install the adapter, run DTensor ops.

    ``layout`` is the mesh's rank tensor (ranks outside it only build the mesh);
    ``op_dims`` names the submesh the DTensors live on (default: the whole mesh).
    """
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = DeviceMesh("cpu", torch.tensor(layout), mesh_dim_names=tuple(names))
    if mesh.get_coordinate() is None:
        return None
    hwrng.manual_seed(seed, mesh, sharded_dims=sharded, platform="cpu")
    op_mesh = mesh[tuple(op_dims)] if op_dims else mesh
    replicate = [Replicate()] * op_mesh.ndim
    with _adapter(True) as platform:
        replicated = distribute_tensor(torch.zeros(4), op_mesh, replicate).uniform_()
        torch.rand(5)  # local randomness between DTensor ops: ranks' own seeds differ
        dropped = torch.nn.functional.dropout(
            distribute_tensor(torch.ones(64), op_mesh, replicate), p=0.5
        )
        shard = distribute_tensor(torch.zeros(16, 3), op_mesh, [*replicate[:-1], Shard(0)])
        shard.normal_()
        model = _tp_model()
        tp_mesh = op_mesh[op_mesh.mesh_dim_names[-1]]  # type: ignore[index]
        parallelize_module(
            model, tp_mesh, {"0": ColwiseParallel(), "2": RowwiseParallel(use_local_output=False)}
        )
        for module in model:
            if isinstance(module, torch.nn.Linear):
                module.reset_parameters()
        out = model(distribute_tensor(torch.ones(2, 8), tp_mesh, [Replicate()]))
        position = platform.counter.peek(torch.default_generator)
        report = {
            "rank": dist.get_rank(),
            "coordinate": dict(zip(names, mesh.get_coordinate(), strict=True)),
            "replicated": replicated.to_local().tolist(),
            "dropout": dropped.to_local().tolist(),
            "shard": shard.to_local().flatten().tolist(),
            "params": {
                name: param.full_tensor().flatten().tolist()
                for name, param in model.named_parameters()
            },
            "row_bias": model[2].bias.to_local().tolist(),
            "output": out.full_tensor().flatten().tolist(),
            "offset": position[1],
            "local": torch.rand(4).tolist(),
        }
    return report


def checkpointed_dropout(sharded: list[str]) -> dict[str, Any]:
    """torch.utils.checkpoint recomputes a DTensor dropout: the mask must come back."""
    from torch.utils.checkpoint import checkpoint

    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    hwrng.manual_seed(5, mesh, sharded_dims=sharded, platform="cpu")
    masks: list[list[float]] = []

    def layer(t: DTensor) -> DTensor:
        torch.rand(3)  # a local draw first: each rank's own stream moves
        out = torch.nn.functional.dropout(t, p=0.5)
        masks.append((out.to_local() != 0).float().tolist())
        return out

    from torch.utils.checkpoint import set_checkpoint_early_stop

    # early stop would end the recomputation at the dropout, before the mask is recorded
    with _adapter(True), set_checkpoint_early_stop(False):
        x = distribute_tensor(torch.ones(32), mesh, [Replicate(), Shard(0)]).requires_grad_()
        y = checkpoint(layer, x, use_reentrant=False)
        y.to_local().sum().backward()
    grad = x.grad.to_local() if isinstance(x.grad, DTensor) else x.grad
    assert grad is not None
    return {
        "coordinate": tuple(mesh.get_coordinate() or ()),
        "masks": masks,
        "grad_is_mask": torch.equal(grad, 2 * torch.tensor(masks[0])),
    }


def extra_random_ops(op: str) -> dict[str, Any]:
    """An in-place random op torch's DTensor leaves out, on a (2, 4) mesh: shards must differ."""
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    calls = {
        "log_normal_": lambda t: t.log_normal_(),
        "exponential_": lambda t: t.exponential_(),
        "geometric_": lambda t: t.geometric_(0.3),
        "cauchy_": lambda t: t.cauchy_(),
        "random_": lambda t: t.random_(0, 1000),
    }
    with _adapter(True) as platform:
        hwrng.manual_seed(4, mesh, sharded_dims=["tp"], platform="cpu")
        tensor = distribute_tensor(torch.zeros(16, 4), mesh, [Replicate(), Shard(0)])
        with CommDebugMode() as comms:
            calls[op](tensor)
        report = _report(tensor, platform, mesh)
        report["collectives"] = comms.get_total_counts()
        return report


def dtensor_manual_seed_on_a_cpu_mesh(seed: int) -> dict[str, Any]:
    """DTensor's own manual_seed(seed, mesh), as torchtitan calls it, seeds on a CPU mesh."""
    import warnings

    from torch.distributed.tensor import _random

    mesh = init_device_mesh("cpu", (8,))
    with _adapter(True), warnings.catch_warnings():
        warnings.simplefilter("error")
        _random.manual_seed(seed, mesh)
        return {"seed": torch.initial_seed(), "supported": _random.is_rng_supported_mesh(mesh)}


def meta_init(how: str) -> dict[str, Any]:
    """A model built on the meta device, parallelised, materialised with to_empty and
    initialised with reset_parameters: the init draws through the adapter, issues no
    collective, and gives tp shards distinct values and replicated parameters equal ones."""
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    hwrng.manual_seed(9, mesh, sharded_dims=["tp"], platform="cpu")
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 8))
    if how == "tp":
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "1": RowwiseParallel()})
    else:
        from torch.distributed.fsdp import fully_shard

        fully_shard(model, mesh=mesh["tp"])
    model.to_empty(device="cpu")
    with _adapter(True), CommDebugMode() as comms:
        for module in model:
            module.reset_parameters()
    return {
        "coordinate": tuple(mesh.get_coordinate() or ()),
        "collectives": comms.get_total_counts(),
        "locals": {n: p.to_local().flatten().tolist() for n, p in model.named_parameters()},
        "placements": {n: str(p.placements) for n, p in model.named_parameters()},
    }


def _local_tensor_ops(mesh: Any) -> tuple[Any, Any, Any]:
    uniform = distribute_tensor(torch.zeros(4, 4), mesh, [Replicate(), Shard(0)]).uniform_()
    twice = distribute_tensor(torch.zeros(4, 6), mesh, [Shard(1), Shard(0)])
    torch.nn.init.normal_(twice)
    return uniform, twice, torch.rand(2)


def real_ranks_for_local_tensor_mode() -> dict[str, Any] | None:
    """What ranks 0..3 of a real 2x2 mesh draw (ranks 4..7 only build the mesh)."""
    from torch.distributed.device_mesh import DeviceMesh

    mesh = DeviceMesh("cpu", [[0, 1], [2, 3]])
    if mesh.get_coordinate() is None:
        return None
    with _adapter(True):
        hwrng.seed_everything(0, "cpu")
        uniform, twice, after = _local_tensor_ops(mesh)
        return {
            "uniform": uniform.to_local().tolist(),
            "twice": twice.to_local().tolist(),
            "after": after.tolist(),
        }


LOCAL_TENSOR_SCRIPT = """
import json, torch, torch.distributed as dist, hwrng
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore
import dist_dtensor_checks as checks

dist.init_process_group("fake", rank=0, world_size=4, store=FakeStore())
mesh = init_device_mesh("cpu", (2, 2))
hwrng.dtensor.install("cpu")
hwrng.seed_everything(0, "cpu")
with LocalTensorMode(4):
    uniform, twice, after = checks._local_tensor_ops(mesh)
    per_rank = {
        r: {
            "uniform": uniform.to_local()._local_tensors[r].tolist(),
            "twice": twice.to_local()._local_tensors[r].tolist(),
            "after": after._local_tensors[r].tolist() if hasattr(after, "_local_tensors")
            else after.tolist(),
        }
        for r in range(4)
    }
print(json.dumps(per_rank))
"""

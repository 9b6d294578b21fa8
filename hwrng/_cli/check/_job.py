"""``hwrng check``: the main job. Proves the promise on the user's own hardware.

Every rank seeds with :func:`hwrng.manual_seed`, installs the DTensor adapter,
runs DTensor random ops on replicated, sharded, uneven and doubly-sharded
tensors, initialises a small tensor-parallel model (``ColwiseParallel`` /
``RowwiseParallel`` with biases) and runs its dropout, draws local dropout in a
named state, and calls :func:`hwrng.verify`. Then the ranks judge what they
drew together, against what the plan says (replicas equal, shards distinct,
pipeline stages distinct), with the rule and the algorithm ``hwrng.verify``
uses (``hwrng.verify._judging``): every pair of ranks, while no rank gathers
the others' results and the cost per rank does not grow with the world. Every
rank ends with the same :class:`CheckReport`; :func:`format_report` prints it.
The report claims only what was compared: a mesh without replicas says so.

DTensors live on each pipeline stage's mesh (every dim but ``pp``), as in a
pipeline-parallel job; the model on the tensor-parallel dim (``tp``, else the
last dim), its hidden width a multiple of that dim's size so that any size
splits it.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hwrng._cli.check._report import CheckReport, Verdict
from hwrng._collectives import Comm, digest62, digest_of
from hwrng._mesh import unravel_index
from hwrng._plan import rank_seed
from hwrng._sharding import ShardSpec
from hwrng.verify._judging import Judged, judging
from hwrng.verify._rule import Observation
from hwrng.verify._topology import over_mesh
from hwrng.verify._wire import drive

__all__ = ["DEFAULT_TIMEOUT_S", "default_mesh", "run_rank"]

#: Seconds ``hwrng check`` waits, by default, for its ranks (each run, ``verify``, each collective).
DEFAULT_TIMEOUT_S = 300.0

PIPELINE_DIM = "pp"
TENSOR_PARALLEL_DIM = "tp"


def default_mesh(nproc: int) -> dict[str, int]:
    """A (dp, pp, tp) mesh for ``nproc`` ranks: tp and pp of 2 where they divide it."""
    tp = 2 if nproc % 2 == 0 else 1
    pp = 2 if (nproc // tp) % 2 == 0 else 1
    return {"dp": nproc // (tp * pp), "pp": pp, "tp": tp}


def _op_dims(names: Sequence[str]) -> list[str]:
    return [n for n in names if n != PIPELINE_DIM] or list(names)


def _tp_dim(names: Sequence[str]) -> str:
    dims = _op_dims(names)
    return TENSOR_PARALLEL_DIM if TENSOR_PARALLEL_DIM in dims else dims[-1]


class Layout(enum.Enum):
    """How a DTensor op of the check lays its tensor over the op mesh.

    :func:`run_rank` draws each op with its layout's placements and reports
    the layout beside the op's digest; :func:`run_rank` rebuilds the same
    placements from it to tell which ranks hold the same shard.
    """

    REPLICATED = "replicated"
    SHARD0_ON_TP = "Shard(0) on the tensor-parallel dim"
    SHARD1_ON_TP = "Shard(1) on the tensor-parallel dim"
    SHARD0_ON_EVERY_DIM = "Shard(0) on every mesh dim"

    def placements(self, dims: Sequence[str], tp_dim: str) -> list[Any]:
        """The placements over the mesh dims ``dims`` (``tp_dim`` among them)."""
        from torch.distributed.tensor import Replicate, Shard

        if self is Layout.REPLICATED:
            return [Replicate()] * len(dims)
        if self is Layout.SHARD1_ON_TP:
            return [Shard(1) if d == tp_dim else Replicate() for d in dims]
        if self is Layout.SHARD0_ON_EVERY_DIM:
            return [Shard(0)] * len(dims)
        return [Shard(0) if d == tp_dim else Replicate() for d in dims]


def _ops(mesh: Any, tp_dim: str) -> dict[str, tuple[Layout, Any]]:
    """The DTensor ops of the check: name -> (layout, function returning the tensor)."""
    from torch.distributed.tensor import distribute_tensor

    names = list(mesh.mesh_dim_names)
    device = mesh.device_type

    def fresh(shape: tuple[int, ...], layout: Layout) -> Any:
        placements = layout.placements(names, tp_dim)
        return distribute_tensor(torch.zeros(shape, device=device), mesh, placements)

    replicated = Layout.REPLICATED
    on_tp = Layout.SHARD0_ON_TP
    uneven = Layout.SHARD1_ON_TP
    twice = Layout.SHARD0_ON_EVERY_DIM
    return {
        "uniform_ on a replicated (4, 4)": (
            replicated,
            lambda: fresh((4, 4), replicated).uniform_(),
        ),
        "dropout on a replicated (64,)": (
            replicated,
            lambda: torch.nn.functional.dropout(fresh((64,), replicated) + 1, p=0.5),
        ),
        f"normal_ on (16, 3), Shard(0) on {tp_dim}": (
            on_tp,
            lambda: fresh((16, 3), on_tp).normal_(),
        ),
        f"uniform_ on uneven (5, 7), Shard(1) on {tp_dim}": (
            uneven,
            lambda: fresh((5, 7), uneven).uniform_(),
        ),
        "normal_ on (13,), one dim sharded over every mesh dim": (
            twice,
            lambda: fresh((13,), twice).normal_(),
        ),
    }


#: ``hwrng check`` prints the seeds of at most this many ranks (every rank checks its own).
SEED_ROWS = 64
#: The model's hidden width per tensor-parallel rank (8 on each, as 16 over tp=2).
HIDDEN_PER_RANK = 8


@dataclass(frozen=True)
class _Drawn:
    """What one rank drew, digested, before the ranks judge it together."""

    seed: int
    coordinate: dict[str, int]
    ops: dict[str, tuple[Layout, int, int]]  # name -> (layout, digest, number of elements)
    params: int
    output: int
    named_local: int
    report: Any  # the VerifyReport, the same on every rank


def _word(tensor: torch.Tensor) -> tuple[int, int]:
    data = tensor.detach().to("cpu", torch.float64).contiguous().numpy()
    return digest62(data), tensor.numel()


def _draw(mesh: Any, platform: Any, seed: int, sharded: list[str], timeout: float) -> _Drawn:
    """Seed, draw and verify on this rank (every rank runs the same)."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    import hwrng
    from hwrng.dtensor import install, uninstall

    names = list(mesh.mesh_dim_names)
    coordinate = dict(zip(names, mesh.get_coordinate() or (), strict=True))
    my_seed = hwrng.manual_seed(seed, mesh, sharded_dims=sharded, platform=platform)
    op_mesh = mesh[tuple(_op_dims(names))] if len(names) > 1 else mesh
    tp_dim = _tp_dim(names)
    tp_mesh = mesh[tp_dim]
    tracker = hwrng.RNGStatesTracker(platform, name="hwrng-check")
    tracker.add("model-parallel-rng", (my_seed + 2718 * (1 + dist.get_rank())) % 2**64)
    ops: dict[str, tuple[Layout, int, int]] = {}
    install(platform)
    try:
        for name, (layout, make) in _ops(op_mesh, tp_dim).items():
            ops[name] = (layout, *_word(make().to_local()))
        hidden = HIDDEN_PER_RANK * tp_mesh.size()  # ColwiseParallel splits it over tp
        model = torch.nn.Sequential(
            torch.nn.Linear(8, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, 8),
            torch.nn.Dropout(0.5),
        ).to(platform.device())
        parallelize_module(
            model,
            tp_mesh,
            {"0": ColwiseParallel(), "2": RowwiseParallel(use_local_output=False)},
        )
        for module in model:
            if isinstance(module, torch.nn.Linear):
                module.reset_parameters()
        params = digest62(
            *(
                _word(p.full_tensor() if isinstance(p, DTensor) else p)[0].to_bytes(8, "little")
                for _, p in model.named_parameters()
            )
        )
        x = distribute_tensor(torch.ones(2, 8, device=platform.device()), tp_mesh, [Replicate()])
        output = _word(model(x).full_tensor())[0]
    finally:
        uninstall()
    with tracker.fork():
        local = _word(torch.nn.functional.dropout(torch.ones(64, device=platform.device())))[0]
    report = hwrng.verify(timeout=timeout)
    del tracker
    return _Drawn(my_seed, coordinate, ops, params, output, local, report)


_PARAMETERS = "model parameters after reset_parameters"
_OUTPUT = "model output, dropout included"
_LOCAL = "local dropout in a named state"


def _shards(layout: Layout, mesh: dict[str, int], op_dims: list[str], tp_dim: str) -> int:
    placements = layout.placements(op_dims, tp_dim)
    return math.prod(
        mesh[d] for d, p in zip(op_dims, placements, strict=True) if not p.is_replicate()
    )


def _op_detail(judged: Judged, shards: int, stages: int) -> str:
    pieces = f"{shards} shard(s)" + (f" x {stages} stages" if stages > 1 else "")
    if judged.compared_equal and judged.compared_apart:
        return f"{pieces} differ, replicas equal"
    if judged.compared_apart:
        return f"{pieces} differ (no replicas in this mesh)"
    if judged.compared_equal:
        return f"{pieces}, replicas equal"
    return "nothing to compare (one rank)"


def _model_detail(judged: Judged, tp_dim: str) -> str:
    if judged.compared_equal and judged.compared_apart:
        return f"equal within each {tp_dim} group, groups differ"
    if judged.compared_equal:
        return f"equal within each {tp_dim} group (one group: no other to differ from)"
    if judged.compared_apart:
        return f"groups differ (no {tp_dim} peers in this mesh)"
    return "nothing to compare (one rank)"


def _verdict(what: str, judged: Judged, detail: str) -> Verdict:
    problems = list(judged.problems)
    if judged.hidden:
        problems.append(f"... and {judged.hidden} more not shown")
    return Verdict(what, judged.ok, "; ".join(problems) or detail)


def run_rank(
    mesh_sizes: dict[str, int],
    sharded: list[str],
    seed: int,
    platform_name: str,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """What every rank runs: seed, draw, verify, judge with the others; the report as a dict.

    The ranks judge together, every pair of them (see
    :mod:`hwrng.verify._judging`): no rank gathers the others' results, and every rank
    returns the same report. ``timeout`` (seconds) bounds ``verify`` and each
    collective of the judging, whatever the process groups were made with.
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import hwrng

    platform = hwrng.get_platform(platform_name)
    names = list(mesh_sizes)
    mesh = init_device_mesh(
        platform.device_type, tuple(mesh_sizes.values()), mesh_dim_names=tuple(names)
    )
    started = time.perf_counter()
    drawn = _draw(mesh, platform, seed, sharded, timeout)
    elapsed = time.perf_counter() - started
    whole = Comm(None, platform, timeout=timeout)
    op_dims, tp_dim = _op_dims(names), _tp_dim(names)
    apart = [d for d in sharded if d not in op_dims]
    model_apart = [d for d in sharded if d != tp_dim]
    checks: dict[str, Observation] = {}
    for name, (layout, digest, numel) in drawn.ops.items():
        spec = ShardSpec(
            (16, 16),
            tuple(mesh_sizes[d] for d in op_dims),
            tuple(layout.placements(op_dims, tp_dim)),
            tuple(drawn.coordinate[d] for d in op_dims),
        )
        key = digest_of(tuple(drawn.coordinate[d] for d in apart), spec.shard_index)
        checks[name] = Observation(digest, key, key, empty=numel == 0)
    model_key = digest_of(tuple(drawn.coordinate[d] for d in model_apart))
    checks[_PARAMETERS] = Observation(drawn.params, model_key, model_key)
    checks[_OUTPUT] = Observation(drawn.output, model_key, model_key)
    rank_key = digest_of(dist.get_rank())
    checks[_LOCAL] = Observation(drawn.named_local, rank_key, rank_key)
    topology = over_mesh(mesh, whole, platform, timeout=timeout)
    outcome = drive(
        judging([[o] for o in checks.values()], topology.place, topology.name),
        whole,
        topology.lines,
    )
    judged = dict(zip(checks, outcome.judged, strict=True))
    wrong = drawn.seed != rank_seed(seed, drawn.coordinate, mesh_sizes, sharded)
    (count,) = whole.sum([int(wrong)])
    odd = whole.first_ranks(wrong, 16)
    device = whole.broadcast_text(f"{platform.describe_device()}, {platform.device()}", 0)
    (slowest,) = whole.max([round(elapsed * 1000)])
    report = CheckReport(
        platform_name,
        device,
        mesh_sizes,
        sharded,
        seed,
        _seed_rows(mesh_sizes, sharded, seed),
        seconds=slowest / 1000,
    )
    more = f" and {count - len(odd)} more" if count > len(odd) else ""
    report.ops.append(
        Verdict(
            "each rank's seed follows the plan",
            not count,
            f"ranks {odd}{more} got other seeds than rank_seed gives"
            if count
            else "seed + linear index, on every rank",
        )
    )
    stages = math.prod(mesh_sizes[d] for d in apart)
    for name, (layout, _, _) in drawn.ops.items():
        shards = _shards(layout, mesh_sizes, op_dims, tp_dim)
        found = judged[name]
        report.ops.append(_verdict(name, found, _op_detail(found, shards, stages)))
    for name in (_PARAMETERS, _OUTPUT):
        report.ops.append(_verdict(name, judged[name], _model_detail(judged[name], tp_dim)))
    local = judged[_LOCAL]
    report.ops.append(
        _verdict(
            _LOCAL,
            local,
            "a mask of its own on every rank"
            if local.compared_apart
            else "one rank: nothing to compare",
        )
    )
    for verdict in drawn.report.streams:
        report.streams.append(
            Verdict(verdict.stream, verdict.ok, "; ".join(verdict.problems) or verdict.compared)
        )
    return report.to_dict()


def _seed_rows(
    mesh: dict[str, int], sharded: list[str], seed: int
) -> list[tuple[int, dict[str, int], int]]:
    """The plan's seeds of the first :data:`SEED_ROWS` ranks (each rank checks its own)."""
    sizes = list(mesh.values())
    rows = []
    for rank in range(min(SEED_ROWS, math.prod(sizes))):
        coordinate = dict(zip(mesh, unravel_index(rank, sizes), strict=True))
        rows.append((rank, coordinate, rank_seed(seed, coordinate, mesh, sharded)))
    return rows

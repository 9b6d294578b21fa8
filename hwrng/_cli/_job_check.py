"""``hwrng check``: the main job. Proves the promise on the user's own hardware.

Every rank seeds with :func:`hwrng.manual_seed`, installs the DTensor adapter,
runs DTensor random ops on replicated, sharded, uneven and doubly-sharded
tensors, initialises a small tensor-parallel model (``ColwiseParallel`` /
``RowwiseParallel`` with biases) and runs its dropout, draws local dropout in a
named state, and calls :func:`hwrng.verify`. It returns a digest of what it
drew; :func:`judge` compares the ranks' digests against what the plan says
(replicas equal, shards distinct, pipeline stages distinct) and
:func:`format_report` prints the verdicts.

DTensors live on each pipeline stage's mesh (every dim but ``pp``), as in a
pipeline-parallel job; the model on the tensor-parallel dim (``tp``, else the
last dim).
"""

from __future__ import annotations

import datetime
import enum
import hashlib
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from hwrng._cli._machine import describe_device
from hwrng._cli._table import format_table
from hwrng._mesh import unravel_index
from hwrng._plan import rank_seed

__all__ = [
    "CheckReport",
    "Verdict",
    "default_mesh",
    "format_report",
    "judge",
    "run_rank",
]

PIPELINE_DIM = "pp"
TENSOR_PARALLEL_DIM = "tp"


def default_mesh(nproc: int) -> dict[str, int]:
    """A (dp, pp, tp) mesh for ``nproc`` ranks: tp and pp of 2 where they divide it."""
    tp = 2 if nproc % 2 == 0 else 1
    pp = 2 if (nproc // tp) % 2 == 0 else 1
    return {"dp": nproc // (tp * pp), "pp": pp, "tp": tp}


def _digest(tensor: torch.Tensor) -> tuple[str, int]:
    data = tensor.detach().to("cpu", torch.float64).contiguous().numpy().tobytes()
    return hashlib.blake2b(data, digest_size=8).hexdigest(), tensor.numel()


def _op_dims(names: Sequence[str]) -> list[str]:
    return [n for n in names if n != PIPELINE_DIM] or list(names)


def _tp_dim(names: Sequence[str]) -> str:
    dims = _op_dims(names)
    return TENSOR_PARALLEL_DIM if TENSOR_PARALLEL_DIM in dims else dims[-1]


class Layout(enum.Enum):
    """How a DTensor op of the check lays its tensor over the op mesh.

    :func:`run_rank` draws each op with its layout's placements and reports
    the layout beside the op's digest; :func:`judge` rebuilds the same
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


def run_rank(
    mesh_sizes: dict[str, int], sharded: list[str], seed: int, platform_name: str
) -> dict[str, Any]:
    """What each rank runs: seed, draw, verify; return digests (runs in every rank)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    import hwrng
    from hwrng.dtensor import install, uninstall

    platform = hwrng.get_platform(platform_name)
    names = list(mesh_sizes)
    mesh = init_device_mesh(
        platform.device_type, tuple(mesh_sizes.values()), mesh_dim_names=tuple(names)
    )
    coordinate = dict(zip(names, mesh.get_coordinate() or (), strict=True))
    my_seed = hwrng.manual_seed(seed, mesh, sharded_dims=sharded, platform=platform)
    op_mesh = mesh[tuple(_op_dims(names))] if len(names) > 1 else mesh
    tp_dim = _tp_dim(names)
    tp_mesh = mesh[tp_dim]
    tracker = hwrng.RNGStatesTracker(platform, name="hwrng-check")
    tracker.add("model-parallel-rng", (my_seed + 2718 * (1 + dist.get_rank())) % 2**64)
    ops: dict[str, tuple[str, int]] = {}
    layouts: dict[str, str] = {}
    started = time.perf_counter()
    install(platform)
    try:
        for name, (layout, make) in _ops(op_mesh, tp_dim).items():
            ops[name] = _digest(make().to_local())
            layouts[name] = layout.value
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8), torch.nn.Dropout(0.5)
        ).to(platform.device())
        parallelize_module(
            model,
            tp_mesh,
            {"0": ColwiseParallel(), "2": RowwiseParallel(use_local_output=False)},
        )
        for module in model:
            if isinstance(module, torch.nn.Linear):
                module.reset_parameters()
        from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

        params = {
            n: _digest(p.full_tensor() if isinstance(p, DTensor) else p)[0]
            for n, p in model.named_parameters()
        }

        x = distribute_tensor(torch.ones(2, 8, device=platform.device()), tp_mesh, [Replicate()])
        output = _digest(model(x).full_tensor())[0]
    finally:
        uninstall()
    with tracker.fork():
        mask = torch.nn.functional.dropout(torch.ones(64, device=platform.device()))
        local = _digest(mask)[0]
    report = hwrng.verify()
    elapsed = time.perf_counter() - started
    del tracker
    return {
        "rank": dist.get_rank(),
        "coordinate": coordinate,
        "seed": my_seed,
        "ops": ops,
        "layouts": layouts,
        "params": params,
        "output": output,
        "named_local": local,
        "verify": [(v.stream, v.expectation, list(v.problems)) for v in report.streams],
        "seconds": elapsed,
        "device": f"{describe_device(platform)}, {platform.device()}",
    }


@dataclass(frozen=True)
class Verdict:
    """One line of the report: a check, whether it held, and why not."""

    what: str
    ok: bool
    detail: str


@dataclass
class CheckReport:
    """Everything ``hwrng check`` prints (``--json`` prints it as a document)."""

    backend: str
    device: str
    mesh: dict[str, int]
    sharded: list[str]
    seed: int
    seeds: list[tuple[int, dict[str, int], int]]
    ops: list[Verdict] = field(default_factory=list)
    streams: list[Verdict] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every check held."""
        return all(v.ok for v in self.ops + self.streams)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain values."""
        return {
            "ok": self.ok,
            "backend": self.backend,
            "device": self.device,
            "mesh": self.mesh,
            "sharded": self.sharded,
            "seed": self.seed,
            "seeds": [{"rank": r, "coordinate": c, "seed": s} for r, c, s in self.seeds],
            "ops": [vars(v) for v in self.ops],
            "streams": [vars(v) for v in self.streams],
            "seconds": round(self.seconds, 3),
            "torch": torch.__version__,
            "python": sys.version.split()[0],
        }


def _equal_iff_same_key(
    entries: dict[int, tuple[Any, str, int]], coordinates: dict[int, dict[str, int]]
) -> list[str]:
    """Ranks must draw alike exactly when their keys are equal (empty results never clash).

    ``entries`` maps rank to ``(key, digest, numel)``.
    """
    problems = []
    by_key: dict[Any, dict[str, list[int]]] = {}
    for rank, (key, digest, _) in entries.items():
        by_key.setdefault(key, {}).setdefault(digest, []).append(rank)
    for by_digest in by_key.values():
        if len(by_digest) > 1:
            ranks = sorted(r for rs in by_digest.values() for r in rs)
            problems.append(f"replicas {_named(ranks, coordinates)} differ")
    by_digest_keys: dict[str, set[Any]] = {}
    for key, digest, numel in entries.values():
        if numel:
            by_digest_keys.setdefault(digest, set()).add(key)
    for digest, keys in by_digest_keys.items():
        if len(keys) > 1:
            ranks = sorted(r for r, (k, d, _) in entries.items() if d == digest)
            problems.append(f"{_named(ranks, coordinates)} should differ but drew alike")
    return problems


def _named(ranks: Sequence[int], coordinates: dict[int, dict[str, int]]) -> str:
    shown = ", ".join(f"{r} {coordinates[r]}" for r in ranks[:4])
    return f"ranks {shown}" + (f" and {len(ranks) - 4} more" if len(ranks) > 4 else "")


def judge(
    results: list[dict[str, Any]],
    *,
    mesh: dict[str, int],
    sharded: list[str],
    seed: int,
    backend: str,
    seconds: float,
) -> CheckReport:
    """Compare every rank's digests against the plan; build the report.

    A DTensor op's ranks must agree exactly when they hold the same shard of
    one stage mesh, or of two stages not seeded apart; the model's, when they
    are in tensor-parallel groups not seeded apart; named-state dropout differs
    on every rank; each stream passes :func:`hwrng.verify`.
    """
    from hwrng._sharding import ShardSpec

    names = list(mesh)
    results = sorted(results, key=lambda r: r["rank"])
    coordinates = {r["rank"]: r["coordinate"] for r in results}
    seeds = [(r["rank"], r["coordinate"], r["seed"]) for r in results]
    report = CheckReport(backend, results[0]["device"], mesh, sharded, seed, seeds, seconds=seconds)
    wrong = [r for r, c, s in seeds if s != rank_seed(seed, c, mesh, sharded)]
    report.ops.append(
        Verdict(
            "each rank's seed follows the plan",
            not wrong,
            f"ranks {wrong} got other seeds than rank_seed gives"
            if wrong
            else "seed + linear index",
        )
    )
    op_dims = _op_dims(names)
    tp_dim = _tp_dim(names)
    apart = [d for d in sharded if d not in op_dims]
    for name in results[0]["ops"]:
        placements = Layout(results[0]["layouts"][name]).placements(op_dims, tp_dim)
        entries: dict[int, tuple[Any, str, int]] = {}
        for r in results:
            spec = ShardSpec(
                (16, 16),
                tuple(mesh[d] for d in op_dims),
                tuple(placements),
                tuple(r["coordinate"][d] for d in op_dims),
            )
            key = (tuple(r["coordinate"][d] for d in apart), spec.shard_index)
            entries[r["rank"]] = (key, *r["ops"][name])
        problems = _equal_iff_same_key(entries, coordinates)
        shards = len({k[1] for k, _, _ in entries.values()})
        report.ops.append(
            Verdict(name, not problems, "; ".join(problems) or f"{shards} shard(s), replicas equal")
        )
    model_apart = [d for d in sharded if d != tp_dim]
    for label, field_name in (
        ("model parameters after reset_parameters", "params"),
        ("model output, dropout included", "output"),
    ):
        entries = {
            r["rank"]: (tuple(r["coordinate"][d] for d in model_apart), repr(r[field_name]), 1)
            for r in results
        }
        problems = _equal_iff_same_key(entries, coordinates)
        report.ops.append(
            Verdict(label, not problems, "; ".join(problems) or f"equal within each {tp_dim} group")
        )
    entries = {r["rank"]: (r["rank"], r["named_local"], 1) for r in results}
    problems = _equal_iff_same_key(entries, coordinates)
    report.ops.append(
        Verdict(
            "local dropout in a named state",
            not problems,
            "; ".join(problems) or "a mask of its own on every rank",
        )
    )
    for stream, expectation, stream_problems in results[0]["verify"]:
        report.streams.append(
            Verdict(stream, not stream_problems, "; ".join(stream_problems) or expectation)
        )
    return report


def format_report(report: CheckReport) -> str:
    """The readable report: header, seed table, op verdicts, stream verdicts, verdict line."""
    mesh_text = " x ".join(f"{n}={s}" for n, s in report.mesh.items())
    world = math.prod(report.mesh.values())
    names = list(report.mesh)
    lines = [
        f"hwrng check: backend {report.backend} ({report.device}), {world} rank(s), "
        f"mesh {mesh_text}, sharded {', '.join(report.sharded) or 'along no dim'}, "
        f"seed {report.seed}",
        "",
        format_table(
            ["rank", *names, "seed"],
            [[r, *(c[n] for n in names), s] for r, c, s in report.seeds],
        ),
        "",
        format_table(
            ["CHECK", "RESULT", "DETAIL"],
            [[v.what, "PASS" if v.ok else "FAIL", v.detail] for v in report.ops],
        ),
        "",
        format_table(
            ["STREAM (hwrng.verify)", "RESULT", "DETAIL"],
            [[v.what, "PASS" if v.ok else "FAIL", v.detail] for v in report.streams],
        ),
        "",
    ]
    total = len(report.ops) + len(report.streams)
    failed = sum(not v.ok for v in report.ops + report.streams)
    verdict = f"PASSED ({total} checks)" if report.ok else f"FAILED ({failed} of {total} checks)"
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines.append(
        f"hwrng check: {verdict} in {report.seconds:.1f} s; "
        f"torch {torch.__version__}, python {sys.version.split()[0]}, {when}"
    )
    return "\n".join(lines)


def coordinates_of(mesh: dict[str, int]) -> list[dict[str, int]]:
    """Every coordinate of ``mesh`` in rank order (for tables before ranks start)."""
    sizes = list(mesh.values())
    return [
        dict(zip(mesh, unravel_index(rank, sizes), strict=True)) for rank in range(math.prod(sizes))
    ]


TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


def under_torchrun() -> bool:
    """Whether this process was started by torchrun (or a launcher that sets its variables)."""
    import os

    return all(name in os.environ for name in TORCHRUN_VARIABLES)


def run_in_torchrun(
    mesh: dict[str, int], sharded: list[str], seed: int, platform_name: str, backend: str
) -> tuple[CheckReport | None, bool]:
    """Run this process's rank under torchrun; rank 0 judges. Returns (report or None, ok)."""
    import os

    import torch.distributed as dist

    import hwrng

    platform = hwrng.get_platform(platform_name)
    if platform.device_type != "cpu":
        platform.device_handle.set_device(int(os.environ["LOCAL_RANK"]) % platform.device_count())
    started = time.perf_counter()
    owns_group = not dist.is_initialized()
    if owns_group:
        dist.init_process_group(backend)
    try:
        result = run_rank(mesh, sharded, seed, platform_name)
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, result)
        report = judge(
            gathered,
            mesh=mesh,
            sharded=sharded,
            seed=seed,
            backend=platform_name,
            seconds=time.perf_counter() - started,
        )
        return (report if dist.get_rank() == 0 else None), report.ok
    finally:
        if owns_group:
            dist.destroy_process_group()

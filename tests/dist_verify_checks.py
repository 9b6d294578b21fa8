"""What each rank runs in test_verify_dist.py (importable by the spawned ranks)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.utils._python_dispatch import TorchDispatchMode

import hwrng

NAMES = ("dp", "tp")


class _GroupSizes(TorchDispatchMode):
    """Each collective dispatched inside it: its name and how many ranks its group holds."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.namespace == "c10d":
            group = next(a for a in args if isinstance(a, torch.ScriptObject))
            size = dist.ProcessGroup.unbox(group).size()
            self.sizes.append((func.__name__.split(".")[0], size))
        return func(*args, **(kwargs or {}))


def _snapshot() -> tuple[Any, ...]:
    numpy_state: Any = np.random.get_state()
    return (
        torch.get_rng_state(),
        random.getstate(),
        numpy_state[1].tolist(),
        numpy_state[2:],
    )


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return bool(torch.equal(a[0], b[0])) and a[1:] == b[1:]


def scenario(fault: str, sharded: list[str]) -> dict[str, Any]:
    """Seed (dp=4, tp=2) sharded along ``sharded``, run DTensor and local ops, break one
    thing on some ranks (``fault``), then verify; report what verify said and whether it
    changed any state."""
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = init_device_mesh("cpu", (4, 2), mesh_dim_names=NAMES)
    rank = dist.get_rank()
    tracker = hwrng.RNGStatesTracker("cpu", name="verify-check")
    if fault == "other means":
        hwrng.seed_everything(1000 + rank, "cpu")
    else:
        hwrng.manual_seed(42, mesh, sharded_dims=sharded, platform="cpu")
    dp = mesh.get_coordinate()[0]  # type: ignore[index]
    # Megatron-like: a stream of its own on every rank; the fault: one seed along tp
    tracker.add("model-parallel-rng", 5000 + (dp if fault == "same named seed" else rank))
    hwrng.dtensor.install("cpu")
    try:
        distribute_tensor(torch.zeros(8, 4), mesh, [Replicate(), Shard(0)]).uniform_()
        torch.nn.functional.dropout(distribute_tensor(torch.ones(16), mesh, [Replicate()] * 2))
    finally:
        hwrng.dtensor.uninstall()
    torch.rand(3), random.random(), np.random.rand()  # local draws, equal in number
    with tracker.fork():
        torch.rand(2)
    if fault == "reseeded" and rank == 5:
        torch.manual_seed(999)
    if fault == "numpy unseeded" and rank == 2:
        np.random.seed(None)
    if fault == "extra draw" and rank == 6:
        torch.rand(1)
    before = _snapshot()
    with CommDebugMode() as comms, _GroupSizes() as groups:
        report = hwrng.verify(mesh, sharded_dims=sharded if fault == "other means" else None)
    unchanged = _same(before, _snapshot())
    try:
        report.raise_if_failed()
        raised = ""
    except hwrng.VerificationError as error:
        raised = str(error) if error.report is report else "a report other than verify's"
    del tracker
    return {
        "ok": report.ok,
        "failures": {v.stream: (list(v.ranks), list(v.problems)) for v in report.failures},
        "streams": [v.stream for v in report.streams],
        "raised": raised,
        "unchanged": unchanged,
        "collectives": {str(op): n for op, n in comms.get_comm_counts().items()},
        "groups": groups.sizes,
        "text": report.describe(),
    }


# -- 4 ranks (test_verify_rules_dist.py): collective safety, plans, presets, pipeline stages --


def _outcome(report: hwrng.VerifyReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "failures": {v.stream: (list(v.ranks), list(v.problems)) for v in report.failures},
        "unjudged": {v.stream: v.unjudged for v in getattr(report, "unjudged", [])},
        "text": report.describe(),
    }


def _mesh_2x2(names: tuple[str, str] = ("dp", "tp")) -> Any:
    return init_device_mesh("cpu", (2, 2), mesh_dim_names=names)


def one_rank_cannot_build(fault: str) -> dict[str, Any]:
    """One rank fails before judging (no plan), or lacks a stream; all get the same verdict."""
    mesh = _mesh_2x2()
    rank = dist.get_rank()
    hwrng.manual_seed(42, mesh, sharded_dims=["tp"], platform="cpu")
    tracker = hwrng.RNGStatesTracker("cpu", name="verify-rule" if rank != 3 else "elsewhere")
    tracker.add("only-here", 7 + rank)
    if fault == "reseeded itself" and rank == 1:
        hwrng.seed_everything(5, "cpu")
    chosen = {
        "a stream one rank lacks": ["torch.cpu", "state:verify-rule/only-here"],
        "a stream no rank holds": ["torch.cpu", "state:nowhere/at-all"],
    }.get(fault)
    report = hwrng.verify(streams=chosen)
    del tracker
    outcome = _outcome(report)
    outcome["streams"] = [v.stream for v in report.streams]
    return outcome


def bad_arguments_refused_before_any_collective(case: str) -> str:
    """Arguments wrong alike on every rank raise alike on every rank, before any collective."""
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = _mesh_2x2()
    hwrng.manual_seed(42, mesh, sharded_dims=["tp"], platform="cpu")
    arguments: dict[str, Any] = {
        "streams as one string": {"streams": "torch.cpu"},
        "sharded_dims without a mesh": {"sharded_dims": ["tp"]},
        "a mesh that is not a DeviceMesh": {"mesh": {"dp": 2, "tp": 2}},
    }[case]
    with CommDebugMode() as comms:
        try:
            hwrng.verify(**arguments)
        except hwrng.HwrngError as error:
            return f"{type(error).__name__} after {comms.get_total_counts()} collective(s)"
    return "no error"


def groups_of_another_rank(fault: str) -> dict[str, Any]:
    """dp=2 x tp=2 seeded over process groups; ``fault`` breaks one rank's plan."""
    mesh = _mesh_2x2()
    rank = dist.get_rank()
    tp_group, dp_group = mesh.get_group("tp"), mesh.get_group("dp")
    group = dp_group if fault == "dp group on rank 1" and rank == 1 else tp_group
    seed = 6 if fault == "another seed on rank 3" and rank == 3 else 5
    hwrng.manual_seed(seed, groups=[group], platform="cpu")
    outcome = _outcome(hwrng.verify())
    outcome["seed"] = hwrng.current_seeding().rank_seed  # type: ignore[union-attr]
    return outcome


def seeded_on_a_submesh() -> dict[str, Any]:
    """Each dp row seeds on its own tp submesh (same shape, other ranks): one plan."""
    mesh = _mesh_2x2()
    hwrng.manual_seed(11, mesh["tp"], sharded_dims=["tp"], platform="cpu")
    return _outcome(hwrng.verify())


def megatron_named_state(judge_with_mesh: bool) -> dict[str, Any]:
    """The Megatron preset on pp=2 x tp=2, and a named state with one seed on both tp ranks."""
    from hwrng import presets

    mesh = _mesh_2x2(("pp", "tp"))
    rank = dist.get_rank()
    pp, tp = divmod(rank, 2)
    presets.megatron_manual_seed(1234, pp_rank=pp, tp_rank=tp, platform="cpu")
    tracker = hwrng.RNGStatesTracker("cpu", name="user")
    tracker.add("my-tp-rng", 999 + 100 * pp)
    try:
        if judge_with_mesh:
            report = hwrng.verify(mesh, sharded_dims=["pp", "tp"], streams=["state:user/my-tp-rng"])
        else:
            report = hwrng.verify()
        return _outcome(report)
    finally:
        presets.get_rng_tracker("cpu").reset()
        del tracker


def pipeline_stages(fault: str) -> dict[str, Any]:
    """pp=2 x tp=2 sharded along pp and tp; each stage runs its own DTensor ops on its tp mesh."""
    mesh = _mesh_2x2(("pp", "tp"))
    rank = dist.get_rank()
    hwrng.manual_seed(7, mesh, sharded_dims=["pp", "tp"], platform="cpu")
    stage = mesh["tp"]
    hwrng.dtensor.install("cpu")
    try:
        if rank < 2:
            distribute_tensor(torch.zeros(4, 4), stage, [Shard(0)]).uniform_()
        else:
            distribute_tensor(torch.zeros(8, 2), stage, [Shard(0)]).normal_()
            torch.nn.functional.dropout(distribute_tensor(torch.ones(16), stage, [Replicate()]))
        if fault == "one more op on rank 3" and rank == 3:
            DTensor.from_local(torch.zeros(4), stage, [Replicate()], run_check=False).uniform_()
    finally:
        hwrng.dtensor.uninstall()
    return _outcome(hwrng.verify())


def outside_the_group() -> str:
    """verify(group=g) on ranks outside g refuses clearly; g's ranks get their report."""
    group = dist.new_group([0, 1])
    mesh = _mesh_2x2()
    hwrng.manual_seed(42, mesh, sharded_dims=["tp"], platform="cpu")
    try:
        report = hwrng.verify(group=group)
    except hwrng.HwrngError as error:
        return f"{type(error).__name__}: {error}"
    return f"report over {report.world_size} ranks, ok={report.ok}"


def slapo_named_state() -> dict[str, Any]:
    """slapo without a tp_rank on pp=2 x tp=2: it cannot know the tensor-parallel peers."""
    from hwrng import presets

    mesh = _mesh_2x2(("pp", "tp"))
    pp = mesh.get_coordinate()[0]  # type: ignore[index]
    presets.slapo_set_random_seed(1234, pp_rank=pp, platform="cpu")
    tracker = hwrng.RNGStatesTracker("cpu", name="user")
    tracker.add("my-tp-rng", 999 + 100 * pp)
    try:
        return _outcome(hwrng.verify())
    finally:
        del tracker


def out_of_step_beside_private_submeshes(fault: str) -> dict[str, Any]:
    """dp=2 x tp=2 x cp=1: DTensor ops on the whole mesh and on each rank's own 1-rank mesh
    (``mesh["cp"]``); ``fault``: rank 3 runs one op more on the whole mesh."""
    mesh = init_device_mesh("cpu", (2, 2, 1), mesh_dim_names=("dp", "tp", "cp"))
    hwrng.manual_seed(3, mesh, sharded_dims=["tp"], platform="cpu")
    own = mesh["cp"]
    hwrng.dtensor.install("cpu")
    try:
        distribute_tensor(torch.zeros(4, 4), mesh, [Replicate(), Shard(0), Replicate()]).uniform_()
        distribute_tensor(torch.zeros(3), own, [Replicate()]).normal_()
        if fault == "one more op on rank 3" and dist.get_rank() == 3:
            DTensor.from_local(torch.zeros(4), mesh, [Replicate()] * 3, run_check=False).uniform_()
    finally:
        hwrng.dtensor.uninstall()
    return _outcome(hwrng.verify())


def state_of_one_stage(fault: str) -> dict[str, Any]:
    """pp=2 x tp=2 sharded along pp and tp; only stage 0 holds a named state (a sound job);
    ``fault``: both of its tp ranks seed it alike."""
    mesh = _mesh_2x2(("pp", "tp"))
    rank = dist.get_rank()
    hwrng.manual_seed(7, mesh, sharded_dims=["pp", "tp"], platform="cpu")
    tracker = None
    if rank < 2:
        tracker = hwrng.RNGStatesTracker("cpu", name="stage0")
        tracker.add("head-dropout", 50 if fault == "one seed on both tp ranks" else 50 + rank)
    try:
        return _outcome(hwrng.verify())
    finally:
        del tracker


def transposed_mesh(fault: str) -> dict[str, Any]:
    """A mesh whose ranks are not in init_device_mesh's order (dp=2 x tp=2 over [[0, 2], [1, 3]]),
    sharded along tp, with a named state seeded per rank; ``fault``: seeded 100 + dp + tp."""
    from torch.distributed.device_mesh import DeviceMesh

    mesh = DeviceMesh("cpu", torch.tensor([[0, 2], [1, 3]]), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_coordinate()  # type: ignore[misc]
    hwrng.manual_seed(9, mesh, sharded_dims=["tp"], platform="cpu")
    tracker = hwrng.RNGStatesTracker("cpu", name="transposed")
    tracker.add("tp-rng", 100 + (dp + tp if fault == "seed + dp + tp" else 2 * dp + tp))
    try:
        return _outcome(hwrng.verify())
    finally:
        del tracker


def megatron_expert_collision() -> dict[str, Any]:
    """Megatron-LM's seeds on pp=2 x ep=2: ranks (pp=0, ep=1) and (pp=1, ep=0) share the
    expert stream's seed, by Megatron-LM's own formula."""
    import warnings

    from hwrng import presets

    pp, ep = divmod(dist.get_rank(), 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hwrng.HwrngWarning)  # the preset warns: this is the test
        presets.megatron_manual_seed(1234, pp_rank=pp, ep_rank=ep, platform="cpu")
    try:
        return _outcome(hwrng.verify())
    finally:
        presets.get_rng_tracker("cpu").reset()

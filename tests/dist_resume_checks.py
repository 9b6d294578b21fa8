"""What each rank runs in test_resume_dist.py: a small training loop with every kind of
randomness, checkpointed and resumed (importable by the spawned ranks)."""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

import hwrng

STEPS_PER_EPOCH = 2


class Augmented(torch.utils.data.Dataset[torch.Tensor]):
    """Eight items; each worker adds noise from torch, random and NumPy (seeded per worker)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        noise = torch.rand(8) + random.random() + float(np.random.rand())
        return torch.full((8,), float(index)) + noise


def _setup() -> dict[str, Any]:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    hwrng.manual_seed(2024, mesh, sharded_dims=["dp", "tp"], platform="cpu")
    tracker = hwrng.RNGStatesTracker("cpu", name="train")
    tracker.add("model-parallel-rng", 2024 + 2718 + dist.get_rank())
    init = torch.Generator().manual_seed(0)  # the same weights on every rank
    model = torch.nn.Linear(8, 8)
    with torch.no_grad():
        model.weight.copy_(torch.randn(8, 8, generator=init) * 0.3)
        model.bias.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(
        Augmented(),
        batch_size=4,
        shuffle=True,
        num_workers=2,
        worker_init_fn=hwrng.worker_init_fn,
        multiprocessing_context="fork",
    )
    hwrng.dtensor.install("cpu")
    return {"mesh": mesh, "tracker": tracker, "model": model, "optim": optimizer, "loader": loader}


def _epoch(run: dict[str, Any]) -> list[float]:
    losses = []
    for batch in run["loader"]:
        x = batch / 8 * (1 + 0.01 * random.random()) + 0.01 * float(np.random.rand())
        h = run["model"](x)
        # dropout as a DTensor op (rows sharded along dp) through the adapter ...
        h = DTensor.from_local(h, run["mesh"], [Shard(0), Replicate()], run_check=False)
        h = torch.nn.functional.dropout(h, p=0.3).to_local()
        # ... and in a named state, as a tensor-parallel layer would
        with run["tracker"].fork():
            h = torch.nn.functional.dropout(h, p=0.2)
        loss = (h**2).mean()
        run["optim"].zero_grad()
        loss.backward()
        for param in run["model"].parameters():  # data parallel: the replicas stay identical
            assert param.grad is not None
            dist.all_reduce(param.grad)
            param.grad /= dist.get_world_size()
        run["optim"].step()
        losses.append(loss.item())
    return losses


def _save(run: dict[str, Any], directory: str, mode: str) -> None:
    if mode == "dcp":
        import torch.distributed.checkpoint as dcp

        state = {"model": run["model"].state_dict(), "optim": run["optim"].state_dict()}
        dcp.save({**state, "rng": hwrng.RNGState()}, checkpoint_id=os.path.join(directory, "dcp"))
    else:
        rank = dist.get_rank()
        torch.save(
            {"model": run["model"].state_dict(), "optim": run["optim"].state_dict()},
            os.path.join(directory, f"train-{rank}.pt"),
        )
        hwrng.save(os.path.join(directory, f"rng-{rank}.pt"))


def _load(run: dict[str, Any], directory: str, mode: str) -> None:
    if mode == "dcp":
        import torch.distributed.checkpoint as dcp

        state = {
            "model": run["model"].state_dict(),
            "optim": run["optim"].state_dict(),
            "rng": hwrng.RNGState(),
        }
        dcp.load(state, checkpoint_id=os.path.join(directory, "dcp"))
        run["model"].load_state_dict(state["model"])
        run["optim"].load_state_dict(state["optim"])
    else:
        rank = dist.get_rank()
        saved = torch.load(os.path.join(directory, f"train-{rank}.pt"), weights_only=True)
        run["model"].load_state_dict(saved["model"])
        run["optim"].load_state_dict(saved["optim"])
        hwrng.load(os.path.join(directory, f"rng-{rank}.pt"))


def train_and_checkpoint(directory: str, epochs_before: int, epochs_after: int) -> list[float]:
    """Train, checkpoint both ways, train on: the losses after the checkpoint."""
    run = _setup()
    try:
        for _ in range(epochs_before):
            _epoch(run)
        _save(run, directory, "dcp")
        _save(run, directory, "torch")
        return [loss for _ in range(epochs_after) for loss in _epoch(run)]
    finally:
        hwrng.dtensor.uninstall()


def resume(directory: str, mode: str, epochs_after: int) -> list[float]:
    """In fresh processes: set up as the job does, load, train on."""
    run = _setup()
    try:
        _load(run, directory, mode)
        return [loss for _ in range(epochs_after) for loss in _epoch(run)]
    finally:
        hwrng.dtensor.uninstall()


def load_another_ranks_file(directory: str) -> str:
    """Every rank loads (a collective), rank 2 rank 1's file: every rank refuses, none changes."""
    run = _setup()  # kept: its named state must be alive to be loaded into
    hwrng.dtensor.uninstall()
    rank = dist.get_rank()
    before = hwrng.state_dict()
    try:
        hwrng.load(os.path.join(directory, f"rng-{1 if rank == 2 else rank}.pt"))
    except hwrng.CheckpointError as error:
        after = hwrng.state_dict()
        unchanged = before["digest"] == after["digest"]
        return f"{'unchanged' if unchanged else 'CHANGED'}: {error}"
    del run
    return "loaded"


# -- the DCP entry against every documented option, world sizes, elastic resume ------------


def _fingerprint() -> tuple[Any, ...]:
    """Every stream's next draws and the plan, read without moving anything."""
    with hwrng.isolate_rng(platform="cpu"):
        draws = (torch.rand(4).tolist(), random.random(), float(np.random.rand()))
    plan = hwrng.current_seeding()
    return (
        draws,
        os.environ.get("PYTHONHASHSEED"),
        None if plan is None else plan.to_dict(),
        hwrng.get_platform("cpu").counter.peek(torch.default_generator),
    )


def _mesh(name_sizes: tuple[int, int] | None = None) -> Any:
    world = dist.get_world_size()
    return init_device_mesh("cpu", name_sizes or (world // 2, 2), mesh_dim_names=("dp", "tp"))


def _move_everything() -> None:
    torch.rand(5), random.random(), np.random.rand()


def _outcome(load: Any, expected: tuple[Any, ...]) -> str:
    """Run ``load``: 'restored', or 'refused unchanged: <message>' (or what went wrong)."""
    before = _fingerprint()
    try:
        load()
    except hwrng.CheckpointError as error:
        unchanged = "unchanged" if _fingerprint() == before else "CHANGED"
        return f"refused {unchanged}: {error}"
    return "restored" if _fingerprint() == expected else "WRONG STREAMS"


def resume_after_other_seeding(directory: str, how: str) -> tuple[str, Any]:
    """Save after seeding on a mesh; seed otherwise (or not at all); load through DCP."""
    import torch.distributed.checkpoint as dcp

    from hwrng._seeding import record_seeding

    path = os.path.join(directory, f"other-seeding-{how}")
    mesh = _mesh()
    hwrng.manual_seed(5, mesh, sharded_dims=["tp"], platform="cpu")
    _move_everything()
    dcp.save({"rng": hwrng.RNGState()}, checkpoint_id=path)
    expected = _fingerprint()
    if how == "manual_seed":
        hwrng.manual_seed(12345, platform="cpu")
    elif how == "torch.manual_seed":
        torch.manual_seed(1)
        record_seeding(None)
    else:  # no seeding at all: no plan in force, the streams as they happen to be
        record_seeding(None)
    _move_everything()
    outcome = _outcome(lambda: dcp.load({"rng": hwrng.RNGState()}, checkpoint_id=path), expected)
    return outcome, expected[0]


def planner_option(directory: str, option: str) -> str:
    """Save and load with one documented DCP option; the outcome on this rank."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import DefaultLoadPlanner, DefaultSavePlanner

    path = os.path.join(directory, f"option-{option}")
    hwrng.manual_seed(17, _mesh(), sharded_dims=["tp"], platform="cpu")
    _move_everything()
    model = {"weight": torch.arange(4.0)}
    state: dict[str, Any] = {"model": model, "rng": hwrng.RNGState()}
    if option == "dedup_save_to_lowest_rank":
        dcp.save(
            state, checkpoint_id=path, planner=DefaultSavePlanner(dedup_save_to_lowest_rank=True)
        )
    elif option == "flatten_state_dict=False":
        dcp.save(state, checkpoint_id=path, planner=DefaultSavePlanner(flatten_state_dict=False))
    elif option == "RNGSavePlanner, dedup_save_to_lowest_rank":
        planner = hwrng.RNGSavePlanner(dedup_save_to_lowest_rank=True)
        dcp.save(state, checkpoint_id=path, planner=planner)
    elif option.startswith("async_save"):
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
        from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

        kind = AsyncCheckpointerType.PROCESS if "process" in option else None
        staging = (
            DefaultStager(StagingOptions(False, False, True, False))
            if "staging" in option
            else None
        )
        response = dcp.async_save(
            state,
            checkpoint_id=path,
            **({} if kind is None else {"async_checkpointer_type": kind}),
            **({} if staging is None else {"async_stager": staging}),
        )
        # a Future, or (asynchronous staging) torch's AsyncSaveResponse of two futures
        getattr(response, "upload_completion", response).result()
        if staging is not None:
            staging.close()
    elif option == "no entry, allow_partial_load":
        dcp.save({"model": model}, checkpoint_id=path)
    elif option == "layout 1, RNGLoadPlanner":  # what an earlier hwrng wrote: one key
        dcp.save({"model": model, "rng": {"ranks": b"every rank's state"}}, checkpoint_id=path)
    else:
        dcp.save(state, checkpoint_id=path)
    expected = _fingerprint()
    _move_everything()
    kind = hwrng.RNGLoadPlanner if "RNGLoadPlanner" in option else DefaultLoadPlanner
    planner = kind(
        flatten_state_dict=option != "flatten_state_dict=False",
        allow_partial_load="allow_partial_load" in option,
    )
    loaded: dict[str, Any] = {"model": {"weight": torch.zeros(4)}, "rng": hwrng.RNGState()}
    return _outcome(lambda: dcp.load(loaded, checkpoint_id=path, planner=planner), expected)


def one_rank_refuses(directory: str) -> str:
    """Rank 2 holds a named state the checkpoint lacks: every rank refuses, nothing changes."""
    import torch.distributed.checkpoint as dcp

    path = os.path.join(directory, "one-refuses")
    hwrng.manual_seed(23, _mesh(), sharded_dims=["tp"], platform="cpu")
    dcp.save({"rng": hwrng.RNGState()}, checkpoint_id=path)
    expected = _fingerprint()
    _move_everything()
    tracker = hwrng.RNGStatesTracker("cpu", name="only-on-rank-2")
    if dist.get_rank() == 2:
        tracker.add("extra", 99)
    return _outcome(lambda: dcp.load({"rng": hwrng.RNGState()}, checkpoint_id=path), expected)


def save_on_this_world(directory: str, name: str) -> tuple[int, int]:
    """Seed (9, tp sharded), draw, save through DCP: this rank's default generator position."""
    import torch.distributed.checkpoint as dcp

    hwrng.manual_seed(9, _mesh(), sharded_dims=["tp"], platform="cpu")
    _move_everything()
    dcp.save({"rng": hwrng.RNGState()}, checkpoint_id=os.path.join(directory, name))
    return hwrng.get_platform("cpu").counter.peek(torch.default_generator)


def load_on_another_world(directory: str, name: str, on_mismatch: str, position: int) -> Any:
    """Load a checkpoint of another world size; with reseed, compare with the plan's oracle."""
    import warnings

    import torch.distributed.checkpoint as dcp

    mesh = _mesh()
    hwrng.manual_seed(4321, mesh, sharded_dims=["tp"], platform="cpu")
    _move_everything()
    state = {"rng": hwrng.RNGState(on_mismatch=on_mismatch, mesh=mesh)}  # type: ignore[arg-type]
    path = os.path.join(directory, name)
    planner = hwrng.RNGLoadPlanner()  # new ranks have no key of their own in the checkpoint
    if on_mismatch == "error":
        return _outcome(lambda: dcp.load(state, checkpoint_id=path, planner=planner), ())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dcp.load(state, checkpoint_id=path, planner=planner)
    got = _fingerprint()
    # the oracles: the saved job's streams from their start (drawn before the save), and the
    # default generator on the plan's stream at the saved position (where DTensor ops continue)
    seed = hwrng.manual_seed(9, mesh, sharded_dims=["tp"], platform="cpu")
    start = _fingerprint()
    hwrng.get_platform("cpu").set_seed_offset(torch.default_generator, seed, position)
    continued = _fingerprint()
    warned = [str(w.message) for w in caught if issubclass(w.category, hwrng.HwrngWarning)]
    ok = (
        got[0][0] == continued[0][0]  # torch continues ...
        and got[0][1] != start[0][1]  # ... random and NumPy start streams of their own
        and got[0][2] != start[0][2]
        and got[2]["generation"] == 1
    )
    return ok, got[0], warned


def grown_without_the_planner(directory: str, name: str) -> str:
    """DCP's default planner stops a grown world's load at the first missing key, everywhere."""
    import torch.distributed.checkpoint as dcp

    mesh = _mesh()
    hwrng.manual_seed(4321, mesh, sharded_dims=["tp"], platform="cpu")
    state = {"rng": hwrng.RNGState(on_mismatch="reseed", mesh=mesh)}
    try:
        dcp.load(state, checkpoint_id=os.path.join(directory, name))
    except BaseException as error:  # DCP's CheckpointException is not an Exception
        return f"{type(error).__name__}: {'Missing key' in str(error)}"
    return "loaded"


def _invariant_ops(mesh: Any) -> list[list[Any]]:
    """Two kinds of DTensor random op (uniform, normal) and dropout, sharded on different dims."""
    from torch.distributed.tensor import distribute_tensor
    from torch.distributed.tensor import rand as dtensor_rand

    uniform = dtensor_rand((8, 6), device_mesh=mesh, placements=[Shard(0), Shard(1)])
    normal = distribute_tensor(torch.zeros(6, 10), mesh, [Replicate(), Shard(1)]).normal_()
    dropped = torch.nn.functional.dropout(
        distribute_tensor(torch.ones(10, 4), mesh, [Shard(0), Replicate()]), p=0.5
    )
    return [t.full_tensor().tolist() for t in (uniform, normal, dropped)]


def elastic_reference(directory: str, name: str) -> tuple[list[Any], list[Any]]:
    """The uninterrupted run: ops, a local draw, save, then the ops again (before, after)."""
    import torch.distributed.checkpoint as dcp

    mesh = _mesh()
    hwrng.manual_seed(7, mesh, sharded_dims=["tp"], platform="cpu")
    hwrng.dtensor.install("cpu", invariant=True)
    try:
        before = _invariant_ops(mesh)
        torch.rand(3)  # a local op moves the default generator too
        dcp.save({"rng": hwrng.RNGState()}, checkpoint_id=os.path.join(directory, name))
        return before, _invariant_ops(mesh)
    finally:
        hwrng.dtensor.uninstall()


def elastic_resume(directory: str, name: str) -> tuple[list[Any], list[str]]:
    """Fresh start at another world size, seeded otherwise; load with reseed; the ops."""
    import warnings

    import torch.distributed.checkpoint as dcp

    mesh = _mesh()
    hwrng.manual_seed(99, mesh, sharded_dims=["tp"], platform="cpu")
    hwrng.dtensor.install("cpu", invariant=True)
    try:
        state = {"rng": hwrng.RNGState(on_mismatch="reseed", mesh=mesh)}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dcp.load(
                state,
                checkpoint_id=os.path.join(directory, name),
                planner=hwrng.RNGLoadPlanner(),
            )
        warned = [str(w.message) for w in caught if issubclass(w.category, hwrng.HwrngWarning)]
        return _invariant_ops(mesh), warned
    finally:
        hwrng.dtensor.uninstall()


def save_with_one_rank_in_a_fork(directory: str) -> str:
    """Rank 1 saves from inside fork_rng: every rank refuses (none waits for it for ever)."""
    import contextlib

    import torch.distributed.checkpoint as dcp

    hwrng.manual_seed(31, _mesh(), sharded_dims=["tp"], platform="cpu")
    block = hwrng.fork_rng(platform="cpu") if dist.get_rank() == 1 else contextlib.nullcontext()
    with block:
        try:
            dcp.save({"rng": hwrng.RNGState()}, checkpoint_id=os.path.join(directory, "fork"))
        except hwrng.CheckpointError as error:
            return str(error)
    return "saved"


def a_missing_model_key_under_the_planner(directory: str) -> str:
    """RNGLoadPlanner leaves out hwrng's missing keys only: a missing model key still fails."""
    import torch.distributed.checkpoint as dcp

    path = os.path.join(directory, "model-key")
    hwrng.manual_seed(17, _mesh(), sharded_dims=["tp"], platform="cpu")
    dcp.save({"model": {"weight": torch.arange(4.0)}, "rng": hwrng.RNGState()}, checkpoint_id=path)
    loaded = {"model": {"weight": torch.zeros(4), "bias": torch.zeros(1)}, "rng": hwrng.RNGState()}
    try:
        dcp.load(loaded, checkpoint_id=path, planner=hwrng.RNGLoadPlanner())
    except BaseException as error:  # DCP's CheckpointException is not an Exception
        return f"{type(error).__name__}: {'model.bias' in str(error)}"
    return "loaded"


# -- hwrng.save / hwrng.load per rank: one save across ranks ---------------------------------


def per_rank_files_of_two_saves(directory: str, on_mismatch: str) -> tuple[str, list[str]]:
    """Every rank saves step 2, then step 3 over its file, but rank 1's step 3 never lands (its
    step-2 file is put back: killed before its save); every rank loads: what happened here."""
    import shutil
    import warnings

    mesh = _mesh((1, dist.get_world_size()))
    hwrng.manual_seed(53, mesh, sharded_dims=["tp"], platform="cpu")
    rank = dist.get_rank()
    path = os.path.join(directory, f"rng-{rank}.pt")
    hwrng.save(path)
    shutil.copyfile(path, path + ".step-2")
    _move_everything()
    hwrng.save(path)
    expected = _fingerprint()
    if rank == 1:
        os.replace(path + ".step-2", path)
    dist.barrier()
    _move_everything()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = _outcome(
            lambda: hwrng.load(path, on_mismatch=on_mismatch, mesh=mesh),  # type: ignore[arg-type]
            expected,
        )
    return outcome, [str(w.message) for w in caught if issubclass(w.category, hwrng.HwrngWarning)]


def per_rank_files_one_rank_cannot_write(directory: str) -> str:
    """Rank 1's ``hwrng.save`` fails (its folder is missing): every rank raises, naming rank 1."""
    hwrng.manual_seed(59, platform="cpu")
    rank = dist.get_rank()
    folder = directory if rank == 0 else os.path.join(directory, "missing")
    try:
        hwrng.save(os.path.join(folder, f"rng-{rank}.pt"))
    except hwrng.CheckpointError as error:
        return str(error)
    return "saved"


def per_rank_one_rank_names_no_backend(directory: str, action: str) -> dict[str, Any]:
    """Rank 1 alone passes ``platform="no-such-backend"`` to ``hwrng.save`` or ``hwrng.load``:
    what each rank raised, how long it took, and whether its streams are as they were."""
    import time

    rank = dist.get_rank()
    hwrng.manual_seed(61, platform="cpu")
    path = os.path.join(directory, f"rng-{rank}.pt")
    hwrng.save(path)  # every rank's file, so that only rank 1's argument is wrong
    _move_everything()
    before = _fingerprint()
    call = hwrng.save if action == "save" else hwrng.load
    started = time.monotonic()
    try:
        call(path, platform="no-such-backend" if rank == 1 else None)
    except hwrng.HwrngError as error:
        return {
            "raised": type(error).__name__,
            "message": str(error),
            "seconds": time.monotonic() - started,
            "unchanged": _fingerprint() == before,
        }
    return {"raised": None}


# -- hwrng.load with on_mismatch="reseed": one plan for every rank, or the same refusal ---------


def _replicas_along_tp() -> Any:
    """A (dp, tp) mesh over the world; seeded along dp only, rank 0 and 1 are tp replicas."""
    return init_device_mesh("cpu", (dist.get_world_size() // 2, 2), mesh_dim_names=("dp", "tp"))


def save_a_run(directory: str, run: str, seed: int, *, one_plan: bool = True) -> None:
    """A run seeds (sharded along dp), draws, and saves each rank's file to ``<run>/rng-<r>.pt``.

    Without ``one_plan`` every rank seeds alone with ``seed + rank``, without a mesh.
    """
    rank = dist.get_rank()
    if one_plan:
        hwrng.manual_seed(seed, _replicas_along_tp(), sharded_dims=["dp"], platform="cpu")
    else:
        hwrng.manual_seed(seed + rank, platform="cpu")
    _move_everything()
    folder = os.path.join(directory, run)
    os.makedirs(folder, exist_ok=True)
    hwrng.save(os.path.join(folder, f"rng-{rank}.pt"))


def _draws() -> dict[str, Any]:
    """The next draws of every stream (they move the streams: call last)."""
    return {
        "torch": torch.rand(4).tolist(),
        "random": [random.random() for _ in range(2)],
        "numpy": np.random.rand(2).tolist(),
    }


def reseed_per_rank(directory: str, files: dict[int, str], case: str) -> dict[str, Any]:
    """Seed otherwise, draw, then ``hwrng.load`` this rank's file ``files[rank]`` (relative to
    ``directory``) under ``reseed``: what happened, the next draws, verify's verdict, the plan.

    ``case`` ``"no mesh"`` loads without ``mesh=``; ``"rank 2 in a fork"`` loads on rank 2
    inside a named state's fork; ``"rank 1 says error"`` loads on rank 1 with ``"error"``.
    """
    import contextlib
    import warnings

    rank = dist.get_rank()
    mesh = _replicas_along_tp()
    hwrng.manual_seed(4321, mesh, sharded_dims=["dp", "tp"], platform="cpu")
    _move_everything()
    block: Any = contextlib.nullcontext()
    if case == "rank 2 in a fork" and rank == 2:  # a tracker of rank 2's alone, gone on return
        tracker = hwrng.RNGStatesTracker("cpu")
        tracker.add("tp", 7)
        block = tracker.fork("tp")
    path = os.path.join(directory, files[rank])
    before = _fingerprint()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with block:
                hwrng.load(
                    path,
                    on_mismatch="error" if case == "rank 1 says error" and rank == 1 else "reseed",
                    mesh=None if case == "no mesh" else mesh,
                )
        except hwrng.CheckpointError as error:
            return {"refused": str(error), "unchanged": _fingerprint() == before}
    warned = [str(w.message) for w in caught if issubclass(w.category, hwrng.HwrngWarning)]
    plan = hwrng.current_seeding()
    assert plan is not None
    draws = _draws()
    report = hwrng.verify(mesh)
    return {
        "draws": draws,
        "verified": report.ok,
        "report": report.describe(),
        "warned": warned,
        "plan": (plan.seed, list(plan.sharded_dims), plan.generation),
    }

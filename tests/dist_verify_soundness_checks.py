"""What each rank runs in test_verify_soundness_dist.py (importable by the spawned ranks)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import verify_oracle
from torch.distributed.device_mesh import init_device_mesh

import hwrng
from hwrng._host import HOST_COUNTER

STREAMS = ("torch.cpu", "random", "numpy", "state:soundness/tp-rng")


def seeded_by_other_means(names: tuple[str, ...], job: verify_oracle.Job) -> dict[str, Any]:
    """Seed torch, random, NumPy and a named state with the job's (maybe buggy) seeds; verify
    against the job's plan; then draw from every stream, for the test's oracle."""
    mesh = init_device_mesh("cpu", job.sizes, mesh_dim_names=names)
    seed = job.seed(dist.get_rank())
    torch.manual_seed(seed)  # torch keys its Mersenne Twister with the low 32 bits
    random.seed(seed)  # random with all of them
    np.random.seed(seed % 2**32)  # NumPy's legacy seeding takes 32 bits at most
    tracker = hwrng.RNGStatesTracker("cpu", name="soundness")
    tracker.add("tp-rng", seed + 2718)
    try:
        report = hwrng.verify(
            mesh, sharded_dims=[names[d] for d in job.sharded], streams=STREAMS, platform="cpu"
        )
        with tracker.fork("tp-rng"):
            named = torch.rand(4).tolist()
    finally:
        del tracker
    return {
        "verdicts": {v.stream: (v.ok, sorted(v.ranks)) for v in report.streams},
        "draws": {
            "torch.cpu": torch.rand(4).tolist(),
            "random": [random.random() for _ in range(4)],
            "numpy": np.random.rand(4).tolist(),
            "state:soundness/tp-rng": named,
        },
    }


# -- presets: every option, judged by what the ranks then draw -------------------------------


def _draws_of_every_stream(tracker: Any) -> dict[str, list[float]]:
    """The next draws of each named state of ``tracker``, then of torch, random and NumPy."""
    drawn: dict[str, list[float]] = {}
    for name in sorted(tracker.get_states()):
        with tracker.fork(name):
            drawn[f"state:{tracker.name}/{name}"] = torch.rand(4).tolist()
    drawn["torch.cpu"] = torch.rand(4).tolist()
    drawn["random"] = [random.random() for _ in range(4)]
    drawn["numpy"] = np.random.rand(4).tolist()
    return drawn


def preset_seeded(
    preset: str, names: tuple[str, ...], sizes: tuple[int, ...], options: dict[str, Any]
) -> dict[str, Any]:
    """Seed this rank with ``preset`` for its coordinates on a ``names`` x ``sizes`` mesh
    (with ``options``); verify; then draw from every stream, for the test's oracle."""
    import warnings

    from hwrng import presets

    mesh = init_device_mesh("cpu", sizes, mesh_dim_names=names)
    at = dict(zip(names, mesh.get_coordinate() or (), strict=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hwrng.HwrngWarning)  # colliding layouts are cases here
        if preset == "megatron":
            ranks = {f"{d}_rank": at[d] for d in ("pp", "tp", "dp", "ep", "etp") if d in at}
            presets.megatron_manual_seed(1234, **ranks, **options, platform="cpu")
        elif preset == "slapo":
            ranks = {f"{d}_rank": at[d] for d in ("pp", "dp", "tp") if d in at}
            presets.slapo_set_random_seed(1234, **ranks, **options, platform="cpu")
        elif preset == "d9d":
            presets.d9d_set_seeds(1234, mesh, options["dim"], platform="cpu")
        else:
            presets.torchtitan_set_seed(1234, mesh, options["dims"], platform="cpu")
    tracker = presets.get_rng_tracker("cpu")
    try:
        report = hwrng.verify()
        return {
            "verdicts": {v.stream: (v.ok, sorted(v.ranks)) for v in report.streams},
            "text": report.describe(),
            "coordinate": at,
            "draws": _draws_of_every_stream(tracker),
        }
    finally:
        tracker.reset()


# -- the DTensor stream: what each mesh's ranks draw next -----------------------------------


def _replicated_op(mesh: Any) -> list[float]:
    from torch.distributed.tensor import DTensor, Replicate

    local = torch.zeros(4)
    placements = [Replicate()] * mesh.ndim
    return (
        DTensor.from_local(local, mesh, placements, run_check=False).uniform_().to_local().tolist()
    )  # type: ignore[no-any-return]


def dtensor_job(case: str) -> dict[str, Any]:
    """DTensor ops on a 2 x 2 mesh, one thing wrong on some rank (``case``); verify; then one
    replicated op more on the mesh each rank's ops ran on -- what the oracle judges."""
    import warnings

    from hwrng import presets

    rank = dist.get_rank()
    if case.startswith(("megatron", "slapo")):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "tp"))
        pp, tp = mesh.get_coordinate()  # type: ignore[misc]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hwrng.HwrngWarning)
            if case.startswith("megatron"):
                presets.megatron_manual_seed(1234, pp_rank=pp, tp_rank=tp, platform="cpu")
            else:
                presets.slapo_set_random_seed(1234, pp_rank=pp, tp_rank=tp, platform="cpu")
        # across stages: the pp mesh of each tp rank; within a stage: its tp mesh
        used = mesh["pp"] if case.endswith("across stages") else mesh["tp"]
    elif case.startswith("stage"):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "tp"))
        hwrng.manual_seed(7, mesh, sharded_dims=["pp", "tp"], platform="cpu")
        used = mesh["tp"]
    else:
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        hwrng.manual_seed(7, mesh, sharded_dims=["dp", "tp"], platform="cpu")
        used = mesh
    hwrng.dtensor.install("cpu")
    try:
        skips = {"no op on rank 2": 2, "stage rank 3 ran none": 3}.get(case)
        if rank != skips:
            _replicated_op(used)
        if case == "rank 1 re-seeded with the same plan" and rank == 1:
            hwrng.manual_seed(7, mesh, sharded_dims=["dp", "tp"], platform="cpu")
        report = hwrng.verify()
        drawn = _replicated_op(used)
    finally:
        hwrng.dtensor.uninstall()
        presets.get_rng_tracker("cpu").reset()
    verdict = next(v for v in report.streams if v.stream == "dtensor")
    return {
        "verdict": (verdict.ok, sorted(verdict.ranks)),
        "text": report.describe(),
        "mesh": sorted(int(r) for r in used.mesh.flatten().tolist()),
        "drawn": drawn,
    }


# -- verify is read-only: a whole run draws the same with verify calls and without --------


def _forget_host_readings() -> None:
    """Empty what the host generator's counter view remembers, as in a fresh process.

    The pool's ranks run one job after another: a run must not read positions that an
    earlier run's reads left behind (``HOST_COUNTER`` keeps them for the process's life).
    """
    HOST_COUNTER._memo.clear()
    HOST_COUNTER._records.clear()


class _Run:
    """One rank's job on dp=2 x tp=2: what it drew from each stream, and what verify said."""

    def __init__(self, verifying: bool) -> None:
        self.verifying = verifying
        self.mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        self.tp = self.mesh.get_coordinate()[1]  # type: ignore[index]
        self.drawn: list[tuple[str, list[float]]] = []
        self.verdicts: list[tuple[str, bool, str]] = []
        self.tracker: Any = None

    def seed(self) -> None:
        hwrng.manual_seed(42, self.mesh, sharded_dims=["tp"], platform="cpu")

    def look(self, label: str) -> None:
        """Call verify where the other run does not (every stream, every rank)."""
        if self.verifying:
            report = hwrng.verify()
            self.verdicts.append((label, report.ok, report.describe()))

    def dtensor(self, label: str, rows: int = 8) -> None:
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor

        values = distribute_tensor(torch.zeros(rows, 4), self.mesh, [Replicate(), Shard(0)])
        self.drawn.append((f"{label}: dtensor", values.uniform_().to_local().flatten().tolist()))

    def local(self, label: str) -> None:
        self.drawn.append((f"{label}: torch.cpu", torch.rand(3).tolist()))
        self.drawn.append((f"{label}: torch.cpu normal", torch.randn(2).tolist()))
        self.drawn.append((f"{label}: random", [random.random() for _ in range(2)]))
        self.drawn.append((f"{label}: numpy", np.random.rand(2).tolist()))
        with self.tracker.fork("tp-rng"):
            self.drawn.append((f"{label}: tp-rng", torch.rand(2).tolist()))

    def everything(self, label: str) -> None:
        self.dtensor(label)
        self.local(label)


def whole_run(verifying: bool, directory: str) -> dict[str, Any]:
    """Draw from every stream after every way of setting a state (re-seeding, set_rng_state,
    Generator.set_state, torch.manual_seed, load_state_dict, load, fork_rng, named-state forks,
    set_states, a preset); ``verifying``: with ``hwrng.verify()`` between the steps.

    Each way of setting a state is taken where verify has looked at the generator first: a
    state verify saw, a re-seed and DTensor ops that move on, then the state put back.
    """
    from hwrng import presets
    from hwrng._seeding import current_seeding

    _forget_host_readings()
    run = _Run(verifying)
    run.seed()
    run.tracker = hwrng.RNGStatesTracker("cpu", name="read-only")
    run.tracker.add("tp-rng", 3000 + run.tp)  # tensor-parallel shards differ
    hwrng.dtensor.install("cpu")
    try:
        run.everything("start")
        run.look("start")
        for way in ("torch.set_rng_state", "Generator.set_state"):
            run.local(f"before {way}")
            run.look(f"before {way}")
            saved = torch.get_rng_state()
            run.seed()
            run.dtensor(f"re-seeded before {way}", rows=16)
            run.dtensor(f"re-seeded before {way}", rows=8)
            if way == "torch.set_rng_state":
                torch.set_rng_state(saved)
            else:
                torch.default_generator.set_state(saved)
            run.look(f"after {way}")
            run.everything(f"after {way}")
        run.local("before torch.manual_seed")
        run.look("before torch.manual_seed")
        plan = current_seeding()
        assert plan is not None and plan.rank_seed < 2**32  # torch seeds as hwrng does there
        torch.manual_seed(plan.rank_seed)
        run.look("after torch.manual_seed")
        run.everything("after torch.manual_seed")
        run.seed()
        run.look("after hwrng.manual_seed")
        run.everything("after hwrng.manual_seed")
        document = hwrng.state_dict()
        path = f"{directory}/rank{dist.get_rank()}.rng"
        hwrng.save(path)
        run.everything("after saving")
        run.look("after saving")
        hwrng.load_state_dict(document)
        run.look("after load_state_dict")
        run.everything("after load_state_dict")
        hwrng.load(path)
        run.look("after load")
        run.everything("after load")
        run.local("before fork_rng")
        run.look("before fork_rng")
        with hwrng.fork_rng():
            run.seed()
            run.dtensor("inside fork_rng", rows=16)
            run.local("inside fork_rng")
            run.look("inside fork_rng")
            inside = torch.get_rng_state()
        run.look("after fork_rng")
        run.everything("after fork_rng")
        torch.set_rng_state(inside)
        run.everything("back at fork_rng's state")
        named = run.tracker.get_states()
        with run.tracker.fork("tp-rng"):
            run.dtensor("inside a named fork")
            run.drawn.append(("inside a named fork: tp-rng", torch.rand(3).tolist()))
        run.look("after a named fork")
        run.everything("after a named fork")
        run.tracker.set_states(named)
        run.look("after set_states")
        run.everything("after set_states")
        dp = run.mesh.get_coordinate()[0]  # type: ignore[index]
        presets.megatron_manual_seed(1234, tp_rank=run.tp, dp_rank=dp, platform="cpu")
        preset = presets.get_rng_tracker("cpu")
        run.look("after a preset")
        for name in sorted(preset.get_states()):
            with preset.fork(name):
                run.drawn.append((f"after a preset: {name}", torch.rand(3).tolist()))
        run.everything("after a preset")
        run.look("end")
    finally:
        hwrng.dtensor.uninstall()
        presets.get_rng_tracker("cpu").reset()
        run.tracker = None
    return {"drawn": run.drawn, "verdicts": run.verdicts}


def word_zero_marked(case: str) -> dict[str, Any]:
    """Seed torch on dp=2 x tp=2 -- ``"sound"``: each tp rank its own seed; ``"mis-seeded"``:
    one seed everywhere -- draw, then XOR a coordinate into the low 31 bits of word 0 of the
    state, which no draw reads (sound: dp, so replicas differ only there; mis-seeded: tp, so
    shards differ only there); verify torch's CPU stream sharded along tp; then draw."""
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_coordinate()  # type: ignore[misc]
    torch.manual_seed(1000 + tp if case == "sound" else 1000)
    torch.rand(5)
    state = torch.get_rng_state()
    word = int(state[24:28].view(torch.int32)) ^ (0x2A5A5 * (dp if case == "sound" else tp))
    state[24:28] = torch.tensor(list(word.to_bytes(4, "little", signed=True)), dtype=torch.uint8)
    torch.set_rng_state(state)
    report = hwrng.verify(mesh, sharded_dims=["tp"], streams=["torch.cpu"], platform="cpu")
    (verdict,) = report.streams
    return {"verdict": (verdict.ok, sorted(verdict.ranks)), "draws": torch.rand(8).tolist()}

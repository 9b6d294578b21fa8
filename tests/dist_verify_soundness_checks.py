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

"""What each rank runs in test_seeding_dist.py (importable by the spawned ranks)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

import hwrng


def _draws() -> dict[str, Any]:
    return {
        "torch": torch.rand(4).tolist(),
        "device": torch.rand(4, generator=hwrng.get_platform("cpu").generator()).tolist(),
        "random": [random.random() for _ in range(4)],
        "numpy": np.random.rand(4).tolist(),
    }


def seed_on_mesh(seed: int, sharded: list[str]) -> list[dict[str, Any]]:
    mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "pp", "tp"))
    rank_seed = hwrng.manual_seed(seed, mesh, sharded_dims=sharded, platform="cpu")
    coordinate = mesh.get_coordinate()
    assert coordinate is not None
    mine = {
        "rank": dist.get_rank(),
        "coordinate": dict(zip(("dp", "pp", "tp"), coordinate, strict=True)),
        "seed": rank_seed,
        **_draws(),
    }
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    return gathered


def seed_on_groups(seed: int, names: list[str]) -> dict[str, Any]:
    mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "pp", "tp"))
    groups = [mesh.get_group(name) for name in names]
    by_groups = hwrng.manual_seed(seed, groups=groups, platform="cpu")
    draws = _draws()
    by_mesh = hwrng.manual_seed(seed, mesh, sharded_dims=names, platform="cpu")
    return {"groups": by_groups, "mesh": by_mesh, "draws": draws, "again": _draws()}


def seed_on_hand_made_groups(seed: int) -> int:
    """Groups built with new_group: pairs {0,1}, {2,3}, ... sharded within each pair."""
    world = dist.get_world_size()
    mine = None
    for start in range(0, world, 2):
        group = dist.new_group([start, start + 1])
        if dist.get_rank() in (start, start + 1):
            mine = group
    assert mine is not None
    return hwrng.manual_seed(seed, groups=[mine], platform="cpu")


def only_rank_zero_seeds(seed: int) -> int | None:
    """Seeding uses no collective: one rank seeding alone must not hang."""
    mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "pp", "tp"))
    result = None
    if dist.get_rank() == 0:
        result = hwrng.manual_seed(seed, mesh, sharded_dims=["pp", "tp"], platform="cpu")
    return result


def rank_outside_mesh(seed: int) -> str:
    before = torch.get_rng_state()
    mesh = DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("pp", "tp"))
    try:
        return str(hwrng.manual_seed(seed, mesh, sharded_dims=["tp"], platform="cpu"))
    except hwrng.MeshError as error:
        assert torch.equal(before, torch.get_rng_state()), "a refused call must touch nothing"
        return f"MeshError: {error}"


class Probe(torch.utils.data.Dataset[dict[str, Any]]):
    """Each item reports which worker made it and that worker's next draws."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> dict[str, Any]:
        info = torch.utils.data.get_worker_info()
        assert info is not None
        return {
            "worker": info.id,
            "torch": torch.rand(1).item(),
            "random": random.random(),
            "numpy": float(np.random.rand()),
        }


def dataloader_worker_streams(
    seed: int, use_hwrng: bool, context: str = "fork", hide_rank: bool = False
) -> list[dict[str, Any]] | None:
    """Ranks 0 and 1 each run a 2-worker DataLoader; every item reports its worker's draws.

    ``hide_rank`` removes ``RANK`` from the environment first, as for ranks started with
    ``mp.spawn``: then only the parent's torch.distributed state knows the rank.
    """
    import os

    from torch.utils.data import DataLoader

    rank = dist.get_rank()
    hwrng.manual_seed(seed, platform="cpu")  # every rank the same: data-parallel replicas
    if rank > 1:
        return None
    saved = (
        {name: os.environ.pop(name, None) for name in ("RANK", "HWRNG_RANK")} if hide_rank else {}
    )
    try:
        loader = DataLoader(
            Probe(),
            batch_size=None,
            num_workers=2,
            worker_init_fn=hwrng.worker_init_fn if use_hwrng else None,
            multiprocessing_context=context,
        )
        return [{"rank": rank, **item} for item in loader]
    finally:
        for name, value in saved.items():
            if value is not None:
                os.environ[name] = value


def group_without_this_rank(seed: int) -> str:
    """new_group([0]) hands the other ranks a placeholder, not a group."""
    group = dist.new_group([0])
    before = torch.get_rng_state()
    try:
        return str(hwrng.manual_seed(seed, groups=[group], platform="cpu"))
    except hwrng.MeshError as error:
        assert torch.equal(before, torch.get_rng_state())
        return f"MeshError: {error}"


def mesh_refusals(seed: int) -> list[str]:
    """Every refused call names its problem and leaves every RNG as it was."""
    mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "pp", "tp"))
    before = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].tolist())
    messages = []
    for sharded in (["ep"], ["tp", "tp"], ("pp", "pp"), {"pp", "tp"}):
        try:
            hwrng.manual_seed(seed, mesh, sharded_dims=sharded, platform="cpu")  # type: ignore[arg-type]
        except hwrng.MeshError as error:
            messages.append(str(error))
    try:
        hwrng.manual_seed(seed, mesh, groups=[mesh.get_group("tp")], platform="cpu")
    except hwrng.MeshError as error:
        messages.append(str(error))
    after = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].tolist())
    assert torch.equal(before[0], after[0]) and before[1:] == after[1:], "refusals touched an RNG"
    return messages


def the_seeded_mesh_is_not_kept_alive(seed: int) -> dict[str, bool]:
    """hwrng remembers the seeded mesh for verify, but must not keep it (and its groups) alive."""
    import gc
    import weakref

    from hwrng._seeding import seeded_mesh

    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    hwrng.manual_seed(seed, mesh, sharded_dims=["tp"], platform="cpu")
    held_while_alive = seeded_mesh() is mesh
    plan = hwrng.current_seeding()
    hwrng._seeding.record_seeding(plan)  # a plan restored on its own mesh keeps the mesh
    kept_on_restore = seeded_mesh() is mesh
    gone = weakref.ref(mesh)
    del mesh
    gc.collect()
    return {
        "held_while_alive": held_while_alive,
        "kept_on_restore": kept_on_restore,
        "freed": gone() is None,
        "forgotten": seeded_mesh() is None,
        "plan_kept": hwrng.current_seeding() is plan,
    }

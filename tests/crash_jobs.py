"""The save paths the kill matrix cuts without a trainer (importable by the forked ranks).

Each path's ``*_save`` saves twice to the same place (the pattern of a
trainer's ``last.ckpt``), counting the second save's file events, and returns
each rank's draws after each save; ``*_resume`` resumes a fresh job as a user
would and returns the draws that follow; ``*_present`` says, from the files
alone, which save the checkpoint holds.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from crash_harness import SavePath, arm, count_event, disarm

import hwrng


def _seed() -> None:
    """Seed as the job does at every start: each rank its own streams."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("dp",))
    hwrng.manual_seed(1234, mesh, sharded_dims=["dp"], platform="cpu")


def draws() -> list[Any]:
    """What the next steps draw from every stream."""
    return [torch.rand(4).tolist(), random.random(), float(np.random.rand())]


def save_twice(
    save: Callable[[int], object],
    settle: Callable[[int], object] | None = None,
    *,
    saves: int = 2,
) -> dict[int, Any]:
    """Save steps 1 and 2 (or up to ``saves``), the kill armed for the last save alone; what
    each rank draws after each.

    ``settle(step)``, where given, runs after each save, unarmed (a rank keeping a first save's
    file aside, a barrier).
    """
    after: dict[int, Any] = {}
    for step in range(1, saves + 1):
        if step == saves:
            arm()
        save(step)
        disarm()
        if settle is not None:
            settle(step)
        after[step] = draws()
    return after


def _rank0_writes_atomically(value: Any, path: str) -> None:
    """The trainer's own file: rank 0 writes it beside and renames it over (as Lightning)."""
    if dist.get_rank() == 0:
        torch.save(value, path + ".tmp")
        os.replace(path + ".tmp", path)
    dist.barrier()


# -- RNGState(directory=...) by hand: rank 0 writes the trainer's file -----------------------


def by_hand_save(root: str, *, commit: bool = True, saves: int = 3) -> dict[int, Any]:
    """Save three times to ``trainer.pt`` (and its per-rank folder), committing each (or not):
    the cut save, the third, retires the second's set and removes the first's, retired by the
    second."""
    _seed()
    torch.rand(3)
    state = hwrng.RNGState(directory=os.path.join(root, "trainer.pt.hwrng"))

    def save(step: int) -> None:
        saved = state.state_dict()
        _rank0_writes_atomically({"rng": saved, "step": step}, os.path.join(root, "trainer.pt"))
        if commit:
            state.commit()

    return save_twice(save, saves=saves)


def by_hand_resume(root: str) -> Any:
    """Load ``trainer.pt`` on every rank and restore the streams."""
    _seed()
    loaded = torch.load(os.path.join(root, "trainer.pt"), weights_only=True)
    hwrng.RNGState(directory=os.path.join(root, "trainer.pt.hwrng")).load_state_dict(loaded["rng"])
    return draws()


def by_hand_present(root: str) -> int | None:
    """The step in ``trainer.pt``, if there is one."""
    path = os.path.join(root, "trainer.pt")
    if not os.path.exists(path):
        return None
    return int(torch.load(path, weights_only=True)["step"])


BY_HAND = SavePath("`RNGState(directory=)` by hand", by_hand_save, by_hand_resume, by_hand_present)


# -- DCP, each save to a new directory (as torchtitan's step folders) -----------------------


def _dcp_state(step: int) -> dict[str, Any]:
    return {"rng": hwrng.RNGState(), "step": torch.tensor([step])}


def dcp_new_dir_save(root: str) -> dict[int, Any]:
    """``dcp.save`` to ``step-1`` then ``step-2``."""
    _seed()
    torch.rand(3)
    return save_twice(
        lambda step: dcp.save(_dcp_state(step), checkpoint_id=os.path.join(root, f"step-{step}"))
    )


def dcp_new_dir_present(root: str) -> int | None:
    """The latest ``step-<n>`` with DCP's ``.metadata`` (torchtitan's rule)."""
    steps = [
        int(name.split("-")[1])
        for name in os.listdir(root)
        if name.startswith("step-") and os.path.isfile(os.path.join(root, name, ".metadata"))
    ]
    return max(steps, default=None)


def dcp_new_dir_resume(root: str) -> Any:
    """Load the latest complete step folder."""
    _seed()
    step = dcp_new_dir_present(root)
    if step is None:
        raise FileNotFoundError(f"no complete checkpoint in {root}")
    dcp.load(_dcp_state(0), checkpoint_id=os.path.join(root, f"step-{step}"))
    return draws()


DCP_NEW_DIR = SavePath(
    "DCP, a new directory per save", dcp_new_dir_save, dcp_new_dir_resume, dcp_new_dir_present
)


# -- DCP saved over in place (not supported: DCP rewrites its files in place) ----------------


def dcp_same_dir_save(root: str) -> dict[int, Any]:
    """``dcp.save`` twice to ``ckpt``; rank 0 keeps the first save's ``.metadata`` aside."""
    _seed()
    torch.rand(3)

    def keep_first_metadata(step: int) -> None:
        if step == 1 and dist.get_rank() == 0:
            shutil.copyfile(os.path.join(root, "ckpt", ".metadata"), root + ".metadata-1")
        dist.barrier()

    return save_twice(
        lambda step: dcp.save(_dcp_state(step), checkpoint_id=os.path.join(root, "ckpt")),
        keep_first_metadata,
    )


def dcp_same_dir_present(root: str) -> int | None:
    """Which save wrote the ``.metadata`` there (by its bytes), if any."""
    path = os.path.join(root, "ckpt", ".metadata")
    if not os.path.exists(path):
        return None
    with open(path, "rb") as now, open(root + ".metadata-1", "rb") as first:
        return 1 if now.read() == first.read() else 2


def dcp_same_dir_resume(root: str) -> Any:
    """Load ``ckpt``."""
    _seed()
    dcp.load(_dcp_state(0), checkpoint_id=os.path.join(root, "ckpt"))
    return draws()


DCP_SAME_DIR = SavePath(
    "DCP, one directory saved over (not supported)",
    dcp_same_dir_save,
    dcp_same_dir_resume,
    dcp_same_dir_present,
    lost_by_trainer=True,
)


def by_hand_save_uncommitted(root: str) -> dict[int, Any]:
    """:func:`by_hand_save` as code written before ``RNGState.commit`` existed: no commit
    (two saves)."""
    return by_hand_save(root, commit=False, saves=2)


# -- hwrng.save per rank: each rank's file saved over in place ---------------------------------


def _own_file(root: str) -> str:
    return os.path.join(root, f"rng-{dist.get_rank()}.pt")


def per_rank_save(root: str) -> dict[int, Any]:
    """``hwrng.save`` twice to each rank's ``rng-<r>.pt``; each keeps its first file aside."""
    _seed()
    torch.rand(3)

    def keep_first(step: int) -> None:
        if step == 1:
            shutil.copyfile(_own_file(root), _own_file(root) + ".step-1")
        dist.barrier()

    return save_twice(lambda step: hwrng.save(_own_file(root)), keep_first)


def per_rank_resume(root: str) -> Any:
    """``hwrng.load`` of each rank's file."""
    _seed()
    hwrng.load(_own_file(root))
    return draws()


def per_rank_present(root: str) -> int | None:
    """The save every rank's file holds (by its bytes); ``None`` where they differ."""
    held = set()
    for first in (n for n in os.listdir(root) if n.endswith(".step-1")):
        path = os.path.join(root, first.removesuffix(".step-1"))
        if not os.path.exists(path):
            return None
        with open(path, "rb") as now, open(os.path.join(root, first), "rb") as saved:
            held.add(1 if now.read() == saved.read() else 2)
    return held.pop() if len(held) == 1 else None


PER_RANK = SavePath(
    "`hwrng.save` per rank, each file saved over", per_rank_save, per_rank_resume, per_rank_present
)


# -- two runs on one path overlapping (a requeued job and the old one's last save) ------------


def overlap_save(root: str) -> dict[int, Any]:
    """Run A saves 1 to ``last.ckpt``; then A saves 2 while a run B saves 3 to the same path:
    both sets written, B's file lands, then A's (which ``last.ckpt`` then names), B commits,
    A commits. The two runs are two ``RNGState`` of each rank (a run is its own state)."""
    _seed()
    torch.rand(3)
    directory, last = os.path.join(root, "last.ckpt.hwrng"), os.path.join(root, "last.ckpt")
    old, new = hwrng.RNGState(directory=directory), hwrng.RNGState(directory=directory)
    after: dict[int, Any] = {}

    def take(state: hwrng.RNGState, step: int) -> dict[str, Any]:
        saved = state.state_dict()
        with hwrng.isolate_rng(platform="cpu"):
            after[step] = draws()
        draws()
        return {"rng": saved, "step": step}

    _rank0_writes_atomically(take(old, 1), last)
    old.commit()
    arm()
    second, third = take(old, 2), take(new, 3)
    _rank0_writes_atomically(third, last)
    _rank0_writes_atomically(second, last)
    new.commit()
    old.commit()
    disarm()
    return after


def overlap_resume(root: str) -> Any:
    """Load ``last.ckpt`` on every rank."""
    _seed()
    loaded = torch.load(os.path.join(root, "last.ckpt"), weights_only=True)
    hwrng.RNGState(directory=os.path.join(root, "last.ckpt.hwrng")).load_state_dict(loaded["rng"])
    return draws()


def overlap_present(root: str) -> int | None:
    """The save ``last.ckpt`` holds."""
    path = os.path.join(root, "last.ckpt")
    return int(torch.load(path, weights_only=True)["step"]) if os.path.exists(path) else None


OVERLAP = SavePath(
    "two runs on one path, overlapping", overlap_save, overlap_resume, overlap_present
)


# -- DCP async_save, each save to a new directory --------------------------------------------


def dcp_async_save(root: str) -> dict[int, Any]:
    """``dcp.async_save`` to ``step-1`` then ``step-2``, each waited for; one more kill point
    once the second's future has completed."""
    _seed()
    torch.rand(3)

    def save(step: int) -> None:
        folder = os.path.join(root, f"step-{step}")
        response = dcp.async_save(_dcp_state(step), checkpoint_id=folder)
        getattr(response, "upload_completion", response).result()  # a Future, or torch's response
        count_event("the future completed", folder)

    return save_twice(save)


DCP_ASYNC = SavePath(
    "DCP `async_save`, a new directory per save",
    dcp_async_save,
    dcp_new_dir_resume,
    dcp_new_dir_present,
)

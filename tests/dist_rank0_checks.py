"""What each rank runs in test_rank0_checkpoint.py: rank 0 alone writes hwrng.RNGState's dict
with torch.save, as Lightning, Fabric and accelerate do (importable by the spawned ranks)."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from dist_resume_checks import _fingerprint, _mesh, _move_everything, _outcome

import hwrng


def _save_on_rank_0(path: str) -> tuple[Any, ...]:
    """Every rank gives its state (a collective); rank 0 writes; what each rank expects back."""
    saved = hwrng.RNGState().state_dict()
    expected = _fingerprint()
    if dist.get_rank() == 0:
        torch.save(saved, path)
    dist.barrier()
    return expected


def round_trip(directory: str) -> tuple[str, Any]:
    """Save, move, load on every rank with check() then its restore: what happened here."""
    path = os.path.join(directory, "rank0.ckpt")
    hwrng.manual_seed(31, _mesh(), sharded_dims=["tp"], platform="cpu")
    _move_everything()
    expected = _save_on_rank_0(path)
    _move_everything()
    moved = _fingerprint()
    restore = hwrng.RNGState().check(torch.load(path, weights_only=True))
    unchanged = _fingerprint() == moved
    restore()
    restored = _fingerprint() == expected
    return f"check {'changed nothing' if unchanged else 'CHANGED'}; " + (
        "restored" if restored else "WRONG STREAMS"
    ), expected[0]


def one_rank_refuses(directory: str, how: str) -> str:
    """Rank 1 holds a named state the checkpoint lacks: every rank refuses, nothing changes."""
    path = os.path.join(directory, "rank0.ckpt")
    hwrng.manual_seed(37, _mesh(), sharded_dims=["tp"], platform="cpu")
    expected = _save_on_rank_0(path)
    _move_everything()
    tracker = hwrng.RNGStatesTracker("cpu", name=f"only-on-rank-1-{how}")
    if dist.get_rank() == 1:
        tracker.add("extra", 99)
    loaded = torch.load(path, weights_only=True)
    state = hwrng.RNGState()

    def load() -> None:
        if how == "check":  # the verdict now, the restore later (the Lightning callback)
            restore = state.check(loaded)
            restore()
        else:
            state.load_state_dict(loaded)

    return _outcome(load, expected)

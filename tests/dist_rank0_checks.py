"""What each rank runs in test_rank0_checkpoint.py: rank 0 alone writes hwrng.RNGState's dict
with torch.save, as Lightning, Fabric and accelerate do (importable by the spawned ranks)."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from dist_resume_checks import _fingerprint, _mesh, _move_everything, _outcome

import hwrng


def _save_on_rank_0(path: str, files: str | None) -> tuple[Any, ...]:
    """Every rank gives its state (a collective); rank 0 writes; what each rank expects back."""
    saved = hwrng.RNGState(directory=files).state_dict()
    expected = _fingerprint()
    if dist.get_rank() == 0:
        torch.save(saved, path)
    dist.barrier()
    return expected


def round_trip(directory: str) -> tuple[str, Any, list[str], dict[str, list[str]]]:
    """Save, move, load on every rank with check() then its restore: what happened here,
    and what rank 0's file and the per-rank directory hold."""
    path = os.path.join(directory, "rank0.ckpt")
    files = os.path.join(directory, "rank0.ckpt.hwrng")
    if dist.get_rank() == 0:
        os.makedirs(files)
    dist.barrier()
    hwrng.manual_seed(31, _mesh(), sharded_dims=["tp"], platform="cpu")
    _move_everything()
    expected = _save_on_rank_0(path, files)
    _move_everything()
    moved = _fingerprint()
    loaded = torch.load(path, weights_only=True)
    restore = hwrng.RNGState(directory=files).check(loaded)
    unchanged = _fingerprint() == moved
    restore()
    restored = _fingerprint() == expected
    outcome = f"check {'changed nothing' if unchanged else 'CHANGED'}; " + (
        "restored" if restored else "WRONG STREAMS"
    )
    sets = {name: sorted(os.listdir(os.path.join(files, name))) for name in os.listdir(files)}
    return outcome, expected[0], sorted(loaded), sets


def one_rank_refuses(directory: str, how: str) -> str:
    """Rank 1 holds a named state the checkpoint lacks: every rank refuses, nothing changes."""
    path = os.path.join(directory, "rank0.ckpt")
    files = directory
    hwrng.manual_seed(37, _mesh(), sharded_dims=["tp"], platform="cpu")
    expected = _save_on_rank_0(path, files)
    _move_everything()
    tracker = hwrng.RNGStatesTracker("cpu", name=f"only-on-rank-1-{how}")
    if dist.get_rank() == 1:
        tracker.add("extra", 99)
    loaded = torch.load(path, weights_only=True)
    state = hwrng.RNGState(directory=files)

    def load() -> None:
        if how == "check":  # the verdict now, the restore later (the Lightning callback)
            restore = state.check(loaded)
            restore()
        else:
            state.load_state_dict(loaded)

    return _outcome(load, expected)


def without_a_directory(directory: str) -> str:
    """Rank 0 alone writes, and no directory was given: rank 1 finds no entry, all refuse."""
    path = os.path.join(directory, "rank0.ckpt")
    hwrng.manual_seed(41, _mesh(), sharded_dims=["tp"], platform="cpu")
    expected = _save_on_rank_0(path, None)
    _move_everything()
    loaded = torch.load(path, weights_only=True)
    return _outcome(lambda: hwrng.RNGState().load_state_dict(loaded), expected)


def one_rank_cannot_write(directory: str) -> str:
    """Rank 1's directory cannot be made (its parent is a file): every rank refuses the save."""
    hwrng.manual_seed(43, _mesh(), sharded_dims=["tp"], platform="cpu")
    blocker = os.path.join(directory, f"a-file-{dist.get_rank()}")
    with open(blocker, "w") as file:
        file.write("not a directory")
    files = os.path.join(blocker, "sub") if dist.get_rank() == 1 else directory
    try:
        hwrng.RNGState(directory=files).state_dict()
    except hwrng.CheckpointError as error:
        return str(error)
    return "saved"


def damaged_rank_file(directory: str, damage: str, on_mismatch: str) -> tuple[str, list[str]]:
    """Rank 1's file of the save is truncated to half or has one bit flipped: what loading
    does on this rank (refused, naming rank 1, its file and the remedy; or, under
    ``reseed``, re-derived on every rank), and the warnings it gave."""
    import warnings

    path = os.path.join(directory, "rank0.ckpt")
    files = os.path.join(directory, "rank0.ckpt.hwrng")
    hwrng.manual_seed(47, _mesh(), sharded_dims=["tp"], platform="cpu")
    expected = _save_on_rank_0(path, files)
    if dist.get_rank() == 1:
        (folder,) = os.listdir(files)
        own = os.path.join(files, folder, "rank-1.pt")
        with open(own, "rb") as file:
            data = bytearray(file.read())
        if damage == "truncated":
            data = data[: len(data) // 2]
        else:
            data[len(data) // 3] ^= 0x10
        with open(own, "wb") as file:
            file.write(bytes(data))
    dist.barrier()
    _move_everything()
    loaded = torch.load(path, weights_only=True)
    state = hwrng.RNGState(directory=files, on_mismatch=on_mismatch, mesh=_mesh())  # type: ignore[arg-type]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = _outcome(lambda: state.load_state_dict(loaded), expected)
    return outcome, [str(w.message) for w in caught if issubclass(w.category, hwrng.HwrngWarning)]


def dead_set_of_a_larger_world(directory: str) -> list[list[str]]:
    """A 4-rank save killed before rank 2 wrote its file left rank-0, rank-1 and rank-3.pt;
    2 ranks save and commit three times: what each commit left of that set, in sight or
    retired (``<folder>/<file>``)."""
    from hwrng.checkpoint._files import seal

    files = os.path.join(directory, "trainer.pt.hwrng")
    dead = os.path.join(files, f"save-{0xDEAD:016x}")
    if dist.get_rank() == 0:
        os.makedirs(dead)
        for name in ("rank-0.pt", "rank-1.pt", "rank-3.pt", "rank-3.pt.tmp"):
            with open(os.path.join(dead, name), "wb") as file:
                file.write(seal({"nonce": 0xDEAD}))
    dist.barrier()
    hwrng.manual_seed(61, _mesh(), sharded_dims=["tp"], platform="cpu")
    state = hwrng.RNGState(directory=files)
    left = []
    for step in range(3):
        saved = state.state_dict()
        if dist.get_rank() == 0:
            torch.save({"rng": saved, "step": step}, os.path.join(directory, "trainer.pt"))
        state.commit()
        dist.barrier()  # every rank's removals are done
        folders = [name for name in os.listdir(files) if name.startswith(os.path.basename(dead))]
        left.append(
            sorted(
                f"{'retired' if '.retired-' in folder else 'in sight'}/{name}"
                for folder in folders
                for name in os.listdir(os.path.join(files, folder))
            )
        )
    return left


def two_runs_with_a_commit_held(directory: str) -> tuple[str, str]:
    """Two runs on one ``last.ckpt`` (each rank's two ``RNGState``): run A's commit is held at
    its decision point, on every rank, while run B's file lands and B commits; then A goes on.
    What loading ``last.ckpt`` (which names B's set) gives, then after A's next commit."""
    import threading

    from hwrng.checkpoint import _commit

    files, last = os.path.join(directory, "last.ckpt.hwrng"), os.path.join(directory, "last.ckpt")
    hwrng.manual_seed(67, _mesh(), sharded_dims=["tp"], platform="cpu")
    old, new = hwrng.RNGState(directory=files), hwrng.RNGState(directory=files)

    def land(saved: Any) -> None:
        if dist.get_rank() == 0:
            torch.save({"rng": saved}, last + ".tmp")
            os.replace(last + ".tmp", last)
        dist.barrier()

    land(old.state_dict())
    old.commit()
    _move_everything()
    a2 = old.state_dict()
    _move_everything()
    b1 = new.state_dict()
    expected = _fingerprint()  # what last.ckpt, once it names b1, gives back
    _move_everything()
    land(a2)
    reached, go = threading.Event(), threading.Event()
    held: list[threading.Thread] = []
    raised: list[BaseException] = []

    def pause() -> None:
        if held and threading.current_thread() is held[0]:
            reached.set()
            go.wait(120)

    def commit_a() -> None:
        try:
            old.commit()
        except BaseException as error:  # the held commit's failure is this check's result
            raised.append(error)

    _commit.decision_point = pause
    try:
        held.append(threading.Thread(target=commit_a, daemon=True))
        held[0].start()
        if not reached.wait(120):
            return "A's commit never reached its decision point", ""
        land(b1)
        new.commit()
        go.set()
        held[0].join(120)
    finally:
        _commit.decision_point = None
        go.set()
    if raised or held[0].is_alive():
        return f"A's commit failed: {raised}", ""
    load = hwrng.RNGState(directory=files)
    first = _outcome(
        lambda: load.load_state_dict(torch.load(last, weights_only=True)["rng"]), expected
    )
    _move_everything()
    old.state_dict()  # A's next save, its write never landing: b1 is still named
    old.commit()
    again = hwrng.RNGState(directory=files)
    second = _outcome(
        lambda: again.load_state_dict(torch.load(last, weights_only=True)["rng"]), expected
    )
    return first, second

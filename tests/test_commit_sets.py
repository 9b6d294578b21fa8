"""A commit removes nothing a checkpoint still names; the rank files follow the checkpoint.

``RNGState(directory=D)`` by hand, on one process (a directory of per-rank
files needs no process group): each test writes trainer's files as users do,
commits, and loads every checkpoint that should still load, comparing the
draws that follow with those the saving process drew after that save. The
cases of the issue: two trainer's files sharing one directory, two runs
overlapping on one path, a trainer's write still on its way at the commit
(an asynchronous save), a set of a killed 4-rank save, a FIFO where a rank
file should be, an fsspec URL resumed from another working directory, and a
folder copied with its links followed.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import hwrng
from hwrng.checkpoint._files import seal
from hwrng.checkpoint._sets import SET_PREFIX


@pytest.fixture(autouse=True)
def _seeded() -> None:
    hwrng.manual_seed(123, platform="cpu")


def _next_draws() -> list[Any]:
    """What every stream draws next, read without moving anything."""
    with hwrng.isolate_rng(platform="cpu"):
        return [torch.rand(3).tolist(), random.random(), float(np.random.rand())]


def _move() -> None:
    torch.rand(5), random.random(), np.random.rand()


def _write(path: Path, value: Any) -> None:
    """A trainer's file, written beside and renamed over (as Lightning and torch users do)."""
    torch.save(value, str(path) + ".tmp")
    os.replace(str(path) + ".tmp", path)


class Run:
    """One training run saving by hand: what its process drew after each of its saves."""

    def __init__(self, directory: Path | str) -> None:
        self.state = hwrng.RNGState(directory=directory)
        self.after: dict[str, list[Any]] = {}

    def take(self, label: str) -> dict[str, Any]:
        """The RNG entry of a save labelled ``label`` (its rank files are written now)."""
        saved = self.state.state_dict()
        self.after[label] = _next_draws()
        _move()
        return {"rng": saved, "label": label}


def _resumes(directory: Path | str, trainer_file: Path | str, after: dict[str, list[Any]]) -> None:
    """``trainer_file`` loads, and the streams are those its save left."""
    loaded = torch.load(trainer_file, weights_only=True)
    _move()
    hwrng.RNGState(directory=directory).load_state_dict(loaded["rng"])
    assert _next_draws() == after[loaded["label"]]


def _sets(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_two_trainer_files_sharing_one_directory_both_load(tmp_path: Path) -> None:
    directory = tmp_path / "rng"
    run = Run(directory)
    (tmp_path / "weights.safetensors").write_bytes(b"\x10" + bytes(4096))  # read no further
    for name in ("a.pt", "b.pt", "a.pt", "b.pt"):
        _write(tmp_path / name, run.take(name))
        run.state.commit()  # every file beside the directory is in reach
    _resumes(directory, tmp_path / "a.pt", run.after)
    _resumes(directory, tmp_path / "b.pt", run.after)
    assert len(_sets(directory)) == 2  # the two named: the earlier saves of each went


def test_a_directory_named_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented by-hand layout: ``trainer.pt`` beside ``trainer.pt.hwrng``, both relative."""
    monkeypatch.chdir(tmp_path)
    run = Run("trainer.pt.hwrng")
    for label in ("1", "2", "3"):
        _write(Path("trainer.pt"), run.take(label))
        run.state.commit()
    assert len(_sets(tmp_path / "trainer.pt.hwrng")) == 1
    _resumes("trainer.pt.hwrng", "trainer.pt", run.after)


def test_a_second_run_on_the_same_path_keeps_the_set_the_newest_file_names(
    tmp_path: Path,
) -> None:
    """The requeued job: run B starts while run A makes its last save to the same path."""
    directory, last = tmp_path / "last.ckpt.hwrng", tmp_path / "last.ckpt"
    old, new = Run(directory), Run(directory)
    _write(last, old.take("a1"))
    old.state.commit()
    a2 = old.take("a2")  # A's last save: its rank files...
    b1 = new.take("b1")  # ... while B saves too
    _write(last, b1)
    _write(last, a2)  # A's write lands last: last.ckpt names a2
    new.state.commit()  # B used to remove every other set, a2 included
    old.state.commit()
    _resumes(directory, last, {**old.after, **new.after})
    assert len(_sets(directory)) == 1


def test_a_set_removed_by_another_run_before_the_write_is_written_again(tmp_path: Path) -> None:
    """The other order: A's commit runs before B's write of the file lands."""
    directory, last = tmp_path / "last.ckpt.hwrng", tmp_path / "last.ckpt"
    old, new = Run(directory), Run(directory)
    a2 = old.take("a2")
    b1 = new.take("b1")
    _write(last, a2)
    old.state.commit()  # b1 is named by nothing yet: A removes it
    _write(last, b1)
    new.state.commit()  # B finds its own file gone, and writes it again
    _resumes(directory, last, {**old.after, **new.after})


def test_a_write_still_on_its_way_at_the_commit_keeps_the_previous_set(tmp_path: Path) -> None:
    """An asynchronous save: the commit runs while the trainer's write is queued."""
    directory, last = tmp_path / "last.ckpt.hwrng", tmp_path / "last.ckpt"
    run = Run(directory)
    _write(last, run.take("1"))
    run.state.commit()
    second = run.take("2")
    run.state.commit()  # the write of save 2 has not landed: last.ckpt names save 1
    _resumes(directory, last, run.after)  # the write failed, or rank 0 died: save 1 resumes
    _write(last, second)
    third = run.take("3")
    run.state.commit()  # save 3 still on its way: save 2, which last.ckpt names, stays
    _resumes(directory, last, run.after)
    _write(last, third)
    run.take("4")
    run.state.commit()
    _resumes(directory, last, run.after)
    assert len(_sets(directory)) == 2  # save 3 (named) and save 4 (on its way)


def test_every_file_of_a_dead_save_goes_whatever_ranks_are_missing(tmp_path: Path) -> None:
    """A 4-rank save killed before rank 2 wrote: its rank-3.pt went with the rest."""
    directory = tmp_path / "trainer.pt.hwrng"
    dead = directory / f"{SET_PREFIX}{0xDEAD:016x}"
    dead.mkdir(parents=True)
    for name in ("rank-0.pt", "rank-1.pt", "rank-3.pt", "rank-3.pt.tmp"):
        (dead / name).write_bytes(seal({"nonce": 0xDEAD}))
    run = Run(directory)
    _write(tmp_path / "trainer.pt", run.take("1"))
    run.state.commit()
    assert not dead.exists()
    assert len(_sets(directory)) == 1
    _resumes(directory, tmp_path / "trainer.pt", run.after)


def _load_in_a_thread(call: Any, fifo: Path) -> tuple[list[BaseException], bool]:
    """Run ``call``; if it is still blocked after 10 s, open the FIFO's other end to free it."""
    raised: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as error:  # what the load raised is the result
            raised.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(10)
    blocked = thread.is_alive()
    if blocked:  # the load blocked in open(): give it a writer, so that this test ends
        descriptor = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(descriptor)
        thread.join(10)
    return raised, blocked


def test_a_fifo_where_a_rank_file_should_be_is_refused_without_opening_it(tmp_path: Path) -> None:
    directory, trainer_file = tmp_path / "trainer.pt.hwrng", tmp_path / "trainer.pt"
    run = Run(directory)
    _write(trainer_file, run.take("1"))
    run.state.commit()
    (rank_file,) = directory.glob("save-*/rank-0.pt")
    rank_file.unlink()
    os.mkfifo(rank_file)
    loaded = torch.load(trainer_file, weights_only=True)
    raised, blocked = _load_in_a_thread(
        lambda: hwrng.RNGState(directory=directory).load_state_dict(loaded["rng"]), rank_file
    )
    assert not blocked, "the load opened the FIFO and blocked"
    assert len(raised) == 1 and isinstance(raised[0], hwrng.CheckpointError), raised
    assert "a FIFO (named pipe), not a regular file" in str(raised[0])
    assert str(rank_file) in str(raised[0]) and "on_mismatch='reseed'" in str(raised[0])
    with pytest.warns(hwrng.HwrngWarning, match="not restored"):  # reseed stays the way out
        hwrng.RNGState(directory=directory, on_mismatch="reseed").load_state_dict(loaded["rng"])
    second = run.take("2")  # a commit removes the FIFO of a dead set without opening it
    _write(trainer_file, second)
    raised, blocked = _load_in_a_thread(run.state.commit, rank_file)
    assert not blocked and not raised, raised
    assert not rank_file.exists()


def test_a_fifo_given_to_hwrng_load_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "rng.pt"
    os.mkfifo(fifo)
    raised, blocked = _load_in_a_thread(lambda: hwrng.load(fifo), fifo)
    assert not blocked, "hwrng.load opened the FIFO and blocked"
    assert len(raised) == 1 and "a FIFO (named pipe), not a regular file" in str(raised[0])


def test_a_fifo_beside_the_directory_is_not_opened_by_a_commit(tmp_path: Path) -> None:
    """A commit without ``checkpoint`` reads the files beside the directory: never a FIFO."""
    directory = tmp_path / "trainer.pt.hwrng"
    fifo = tmp_path / "a-pipe"
    os.mkfifo(fifo)
    run = Run(directory)
    for label in ("1", "2"):
        _write(tmp_path / "trainer.pt", run.take(label))
        raised, blocked = _load_in_a_thread(run.state.commit, fifo)
        assert not blocked and not raised, raised
    assert len(_sets(directory)) == 1


def test_an_fsspec_url_keeps_the_rank_files_on_its_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank files follow a URL (fsspec's memory://), not the working directory."""
    import fsspec

    memory = fsspec.filesystem("memory")
    base = f"memory://{tmp_path.name}"
    directory, trainer_file = f"{base}/last.ckpt.hwrng", f"{base}/last.ckpt"
    monkeypatch.chdir(tmp_path)
    run = Run(directory)
    for label in ("1", "2"):
        with fsspec.open(trainer_file, "wb") as file:
            torch.save(run.take(label), file)
        run.state.commit()
    assert list(tmp_path.iterdir()) == []  # nothing in the working directory
    assert len(memory.ls(f"/{tmp_path.name}/last.ckpt.hwrng")) == 1
    elsewhere = tmp_path / "another-node"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with fsspec.open(trainer_file, "rb") as file:
        loaded = torch.load(file, weights_only=True)
    _move()
    hwrng.RNGState(directory=directory).load_state_dict(loaded["rng"])
    assert _next_draws() == run.after["2"]
    memory.rm(f"/{tmp_path.name}", recursive=True)


def test_a_local_file_url_resumes_from_another_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"simplecache::file://{tmp_path}/ckpt"
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "node-0").mkdir()
    monkeypatch.chdir(tmp_path / "node-0")
    run = Run(f"{url}/last.ckpt.hwrng")
    for label in ("1", "2"):
        _write(tmp_path / "ckpt" / "last.ckpt", run.take(label))
        run.state.commit()
    assert list((tmp_path / "node-0").iterdir()) == []
    assert len(_sets(tmp_path / "ckpt" / "last.ckpt.hwrng")) == 1
    (tmp_path / "node-1").mkdir()
    monkeypatch.chdir(tmp_path / "node-1")
    _resumes(f"{url}/last.ckpt.hwrng", tmp_path / "ckpt" / "last.ckpt", run.after)


_WITHOUT_FSSPEC = """
import sys
sys.modules["fsspec"] = None  # as if it were not installed
import hwrng
hwrng.manual_seed(1, platform="cpu")
try:
    hwrng.RNGState(directory="memory://nowhere/last.ckpt.hwrng").state_dict()
except hwrng.CheckpointError as error:
    print("refused:", error)
"""


def test_a_url_without_fsspec_is_refused_clearly() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_FSSPEC], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout and "fsspec, which is not installed" in result.stdout


def test_a_folder_copied_with_its_links_followed_still_resumes(tmp_path: Path) -> None:
    """``cp -rL`` of a Lightning folder (``save_last="link"``): last.ckpt becomes a copy of
    epoch=1.ckpt, and finds epoch=1.ckpt.hwrng beside it."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    run = Run(folder / "epoch=1.ckpt.hwrng")
    _write(folder / "epoch=1.ckpt", run.take("1"))
    run.state.commit()
    (folder / "last.ckpt").symlink_to("epoch=1.ckpt")
    subprocess.run(["cp", "-rL", str(folder), str(tmp_path / "copy")], check=True)
    copy = tmp_path / "copy"
    assert not (copy / "last.ckpt").is_symlink()
    _resumes(copy / "last.ckpt.hwrng", copy / "last.ckpt", run.after)
    moved = tmp_path / "moved"
    os.rename(copy, moved)
    _resumes(moved / "last.ckpt.hwrng", moved / "last.ckpt", run.after)


def test_commit_reads_only_the_checkpoint_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``commit(checkpoint)``: the trainer's file kept elsewhere; the files beside the
    directory are then not read (an integration's directory belongs to one file)."""
    from hwrng.checkpoint import _named

    monkeypatch.setattr(_named, "LARGEST_SEARCHED", 4096)
    directory, elsewhere = tmp_path / "rng", tmp_path / "trainer" / "state.pt"
    elsewhere.parent.mkdir()
    (tmp_path / "huge.pkl").write_bytes(b"\x80" + bytes(8192))  # a pickle too large to search
    run = Run(directory)
    for label in ("1", "2"):
        _write(elsewhere, run.take(label))
        run.state.commit(elsewhere)
    assert len(_sets(directory)) == 1
    _resumes(directory, elsewhere, run.after)
    _write(elsewhere, run.take("3"))
    with pytest.warns(hwrng.HwrngWarning, match="cannot tell which of them"):
        run.state.commit()  # without it, huge.pkl is in reach, and cannot be told: all kept
    assert len(_sets(directory)) == 2

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
import re
import shutil
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
    """The sets in sight (retired ones left out)."""
    names = sorted(p.name for p in directory.iterdir()) if directory.exists() else []
    return [name for name in names if re.fullmatch(f"{SET_PREFIX}[0-9a-f]{{16}}", name)]


def _retired(directory: Path) -> list[str]:
    """The retired sets: out of sight, removed by a later commit that finds them unnamed."""
    names = sorted(p.name for p in directory.iterdir()) if directory.exists() else []
    return [name for name in names if ".retired-" in name]


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
    assert len(_retired(directory)) == 1  # b.pt's first, retired by the last commit


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
    assert not dead.exists()  # retired, every file at once
    assert len(_sets(directory)) == 1 and _retired(directory)[0].startswith(dead.name)
    _write(tmp_path / "trainer.pt", run.take("2"))
    run.state.commit()  # read again after it was retired: still unnamed, removed
    assert not [name for name in _retired(directory) if name.startswith(dead.name)]
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
    listed = memory.ls(f"/{tmp_path.name}/last.ckpt.hwrng", detail=False)
    assert len([name for name in listed if ".retired-" not in name]) == 1
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


def test_commit_reads_the_checkpoint_and_the_files_beside_it_and_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``commit(checkpoint)`` with the trainer's file kept elsewhere: a copy beside it keeps
    its set; a file beside the directory that cannot be told keeps every set, and warns."""
    from hwrng.checkpoint import _named

    monkeypatch.setattr(_named, "LARGEST_SEARCHED", 4096)
    directory, elsewhere = tmp_path / "rng", tmp_path / "trainer" / "state.pt"
    elsewhere.parent.mkdir()
    run = Run(directory)
    _write(elsewhere, run.take("1"))
    run.state.commit(elsewhere)
    shutil.copy(elsewhere, elsewhere.parent / "best.pt")  # beside the checkpoint
    for label in ("2", "3"):
        _write(elsewhere, run.take(label))
        run.state.commit(elsewhere)
    assert len(_sets(directory)) == 2  # save 1 (best.pt) and save 3 (state.pt)
    _resumes(directory, elsewhere.parent / "best.pt", run.after)
    (tmp_path / "huge.pkl").write_bytes(b"\x80" + bytes(8192))  # a pickle too large to search
    _write(elsewhere, run.take("4"))
    with pytest.warns(hwrng.HwrngWarning, match="cannot tell which of them"):
        run.state.commit(elsewhere)  # huge.pkl is beside the directory: every set kept
    assert len(_sets(directory)) == 3
    _resumes(directory, elsewhere, run.after)


# -- copies, renames and links of a trainer's file keep their sets --------------------------


def _written_again(source: Path, target: Path) -> None:
    """Another tool's file: the trainer's checkpoint loaded, and written again with more in it
    in torch's legacy format (a pickle, not a zip)."""
    value = {**torch.load(source, weights_only=True), "weights": torch.zeros(3)}
    torch.save(value, target, _use_new_zipfile_serialization=False)


@pytest.mark.parametrize(
    "keep",
    [
        shutil.copy,
        os.link,
        os.rename,
        _written_again,
    ],
    ids=["a copy", "a hard link", "a rename", "a file another tool wrote"],
)
def test_a_file_kept_beside_the_trainer_s_keeps_its_set_as_training_goes_on(
    tmp_path: Path, keep: Any
) -> None:
    """``cp last.ckpt last-backup.ckpt``: the next commits of ``last.ckpt`` read only
    ``last.ckpt``, and removed the set the backup names (the backup was then refused)."""
    directory, last = tmp_path / "last.ckpt.hwrng", tmp_path / "last.ckpt"
    run = Run(directory)
    _write(last, run.take("1"))
    run.state.commit(last)
    keep(last, tmp_path / "last-backup.ckpt")
    for label in ("2", "3", "4"):
        _write(last, run.take(label))
        run.state.commit(last)  # as every integration does: the trainer's file is given
    _resumes(directory, tmp_path / "last-backup.ckpt", run.after)
    _resumes(directory, last, run.after)
    assert len(_sets(directory)) == 2  # save 1 (the backup) and save 4
    (tmp_path / "last-backup.ckpt").unlink()
    _write(last, run.take("5"))
    run.state.commit(last)
    _write(last, run.take("6"))
    run.state.commit(last)  # no file names save 1 now: retired, then removed
    assert len(_sets(directory)) == 1 and len(_retired(directory)) == 1
    _resumes(directory, last, run.after)


def test_a_copy_keeps_its_set_when_the_trainer_removes_the_original(tmp_path: Path) -> None:
    """What Lightning's top-k does, by hand: ``release`` after the trainer removed its file."""
    from hwrng.checkpoint._commit import release

    run = Run(tmp_path / "epoch=3.ckpt.hwrng")
    _write(tmp_path / "epoch=3.ckpt", run.take("3"))
    run.state.commit(tmp_path / "epoch=3.ckpt")
    shutil.copy(tmp_path / "epoch=3.ckpt", tmp_path / "best.ckpt")
    run.state.directory = tmp_path / "epoch=4.ckpt.hwrng"
    _write(tmp_path / "epoch=4.ckpt", run.take("4"))
    run.state.commit(tmp_path / "epoch=4.ckpt")
    (tmp_path / "epoch=3.ckpt").unlink()
    release(tmp_path / "epoch=3.ckpt.hwrng")
    _resumes(tmp_path / "best.ckpt.hwrng", tmp_path / "best.ckpt", run.after)
    (tmp_path / "best.ckpt").unlink()
    (tmp_path / "epoch=4.ckpt").unlink()
    release(tmp_path / "epoch=4.ckpt.hwrng")
    release(tmp_path / "epoch=3.ckpt.hwrng")  # no file names it now: the folder goes
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# -- a commit held at its decision point while another run lands and commits ----------------


class Held:
    """Hold the next commit that reaches its decision point, in a thread of its own."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from hwrng.checkpoint import _commit

        self.reached, self.go = threading.Event(), threading.Event()
        self.raised: list[BaseException] = []
        self._thread: threading.Thread | None = None

        def pause() -> None:
            if threading.current_thread() is self._thread:
                self.reached.set()
                assert self.go.wait(60), "the held commit was never let go"

        monkeypatch.setattr(_commit, "decision_point", pause)

    def start(self, call: Any) -> None:
        """Run ``call`` in a thread; return once it has decided (and is held there)."""

        def target() -> None:
            try:
                call()
            except BaseException as error:  # the held call's failure is the test's result
                self.raised.append(error)

        self._thread = threading.Thread(target=target, daemon=True)
        self._thread.start()
        assert self.reached.wait(60), "the commit never reached its decision point"

    def finish(self) -> None:
        """Let the held call go on, and wait for it."""
        assert self._thread is not None
        self.go.set()
        self._thread.join(60)
        assert not self._thread.is_alive() and not self.raised, self.raised


def test_a_file_landing_while_a_commit_is_held_at_its_decision_keeps_its_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The requeue case, one ``last.ckpt``: A decides (B's set is named by nothing yet), B's
    file lands and B commits, then A goes on: A used to remove the set the file names."""
    directory, last = tmp_path / "last.ckpt.hwrng", tmp_path / "last.ckpt"
    old, new = Run(directory), Run(directory)
    _write(last, old.take("a1"))
    old.state.commit()
    a2, b1 = old.take("a2"), new.take("b1")
    _write(last, a2)
    held = Held(monkeypatch)
    held.start(old.state.commit)  # decided: b1 is named by no file
    _write(last, b1)  # B's file lands last
    new.state.commit()
    held.finish()
    _resumes(directory, last, {**old.after, **new.after})
    old.take("a3")  # A's next save, its write still on its way: b1 is still named
    old.state.commit()
    _resumes(directory, last, {**old.after, **new.after})


def test_two_files_sharing_a_directory_with_a_commit_held_keep_their_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``a.pt`` and ``b.pt`` sharing ``directory=``: B's commit decides while A's newest set is
    named by nothing yet; A's file lands and A commits; B goes on (it removed ``a.pt``'s set)."""
    directory = tmp_path / "rng"
    a, b = Run(directory), Run(directory)
    _write(tmp_path / "a.pt", a.take("a1"))
    a.state.commit()
    _write(tmp_path / "b.pt", b.take("b1"))
    b.state.commit()
    a2 = a.take("a2")  # A's rank files: a.pt not written yet
    b.take("b2")  # B's save, its write still on its way
    held = Held(monkeypatch)
    held.start(b.state.commit)  # decided: a2 is named by no file
    _write(tmp_path / "a.pt", a2)
    a.state.commit()
    held.finish()
    _resumes(directory, tmp_path / "a.pt", {**a.after, **b.after})
    _resumes(directory, tmp_path / "b.pt", {**a.after, **b.after})


def test_a_retired_set_is_removed_only_when_a_later_read_finds_it_unnamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A set retired while named (a file landed during the decision) stays loadable, and no
    later commit removes it while a file names it."""
    directory, last = tmp_path / "last.ckpt.hwrng", tmp_path / "last.ckpt"
    old, new = Run(directory), Run(directory)
    _write(last, old.take("a1"))
    old.state.commit()
    old.take("a2")
    b1 = new.take("b1")
    held = Held(monkeypatch)
    held.start(old.state.commit)
    _write(last, b1)
    held.finish()  # b1 retired, though last.ckpt names it now
    assert _retired(directory)
    for _ in range(3):  # A saves on, its writes never landing: b1 stays
        old.take("a")
        old.state.commit()
        _resumes(directory, last, {**old.after, **new.after})


# -- a run's save while another run's commit retires its set --------------------------------


def test_a_save_whose_set_is_retired_while_it_writes_writes_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs on one path: B writes its rank file while A's commit runs; A's commit used to
    delete B's file in flight, and B's save raised."""
    directory, last = tmp_path / "last.ckpt.hwrng", tmp_path / "last.ckpt"
    old, new = Run(directory), Run(directory)
    _write(last, old.take("a1"))
    old.state.commit()
    _write(last, old.take("a2"))
    writing, go = threading.Event(), threading.Event()
    real_replace = os.replace
    saver: list[threading.Thread] = []

    def replace(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        if saver and threading.current_thread() is saver[0] and str(target).endswith("rank-0.pt"):
            writing.set()
            assert go.wait(60)
        real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    taken: list[Any] = []
    raised: list[BaseException] = []

    def save() -> None:
        try:
            taken.append(new.take("b1"))
        except BaseException as error:  # what the save raised is the result
            raised.append(error)

    thread = threading.Thread(target=save, daemon=True)
    saver.append(thread)
    thread.start()
    assert writing.wait(60)  # B's file written, not yet renamed
    old.state.commit()  # A: B's set is named by no file
    saver.pop()
    go.set()
    thread.join(60)
    assert not thread.is_alive() and not raised, raised
    _write(last, taken[0])
    new.state.commit()
    _resumes(directory, last, {**old.after, **new.after})


# -- a storage error is never "no file" -------------------------------------------------------


def test_an_fsspec_error_reading_the_trainer_s_file_keeps_every_set_and_warns(
    tmp_path: Path,
) -> None:
    """On fsspec, a HEAD of the trainer's file that failed once (PermissionError) read as "no
    file", and the set it names was removed without a warning; a local path kept and warned."""
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    failing: set[str] = set()

    class Flaky(MemoryFileSystem):  # type: ignore[misc]
        """fsspec's memory filesystem under a protocol of its own, whose HEAD can fail."""

        protocol = "hwrng-flaky"

        @classmethod
        def _strip_protocol(cls, path: str) -> str:
            return str(super()._strip_protocol(path.removeprefix("hwrng-flaky://")))

        def info(self, path: str, **kwargs: Any) -> Any:
            if self._strip_protocol(path) in failing:
                failing.discard(self._strip_protocol(path))
                raise PermissionError(f"403 Forbidden (once): {path}")
            return super().info(path, **kwargs)

    fsspec.register_implementation("hwrng-flaky", Flaky, clobber=True)
    base = f"hwrng-flaky://{tmp_path.name}"
    directory, last = f"{base}/last.ckpt.hwrng", f"{base}/last.ckpt"
    try:
        old = Run(directory)
        with fsspec.open(last, "wb") as file:
            torch.save(old.take("1"), file)
        old.state.commit(last)
        resumed = Run(directory)  # a resumed job: its first save's write still on its way
        resumed.take("2")
        failing.add(f"/{tmp_path.name}/last.ckpt")
        with pytest.warns(hwrng.HwrngWarning, match="kept every earlier set"):
            resumed.state.commit(last)
        with fsspec.open(last, "rb") as file:
            loaded = torch.load(file, weights_only=True)
        _move()
        hwrng.RNGState(directory=directory).load_state_dict(loaded["rng"])
        assert _next_draws() == old.after["1"]
    finally:
        Flaky().rm(f"/{tmp_path.name}", recursive=True)

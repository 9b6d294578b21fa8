"""What a power loss could leave: every rename or removal hwrng commits is synced before it returns.

A rename, a new folder or a removal is an entry of a folder; it survives a
power loss only once that folder is synced (``fsync`` of the folder). Without
it, a power loss may bring the folder back as it was: the previous file of
``hwrng.save`` in place of the new one, a set's folder missing while the
trainer's file names it. The test records, in order, every operation on names
(``os.mkdir``, ``os.rename``, ``os.replace``, ``os.unlink``, ``os.rmdir``) and
every ``fsync`` of a folder that hwrng makes under the test's folder, and
replays them as a power loss would: an operation is durable only if its
folder is synced after it (or the folder itself is removed, durably). What
hwrng has declared done -- a call that returned -- must be durable whole.
The calls are real (the local filesystem); the recorder only watches.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

import hwrng


@dataclass
class Recorder:
    """The operations on names, and the folder syncs, made under ``root``, in order."""

    root: str
    log: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    folders: dict[int, str] = field(default_factory=dict)  # descriptor -> folder opened

    def under(self, path: Any) -> str | None:
        if isinstance(path, int):
            return None
        text = os.path.abspath(os.fsdecode(path))
        return text if text == self.root or text.startswith(self.root + os.sep) else None

    def add(self, kind: str, *paths: Any) -> None:
        named = tuple(p for p in (self.under(path) for path in paths) if p is not None)
        if named:
            self.log.append((kind, named))

    def not_durable(self) -> list[str]:
        """Each operation a power loss now could undo: its folder was not synced after it."""
        undone = []
        for index, (kind, paths) in enumerate(self.log):
            if kind == "fsync":
                continue
            for folder in {os.path.dirname(path) for path in paths}:
                if not self._synced_after(folder, index):
                    undone.append(f"{kind} {' -> '.join(paths)} (folder {folder} not synced)")
        return undone

    def _synced_after(self, folder: str, index: int) -> bool:
        for kind, paths in self.log[index + 1 :]:
            if kind == "fsync" and paths == (folder,):
                return True
        later = [i for i, (kind, paths) in enumerate(self.log) if i > index]
        return any(
            self.log[i] == ("rmdir", (folder,)) and self._synced_after(os.path.dirname(folder), i)
            for i in later
        )


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """Every name operation and folder sync under ``tmp_path``, while the test runs."""
    recorder = Recorder(str(tmp_path.resolve()))
    real = {name: getattr(os, name) for name in ("mkdir", "rename", "replace", "unlink", "rmdir")}
    real_open, real_fsync, real_close = os.open, os.fsync, os.close

    def watched(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            result = real[name](*args, **kwargs)
            if kwargs.get("dir_fd") is None:
                recorder.add(name, *args[: 2 if name in ("rename", "replace") else 1])
            return result

        return call

    def opened(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        descriptor = real_open(path, flags, *args, **kwargs)
        where = recorder.under(path)
        if where is not None and flags & getattr(os, "O_DIRECTORY", 0):
            recorder.folders[descriptor] = where
        return descriptor

    def synced(descriptor: int) -> None:
        real_fsync(descriptor)
        if descriptor in recorder.folders:
            recorder.log.append(("fsync", (recorder.folders[descriptor],)))

    def closed(descriptor: int) -> None:
        recorder.folders.pop(descriptor, None)
        real_close(descriptor)

    for name in real:
        monkeypatch.setattr(os, name, watched(name))
    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(os, "fsync", synced)
    monkeypatch.setattr(os, "close", closed)
    return recorder


@pytest.fixture(autouse=True)
def _seeded() -> None:
    hwrng.manual_seed(5, platform="cpu")


def test_hwrng_save_syncs_the_folder_after_its_rename(tmp_path: Path, recorded: Recorder) -> None:
    """``hwrng.save`` renamed its file into place without syncing the folder: after a power
    loss the rename could be lost, and the previous file come back."""
    path = tmp_path / "rng.pt"
    hwrng.save(path)  # a new file
    hwrng.save(path)  # over the previous one
    assert [kind for kind, _ in recorded.log].count("replace") == 2
    assert recorded.not_durable() == []


def test_a_save_through_a_link_syncs_the_folder_of_the_file_it_replaces(
    tmp_path: Path, recorded: Recorder
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "rng.pt").symlink_to(tmp_path / "real" / "rng.pt")
    recorded.log.clear()
    hwrng.save(tmp_path / "rng.pt")
    assert ("fsync", (str(tmp_path.resolve() / "real"),)) in recorded.log
    assert recorded.not_durable() == []


def _trainer_writes(value: Any, path: Path) -> None:
    torch.save(value, str(path) + ".tmp")
    os.replace(str(path) + ".tmp", path)


def test_every_save_and_commit_of_rank_files_is_durable_when_it_returns(
    tmp_path: Path, recorded: Recorder
) -> None:
    """Each rank file renamed into its set, each new folder, each set retired and removed:
    synced before ``state_dict`` and ``commit`` return. The trainer's own file is its own."""
    state = hwrng.RNGState(directory=tmp_path / "trainer.pt.hwrng")
    kinds: set[str] = set()
    for step in range(4):
        recorded.log.clear()
        saved = state.state_dict()
        assert recorded.not_durable() == [], step
        kinds |= {kind for kind, _ in recorded.log}
        _trainer_writes({"rng": saved}, tmp_path / "trainer.pt")
        recorded.log.clear()
        state.commit()
        assert recorded.not_durable() == [], step
        kinds |= {kind for kind, _ in recorded.log}
    assert kinds >= {"mkdir", "replace", "rename", "unlink", "rmdir", "fsync"}  # all were seen


def test_the_recorder_finds_a_rename_left_unsynced(tmp_path: Path, recorded: Recorder) -> None:
    """The oracle itself: a rename without a sync is named, one with a sync is not."""
    (tmp_path / "a").write_bytes(b"a")
    recorded.log.clear()
    os.rename(tmp_path / "a", tmp_path / "b")
    assert len(recorded.not_durable()) == 1 and "rename" in recorded.not_durable()[0]
    descriptor = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(descriptor)
    os.close(descriptor)
    assert recorded.not_durable() == []

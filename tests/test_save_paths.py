"""hwrng.save replaces only a regular file: every other kind of path is refused, untouched.

Every node is made inside the test's temporary directory (a character device
as a copy of ``/dev/null``'s node, made with ``mknod``; skipped where that is
not permitted). Each refusal is checked on the node itself: still there, the
same inode of the same type, nothing written into it, no temporary file left.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import hwrng


@pytest.fixture(autouse=True)
def _seeded() -> None:
    hwrng.manual_seed(11, platform="cpu")


def _identity(path: Path) -> tuple[int, int, int, int]:
    """What must not change about a refused node: its inode, type, device number, size."""
    info = os.lstat(path)
    return info.st_ino, stat.S_IFMT(info.st_mode), info.st_rdev, info.st_size


def _refused(path: Path, kind: str) -> None:
    """Save to ``path`` and require a refusal that names it and ``kind``, changing nothing."""
    before = _identity(path)
    listing = sorted(os.listdir(path.parent))
    with pytest.raises(hwrng.CheckpointError, match="not a regular file") as refusal:
        hwrng.save(path)
    message = str(refusal.value)
    assert repr(str(path)) in message and f"it is {kind}," in message, message
    assert refusal.value.__cause__ is None
    assert _identity(path) == before
    assert sorted(os.listdir(path.parent)) == listing  # no temporary file


def _character_device(path: Path) -> Path:
    null = os.stat("/dev/null").st_rdev
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, null)
    except PermissionError:
        pytest.skip("making a device node is not permitted here")
    return path


def test_a_character_device_is_refused(tmp_path: Path) -> None:
    node = _character_device(tmp_path / "null")
    _refused(node, "a character device")
    assert os.lstat(node).st_rdev == os.stat("/dev/null").st_rdev


def test_a_block_device_is_refused(tmp_path: Path) -> None:
    node = tmp_path / "loop"
    try:
        os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(7, 200))
    except PermissionError:
        pytest.skip("making a device node is not permitted here")
    _refused(node, "a block device")


@contextlib.contextmanager
def _reading(fifo: Path) -> Iterator[int]:
    """Hold the FIFO's reading end open (without blocking): a write would land, not hang."""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        yield reader
    finally:
        os.close(reader)


def test_a_fifo_is_refused_and_nothing_is_written_into_it(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with _reading(fifo) as reader:
        _refused(fifo, "a FIFO (named pipe)")
        assert os.read(reader, 1 << 16) == b""  # no writer ever came: nothing written


def test_a_socket_is_refused_and_nothing_connects_to_it(tmp_path: Path) -> None:
    path = tmp_path / "socket"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        server.setblocking(False)
        _refused(path, "a socket")
        with pytest.raises(BlockingIOError):
            server.accept()


def test_a_directory_is_refused_and_left_empty(tmp_path: Path) -> None:
    directory = tmp_path / "a-directory"
    directory.mkdir()
    _refused(directory, "a directory")
    assert list(directory.iterdir()) == []
    with pytest.raises(hwrng.CheckpointError, match="ends with a separator"):
        hwrng.save(f"{tmp_path / 'not-yet'}/")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory"]


def _draws() -> list[float]:
    with hwrng.isolate_rng(platform="cpu"):
        return torch.rand(4).tolist()


def test_a_link_to_a_regular_file_is_followed_and_survives(tmp_path: Path) -> None:
    target = tmp_path / "rng-rank0.pt"
    hwrng.save(target)
    old = target.read_bytes()
    first = tmp_path / "latest.pt"
    first.symlink_to(target.name)  # relative, as a checkpoint directory has them
    chain = tmp_path / "chain.pt"
    chain.symlink_to(first.name)
    inode = os.lstat(target).st_ino
    torch.rand(5)
    expected = _draws()
    hwrng.save(chain)
    assert os.readlink(chain) == first.name and os.readlink(first) == target.name
    assert stat.S_ISREG(os.lstat(target).st_mode) and target.read_bytes() != old
    assert os.lstat(target).st_ino != inode  # renamed over, not written in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.pt", "latest.pt", target.name]
    torch.rand(3)
    hwrng.load(first)
    assert _draws() == expected


def test_a_dangling_link_gets_the_file_it_names(tmp_path: Path) -> None:
    link = tmp_path / "latest.pt"
    link.symlink_to("rng-rank0.pt")
    expected = _draws()
    hwrng.save(link)
    assert os.readlink(link) == "rng-rank0.pt"
    assert stat.S_ISREG(os.lstat(tmp_path / "rng-rank0.pt").st_mode)
    torch.rand(3)
    hwrng.load(link)
    assert _draws() == expected


def test_a_dangling_link_into_a_missing_directory_fails_cleanly(tmp_path: Path) -> None:
    link = tmp_path / "latest.pt"
    link.symlink_to("missing/rng-rank0.pt")
    with pytest.raises(hwrng.CheckpointError, match=r"latest\.pt") as failure:
        hwrng.save(link)
    assert isinstance(failure.value.__cause__, FileNotFoundError)
    assert os.readlink(link) == "missing/rng-rank0.pt"
    assert [p.name for p in tmp_path.iterdir()] == ["latest.pt"]
    del failure


def test_a_link_to_a_device_node_is_refused_and_both_survive(tmp_path: Path) -> None:
    node = _character_device(tmp_path / "null")
    link = tmp_path / "rng-rank0.pt"
    link.symlink_to(node)
    before = _identity(node)
    with pytest.raises(hwrng.CheckpointError, match="is a character device") as refusal:
        hwrng.save(link)
    assert f"which resolves to {str(node)!r}" in str(refusal.value)
    assert os.readlink(link) == str(node) and _identity(node) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null", "rng-rank0.pt"]


def test_links_to_a_fifo_a_directory_or_a_loop_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "to-pipe").symlink_to(fifo.name)
    (tmp_path / "dir").mkdir()
    (tmp_path / "to-dir").symlink_to("dir")
    (tmp_path / "loop-a").symlink_to("loop-b")
    (tmp_path / "loop-b").symlink_to("loop-a")
    with _reading(fifo) as reader:
        _refused(tmp_path / "to-pipe", "a FIFO (named pipe)")
        assert os.read(reader, 1 << 16) == b""
    _refused(tmp_path / "to-dir", "a directory")
    _refused(tmp_path / "loop-a", "a symbolic link that does not resolve (a loop)")
    assert os.readlink(tmp_path / "to-pipe") == "pipe" and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert os.readlink(tmp_path / "to-dir") == "dir"
    assert os.readlink(tmp_path / "loop-a") == "loop-b"


# -- replacing a regular file keeps its mode and owner; a new file follows the umask ----------


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444, 0o604])
def test_replacing_a_file_keeps_its_mode(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "rng.pt"
    path.write_bytes(b"an earlier state")
    os.chmod(path, mode)
    hwrng.save(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    assert path.read_bytes() != b"an earlier state"


def test_a_new_file_follows_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        hwrng.save(tmp_path / "rng.pt")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(tmp_path / "rng.pt").st_mode) == 0o640


def test_replacing_a_file_through_a_link_keeps_the_files_mode(tmp_path: Path) -> None:
    path = tmp_path / "rng.pt"
    path.write_bytes(b"an earlier state")
    os.chmod(path, 0o600)
    (tmp_path / "link").symlink_to(path)
    hwrng.save(tmp_path / "link")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and (tmp_path / "link").is_symlink()


def test_replacing_a_file_keeps_its_owner(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file another owner needs root")
    path = tmp_path / "rng.pt"
    path.write_bytes(b"an earlier state")
    os.chown(path, 4321, 8765)
    os.chmod(path, 0o600)
    hwrng.save(path)
    info = os.stat(path)
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (4321, 8765, 0o600)

"""Every Python block of the README and the docs runs as written, and the recipe prints its promise.

A block whose first line is ``# torchrun --nproc-per-node N NAME`` runs under
torchrun with N gloo ranks on this host; every other block runs in a fresh
interpreter. Each runs in an empty directory. A block that appears, identical,
on several pages (the thirty-second example is in the README and on the docs'
home page) runs once. Blocks fenced as ``py`` are shown, never run (they need a
trainer or a GPU).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NUMBER = r"-?\d+\.\d{6}"  # the block prints six decimals; ranks' lines may interleave
TORCHRUN = re.compile(r"# torchrun --nproc-per-node (\d+) (\S+\.py)")
#: gloo can abort a rank at interpreter exit, after the block has finished and printed
#: (torch 2.13, about 1 run in 10 on a loaded 2-core machine; pytorch/pytorch#190489). A
#: torchrun block that ends so runs once more, and that run must pass as written.
EXIT_ABORT = "terminate called without an active exception"


def _blocks(page: Path) -> list[tuple[int, str]]:
    """``(line number, code)`` of every fenced Python block of one page."""
    blocks, lines, start = [], page.read_text(encoding="utf-8").splitlines(), None
    for number, line in enumerate(lines, 1):
        if start is None and line.strip() == "```python":
            start = number
        elif start is not None and line.strip() == "```":
            blocks.append((start, "\n".join(lines[start : number - 1]) + "\n"))
            start = None
    assert start is None, f"{page}: the block at line {start} is never closed"
    return blocks


def _unique_blocks() -> dict[str, list[str]]:
    """Each distinct block, with every ``page:line`` where it appears (first first)."""
    places: dict[str, list[str]] = {}
    for page in PAGES:
        for line, code in _blocks(page):
            places.setdefault(code, []).append(f"{page.relative_to(ROOT)}:{line}")
    return places


BLOCKS = _unique_blocks()


def _run(code: str, directory: Path) -> subprocess.CompletedProcess[str]:
    first = code.splitlines()[0]
    match = TORCHRUN.fullmatch(first.strip())
    if match is None:
        script = directory / "block.py"
        command = [sys.executable, str(script)]
    else:
        script = directory / match.group(2)
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            match.group(1),
            str(script),
        ]
    script.write_text(code, encoding="utf-8")
    return subprocess.run(
        command, cwd=directory, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_pages_have_the_blocks_this_test_expects() -> None:
    assert len(BLOCKS) >= 5
    assert sum(TORCHRUN.fullmatch(code.splitlines()[0]) is not None for code in BLOCKS) == 3
    readme = [code for _, code in _blocks(ROOT / "README.md")]
    assert any("thirty_seconds.py" in code.splitlines()[0] for code in readme)
    home = [code for _, code in _blocks(ROOT / "docs" / "index.md")]
    assert [code for code in readme if code in home] == readme, "README's example differs"


@pytest.mark.parametrize("code", list(BLOCKS), ids=[places[0] for places in BLOCKS.values()])
def test_every_block_runs_as_written(code: str, tmp_path: Path) -> None:
    result = _run(code, tmp_path)
    under_torchrun = TORCHRUN.fullmatch(code.splitlines()[0]) is not None
    if result.returncode != 0 and under_torchrun and EXIT_ABORT in result.stderr:
        again = tmp_path / "again"  # a fresh directory: the first run may have left files
        again.mkdir()
        result = _run(code, again)
    assert result.returncode == 0, (
        f"block at {', '.join(BLOCKS[code])} failed:\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    if "thirty_seconds.py" in code.splitlines()[0]:
        _check_thirty_seconds(result.stdout + result.stderr)


def _check_thirty_seconds(output: str) -> None:
    """All ranks print one replicated value; dp replicas (0, 2) and (1, 3) share shard values."""
    replicated = {
        int(rank): value for rank, value in re.findall(rf"rank (\d) replicated ({NUMBER})", output)
    }
    pattern = rf"rank (\d) shard ({NUMBER}) local ({NUMBER})"
    shards = {int(rank): (shard, local) for rank, shard, local in re.findall(pattern, output)}
    assert sorted(replicated) == sorted(shards) == [0, 1, 2, 3], output[-2000:]
    assert len(set(replicated.values())) == 1, replicated
    assert shards[0] == shards[2] and shards[1] == shards[3], shards
    assert shards[0][0] != shards[1][0] and shards[0][1] != shards[1][1], shards

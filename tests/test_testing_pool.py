"""hwrng.testing.DistributedPool: ranks never outlive the process that started them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import IO

import pytest

POOL_SCRIPT = """
import sys, time
from hwrng._cli import _stop_on_sigterm
from hwrng.testing import DistributedPool
import os
_stop_on_sigterm()
with DistributedPool(2, timeout=60) as pool:
    print("ranks", *pool.run(os.getpid), flush=True)
    time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead, only not yet reaped
        return stat.read().split(")")[-1].split()[0] != "Z"


def _wait_dead(pids: Sequence[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if _alive(pid)]
        if not alive:
            return []
        time.sleep(0.2)
    return [pid for pid in pids if _alive(pid)]


def _rank_pids(stdout: IO[str]) -> list[int]:
    """The ranks' pids the script prints. The ranks share its stdout, where torch 2.10 and
    2.11's gloo prints a line of its own for each process group it connects."""
    for line in stdout:
        if line.startswith("ranks "):
            return [int(pid) for pid in line.split()[1:]]
    raise AssertionError("the pool script ended without printing its ranks")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_ranks_exit_when_their_parent_is_stopped(how: signal.Signals) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", POOL_SCRIPT], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        ranks = _rank_pids(parent.stdout)
        assert len(ranks) == 2 and all(_alive(pid) for pid in ranks)
        parent.send_signal(how)
        parent.wait(timeout=60)
        assert _wait_dead(ranks, 15) == [], "ranks outlived their parent"
    finally:
        parent.kill()
        parent.wait()

"""Two gloo ranks whose rendezvous store is written in Python; run by test_verify_python_store.

``python python_store_ranks.py OUT``: each rank joins a process group made on a
``torch.distributed.Store`` subclass (over a real TCPStore), calls ``hwrng.verify()``
CALLS times, and writes what it saw to ``OUT/rank-N.json``. torch's C++ side of such a
store (which the process group's prefix store calls) has no ``clone`` and no
``delete_key``, whatever the subclass defines.
"""

from __future__ import annotations

import datetime
import json
import socket
import sys
import warnings
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

CALLS = 12


class PythonStore(dist.Store):
    """A store written in Python, as a user writes one: every call goes to ``inner``."""

    def __init__(self, inner: dist.Store) -> None:
        super().__init__()
        self.inner = inner

    def set(self, key: str, value: Any) -> None:
        self.inner.set(key, value)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def add(self, key: str, value: int) -> int:
        return self.inner.add(key, value)

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        if timeout is None:
            self.inner.wait(keys)
        else:
            self.inner.wait(keys, timeout)

    def check(self, keys: list[str]) -> bool:
        return self.inner.check(keys)

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        return self.inner.compare_set(key, expected, desired)

    def num_keys(self) -> int:
        return self.inner.num_keys()


def rank_main(rank: int, port: int, out: str) -> None:
    import hwrng

    inner = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=datetime.timedelta(seconds=60))
    store = PythonStore(inner)  # kept alive here: torch calls back into the Python object
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60)
    )
    hwrng.manual_seed(7)
    seen: dict[str, Any] = {"passed": [], "keys": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(CALLS):
            seen["passed"].append(bool(hwrng.verify().ok))
            seen["keys"].append(inner.num_keys())
    seen["warnings"] = [
        str(w.message) for w in caught if issubclass(w.category, hwrng.HwrngWarning)
    ]
    dist.barrier()
    dist.destroy_process_group()
    Path(out, f"rank-{rank}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    mp.spawn(rank_main, args=(free, sys.argv[1]), nprocs=2)

"""One simulated rank of a large world: what hwrng's checkpoint and verify cost it.

Run as ``python tests/scale_probe.py WORLD [RANK]``; prints one JSON document.
torch's fake process group (``torch.testing._internal.distributed.fake_pg``)
stands for every other rank: its collectives return at once, a gather with
world-sized results. The mesh is ``(WORLD / 8) x 8`` (``dp`` x ``tp``), seeded
sharded along ``tp``. Each phase runs once to warm up, then is measured:

* ``save``: ``hwrng.RNGState().state_dict()`` (what DCP calls to save);
* ``load``: a fresh ``RNGState``'s template and ``load_state_dict`` of the saved
  entry (what DCP calls to load);
* ``verify``: ``hwrng.verify()``;
* ``gather_all`` (the baseline, not hwrng): ``all_gather_object`` of this rank's
  saved entry, which is what hwrng's layout 1 did on every save -- every rank
  held every rank's state.

For each: the peak of Python allocations (tracemalloc) above what was held
before, the bytes of every tensor handed to a ``c10d`` collective (a
``TorchDispatchMode`` sees each collective as it is dispatched: what is sent
and what comes back), the number of collectives, and the time. Also the bytes
of the serialised entry this rank saves.

Under the fake group every peer answers with this rank's own words, so paths
that run only when ranks differ (a gather along a dim whose ranks should
differ, the naming round after a failure) do not run here; their size is the
dim's, not the world's, and tests/test_verify_dist.py measures them on gloo.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class CollectiveBytes(TorchDispatchMode):
    """Counts the collectives dispatched inside it, and the bytes of their tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func.namespace == "c10d":
            self.calls += 1
            tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            self.bytes += sum(t.numel() * t.element_size() for t in tensors)
        return out


def measure(action: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    """Run ``action`` twice: its collectives counted, then its memory and time alone.

    The dispatch mode sees every tensor operation, which would inflate both the
    time and the Python allocations, so they come from a run without it.
    """
    with CollectiveBytes() as counted:
        action()
    # the first run's cyclic garbage would otherwise be freed, or not, depending on where the
    # collector's thresholds fall: measured peaks differed by a third from one run to another
    gc.collect()
    tracemalloc.reset_peak()
    held, _ = tracemalloc.get_traced_memory()
    started = time.perf_counter()
    result = action()
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    return result, {
        "peak_bytes": peak - held,
        "collective_bytes": counted.bytes,
        "collectives": counted.calls,
        "seconds": seconds,
    }


def probe(world: int, rank: int) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import hwrng

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world // 8, 8), mesh_dim_names=("dp", "tp"))
    hwrng.manual_seed(1234, mesh, sharded_dims=["tp"], platform="cpu")
    tracker = hwrng.RNGStatesTracker("cpu", name="scale")
    tracker.add("model-parallel-rng", 1234 + 2718 + rank % 8)
    torch.rand(16)
    with tracker.fork():
        torch.rand(16)

    def save() -> dict[str, Any]:
        return hwrng.RNGState().state_dict()

    def load(saved: dict[str, Any]) -> None:
        state = hwrng.RNGState()
        state.state_dict()  # the template DCP loads into
        state.load_state_dict(saved)

    def verify() -> Any:
        return hwrng.verify()

    tracemalloc.start()
    results: dict[str, Any] = {"world": world, "rank": rank}
    for name, action in (("save", save), ("verify", verify)):
        action()  # warm up
        value, results[name] = measure(action)
        if name == "save":
            entry = {key: bytes(bytearray(v)) for key, v in value.items()}  # as DCP hands it back
            results["entry_bytes"] = sum(len(v) for v in value.values())
            results["keys"] = sorted(value)
        else:
            results["verify_ok"] = value.ok
    load(dict(entry))  # warm up
    _, results["load"] = measure(lambda: load(dict(entry)))
    own = entry[f"rank_{rank}"]

    def gather_all() -> None:
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, own)

    gather_all()
    _, results["gather_all"] = measure(gather_all)
    tracemalloc.stop()
    del tracker
    dist.destroy_process_group()
    return results


if __name__ == "__main__":
    size = int(sys.argv[1])
    print(json.dumps(probe(size, int(sys.argv[2]) if len(sys.argv) > 2 else size // 2 + 3)))

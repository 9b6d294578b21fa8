"""Per-region overhead of OffsetTracker.region and RNGStatesTracker.fork.

Baseline in the same run: torch.random.fork_rng on the same device. On a GPU
it also times torch's own OffsetBasedRNGTracker region and checks, under
``torch.cuda.set_sync_debug_mode("error")``, that hwrng's regions never
synchronise with the device.

Run: python benchmarks/bench_regions.py [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Callable

import torch
from _timing import machine, median_ns
from torch.distributed.tensor import Replicate, Shard

import hwrng


def region_bodies(platform: hwrng.Platform) -> dict[str, Callable[[], object]]:
    device = platform.device()
    devices = [] if device.type == "cpu" else [device]
    tracker = hwrng.OffsetTracker(platform)
    states = hwrng.RNGStatesTracker(platform)
    states.add("model-parallel-rng", 2718)
    spec = hwrng.ShardSpec((4096, 1024), (2, 4), (Replicate(), Shard(0)), (1, 3))
    user = torch.Generator(device=device)
    platform.set_seed_offset(user, 1, 0)

    def torch_fork() -> None:
        with torch.random.fork_rng(devices=devices, device_type=device.type):
            pass

    def region() -> None:
        with tracker.region(spec):
            pass

    def region_user() -> None:
        with tracker.region(spec, user):
            pass

    def region_via_default() -> None:
        with tracker.region(spec, user, via_default=True):
            pass

    def states_fork() -> None:
        with states.fork():
            pass

    local = spec.local_shape[0] // 16, spec.local_shape[1]  # a 64 x 1024 shard: a small op

    def torch_fork_op() -> None:
        with torch.random.fork_rng(devices=devices, device_type=device.type):
            torch.rand(local, device=device)

    def region_op() -> None:
        with tracker.region(spec) as generator:
            torch.rand(local, device=device, generator=generator)

    return {
        "torch.random.fork_rng (baseline)": torch_fork,
        "hwrng OffsetTracker.region": region,
        "hwrng OffsetTracker.region(user generator)": region_user,
        "hwrng OffsetTracker.region(via_default)": region_via_default,
        "hwrng RNGStatesTracker.fork": states_fork,
        "with a 64x1024 rand: torch.random.fork_rng": torch_fork_op,
        "with a 64x1024 rand: hwrng OffsetTracker.region": region_op,
    }


@contextlib.contextmanager
def one_rank_group(backend: str) -> object:
    import torch.distributed as dist

    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group(backend, init_method=f"file://{tmp}/rdv", rank=0, world_size=1)
        try:
            yield
        finally:
            dist.destroy_process_group()


def torch_tracker_body() -> Callable[[], object]:
    """Torch's OffsetBasedRNGTracker region on a one-GPU mesh (its own code, unchanged)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor
    from torch.distributed.tensor._random import OffsetBasedRNGTracker

    mesh = init_device_mesh("cuda", (1,))
    spec = distribute_tensor(torch.zeros(8, device="cuda"), mesh, [Shard(0)])._spec
    tracker = OffsetBasedRNGTracker(mesh, run_state_sync=False)

    def body() -> None:
        with tracker._distribute_region(spec):
            pass

    return body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--inner", type=int, default=2000)
    args = parser.parse_args()
    platform = hwrng.get_platform(args.device)
    print(
        f"per-region overhead on {platform.name} "
        f"({args.inner} regions per sample, median of 15 samples)"
    )
    print(machine())
    bodies = region_bodies(platform)
    if platform.name == "cuda":
        with one_rank_group("nccl"):
            bodies["torch OffsetBasedRNGTracker._distribute_region"] = torch_tracker_body()
            results = {name: median_ns(body, inner=args.inner) for name, body in bodies.items()}
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
            try:
                for name, body in bodies.items():
                    if name.startswith("hwrng"):
                        for _ in range(10):
                            body()
            finally:
                torch.cuda.set_sync_debug_mode("default")
            print(
                "hwrng regions under torch.cuda.set_sync_debug_mode('error'): no host-device sync"
            )
    else:
        results = {name: median_ns(body, inner=args.inner) for name, body in bodies.items()}
    width = max(map(len, results))
    for name, value in results.items():
        key = (
            "with a 64x1024 rand: torch.random.fork_rng"
            if name.startswith("with")
            else ("torch.random.fork_rng (baseline)")
        )
        print(
            f"{name:<{width}}  {value / 1000:8.2f} us   {value / results[key]:5.2f}x its baseline"
        )
    print(f"(OMP threads: {os.environ.get('OMP_NUM_THREADS', 'default')})")


if __name__ == "__main__":
    main()

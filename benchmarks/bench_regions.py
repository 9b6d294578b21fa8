"""Tracked regions and named-state forks, against torch and a Megatron-style tracker.

Baselines measured in the same run: ``torch.random.fork_rng`` (an empty region),
a Megatron-style tracker that swaps whole states the way Megatron-LM's
``CudaRNGStatesTracker.fork`` does (around dropout), a bare ``torch.rand``
(around an op) and, on CUDA, the four counter calls a region needs and torch's
own ``OffsetBasedRNGTracker`` region.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from _timing import Result, measure, one_rank_group
from torch.distributed.tensor import Replicate, Shard

import hwrng


class MegatronStyleTracker:
    """Named states kept as whole state tensors and swapped, as Megatron-LM's tracker does."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator
        self.states: dict[str, torch.Tensor] = {}

    def add(self, name: str, seed: int) -> None:
        """Add a state seeded with ``seed``."""
        saved = self.generator.get_state()
        self.generator.manual_seed(seed)
        self.states[name] = self.generator.get_state()
        self.generator.set_state(saved)

    @contextlib.contextmanager
    def fork(self, name: str) -> Iterator[None]:
        """Swap the named state in, and back out (saving it) at the end."""
        original = self.generator.get_state()
        self.generator.set_state(self.states[name])
        try:
            yield
        finally:
            self.states[name] = self.generator.get_state()
            self.generator.set_state(original)


def run(platform: hwrng.Platform, quick: bool) -> list[Result]:
    """Time empty regions and forks, then regions around ops."""
    device = platform.device()
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else None
    inner = 200 if quick else 2000
    devices = [device] if cuda else []
    tracker = hwrng.OffsetTracker(platform)
    replicated = hwrng.ShardSpec((4096, 1024), (2, 4), (Replicate(), Replicate()), (1, 3))
    sharded = hwrng.ShardSpec((4096, 1024), (2, 4), (Replicate(), Shard(0)), (1, 3))
    user = torch.Generator(device=device)
    platform.set_seed_offset(user, 1, 0)
    states = hwrng.RNGStatesTracker(platform, name="bench")
    states.add("model-parallel-rng", 2718)
    megatron = MegatronStyleTracker(platform.generator())
    megatron.add("model-parallel-rng", 2718)
    x = torch.ones(64, 1024, device=device)

    def with_(
        context: Callable[[], contextlib.AbstractContextManager[object]],
        op: Callable[[], object],
    ) -> Callable[[], None]:
        def body() -> None:
            with context():
                op()

        return body

    def nothing() -> None:
        return None

    empty = {
        "torch.random.fork_rng": with_(
            lambda: torch.random.fork_rng(devices=devices, device_type=device.type), nothing
        ),
        "hwrng OffsetTracker.region, replicated": with_(
            lambda: tracker.region(replicated), nothing
        ),
        "hwrng OffsetTracker.region, sharded": with_(lambda: tracker.region(sharded), nothing),
        "hwrng OffsetTracker.region, user generator": with_(
            lambda: tracker.region(sharded, user), nothing
        ),
        "hwrng RNGStatesTracker.fork": with_(states.fork, nothing),
        "Megatron-style fork (whole-state swap)": with_(
            lambda: megatron.fork("model-parallel-rng"), nothing
        ),
    }
    if cuda:
        generator = platform.generator()

        def counter_writes() -> None:
            seed = generator.initial_seed()
            offset = generator.get_offset()
            generator.manual_seed(seed)
            generator.set_offset(offset)

        empty["the four counter calls a region needs"] = counter_writes
    results = measure(
        "empty region or fork", empty, baseline="torch.random.fork_rng", inner=inner, sync=sync
    )
    if cuda:
        results += measure(
            "empty region, CUDA counter",
            {
                name: empty[name]
                for name in (
                    "the four counter calls a region needs",
                    "hwrng OffsetTracker.region, sharded",
                )
            },
            baseline="the four counter calls a region needs",
            inner=inner,
            sync=sync,
        )
    dropout = lambda: torch.nn.functional.dropout(x, 0.5)  # noqa: E731
    results += measure(
        "named state around dropout (64x1024)",
        {
            "Megatron-style fork + dropout": with_(
                lambda: megatron.fork("model-parallel-rng"), dropout
            ),
            "hwrng RNGStatesTracker.fork + dropout": with_(states.fork, dropout),
            "dropout alone": dropout,
        },
        baseline="Megatron-style fork + dropout",
        inner=inner // 4,
        sync=sync,
    )
    rand = lambda: torch.rand(64, 1024, device=device)  # noqa: E731
    results += measure(
        "region around a 64x1024 rand",
        {
            "torch.rand alone": rand,
            "torch.random.fork_rng + rand": with_(
                lambda: torch.random.fork_rng(devices=devices, device_type=device.type), rand
            ),
            "hwrng OffsetTracker.region + rand": with_(lambda: tracker.region(sharded), rand),
        },
        baseline="torch.rand alone",
        inner=inner // 4,
        sync=sync,
    )
    if cuda:
        results += _torch_tracker(platform, inner, sync)
    return results


def _torch_tracker(
    platform: hwrng.Platform, inner: int, sync: Callable[[], object] | None
) -> list[Result]:
    """Torch's own DTensor tracker region on a one-GPU mesh, and a host-sync check of hwrng's."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor
    from torch.distributed.tensor._random import OffsetBasedRNGTracker

    with one_rank_group("nccl"):
        mesh = init_device_mesh("cuda", (1,))
        spec = distribute_tensor(torch.zeros(8, device="cuda"), mesh, [Shard(0)])._spec
        theirs = OffsetBasedRNGTracker(mesh, run_state_sync=False)
        ours = hwrng.OffsetTracker(platform)
        shard = hwrng.ShardSpec.from_dtensor_spec(spec)

        def torch_region() -> None:
            with theirs._distribute_region(spec):
                pass

        def hwrng_region() -> None:
            with ours.region(shard):
                pass

        results = measure(
            "DTensor region on one GPU",
            {
                "torch OffsetBasedRNGTracker._distribute_region": torch_region,
                "hwrng OffsetTracker.region": hwrng_region,
            },
            baseline="torch OffsetBasedRNGTracker._distribute_region",
            inner=inner // 4,
            sync=sync,
        )
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(10):
                hwrng_region()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    results.append(
        Result(
            "DTensor region on one GPU",
            "host-device syncs per hwrng region",
            0.0,
            0.0,
            10,
            note="none: 10 regions under sync debug mode 'error' raised nothing",
        )
    )
    return results

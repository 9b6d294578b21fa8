"""The cuda backend on a real GPU. Skipped where torch sees no CUDA device.

Run on a GPU machine with ``python -m pytest backends/cuda/tests/test_cuda.py -v``. Written for
torch 2.13 to 2.15 (CUDA graphs register named states before capture below 2.14,
per capture from 2.14; the version gate is tested on the CPU in
tests/test_graph_states.py); not yet run on a GPU with torch >= 2.14.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from torch.distributed.tensor import Replicate, Shard

import hwrng
from hwrng._states import graph_states_registered_per_capture

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device is visible"),
]


@pytest.fixture
def cuda() -> hwrng.Platform:
    return hwrng.get_platform("cuda")


def test_selected_and_described(cuda: hwrng.Platform) -> None:
    assert hwrng.get_platform().name == "cuda"
    assert cuda.device_count() == torch.cuda.device_count()
    assert cuda.generator() is torch.cuda.default_generators[torch.cuda.current_device()]
    assert cuda.get_rng_state().numel() == 16


def test_counter_view_is_the_generators_own(cuda: hwrng.Platform) -> None:
    generator = cuda.generator()
    cuda.set_seed_offset(generator, 2**64 - 1, 2**40)
    assert (generator.initial_seed(), generator.get_offset()) == (2**64 - 1, 2**40)
    state = cuda.get_rng_state().numpy().view("<u8")
    assert state.tolist() == [2**64 - 1, 2**40], "the 16-byte state is (seed, offset)"
    torch.rand(1000, device="cuda")
    seed, offset = cuda.get_seed_offset(generator)
    assert seed == 2**64 - 1 and offset > 2**40


def test_regions_never_sync_with_the_device(cuda: hwrng.Platform) -> None:
    tracker = hwrng.OffsetTracker(cuda)
    states = hwrng.RNGStatesTracker(cuda)
    states.add("model-parallel-rng", 3)
    spec = hwrng.ShardSpec((1 << 20,), (4,), (Shard(0),), (2,))
    user = torch.Generator(device="cuda")
    cuda.set_seed_offset(user, 1, 0)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            with tracker.region(spec) as generator:
                torch.rand(spec.local_shape, device="cuda", generator=generator)
            with tracker.region(spec, user):
                torch.rand(spec.local_shape, device="cuda", generator=user)
            with tracker.region(spec, user, via_default=True):
                torch.rand(spec.local_shape, device="cuda")
            with states.fork():
                torch.nn.functional.dropout(torch.ones(1024, device="cuda"), 0.5)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_replicas_equal_shards_distinct_on_the_gpu(cuda: hwrng.Platform) -> None:
    tracker = hwrng.OffsetTracker(cuda)
    generator = cuda.generator()
    by_shard: dict[int, list[torch.Tensor]] = {}
    for coordinate in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        spec = hwrng.ShardSpec((10, 6), (2, 2), (Replicate(), Shard(0)), coordinate)
        cuda.set_seed_offset(generator, 7, 0)
        with tracker.region(spec):
            by_shard.setdefault(coordinate[1], []).append(
                torch.rand(spec.local_shape, device="cuda").cpu()
            )
    assert torch.equal(by_shard[0][0], by_shard[0][1]) and torch.equal(
        by_shard[1][0], by_shard[1][1]
    )
    assert not set(by_shard[0][0].flatten().tolist()) & set(by_shard[1][0].flatten().tolist())


def test_manual_seed_before_cuda_init_is_lazy() -> None:
    code = textwrap.dedent(
        """
        import torch, hwrng
        hwrng.manual_seed(99, platform="cuda")
        assert not torch.cuda.is_initialized(), "seeding must not open a CUDA context"
        torch.cuda.set_device(torch.cuda.device_count() - 1)
        generator = torch.cuda.default_generators[-1]
        assert hwrng.get_platform("cuda").get_seed_offset(generator) == (99, 0)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr


def test_dtensor_adapter_on_a_one_gpu_mesh(cuda: hwrng.Platform, tmp_path: object) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor

    dist.init_process_group("nccl", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cuda", (1,))
        hwrng.dtensor.install(cuda)
        try:
            cuda.manual_seed(11)
            tensor = distribute_tensor(torch.zeros(64, device="cuda"), mesh, [Shard(0)])
            tensor.uniform_()
            assert cuda.get_seed_offset(cuda.generator()) == (11, 64)
            cuda.manual_seed(11)
            assert torch.equal(tensor.to_local(), torch.rand(64, device="cuda"))
        finally:
            hwrng.dtensor.uninstall()
    finally:
        dist.destroy_process_group()


def test_forks_and_regions_inside_a_cuda_graph(cuda: hwrng.Platform) -> None:
    """Captured named-state forks and tracked regions: each replay draws new numbers, and the
    streams advance as eager execution would."""
    tracker = hwrng.RNGStatesTracker(cuda)
    tracker.add("model-parallel-rng", 2718)
    regions = hwrng.OffsetTracker(cuda)
    spec = hwrng.ShardSpec((4096,), (2,), (Shard(0),), (1,))
    x = torch.ones(2048, device="cuda")
    cuda.manual_seed(11)
    graph = torch.cuda.CUDAGraph()
    # torch < 2.14: registers each named state; >= 2.14: capture registers them itself
    registered = tracker.register_graph_states(graph)
    assert len(registered) == (0 if graph_states_registered_per_capture() else 1)
    outputs: dict[str, torch.Tensor] = {}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), tracker.fork():  # warm up outside capture, as torch advises
        torch.nn.functional.dropout(x, 0.5)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        with tracker.fork():
            outputs["dropout"] = torch.nn.functional.dropout(x, 0.5)
        with regions.region(spec) as generator:
            outputs["rand"] = torch.rand(2048, device="cuda", generator=generator)
    replays = []
    for _ in range(3):
        graph.replay()
        replays.append({k: v.clone() for k, v in outputs.items()})
    for key in ("dropout", "rand"):
        assert not torch.equal(replays[0][key], replays[1][key]), f"{key}: a replay repeats"
        assert not torch.equal(replays[1][key], replays[2][key]), f"{key}: a replay repeats"
    assert tracker.get_states()["model-parallel-rng"].numel() == 16, "still checkpointable"


def test_a_seed_change_during_capture_is_refused(cuda: hwrng.Platform) -> None:
    regions = hwrng.OffsetTracker(cuda)
    spec = hwrng.ShardSpec((64,), (1,), (Replicate(),), (0,))
    cuda.manual_seed(1)
    graph = torch.cuda.CUDAGraph()
    with (
        pytest.raises(hwrng.NestingError, match="during CUDA graph capture"),
        torch.cuda.graph(graph),
        regions.region(spec, draw_seed=2),
    ):
        torch.rand(64, device="cuda")

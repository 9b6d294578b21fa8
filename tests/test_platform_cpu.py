"""Every Platform method on the CPU backend, bad input included."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import hwrng
from hwrng.backends.cpu import CPUPlatform


def test_identity(cpu: hwrng.Platform) -> None:
    assert isinstance(cpu, CPUPlatform)
    assert (cpu.name, cpu.dist_backend, cpu.priority) == ("cpu", "gloo", 0)
    assert cpu.device_type == "cpu"
    assert "dtensor" in cpu.capabilities
    assert cpu.is_available() and cpu.unavailable_reason() is None
    cpu.require_available()
    assert cpu.device_handle is torch.cpu
    assert (cpu.device_count(), cpu.current_device()) == (1, 0)
    assert repr(cpu) == "<CPUPlatform 'cpu'>"


@pytest.mark.parametrize(
    "device", [None, 0, "cpu", "cpu:0", torch.device("cpu"), torch.device("cpu", 0)]
)
def test_device_spellings(cpu: hwrng.Platform, device: object) -> None:
    assert cpu.device_index(device) == 0  # type: ignore[arg-type]
    assert cpu.device(device) == torch.device("cpu")  # type: ignore[arg-type]
    assert cpu.generator(device) is torch.default_generator  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("device", "message"),
    [
        (1, "out of range"),
        (-1, "out of range"),
        ("cpu:3", "out of range"),
        ("cuda:0", "is a cuda device"),
        (torch.device("meta"), "is a meta device"),
        ("nonsense", "is not a device"),
        (True, "not True"),
    ],
)
def test_bad_devices_refused(cpu: hwrng.Platform, device: object, message: str) -> None:
    with pytest.raises(hwrng.InvalidDeviceError, match=message):
        cpu.generator(device)  # type: ignore[arg-type]


def test_rng_state_matches_torch(cpu: hwrng.Platform) -> None:
    torch.manual_seed(3)
    assert torch.equal(cpu.get_rng_state(), torch.get_rng_state())
    state = cpu.get_rng_state()
    first = torch.rand(5)
    cpu.set_rng_state(state)
    assert torch.equal(torch.rand(5), first)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (lambda s: s[:-1], "must have 5056 bytes, got 5055"),
        (lambda s: torch.cat([s, s[:8]]), "got 5064"),
        (lambda s: s.to(torch.int16), "dtype torch.uint8"),
        (lambda s: s.view(2, -1), "must be 1-D"),
        (lambda s: s.numpy(), "must be a torch.Tensor"),
        (lambda s: s.to("meta"), "must be a CPU tensor"),
    ],
    ids=["short", "long", "int16", "2-D", "numpy", "meta"],
)
def test_bad_state_refused_and_state_kept(cpu: hwrng.Platform, bad: object, message: str) -> None:
    torch.manual_seed(8)
    state = cpu.get_rng_state()
    with pytest.raises(hwrng.InvalidStateError, match=message):
        cpu.set_rng_state(bad(state))  # type: ignore[operator]
    assert torch.equal(cpu.get_rng_state(), state)


def test_manual_seed_below_2_32_equals_torch(cpu: hwrng.Platform) -> None:
    for seed in (0, 1, 12345, 2**32 - 1):
        torch.manual_seed(seed)
        expected = torch.rand(6)
        cpu.manual_seed(seed)
        assert torch.equal(torch.rand(6), expected)
        assert torch.initial_seed() == seed


def test_manual_seed_keys_all_64_bits(cpu: hwrng.Platform) -> None:
    # torch itself aliases these two seeds (it keeps the low 32 bits); hwrng does not
    torch.manual_seed(1)
    torch_low = torch.rand(4)
    torch.manual_seed(1 + 2**32)
    assert torch.equal(torch.rand(4), torch_low)
    cpu.manual_seed(1 + 2**32)
    assert not torch.equal(torch.rand(4), torch_low)
    assert torch.initial_seed() == 1 + 2**32


@pytest.mark.parametrize("seed", [-1, 2**64, 0.5, "1", True, None])
def test_manual_seed_refuses_bad_seeds(cpu: hwrng.Platform, seed: object) -> None:
    torch.manual_seed(2)
    state = cpu.get_rng_state()
    with pytest.raises(hwrng.InvalidSeedError):
        cpu.manual_seed(seed)  # type: ignore[arg-type]
    with pytest.raises(hwrng.InvalidSeedError):
        cpu.manual_seed_all(seed)  # type: ignore[arg-type]
    assert torch.equal(cpu.get_rng_state(), state)


def test_numpy_integers_are_seeds(cpu: hwrng.Platform) -> None:

    cpu.manual_seed(np.uint64(2**63))
    assert cpu.get_seed_offset(torch.default_generator) == (2**63, 0)


def test_seed_offset_round_trip(cpu: hwrng.Platform) -> None:
    generator = torch.Generator()
    cpu.set_seed_offset(generator, 2**64 - 1, 2**63 - 4)
    assert cpu.get_seed_offset(generator) == (2**64 - 1, 2**63 - 4)


def test_set_seed_offset_refusals_keep_state(cpu: hwrng.Platform) -> None:
    generator = torch.Generator()
    cpu.set_seed_offset(generator, 1, 8)
    state = generator.get_state()
    for seed, offset in [(1, 2), (1, -4), (1, 2**63), (-1, 0), (2**64, 0), (1, 4.0)]:
        with pytest.raises((hwrng.InvalidOffsetError, hwrng.InvalidSeedError)):
            cpu.set_seed_offset(generator, seed, offset)  # type: ignore[arg-type]
    assert torch.equal(generator.get_state(), state)


def test_generators_of_other_devices_refused(cpu: hwrng.Platform) -> None:
    with pytest.raises(hwrng.InvalidDeviceError, match=r"expected a torch\.Generator"):
        cpu.get_seed_offset(object())  # type: ignore[arg-type]
    with pytest.raises(hwrng.InvalidDeviceError, match=r"expected a torch\.Generator"):
        cpu.set_seed_offset(None, 1, 0)  # type: ignore[arg-type]


def test_broadcast_needs_initialised_distributed(cpu: hwrng.Platform) -> None:
    with pytest.raises(RuntimeError, match="init_process_group\\('gloo'\\)"):
        cpu.broadcast(torch.zeros(2))
    with pytest.raises(TypeError, match=r"needs a torch\.Tensor"):
        cpu.broadcast([1, 2])  # type: ignore[arg-type]


def test_broadcast_single_process_group(cpu: hwrng.Platform, tmp_path: object) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    try:
        tensor = torch.arange(3.0)
        cpu.broadcast(tensor, src=0)
        assert tensor.tolist() == [0.0, 1.0, 2.0]
    finally:
        dist.destroy_process_group()


def test_enable_determinism_is_a_no_op_on_cpu(cpu: hwrng.Platform) -> None:
    assert cpu.enable_determinism() == {}


def test_invalid_contents_and_layout_refused(cpu: hwrng.Platform) -> None:

    torch.manual_seed(4)
    state = cpu.get_rng_state()
    corrupt = state.clone()
    corrupt.numpy()[8:12].view(np.int32)[0] = 10_000  # "left" beyond the Mersenne block
    with pytest.raises(hwrng.InvalidStateError, match="not a valid state"):
        cpu.set_rng_state(corrupt)
    strided = torch.stack([state, state], dim=1)[:, 0]
    assert not strided.is_contiguous()
    with pytest.raises(hwrng.InvalidStateError, match="contiguous"):
        cpu.set_rng_state(strided)
    assert torch.equal(cpu.get_rng_state(), state)


def test_numpy_device_indices(cpu: hwrng.Platform) -> None:

    assert cpu.device_index(np.int64(0)) == 0
    with pytest.raises(hwrng.InvalidDeviceError, match="an index, a device name"):
        cpu.device_index(0.0)  # type: ignore[arg-type]


def test_a_state_sliced_from_a_packed_buffer_is_applied_correctly() -> None:
    code = textwrap.dedent(
        """
        import torch, hwrng
        cpu = hwrng.get_platform("cpu")
        torch.manual_seed(1); a = torch.get_rng_state()
        torch.manual_seed(2); b = torch.get_rng_state(); expected = torch.rand(4)
        for view in (torch.cat([a, b])[a.numel():], torch.cat([a[:8], b])[8:]):
            assert view.is_contiguous() and view.dim() == 1
            cpu.set_rng_state(view)
            assert torch.equal(torch.rand(4), expected)
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_checks_read_a_cpu_generator_without_moving_it(cpu: hwrng.Platform) -> None:
    torch.manual_seed(3)
    torch.rand(5)
    before = torch.get_rng_state()
    position = cpu.counter.peek(torch.default_generator)
    assert torch.equal(torch.get_rng_state(), before), "peek never moves the generator"
    assert cpu.get_seed_offset(torch.default_generator) == position, "read agrees with peek"


def test_a_peek_leaves_every_later_read_as_it_would_have_been() -> None:
    """The oracle: the same steps on a counter and generator of their own that nobody peeks
    at. A drawn state is looked at, the generator is re-positioned and moves on (its anchor
    moves), then the state is put back and read."""

    def steps(peeking: bool) -> tuple[tuple[int, int] | None, tuple[int, int]]:
        counter, generator = hwrng.MersenneCounter(), torch.Generator()
        counter.write(generator, 7, 0)
        torch.rand(3, generator=generator)
        drawn = generator.get_state()
        looked = counter.peek(generator) if peeking else None
        counter.write(generator, 7, 40)
        generator.set_state(drawn)
        return looked, counter.read(generator)

    (looked, read), (_, alone) = steps(True), steps(False)
    assert looked == (7, 4), "what a read there and then would have said"
    assert read == alone == (7, 44), "a state never read reads past the anchor it finds"

"""Rules for reading and restoring a device's RNG state."""

from __future__ import annotations

import pytest
import torch

import hwrng
from hwrng_conformance.helpers import draw_default


def _device_spellings(platform: hwrng.Platform) -> list[hwrng.DeviceLike]:
    index = platform.current_device()
    return [None, index, platform.device(index), str(platform.device(index))]


def test_rng_state_is_a_cpu_uint8_copy(platform: hwrng.Platform) -> None:
    state = platform.get_rng_state()
    assert isinstance(state, torch.Tensor)
    assert state.dtype == torch.uint8
    assert state.device.type == "cpu"
    assert state.dim() == 1 and state.numel() > 0
    before = draw_default(platform)
    platform.set_rng_state(state)
    state.zero_()  # the caller owns the copy: scribbling on it changes nothing
    assert torch.equal(draw_default(platform), before)


@pytest.mark.parametrize("spelling", range(4), ids=["none", "index", "device", "string"])
def test_rng_state_round_trip(platform: hwrng.Platform, spelling: int) -> None:
    device = _device_spellings(platform)[spelling]
    platform.manual_seed(1234, device)
    state = platform.get_rng_state(device)
    first = draw_default(platform)
    platform.set_rng_state(state, device)
    assert torch.equal(draw_default(platform), first)


def _refused_states(state: torch.Tensor) -> dict[str, object]:
    return {
        "one byte short": state[:-1].clone(),
        "one byte long": torch.cat([state, state[:1]]),
        "int64": state.to(torch.int64),
        "float32": state.to(torch.float32),
        "two-dimensional": state.reshape(1, -1).clone(),
        "not a tensor": state.tolist(),
    }


@pytest.mark.parametrize(
    "kind",
    ["one byte short", "one byte long", "int64", "float32", "two-dimensional", "not a tensor"],
)
def test_bad_state_refused_with_old_state_intact(platform: hwrng.Platform, kind: str) -> None:
    platform.manual_seed(99)
    state = platform.get_rng_state()
    expected = draw_default(platform)
    platform.set_rng_state(state)
    bad = _refused_states(state)[kind]
    with pytest.raises(hwrng.InvalidStateError):
        platform.set_rng_state(bad)  # type: ignore[arg-type]
    assert torch.equal(draw_default(platform), expected)


def test_device_count_matches_handle(platform: hwrng.Platform) -> None:
    count = platform.device_count()
    assert count >= 1
    assert count == int(platform.device_handle.device_count())


def test_current_device_matches_handle(platform: hwrng.Platform) -> None:
    reported = platform.device_handle.current_device()  # an index, or "cpu" for torch.cpu
    assert platform.current_device() == platform.device_index(reported)
    assert platform.device().type == platform.device_type


def test_unknown_device_refused(platform: hwrng.Platform) -> None:
    with pytest.raises(hwrng.InvalidDeviceError):
        platform.generator(platform.device_count())
    with pytest.raises(hwrng.InvalidDeviceError):
        platform.get_rng_state(-1)
    other = "meta" if platform.device_type != "meta" else "cpu"
    with pytest.raises(hwrng.InvalidDeviceError):
        platform.get_rng_state(torch.device(other))

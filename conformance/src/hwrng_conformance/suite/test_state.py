"""Rules for reading, restoring and digesting a device's RNG state."""

from __future__ import annotations

import itertools

import pytest
import torch

import hwrng
from hwrng_conformance.helpers import draw, draw_default
from hwrng_conformance.profiles import Profile


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


# -- the state digest: what a state will draw, never bytes that do not change the draws -----


def _draws(generator: torch.Generator, state: torch.Tensor, float64: bool) -> list[torch.Tensor]:
    """What ``generator`` draws from ``state``.

    Uniforms, normals (small: a cached sample on some devices; large:
    vectorised), integers, and float64 normals where the device has them.
    """
    generator.set_state(state)
    device = generator.device
    found = [
        torch.rand(64, generator=generator, device=device),
        torch.randn(3, generator=generator, device=device),
        torch.randn(40, generator=generator, device=device),
        torch.randint(0, 2**31 - 1, (8,), generator=generator, device=device),
    ]
    if float64:
        found.append(torch.randn(3, generator=generator, device=device, dtype=torch.float64))
    return [values.cpu() for values in found]


def _states(platform: hwrng.Platform) -> dict[str, torch.Tensor]:
    """States of the device's default generator, some drawing alike and some not."""
    generator = platform.generator()
    states: dict[str, torch.Tensor] = {}

    def keep(name: str) -> None:
        states[name] = generator.get_state()

    platform.manual_seed(11)
    keep("manual_seed(11)")
    platform.manual_seed(11)
    keep("manual_seed(11) again")
    platform.manual_seed(12)
    keep("manual_seed(12)")
    platform.manual_seed(11 + 2**32)
    keep("manual_seed(11 + 2**32)")
    generator.manual_seed(11 + 2**32)  # the device's own seeding (torch's CPU: 32 bits)
    keep("Generator.manual_seed(11 + 2**32)")
    generator.manual_seed(11)
    keep("Generator.manual_seed(11)")
    platform.manual_seed(11)
    draw(generator, 1)
    keep("manual_seed(11), one drawn")
    generator.set_state(generator.get_state())
    keep("manual_seed(11), one drawn, state put back")
    platform.manual_seed(11)
    draw(generator, 2)
    keep("manual_seed(11), two drawn")
    platform.manual_seed(11)
    torch.randn(1, generator=generator, device=generator.device)
    keep("manual_seed(11), one small normal")
    platform.set_seed_offset(generator, 11, 8)
    keep("(11, offset 8)")
    platform.set_seed_offset(generator, 11, 12)
    keep("(11, offset 12)")
    return states


def test_state_digest_follows_the_draws(platform: hwrng.Platform, profile: Profile) -> None:
    """Two states that draw alike digest alike, two that draw apart digest apart (pairwise).

    ``Platform.state_digest`` is how ``hwrng.verify`` compares ranks' streams: bytes of a
    state that never change a draw (torch's CPU generator stores a 64-bit seed but keys its
    Mersenne Twister with the low 32 bits) must not enter it.
    """
    generator = platform.generator()
    saved = generator.get_state()
    try:
        states = _states(platform)
        digests = {name: platform.state_digest(state) for name, state in states.items()}
        draws = {name: _draws(generator, state, profile.float64) for name, state in states.items()}
    finally:
        generator.set_state(saved)
    assert all(isinstance(d, bytes) and d for d in digests.values())
    assert digests == {n: platform.state_digest(s) for n, s in states.items()}, "deterministic"
    wrong = []
    for first, second in itertools.combinations(states, 2):
        alike = all(torch.equal(a, b) for a, b in zip(draws[first], draws[second], strict=True))
        if alike != (digests[first] == digests[second]):
            said = "alike" if digests[first] == digests[second] else "apart"
            drawn = "alike" if alike else "apart"
            wrong.append(f"{first} / {second}: draw {drawn}, digest {said}")
    assert not wrong, wrong
    assert not torch.equal(draws["manual_seed(11)"][0], draws["manual_seed(12)"][0])

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


# -- the state digest, bit by bit: bits no draw reads stay out, every other bit counts -------

#: torch's CPU generator state (aten's CPUGeneratorImplState, little endian), which every
#: generator derived from torch's CPU one keeps (a software device's, PyTorch's OpenReg):
#:   0 uint64 seed | 8 int32 left | 12 int32 seeded | 16 uint64 next | 24 uint64 word[624]
#:   5016 double normal_x, normal_y, normal_rho | 5040 int32 normal valid | 5044 padding
#:   5048 float sample | 5052 bool float sample valid | 5053 padding
#: From aten's set_state and mt19937 engine: the engine keeps the low 32 bits of each word and
#: of next; it outputs ``left - 1`` words from word ``next`` on, then twists, and the twist
#: reads only the top bit of word 0; only normal_y is cached, and only when marked valid.
MERSENNE_LAYOUT_BYTES = 5056
_WORD_0 = 24


def _flipped(state: torch.Tensor, byte: int, bit: int) -> torch.Tensor:
    changed = state.clone()
    changed[byte + bit // 8] ^= 1 << (bit % 8)
    return changed


def _with(state: torch.Tensor, byte: int, value: int, size: int = 4) -> torch.Tensor:
    changed = state.clone()
    changed[byte : byte + size] = torch.tensor(list(value.to_bytes(size, "little")))
    return changed


def _int(state: torch.Tensor, byte: int, size: int = 4) -> int:
    return int.from_bytes(bytes(state[byte : byte + size].tolist()), "little")


def _mersenne_perturbations(state: torch.Tensor) -> list[tuple[str, torch.Tensor, bool]]:
    """``(what, changed state, whether it draws alike)`` for a state of torch's CPU layout.

    Only reachable positions stay reachable: ``next`` moves back, never past the last word
    (torch would read beyond its state).
    """
    left, following = _int(state, 8), _int(state, 16, 8)
    double_valid, float_valid = _int(state, 5040), state[5052].item()
    alike = [
        *((f"stored seed bit {b}", _flipped(state, 0, b)) for b in (0, 31, 32, 63)),
        ("seeded flag 2", _with(state, 12, 2)),
        *((f"next bit {b}", _flipped(state, 16, b)) for b in (32, 63)),
        *((f"word 0 bit {b}", _flipped(state, _WORD_0, b)) for b in (0, 17, 30)),
        *((f"word {w} bit 40", _flipped(state, _WORD_0 + 8 * w, 40)) for w in (0, 311, 623)),
        ("normal_x bit 51", _flipped(state, 5016, 51)),
        ("normal_rho bit 51", _flipped(state, 5032, 51)),
        ("padding 5045", _with(state, 5045, 0xFF, 1)),
        ("padding 5054", _with(state, 5054, 0xFF, 1)),
    ]
    apart = [
        ("word 0 bit 31", _flipped(state, _WORD_0, 31)),
        *(
            (f"word {w} bit {b}", _flipped(state, _WORD_0 + 8 * w, b))
            for w, b in ((1, 0), (227, 31), (396, 5), (397, 9), (623, 0), (623, 31))
        ),
    ]
    if left == 1:  # the next draw twists first: next is never read
        alike.append(("next, before a twist", _flipped(state, 16, 2)))
        apart.append(("left 3: two words before the twist", _with(state, 8, 3)))
    elif following >= 1:
        apart.append(("next one word back", _with(state, 16, following - 1, 8)))
    if double_valid:
        apart.append(("the cached normal_y bit 51", _flipped(state, 5024, 51)))
    else:
        alike.append(("normal_y, not marked valid", _flipped(state, 5024, 51)))
        apart.append(("normal_y marked valid", _with(state, 5040, 1)))
    if not float_valid:  # when valid, only at::normal_distribution<float> reads it (C++ only)
        alike.append(("the float sample, not marked valid", _flipped(state, 5048, 22)))
    return [(what, s, True) for what, s in alike] + [(what, s, False) for what, s in apart]


def _bit_flips(state: torch.Tensor) -> list[tuple[str, torch.Tensor, bool | None]]:
    """Single-bit flips of a state of another layout; which draw alike only the generator says.

    Every bit of a small state (a Philox ``(seed, offset)``), else every bit of its first
    and last 64 bytes and of every 61st byte between.
    """
    size = state.numel()
    chosen: list[int]
    if size <= 64:
        chosen = list(range(size))
    else:
        chosen = sorted({*range(64), *range(size - 64, size), *range(64, size - 64, 61)})
    return [(f"byte {i} bit {b}", _flipped(state, i, b), None) for i in chosen for b in range(8)]


def _bitwise(draws: list[torch.Tensor]) -> list[bytes]:
    return [values.contiguous().view(torch.uint8).numpy().tobytes() for values in draws]


def _every_draw(generator: torch.Generator, state: torch.Tensor, float64: bool) -> list[bytes]:
    """:func:`_draws`, then 1,400 integers, bit for bit.

    1,400 draws pass the next twist of a Mersenne Twister from any position, so every word
    that reaches a draw reaches one of these.
    """
    drawn = _draws(generator, state, float64)
    device = generator.device
    drawn.append(torch.randint(0, 2**31 - 1, (1400,), generator=generator, device=device).cpu())
    return _bitwise(drawn)


def test_state_digest_leaves_out_exactly_the_bits_no_draw_reads(
    platform: hwrng.Platform, profile: Profile
) -> None:
    """Perturbed states digest alike exactly when the device's generator draws them alike.

    States of the default generator -- fresh from ``manual_seed``, after five draws, after
    one small normal -- are perturbed. In torch's CPU layout (also OpenReg's) the suite knows
    which bits never reach a draw (word 0's low 31 bits, the stored seed, ``next``'s high
    half, ``normal_x``, ...) and which do, and the generator's draws must agree; in any other
    layout every bit is flipped where small (a Philox ``(seed, offset)``) and a sample where
    large. A perturbed state the generator refuses is skipped.
    """
    generator = platform.generator()
    saved = generator.get_state()
    wrong: list[str] = []
    tried = alike_seen = 0
    known = saved.numel() == MERSENNE_LAYOUT_BYTES
    try:
        bases = {}
        platform.manual_seed(21)
        bases["fresh"] = generator.get_state()
        draw(generator, 5)
        bases["five drawn"] = generator.get_state()
        platform.manual_seed(21)
        torch.randn(1, generator=generator, device=generator.device)
        bases["one small normal"] = generator.get_state()
        for base_name, base in bases.items():
            expected = _every_draw(generator, base, profile.float64)
            digest = platform.state_digest(base)
            changes = _mersenne_perturbations(base) if known else _bit_flips(base)
            for what, changed, layout_says in changes:
                try:
                    drawn = _every_draw(generator, changed, profile.float64)
                except (RuntimeError, ValueError):
                    continue  # refused by the generator
                tried += 1
                draws_alike = drawn == expected
                alike_seen += draws_alike
                said = platform.state_digest(changed) == digest
                if layout_says is not None and draws_alike != layout_says:
                    wrong.append(
                        f"{base_name}, {what}: torch's CPU layout says the draws are "
                        f"{'alike' if layout_says else 'apart'}, the generator draws them "
                        f"{'alike' if draws_alike else 'apart'}"
                    )
                if said != draws_alike:
                    wrong.append(
                        f"{base_name}, {what}: draws {'alike' if draws_alike else 'apart'}, "
                        f"digests {'alike' if said else 'apart'}"
                    )
    finally:
        generator.set_state(saved)
    assert tried, "the generator refused every perturbed state"
    assert not wrong, wrong
    if known:
        assert alike_seen, "bits that never draw were perturbed"

"""Rules for the counter view: a generator as a (seed, offset) pair."""

from __future__ import annotations

import pytest
import torch

import hwrng
from hwrng_conformance.helpers import all_distinct, draw


@pytest.mark.parametrize("seed", [0, 7, 2**32 + 5, 2**64 - 1], ids=["0", "7", "2**32+5", "2**64-1"])
def test_counter_reads_seed_and_zero_after_manual_seed(platform: hwrng.Platform, seed: int) -> None:
    platform.manual_seed(seed)
    assert platform.get_seed_offset(platform.generator()) == (seed, 0)


@pytest.mark.parametrize("offset", [0, 4, 1024, 2**40], ids=["0", "4", "1024", "2**40"])
def test_set_seed_offset_reproduces_draws(platform: hwrng.Platform, offset: int) -> None:
    generator = platform.generator()
    platform.set_seed_offset(generator, 31, offset)
    assert platform.get_seed_offset(generator) == (31, offset)
    first = draw(generator)
    platform.set_seed_offset(generator, 31, offset)
    assert torch.equal(draw(generator), first)


def test_set_seed_offset_zero_equals_manual_seed(platform: hwrng.Platform) -> None:
    generator = platform.generator()
    platform.manual_seed(4242)
    seeded = draw(generator)
    platform.set_seed_offset(generator, 4242, 0)
    assert torch.equal(draw(generator), seeded)


def test_distinct_offsets_give_distinct_draws(platform: hwrng.Platform) -> None:
    generator = platform.generator()
    draws = []
    for offset in [0, 4, 8, 12, 16, 64, 4096, 2**32, 2**62]:
        platform.set_seed_offset(generator, 5, offset)
        draws.append(draw(generator, 8))
    assert all_distinct(draws)


def test_counter_after_drawing_names_the_next_draws(platform: hwrng.Platform) -> None:
    generator = platform.generator()
    platform.set_seed_offset(generator, 11, 64)
    drawn = draw(generator, 64)
    seed, offset = platform.get_seed_offset(generator)
    assert seed == 11
    assert offset % 4 == 0 and offset != 64, "drawing must move the generator off its position"
    assert platform.get_seed_offset(generator) == (seed, offset), "reading twice reads the same"
    following = draw(generator)
    platform.set_seed_offset(generator, seed, offset)
    assert torch.equal(draw(generator), following), "the pair read determines the next draws"
    platform.set_seed_offset(generator, seed, offset)
    assert not torch.equal(draw(generator, 64), drawn), "the next position must not repeat draws"


def test_counter_survives_state_restore(platform: hwrng.Platform) -> None:
    generator = platform.generator()
    platform.set_seed_offset(generator, 13, 40)
    positioned = platform.get_rng_state()
    draw(generator)
    platform.set_rng_state(positioned)
    assert platform.get_seed_offset(generator) == (13, 40)
    draw(generator, 10)
    drifted = platform.get_rng_state()
    position = platform.get_seed_offset(generator)
    draw(generator)
    platform.set_rng_state(drifted)  # as fork_rng or checkpoint recomputation does
    assert platform.get_seed_offset(generator) == position


def test_user_generator_counter_view(platform: hwrng.Platform) -> None:
    generator = torch.Generator(device=platform.device())
    platform.set_seed_offset(generator, 3, 40)
    assert platform.get_seed_offset(generator) == (3, 40)
    first = draw(generator)
    platform.set_seed_offset(generator, 3, 40)
    assert torch.equal(draw(generator), first)


@pytest.mark.parametrize(
    ("seed", "offset", "error"),
    [
        (1, -4, hwrng.InvalidOffsetError),
        (1, 6, hwrng.InvalidOffsetError),
        (1, 2**63, hwrng.InvalidOffsetError),
        (-1, 0, hwrng.InvalidSeedError),
        (2**64, 0, hwrng.InvalidSeedError),
    ],
    ids=["negative-offset", "unaligned-offset", "offset-2**63", "negative-seed", "seed-2**64"],
)
def test_set_seed_offset_refuses_bad_input(
    platform: hwrng.Platform, seed: int, offset: int, error: type[Exception]
) -> None:
    generator = platform.generator()
    platform.set_seed_offset(generator, 8, 16)
    with pytest.raises(error):
        platform.set_seed_offset(generator, seed, offset)
    assert platform.get_seed_offset(generator) == (8, 16)


def test_foreign_generator_refused(platform: hwrng.Platform) -> None:
    with pytest.raises(hwrng.InvalidDeviceError):
        platform.get_seed_offset("not a generator")  # type: ignore[arg-type]
    host = torch.Generator()  # a generator of the host's device type
    if platform.device_type != host.device.type:
        with pytest.raises(hwrng.InvalidDeviceError):
            platform.get_seed_offset(host)

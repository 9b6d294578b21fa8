"""The counter views: the emulated Mersenne-Twister one, and the Philox one's checks."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hwrng
from hwrng import MersenneCounter, PhiloxCounter, mersenne_state

seeds = st.integers(0, 2**64 - 1)
offsets = st.integers(0, 2**61).map(lambda o: o * 4)


def draws(generator: torch.Generator, count: int = 8) -> torch.Tensor:
    return torch.rand(count, generator=generator)


@settings(max_examples=60, deadline=None)
@given(seed=seeds, offset=offsets)
def test_position_round_trip_and_determinism(seed: int, offset: int) -> None:
    counter = MersenneCounter()
    generator = torch.Generator()
    counter.write(generator, seed, offset)
    assert counter.read(generator) == (seed, offset)
    assert generator.initial_seed() == seed
    first = draws(generator)
    counter.write(generator, seed, offset)
    assert torch.equal(draws(generator), first)


@settings(max_examples=60, deadline=None)
@given(seed=seeds, a=offsets, b=offsets)
def test_distinct_positions_distinct_draws(seed: int, a: int, b: int) -> None:
    state_a, state_b = mersenne_state(seed, a), mersenne_state(seed, b)
    assert torch.equal(state_a, state_b) == (a == b)


@settings(max_examples=60, deadline=None)
@given(a=seeds, b=seeds)
def test_distinct_seeds_distinct_states(a: int, b: int) -> None:
    assert torch.equal(mersenne_state(a, 0), mersenne_state(b, 0)) == (a == b)


def test_offset_zero_small_seed_is_torch_seeding() -> None:
    generator = torch.Generator()
    generator.manual_seed(987654)
    assert torch.equal(mersenne_state(987654, 0), generator.get_state())


def test_reads_seed_zero_after_any_manual_seed() -> None:
    counter = MersenneCounter()
    generator = torch.Generator()
    generator.manual_seed(17)  # torch's own seeding, not hwrng's
    assert counter.read(generator) == (17, 0)
    counter.write(generator, 2**40, 0)
    assert MersenneCounter().read(generator) == (2**40, 0)


def test_torch_seeding_of_a_large_seed_reads_zero_and_moves_to_hwrngs_keying() -> None:
    generator = torch.Generator()
    generator.manual_seed(2**32 + 9)  # torch keeps only the low 32 bits
    assert MersenneCounter().read(generator) == (2**32 + 9, 0)
    assert torch.equal(generator.get_state(), mersenne_state(2**32 + 9, 0))


def test_positions_are_read_from_the_state_alone() -> None:
    """No memory: a new counter, or a restored state, reads the exact position."""
    generator = torch.Generator()
    MersenneCounter().write(generator, 9, 12)
    saved = generator.get_state()
    MersenneCounter().write(generator, 9, 400)
    draws(generator)
    generator.set_state(saved)  # what fork_rng, or checkpoint recomputation, does
    assert MersenneCounter().read(generator) == (9, 12)


@settings(max_examples=40, deadline=None)
@given(seed=seeds, count=st.integers(1, 50))
def test_a_drawn_from_generator_reads_as_a_function_of_its_state(seed: int, count: int) -> None:
    counter = MersenneCounter()
    generator, replica = torch.Generator(), torch.Generator()
    counter.write(generator, seed, 64)
    counter.write(replica, seed, 64)
    drawn = draws(generator, count)
    draws(replica, count)
    saved = generator.get_state()
    position = counter.read(generator)
    assert position == counter.read(replica), "replicas (same history) read the same pair"
    assert position[0] == seed and position[1] % 4 == 0 and position[1] < 2**61
    generator.set_state(saved)
    assert counter.read(generator) == position, "a restored state reads as before"
    following = draws(generator)
    counter.write(generator, *position)
    assert torch.equal(draws(generator), following), "the pair determines the next draws"
    assert not torch.equal(following[: len(drawn)], drawn[: len(following)])


def test_reading_a_drawn_from_generator_snaps_it_to_the_position() -> None:
    counter = MersenneCounter()
    generator = torch.Generator()
    generator.manual_seed(3)
    draws(generator)
    seed, offset = counter.read(generator)
    assert torch.equal(generator.get_state(), mersenne_state(seed, offset))
    assert counter.read(generator) == (seed, offset)


def test_a_cached_normal_is_not_a_positioned_state() -> None:
    counter = MersenneCounter()
    generator = torch.Generator()
    counter.write(generator, 1, 8)
    torch.randn(1, generator=generator)  # may leave a cached second normal sample
    assert counter.read(generator) != (1, 8)


def test_generators_do_not_share_positions() -> None:
    counter = MersenneCounter()
    a, b = torch.Generator(), torch.Generator()
    counter.write(a, 1, 8)
    counter.write(b, 1, 16)
    assert counter.read(a) == (1, 8)
    assert counter.read(b) == (1, 16)


def test_mersenne_counter_refuses_foreign_states() -> None:
    class Sixteen:
        device = torch.device("cpu")

        def get_state(self) -> torch.Tensor:
            return torch.zeros(16, dtype=torch.uint8)

    with pytest.raises(hwrng.InvalidStateError, match="5056-byte"):
        MersenneCounter().read(Sixteen())  # type: ignore[arg-type]


def test_philox_counter_refuses_a_mersenne_generator() -> None:
    counter = PhiloxCounter()
    generator = torch.Generator()  # no offset API, and a 5056-byte state
    with pytest.raises(hwrng.InvalidStateError, match="own CounterView"):
        counter.read(generator)
    state = generator.get_state()
    with pytest.raises(hwrng.InvalidStateError):
        counter.write(generator, 1, 4)
    assert torch.equal(generator.get_state(), state)


def test_philox_counter_state_layout() -> None:
    """A generator with the 16-byte (seed, offset) state and no offset API."""

    class PhiloxLike:
        device = torch.device("cpu")

        def __init__(self) -> None:
            self.state = torch.zeros(16, dtype=torch.uint8)

        def get_offset(self) -> int:
            raise RuntimeError("no offset API")

        def get_state(self) -> torch.Tensor:
            return self.state.clone()

        def set_state(self, state: torch.Tensor) -> None:
            self.state = state.clone()

    counter = PhiloxCounter()
    fake = PhiloxLike()
    counter.write(fake, 2**64 - 1, 2**62)  # type: ignore[arg-type]
    assert counter.read(fake) == (2**64 - 1, 2**62)  # type: ignore[arg-type]
    raw = fake.state.numpy()
    assert raw[:8].tolist() == [255] * 8  # little-endian uint64 seed first
    assert int.from_bytes(bytes(raw[8:].tolist()), "little") == 2**62

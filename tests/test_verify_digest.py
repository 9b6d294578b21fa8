"""verify judges each stream by what it will draw: state digests and DTensor mesh kinds (pure).

The oracle of a digest is the generator itself: two states digest alike exactly
when they draw alike. torch's CPU generator stores the 64-bit seed it was given
but keys its Mersenne Twister with the low 32 bits; hwrng's own seeding keys it
with all 64 (and positions it by its counter view).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hwrng
from hwrng._state_digest import MERSENNE_STATE_BYTES, default_state_digest
from hwrng.verify._meshes import IRREGULAR, instance_of, kind_of, rank_set

CPU = hwrng.get_platform("cpu")


def _draws(state: torch.Tensor) -> list[torch.Tensor]:
    generator = torch.Generator()
    generator.set_state(state)
    return [
        torch.rand(32, generator=generator),
        torch.randn(3, generator=generator),
        torch.randn(3, generator=generator, dtype=torch.float64),
        torch.randn(40, generator=generator),
        torch.randint(0, 2**31 - 1, (8,), generator=generator),
    ]


def _same_draws(a: torch.Tensor, b: torch.Tensor) -> bool:
    return all(torch.equal(x, y) for x, y in zip(_draws(a), _draws(b), strict=True))


#: What a test does to a fresh generator: how it seeds it, then what it draws.
SEEDINGS = st.sampled_from(["torch", "hwrng"])
SEEDS = st.sampled_from([5, 6, 5 + 2**32, 6 + 2**32, 2**63 + 5])
OPS = st.lists(
    st.sampled_from(["rand1", "rand7", "randn1", "randn1-f64", "randn40", "position8"]),
    max_size=3,
)


def _state(seeding: str, seed: int, ops: list[str]) -> torch.Tensor:
    generator = torch.Generator()
    if seeding == "torch":
        generator.manual_seed(seed)
    else:
        hwrng.host_counter().write(generator, seed, 0)
    for op in ops:
        if op == "position8":
            hwrng.host_counter().write(generator, seed, 8)
        elif op.startswith("randn"):
            dtype = torch.float64 if op.endswith("f64") else torch.float32
            torch.randn(int(op[5:].split("-")[0]), generator=generator, dtype=dtype)
        else:
            torch.rand(int(op[4:]), generator=generator)
    return generator.get_state()


@settings(max_examples=150, deadline=None)
@given(a=st.tuples(SEEDINGS, SEEDS, OPS), b=st.tuples(SEEDINGS, SEEDS, OPS))
def test_cpu_states_digest_alike_exactly_when_they_draw_alike(
    a: tuple[str, int, list[str]], b: tuple[str, int, list[str]]
) -> None:
    first, second = _state(*a), _state(*b)
    alike = CPU.state_digest(first) == CPU.state_digest(second)
    assert alike == _same_draws(first, second), (a, b)


def test_torch_keys_its_cpu_generator_with_the_low_32_bits_and_the_digest_follows() -> None:
    low, high = _state("torch", 5, []), _state("torch", 5 + 2**32, [])
    assert not torch.equal(low, high), "the stored seeds differ"
    assert _same_draws(low, high) and CPU.state_digest(low) == CPU.state_digest(high)
    ours = _state("hwrng", 5 + 2**32, [])
    assert not _same_draws(low, ours) and CPU.state_digest(low) != CPU.state_digest(ours)


def test_a_state_put_back_and_a_twist_boundary_digest_as_they_draw() -> None:
    generator = torch.Generator()
    generator.manual_seed(3)
    torch.rand(624, generator=generator)  # left == 1: the next draw twists every word
    at_boundary = generator.get_state()
    assert at_boundary[8:24].tolist() == [1, 0, 0, 0, 1, 0, 0, 0, 112, 2, 0, 0, 0, 0, 0, 0]
    moved = at_boundary.clone()
    moved[16:24] = torch.tensor([0] * 8, dtype=torch.uint8)  # next: ignored before a twist
    assert _same_draws(at_boundary, moved)
    assert CPU.state_digest(at_boundary) == CPU.state_digest(moved)


def test_the_default_digest_takes_torchs_cpu_layout_and_any_other_state_whole() -> None:
    state = _state("torch", 5, [])
    assert state.numel() == MERSENNE_STATE_BYTES
    assert hwrng.Platform.state_digest(CPU, state) == hwrng.mersenne_state_digest(state)
    philox = torch.tensor(list(range(16)), dtype=torch.uint8)
    assert default_state_digest(philox) == hwrng.whole_state_digest(philox)
    other = philox.clone()
    other[15] = 99
    assert default_state_digest(philox) != default_state_digest(other)
    with pytest.raises(hwrng.InvalidStateError):
        hwrng.mersenne_state_digest(philox)


# -- DTensor meshes: the kind of a mesh, and the instance of a kind that holds a rank -------


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    chosen=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_every_rank_finds_its_own_submesh_of_a_kind_from_the_rank_alone(
    sizes: list[int], chosen: list[bool]
) -> None:
    """The oracle: the submeshes of an init_device_mesh layout over some dims, built from the
    rank grid directly; a submesh's kind names, for every rank, the submesh holding it."""
    world = math.prod(sizes)
    grid = torch.arange(world).reshape(sizes)
    dims = [d for d in range(len(sizes)) if chosen[d]]
    submeshes = []
    for index in itertools.product(
        *(range(s) if d not in dims else [None] for d, s in enumerate(sizes))
    ):
        picked = grid[tuple(slice(None) if i is None else i for i in index)]
        submeshes.append(rank_set(picked.flatten().tolist()))
    for submesh in submeshes:
        if len(submesh) < 2:
            continue
        kind = kind_of(submesh)
        assert kind != IRREGULAR
        for other in submeshes:
            for rank in other:
                assert instance_of(rank, kind) == other


def test_ranks_that_form_no_grid_are_irregular() -> None:
    assert kind_of((0, 2, 3, 5)) == IRREGULAR
    assert kind_of((1, 2)) == IRREGULAR  # its rank 2 would start an instance of its own
    assert kind_of((1, 3)) != IRREGULAR and instance_of(3, kind_of((1, 3))) == (1, 3)

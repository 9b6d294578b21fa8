"""verify judges each stream by what it will draw: state digests, DTensor mesh kinds and each
rank's DTensor view, in one process.

The oracle of a digest is the generator itself: two states digest alike exactly
when they draw alike. torch's CPU generator stores the 64-bit seed it was given
but keys its Mersenne Twister with the low 32 bits; hwrng's own seeding keys it
with all 64 (and positions it by its counter view).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import hwrng
from hwrng._mesh import MeshLayout
from hwrng._plan import SeedDim, Seeding
from hwrng._state_digest import MERSENNE_STATE_BYTES, default_state_digest
from hwrng.verify._meshes import IRREGULAR, instance_of, kind_of, rank_set
from hwrng.verify._streams import DTensorView

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


# -- perturbed CPU states: equal draws exactly when equal digests ---------------------------


def _every_draw(state: torch.Tensor) -> list[bytes]:
    """The oracle: what torch draws from ``state``, bit for bit.

    First the cached double normal sample, exactly (``normal_`` with mean -0.0 keeps its sign
    and every bit), then uniforms, small and large normals, and 1,400 integers, one 32-bit
    output each: past the next twist from any position, so every word of the state that
    reaches a draw reaches one of these.
    """
    generator = torch.Generator()
    generator.set_state(state)
    drawn = [
        torch.empty(1, dtype=torch.float64).normal_(-0.0, 1.0, generator=generator),
        torch.rand(32, generator=generator),
        torch.randn(3, generator=generator),
        torch.randn(3, generator=generator, dtype=torch.float64),
        torch.randn(40, generator=generator),
        torch.randint(0, 2**32 - 1, (1400,), generator=generator),
    ]
    return [values.numpy().tobytes() for values in drawn]


#: Where a perturbation lands in torch's CPU state (aten's CPUGeneratorImplState layout) and
#: how: flip a bit, or set a value. The float normal sample is left out: no torch op reads it
#: (only ``at::normal_distribution<float>`` in C++), so draws cannot tell whether it counts.
PERTURBATIONS = st.one_of(
    st.tuples(st.just("seed"), st.just(0), st.integers(0, 63)),
    st.tuples(st.just("left"), st.just(0), st.integers(1, 624)),
    st.tuples(st.just("seeded"), st.just(0), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just("next"), st.just(0), st.integers(0, 63)),
    st.tuples(
        st.just("word"),
        st.one_of(st.sampled_from([0, 1, 226, 227, 396, 397, 623]), st.integers(0, 623)),
        st.integers(0, 63),
    ),
    st.tuples(st.just("word 0"), st.just(0), st.integers(0, 31)),
    st.tuples(st.just("normal"), st.sampled_from([0, 1, 2]), st.integers(0, 63)),
    st.tuples(st.just("normal valid"), st.just(0), st.integers(0, 1)),
    st.tuples(st.just("padding"), st.sampled_from([5044, 5047, 5053, 5055]), st.integers(0, 255)),
)


def _perturbed(state: torch.Tensor, changes: list[tuple[str, int, int]]) -> torch.Tensor:
    raw = bytearray(state.numpy().tobytes())

    def flip(at: int, bit: int) -> None:
        raw[at + bit // 8] ^= 1 << (bit % 8)

    for field, index, value in changes:
        if field == "seed":
            flip(0, value)
        elif field == "left":
            raw[8:12] = value.to_bytes(4, "little")
        elif field == "seeded":
            raw[12:16] = value.to_bytes(4, "little", signed=True)
        elif field == "next":
            flip(16, value)
        elif field in ("word", "word 0"):
            flip(24 + 8 * index, value)
        elif field == "normal":
            flip(5016 + 8 * index, value)
        elif field == "normal valid":
            raw[5040:5044] = value.to_bytes(4, "little")
        else:
            raw[index] = value
    return torch.frombuffer(raw, dtype=torch.uint8).clone()


def _draws_defined(state: torch.Tensor) -> bool:
    """Whether torch takes ``state`` and draws from it without reading past its words.

    ``left`` outputs from word ``next`` on before the twist: with ``next + left > 625`` torch
    reads beyond its state, which nothing can judge. A NaN cached sample (torch never caches
    one) draws as arithmetic makes of it, not by its bits.
    """
    try:
        torch.Generator().set_state(state)
    except RuntimeError:
        return False
    left, following = int(state[8:12].view(torch.int32)), int(state[16:24].view(torch.int64))
    normal_y = float(state[5024:5032].view(torch.float64))
    valid = bool(state[5040:5044].view(torch.int32))
    return (left == 1 or (following & 0xFFFFFFFF) + left <= 625) and not (
        valid and math.isnan(normal_y)
    )


BASE_OPS = st.lists(
    st.sampled_from(["rand1", "rand7", "randn1", "randn1-f64", "randn40", "position8", "twist"]),
    max_size=3,
)


def _base(seeding: str, seed: int, ops: list[str]) -> torch.Tensor:
    """A state torch reaches: :func:`_state`'s, where ``twist`` draws up to the next twist."""
    generator = torch.Generator()
    generator.set_state(_state(seeding, seed, [op for op in ops if op != "twist"]))
    if "twist" in ops:
        left = int(generator.get_state()[8:12].view(torch.int32))
        torch.randint(0, 2**32 - 1, (left - 1,), generator=generator)
    return generator.get_state()


@settings(max_examples=400, deadline=None)
@given(
    base=st.tuples(SEEDINGS, SEEDS, BASE_OPS),
    first=st.lists(PERTURBATIONS, max_size=3),
    second=st.lists(PERTURBATIONS, max_size=3),
)
def test_perturbed_cpu_states_digest_alike_exactly_when_torch_draws_them_alike(
    base: tuple[str, int, list[str]],
    first: list[tuple[str, int, int]],
    second: list[tuple[str, int, int]],
) -> None:
    state = _base(*base)
    one, other = _perturbed(state, first), _perturbed(state, second)
    assume(_draws_defined(one) and _draws_defined(other))
    alike = CPU.state_digest(one) == CPU.state_digest(other)
    assert alike == (_every_draw(one) == _every_draw(other)), (base, first, second)


def test_bits_of_word_0_below_its_top_never_draw_and_the_digest_leaves_them_out() -> None:
    """The case verify got wrong both ways: shards seeded alike with the tensor-parallel rank
    XORed into word 0's low bits draw alike (they must digest alike, so verify fails them);
    replicas that differ there draw alike too (verify must pass them)."""
    for ops in ([], ["rand7"], ["randn1"], ["twist"]):
        state = _base("torch", 1000, ops)
        for tp in (1, 2, 3, 2**31 - 1):
            marked = state.clone()
            marked[24:28] = torch.tensor(
                list((int(state[24:28].view(torch.int32)) ^ tp).to_bytes(4, "little", signed=True)),
                dtype=torch.uint8,
            )
            assert _every_draw(marked) == _every_draw(state), "torch draws them alike"
            assert CPU.state_digest(marked) == CPU.state_digest(state), (ops, tp)
        top = _perturbed(state, [("word 0", 0, 31)])
        assert _every_draw(top) != _every_draw(state), "the top bit of word 0 enters the twist"
        assert CPU.state_digest(top) != CPU.state_digest(state), ops


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


# -- a rank's DTensor view: where its next op on each mesh draws, and the meshes it lacks -----

#: dp=2 x tp=2 by init_device_mesh: rank = 2 * dp + tp; the plan shards both dims.
LAYOUT = MeshLayout(("dp", "tp"), (2, 2))
TP_MESHES = {0: (0, 1), 1: (0, 1), 2: (2, 3), 3: (2, 3)}


def _plan(rank: int) -> Seeding:
    dp, tp = divmod(rank, 2)
    dims = (SeedDim("dp", dp, 2, 2), SeedDim("tp", tp, 1, 2))
    return Seeding(7, dims, "cpu", "manual_seed", layout=LAYOUT)


def _view(rank: int, *, own_seed: int | None = None, offset: int = 0, **more: Any) -> DTensorView:
    plan = _plan(rank)
    own = plan.rank_seed if own_seed is None else own_seed
    recorded = more.get("recorded", (TP_MESHES[rank],))
    kinds = more.get("kinds", (kind_of(TP_MESHES[rank]),))
    return DTensorView(rank, more.get("seeding", plan), own, offset, recorded, kinds)


def test_a_tp_mesh_draws_with_the_seed_of_the_dims_outside_it() -> None:
    """The oracle: 7 + 2 * dp, the plan's seed without its tp term (tp lies inside)."""
    for rank, mesh in TP_MESHES.items():
        assert _plan(rank).dtensor_seed_of(mesh) == 7 + 2 * (rank // 2)
        assert _plan(rank).dtensor_seed_of((0, 1, 2, 3)) == 7


def test_ranks_of_one_mesh_at_one_position_observe_alike_and_meshes_apart() -> None:
    first, second = _view(2).observe((2, 3)), _view(3).observe((2, 3))
    assert first == second
    other = _view(0).observe((0, 1))
    assert other.agree != first.agree and other.apart != first.apart
    assert other.digest != first.digest, "the other mesh draws with 7, this one with 9"


def test_a_re_seeded_or_advanced_rank_observes_apart_and_still_takes_the_meshs_seed() -> None:
    """Re-seeding (even with the plan's own seed) puts the generator where the mesh's ops do
    not draw: the observation differs, while the seed the rank takes for the mesh does not."""
    sound = _view(3).observe((2, 3))
    re_seeded = _view(3, own_seed=_plan(3).rank_seed + 1)
    assert re_seeded.observe((2, 3)).digest != sound.digest
    assert re_seeded.observe((2, 3)).agree == sound.agree
    assert re_seeded.seeds((2, 3)) == _view(2).seeds((2, 3))
    assert _view(3, offset=4).observe((2, 3)).digest != sound.digest


def test_seeded_by_other_means_ranks_of_a_mesh_still_agree_on_their_own_seeds() -> None:
    alike = _view(2, seeding=None, own_seed=5).observe((2, 3))
    assert alike == _view(3, seeding=None, own_seed=5).observe((2, 3))
    assert alike.digest != _view(3, seeding=None, own_seed=6).observe((2, 3)).digest


def test_a_rank_finds_the_meshes_of_the_kinds_others_used_that_it_holds_no_record_of() -> None:
    """Rank 2 ran ops on its tp mesh only; its peers used the dp meshes, the whole mesh, an
    irregular mesh and a mesh beyond the judged ranks: it finds its dp mesh and the whole."""
    kinds = (
        kind_of((2, 3)),  # its own, recorded
        kind_of((0, 2)),  # dp: the instance holding rank 2 is (0, 2)
        kind_of((0, 1, 2, 3)),
        kind_of((1, 2)),  # irregular: cannot be found from rank 2 alone
        kind_of((0, 4)),  # (2, 6): beyond the 4 judged ranks
    )
    assert kinds[3] == IRREGULAR
    view = _view(2)
    assert view.missing(kinds, range(4)) == ((0, 1, 2, 3), (0, 2))
    assert view.missing(kinds, {2, 3}) == (), "meshes reaching past the group are not its"
    idle = _view(2, recorded=(), kinds=())
    assert idle.missing(kinds, range(4)) == ((0, 1, 2, 3), (0, 2), (2, 3))


# -- the devices' streams of a preset that seeds them apart from its plan -------------------


@pytest.mark.parametrize("always", [False, True])
def test_slapos_plan_records_the_dims_its_devices_are_seeded_along(always: bool) -> None:
    from hwrng import presets

    tracker = hwrng.RNGStatesTracker("cpu")
    presets.slapo_set_random_seed(
        100, dp_rank=1, pp_rank=0, tp_rank=1, always_enable_tp_seed=always, tracker=tracker
    )
    plan = hwrng.current_seeding()
    assert plan is not None
    assert plan.device_dims() == (("pp", "dp", "tp") if always else None)
    assert ("devices along pp, dp, tp" in plan.describe()) == always
    assert _plan(0).device_dims() is None, "hwrng's own seeding seeds the devices by its plan"


def test_lists_too_long_for_one_message_are_refused_before_any_collective() -> None:
    from hwrng._collectives import MESSAGE_BYTES
    from hwrng.verify._api import _kinds_message
    from hwrng.verify._setup import names_message

    fits = ["s" * 10] * 8
    assert names_message(fits) == '["' + '", "'.join(fits) + '"]'
    count = MESSAGE_BYTES // 10 + 1  # each name costs at least its 8 characters and ", "
    with pytest.raises(hwrng.MeshError, match=rf"holds {count} streams.*pass streams="):
        names_message(["s" * 8] * count)
    with pytest.raises(hwrng.MeshError, match=rf"on {count} kinds of mesh.*pass mesh="):
        _kinds_message(["k" * 8] * count)

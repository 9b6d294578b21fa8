"""rank_seed, seed_plan and single-process manual_seed: tables, properties, refusals."""

from __future__ import annotations

import itertools
import math
import os
import random
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hwrng

RFC_MESH = {"dp": 2, "pp": 2, "tp": 2}


def coordinates(mesh: dict[str, int]) -> Iterator[dict[str, int]]:
    names = list(mesh)
    for values in itertools.product(*(range(mesh[n]) for n in names)):
        yield dict(zip(names, values, strict=True))


@pytest.mark.parametrize(
    ("sharded", "expected"),
    [
        (["pp", "tp"], [123, 124, 125, 126, 123, 124, 125, 126]),
        (["tp", "pp"], [123, 125, 124, 126, 123, 125, 124, 126]),
        ([], [123] * 8),
        (["dp", "pp", "tp"], list(range(123, 131))),
    ],
)
def test_rfc_tables(sharded: list[str], expected: list[int]) -> None:
    assert hwrng.seed_plan(123, RFC_MESH, sharded).tolist() == expected
    got = [hwrng.rank_seed(123, c, RFC_MESH, sharded) for c in coordinates(RFC_MESH)]
    assert got == expected


def test_seed_plan_dtype_and_wrap() -> None:
    plan = hwrng.seed_plan(2**64 - 2, {"a": 4}, ["a"])
    assert plan.dtype == np.uint64
    assert plan.tolist() == [2**64 - 2, 2**64 - 1, 0, 1]
    assert hwrng.rank_seed(2**64 - 1, {"a": 3}, {"a": 4}, ["a"]) == 2


meshes = st.dictionaries(
    st.sampled_from(["dp", "pp", "tp", "cp", "ep", "fsdp"]),
    st.integers(1, 4),
    min_size=1,
    max_size=4,
)


@st.composite
def mesh_and_dims(draw: st.DrawFn) -> tuple[dict[str, int], list[str], int]:
    mesh = draw(meshes)
    dims = draw(st.permutations(list(mesh)))
    sharded = dims[: draw(st.integers(0, len(dims)))]
    seed = draw(st.one_of(st.integers(0, 2**64 - 1), st.integers(2**64 - 64, 2**64 - 1)))
    return mesh, sharded, seed


@settings(max_examples=150, deadline=None)
@given(mesh_and_dims())
def test_plan_properties(case: tuple[dict[str, int], list[str], int]) -> None:
    mesh, sharded, seed = case
    plan = hwrng.seed_plan(seed, mesh, sharded).tolist()
    coords = list(coordinates(mesh))
    assert len(plan) == math.prod(mesh.values())
    for rank, coordinate in enumerate(coords):
        assert plan[rank] == hwrng.rank_seed(seed, coordinate, mesh, sharded)
        assert 0 <= plan[rank] < 2**64
    for (i, a), (j, b) in itertools.combinations(enumerate(coords), 2):
        same_shard = all(a[d] == b[d] for d in sharded)
        # replicas share a seed; any two shards differ (fewer than 2**64 ranks never wrap)
        assert (plan[i] == plan[j]) == same_shard
    assert len(set(plan)) == math.prod(mesh[d] for d in sharded)


@settings(max_examples=100, deadline=None)
@given(mesh_and_dims())
def test_first_listed_dim_varies_slowest(case: tuple[dict[str, int], list[str], int]) -> None:
    mesh, sharded, seed = case
    coordinate = {d: mesh[d] - 1 for d in mesh}
    index = 0
    for d in sharded:  # the independent oracle: mixed radix, first dim most significant
        index = index * mesh[d] + coordinate[d]
    assert hwrng.rank_seed(seed, coordinate, mesh, sharded) == (seed + index) % 2**64


@pytest.mark.parametrize("seed", [0, 2**32 - 1, 2**32, 2**40 + 5, 2**64 - 1])
def test_random_and_numpy_never_draw_one_stream(seed: int) -> None:
    # Both are Mersenne Twisters: compare their raw 32-bit outputs, not floats.
    hwrng.manual_seed(seed, platform="cpu")
    python_words = [random.getrandbits(32) for _ in range(8)]
    numpy_words = np.random.randint(0, 2**32, size=8, dtype=np.uint64).tolist()
    assert python_words != numpy_words


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"seed": -1}, hwrng.InvalidSeedError, ">= 0"),
        ({"seed": 2**64}, hwrng.InvalidSeedError, "< 2\\*\\*64"),
        ({"seed": 1.0}, hwrng.InvalidSeedError, "integer"),
        ({"sharded_dims": ["xx"]}, hwrng.MeshError, "'xx' not in the mesh"),
        ({"sharded_dims": ["tp", "tp"]}, hwrng.MeshError, "more than once"),
        ({"sharded_dims": "tp"}, hwrng.MeshError, "not the string"),
        ({"sharded_dims": {"pp", "tp"}}, hwrng.MeshError, "ordered sequence"),
        ({"sharded_dims": iter(["pp"])}, hwrng.MeshError, "ordered sequence"),
        (
            {"coordinate": {"dp": 0, "pp": 1, "tp": 0, "ep": 0}},
            hwrng.MeshError,
            "'ep', which is not",
        ),
        ({"coordinate": {"dp": 9, "pp": 1, "tp": 0}}, hwrng.MeshError, "dp=9 lies outside"),
        ({"coordinate": {"dp": 0, "pp": 2, "tp": 0}}, hwrng.MeshError, "outside the mesh"),
        ({"coordinate": {"dp": 0, "tp": 0}}, hwrng.MeshError, "no entry for sharded dim 'pp'"),
        ({"sizes": {"dp": 2, "pp": 0, "tp": 2}}, hwrng.MeshError, "positive integer size"),
    ],
)
def test_rank_seed_refusals(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    args: dict[str, object] = {
        "seed": 1,
        "coordinate": {"dp": 0, "pp": 1, "tp": 0},
        "sizes": RFC_MESH,
        "sharded_dims": ["pp", "tp"],
    }
    args.update(kwargs)
    with pytest.raises(error, match=message):
        hwrng.rank_seed(**args)  # type: ignore[arg-type]


def test_seed_plan_refusals() -> None:
    with pytest.raises(hwrng.MeshError, match="not in the mesh"):
        hwrng.seed_plan(1, RFC_MESH, ["ep"])
    with pytest.raises(hwrng.MeshError, match="a set's order differs"):
        hwrng.seed_plan(1, RFC_MESH, {"pp", "tp"})  # type: ignore[arg-type]
    with pytest.raises(hwrng.MeshError, match="mapping of dim name to size or a DeviceMesh"):
        hwrng.seed_plan(1, [2, 2], ["tp"])  # type: ignore[arg-type]
    with pytest.raises(hwrng.InvalidSeedError):
        hwrng.seed_plan(-5, RFC_MESH, [])


def _snapshot() -> tuple[torch.Tensor, object, object, str | None]:
    return (
        torch.get_rng_state(),
        random.getstate(),
        np.random.get_state(legacy=False),
        os.environ.get("PYTHONHASHSEED"),
    )


def _same(
    a: tuple[torch.Tensor, object, object, str | None],
    b: tuple[torch.Tensor, object, object, str | None],
) -> bool:
    return bool(
        torch.equal(a[0], b[0]) and a[1] == b[1] and str(a[2]) == str(b[2]) and a[3] == b[3]
    )


def test_manual_seed_without_mesh_seeds_everything() -> None:
    assert hwrng.manual_seed(42, platform="cpu") == 42
    got = (torch.rand(3), random.random(), np.random.rand(), os.environ["PYTHONHASHSEED"])
    torch.manual_seed(42)
    random.seed(42)
    np.random.seed(42)
    assert torch.equal(got[0], torch.rand(3))
    assert got[1:] == (random.random(), np.random.rand(), "42")
    record = hwrng.current_seeding()
    assert record is not None and (record.rank_seed, record.seed, record.platform) == (
        42,
        42,
        "cpu",
    )
    hwrng.seed_everything(7, "cpu")  # a seed computed by other means: no plan is known
    assert hwrng.current_seeding() is None


def test_manual_seed_large_seed() -> None:
    seed = 2**64 - 1
    assert hwrng.manual_seed(seed, platform="cpu") == seed
    assert os.environ["PYTHONHASHSEED"] == str(seed % 2**32)
    first = (torch.rand(2), random.random(), np.random.rand())
    hwrng.manual_seed(seed - 2**32, platform="cpu")  # same low 32 bits: must still differ
    second = (torch.rand(2), random.random(), np.random.rand())
    assert not torch.equal(first[0], second[0])
    assert first[1] != second[1] and first[2] != second[2]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"seed": -1}, hwrng.InvalidSeedError, ">= 0"),
        ({"seed": 2**64}, hwrng.InvalidSeedError, "2\\*\\*64"),
        ({"sharded_dims": ["tp"]}, hwrng.MeshError, "needs a mesh"),
        ({"mesh": {"tp": 2}}, hwrng.MeshError, "must be a torch DeviceMesh"),
        ({"groups": "nonsense"}, hwrng.MeshError, "list of ProcessGroups"),
        ({"groups": []}, hwrng.MeshError, "initialised"),
        ({"sharded_dims": {"tp"}}, hwrng.MeshError, "ordered sequence"),
        ({"deterministic": "no"}, TypeError, "True or False"),
        ({"platform": "nope"}, hwrng.BackendNotFoundError, "no hwrng backend named 'nope'"),
        ({"platform": "cuda"}, hwrng.BackendUnavailableError, "unavailable"),
    ],
)
def test_manual_seed_refusals_touch_nothing(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    args: dict[str, object] = {"seed": 5, "platform": "cpu"}
    args.update(kwargs)
    seed = args.pop("seed")
    before = _snapshot()
    with pytest.raises(error, match=message):
        hwrng.manual_seed(seed, **args)  # type: ignore[arg-type]
    assert _same(before, _snapshot())


def test_manual_seed_refuses_mesh_and_groups_together() -> None:
    before = _snapshot()
    with pytest.raises(hwrng.MeshError, match="not both"):
        hwrng.manual_seed(1, object(), groups=[], platform="cpu")  # type: ignore[arg-type]
    assert _same(before, _snapshot())


def test_deterministic_switch() -> None:
    was = torch.are_deterministic_algorithms_enabled()
    try:
        hwrng.manual_seed(1, platform="cpu", deterministic=True)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(was)


def test_seed_everything_returns_platform() -> None:
    assert hwrng.seed_everything(7, "cpu").name == "cpu"
    with pytest.raises(hwrng.InvalidSeedError):
        hwrng.seed_everything(-7, "cpu")


@pytest.mark.parametrize("seed", [torch.tensor(True), np.bool_(True), True])
def test_booleans_are_not_seeds(cpu: hwrng.Platform, seed: object) -> None:
    with pytest.raises(hwrng.InvalidSeedError, match="boolean"):
        hwrng.manual_seed(seed, platform=cpu)  # type: ignore[arg-type]
    assert hwrng.rank_seed(torch.tensor(7), {}, {}, []) == 7, "an integer tensor is a seed"  # type: ignore[arg-type]

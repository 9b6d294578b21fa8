"""worker_seeds and WorkerInitFn in one process (the multi-process case is in test_seeding_dist)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hwrng
from hwrng._workers import worker_seeds

ids = st.integers(0, 2**16)


@settings(max_examples=100, deadline=None)
@given(
    a=st.tuples(st.integers(0, 2**64 - 1), ids, ids),
    b=st.tuples(st.integers(0, 2**64 - 1), ids, ids),
)
def test_distinct_inputs_distinct_seeds(a: tuple[int, int, int], b: tuple[int, int, int]) -> None:
    sa, sb = worker_seeds(*a), worker_seeds(*b)
    assert sa == worker_seeds(*a), "pure and reproducible"
    if a != b:
        assert sa.torch_seed != sb.torch_seed and sa.python_seed != sb.python_seed
        assert sa.numpy_words != sb.numpy_words
    assert 0 <= sa.torch_seed < 2**64 and all(0 <= w < 2**32 for w in sa.numpy_words)


@pytest.mark.parametrize("args", [(-1, 0, 0), (0, -1, 0), (0, 0, True), (0, 0.5, 0)])
def test_bad_inputs(args: tuple[object, object, object]) -> None:
    with pytest.raises(ValueError, match="non-negative integer"):
        worker_seeds(*args)  # type: ignore[arg-type]


def test_outside_a_worker() -> None:
    with pytest.raises(RuntimeError, match="inside a DataLoader worker"):
        hwrng.worker_init_fn(0)


def test_picklable_for_spawned_workers() -> None:
    assert pickle.loads(pickle.dumps(hwrng.worker_init_fn)) == hwrng.worker_init_fn
    assert pickle.loads(pickle.dumps(hwrng.WorkerInitFn(rank=3))).rank == 3


def test_rank_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from hwrng._workers import process_rank

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("HWRNG_RANK", raising=False)
    assert process_rank() is None  # a single process: the workers use rank 0
    monkeypatch.setenv("HWRNG_RANK", "5")
    assert process_rank() == 5
    monkeypatch.setenv("RANK", "2")
    assert process_rank() == 2
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(ValueError, match="RANK='two' is not a rank"):
        process_rank()

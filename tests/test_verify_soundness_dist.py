"""verify on real gloo ranks against a brute-force oracle of what every rank then draws.

Ranks are seeded by other means -- sound seedings and the bugs users write:
``seed + pp + tp``, Megatron's ``100 * pp + 100 * ep``, a copied seed, two
ranks swapped, one rank reseeded, the wrong dims -- then call
``hwrng.verify(mesh, sharded_dims=...)``. The oracle sees every rank's next
draws from each stream and judges every pair: ranks of one replica key must
draw alike, ranks of different keys must not. verify's verdict on each stream,
and the ranks it names, must be the oracle's. 8 ranks on dp=2 x pp=2 x tp=2,
and 4 ranks on dp=2 x tp=2.
"""

from __future__ import annotations

from typing import Any

import dist_verify_soundness_checks as checks
import pytest
import verify_oracle as oracle
from helpers import pool_fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwrng.testing import DistributedPool
from hwrng.verify._rule import Observation

pool8 = pool_fixture(8, timeout=120, name="pool8")
pool4 = pool_fixture(4, timeout=120, name="pool4")


@st.composite
def jobs(draw: st.DrawFn, sizes: tuple[int, ...]) -> oracle.Job:
    ndims, world = len(sizes), 1
    for size in sizes:
        world *= size
    sharded = tuple(draw(st.permutations(range(ndims)))[: draw(st.integers(0, ndims))])
    bugs = [b for b in oracle.BUGS if b not in ("out of step", "empty")]
    bug = draw(st.sampled_from([*bugs, *oracle.SEED_WIDTH_BUGS]))
    dims = tuple(sorted(draw(st.sets(st.integers(0, ndims - 1), min_size=1))))
    ranks = tuple(draw(st.lists(st.integers(0, world - 1), min_size=2, max_size=2)))
    return oracle.Job(sizes, sharded, bug, dims, ranks)


def _oracle(job: oracle.Job, draws: list[dict[str, list[float]]], stream: str) -> oracle.Verdict:
    every = []
    for rank, drawn in enumerate(draws):
        key = oracle.word("key", job.expected(rank))
        agree = None if stream.startswith("state:") else key
        every.append([Observation(oracle.word(drawn[stream]), agree, key)])
    return oracle.judge(every)


def _check(pool: DistributedPool, names: tuple[str, ...], job: oracle.Job) -> None:
    results = pool.run(checks.seeded_by_other_means, names, job)
    verdicts = results[0]["verdicts"]
    assert all(r["verdicts"] == verdicts for r in results), "one report everywhere"
    for stream in checks.STREAMS:
        expected = _oracle(job, [r["draws"] for r in results], stream)
        ok, ranks = verdicts[stream]
        assert (ok, set(ranks)) == (expected.ok, set(expected.offenders)), (stream, job)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(job=jobs((2, 2, 2)))
def test_8_ranks_on_dp_pp_tp_judge_as_the_oracle(pool8: DistributedPool, job: oracle.Job) -> None:
    _check(pool8, ("dp", "pp", "tp"), job)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(job=jobs((2, 2)))
def test_4_ranks_on_dp_tp_judge_as_the_oracle(pool4: DistributedPool, job: oracle.Job) -> None:
    _check(pool4, ("dp", "tp"), job)


def test_seed_plus_pp_plus_tp_fails_on_8_ranks(pool8: DistributedPool) -> None:
    """The commonest bug, which verify along mesh lines let through (ranks (0,1), (1,0) collide)."""
    job = oracle.Job((2, 2, 2), (1, 2), "additive", dims=(1, 2))
    results = pool8.run(checks.seeded_by_other_means, ("dp", "pp", "tp"), job)
    ok, ranks = results[0]["verdicts"]["torch.cpu"]
    assert not ok and ranks == [1, 2, 5, 6]


def test_a_named_state_seeded_1000_plus_dp_plus_tp_fails_with_one_sharded_dim(
    pool4: DistributedPool,
) -> None:
    """Sharded along tp only: (dp=0, tp=1) and (dp=1, tp=0) share the state's seed."""
    job = oracle.Job((2, 2), (1,), "additive", dims=(0, 1))
    results = pool4.run(checks.seeded_by_other_means, ("dp", "tp"), job)
    ok, ranks = results[0]["verdicts"]["state:soundness/tp-rng"]
    assert not ok and ranks == [1, 2]


# -- seeds wider than torch's CPU seeding --------------------------------------------------


@pytest.mark.parametrize("bug", oracle.SEED_WIDTH_BUGS)
def test_seeds_that_differ_only_above_bit_32_are_judged_by_what_torch_draws(
    pool4: DistributedPool, bug: str
) -> None:
    """torch keys its Mersenne Twister with the low 32 bits: ``1000 + tp * 2**32`` draws
    alike on every tp rank (torch.cpu fails), ``1000 + tp + dp * 2**32`` gives equal
    replicas (torch.cpu passes; random, keyed by all bits, fails)."""
    job = oracle.Job((2, 2), (1,), bug)
    _check(pool4, ("dp", "tp"), job)
    results = pool4.run(checks.seeded_by_other_means, ("dp", "tp"), job)
    ok, ranks = results[0]["verdicts"]["torch.cpu"]
    assert (ok, ranks) == ((False, [0, 1, 2, 3]) if bug == "high bits" else (True, []))


@pytest.mark.parametrize("case", ["sound", "mis-seeded"])
def test_bits_no_draw_reads_decide_no_verdict(pool4: DistributedPool, case: str) -> None:
    """Low bits of word 0 of torch's Mersenne state never reach a draw: replicas that differ
    only there pass, shards that differ only there fail, as the oracle of their draws says."""
    results = pool4.run(checks.word_zero_marked, case)
    verdict = results[0]["verdict"]
    assert all(r["verdict"] == verdict for r in results), "one report everywhere"
    every = [
        [Observation(oracle.word(r["draws"]), oracle.word(tp), oracle.word(tp))]
        for r, tp in zip(results, (0, 1, 0, 1), strict=True)
    ]
    found = oracle.judge(every)
    assert found.ok == (case == "sound"), "the case is what it says"
    assert (verdict[0], set(verdict[1])) == (found.ok, set(found.offenders))


# -- presets, every option: verify agrees with the oracle of what ranks draw ---------------

#: Along which dims each stream of a preset is meant to differ, as the trainers document it
#: (replicas agree along every other dim; named states are only required to differ).
MEGATRON = {
    "default": ("pp",),
    "data-parallel-rng": ("pp",),
    "model-parallel-rng": ("pp", "tp"),
    "expert-parallel-rng": ("pp", "ep", "etp"),
}


def _expected_dims(preset: str, options: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    if preset == "megatron":
        stage = ("pp", "dp") if options.get("data_parallel_random_init") else ("pp",)
        return {
            "default": stage,
            "device": stage,
            "data-parallel-rng": stage,
            "model-parallel-rng": (*stage, "tp"),
            "expert-parallel-rng": (*stage, "ep", "etp"),
        }
    if preset == "slapo":
        stage = tuple(d for d in ("pp", "dp") if d in names)
        tensor = (*stage, "tp") if "tp" in names else stage
        device = tensor if options.get("always_enable_tp_seed") else stage
        return {"default": stage, "device": device, "model-parallel-rng": tensor}
    if preset == "d9d":
        return {"default": (options["dim"],), "device": (options["dim"],)}
    return {"default": tuple(options["dims"]), "device": tuple(options["dims"])}


def _preset_oracle(
    results: list[dict[str, Any]], expected: dict[str, Any], stream: str
) -> oracle.Verdict:
    if stream.startswith("state:"):
        dims, agree = expected[stream.rpartition("/")[2]], False
    else:  # on the CPU, torch's CPU generator is the one device's generator
        dims, agree = expected["device" if stream == "torch.cpu" else "default"], True
    every = []
    for result in results:
        key = oracle.word(tuple(result["coordinate"].get(d, 0) for d in dims))
        drawn = oracle.word(result["draws"][stream])
        every.append([Observation(drawn, key if agree else None, key)])
    return oracle.judge(every)


PRESET_CASES = [
    ("megatron", ("pp", "tp"), (2, 2), {}),
    ("megatron", ("dp", "tp"), (2, 2), {"data_parallel_random_init": True}),
    ("megatron", ("pp", "ep"), (2, 2), {}),  # Megatron-LM's own expert collision
    ("megatron", ("pp", "ep"), (2, 2), {"collision_free": True, "sizes": {"pp": 2, "ep": 2}}),
    ("megatron", ("ep", "etp"), (2, 2), {}),
    ("slapo", ("pp", "tp"), (2, 2), {}),
    ("slapo", ("pp", "dp"), (2, 2), {}),  # no tp_rank: the tracker is left as it was
    ("slapo", ("pp", "tp"), (2, 2), {"always_enable_tp_seed": True}),  # sequence parallel
    ("slapo", ("dp", "tp"), (2, 2), {"always_enable_tp_seed": True}),
    ("slapo", ("pp", "tp"), (2, 2), {"collision_free": True, "sizes": {"pp": 2, "tp": 2}}),
    ("d9d", ("pp", "tp"), (2, 2), {"dim": "pp"}),
    ("torchtitan", ("pp", "tp"), (2, 2), {"dims": ["tp", "pp"]}),
]


@pytest.mark.parametrize(
    ("preset", "names", "sizes", "options"),
    PRESET_CASES,
    ids=[f"{p}-{'x'.join(n)}-{','.join(o) or 'plain'}" for p, n, _, o in PRESET_CASES],
)
def test_verify_after_each_preset_agrees_with_the_oracle(
    pool4: DistributedPool,
    preset: str,
    names: tuple[str, ...],
    sizes: tuple[int, ...],
    options: dict[str, Any],
) -> None:
    results = pool4.run(checks.preset_seeded, preset, names, sizes, options)
    verdicts = results[0]["verdicts"]
    assert all(r["verdicts"] == verdicts for r in results), "one report everywhere"
    expected = _expected_dims(preset, options, names)
    streams = [s for s in verdicts if s != "dtensor"]
    assert set(streams) == set(results[0]["draws"]), results[0]["text"]
    for stream in streams:
        found = _preset_oracle(results, expected, stream)
        ok, ranks = verdicts[stream]
        assert (ok, set(ranks)) == (found.ok, set(found.offenders)), (stream, results[0]["text"])


# -- the DTensor stream: ranks of one mesh draw the next op alike ---------------------------

DTENSOR_CASES = {
    "sound": True,
    "no op on rank 2": False,  # dp2 x tp2, both sharded: the DTensor stream is the only witness
    "rank 1 re-seeded with the same plan": False,
    "stage sound": True,
    "stage rank 3 ran none": False,
    "megatron within a stage": True,
    "megatron across stages": False,  # the preset's seed differs along pp, inside the mesh
    "slapo across stages": False,
}


@pytest.mark.parametrize("case", list(DTENSOR_CASES))
def test_the_dtensor_stream_is_judged_by_what_each_mesh_draws_next(
    pool4: DistributedPool, case: str
) -> None:
    results = pool4.run(checks.dtensor_job, case)
    verdict = results[0]["verdict"]
    assert all(r["verdict"] == verdict for r in results), "one report everywhere"
    every = [
        [Observation(oracle.word(r["drawn"]), oracle.word("mesh", tuple(r["mesh"])), 0)]
        for r in results
    ]
    found = oracle.judge(every)
    assert found.ok == DTENSOR_CASES[case], "the case is what it says"
    assert (verdict[0], set(verdict[1])) == (found.ok, set(found.offenders)), results[0]["text"]


# -- verify is read-only: a whole run draws the same with verify calls and without ---------


def test_a_whole_run_draws_the_same_with_verify_calls_and_without(
    pool4: DistributedPool, tmp_path: Any
) -> None:
    """Every stream (torch, random, NumPy, a named state, a preset's named states, the DTensor
    stream), after every way of setting a state, each taken where verify looked first: the
    numbers drawn with verify calls are those drawn without, and the sound job passes them."""
    runs = {}
    for verifying in (False, True):
        directory = tmp_path / ("verifying" if verifying else "plain")
        directory.mkdir()
        runs[verifying] = pool4.run(checks.whole_run, verifying, str(directory))
    for rank, (plain, verified) in enumerate(zip(runs[False], runs[True], strict=True)):
        assert [label for label, _ in plain["drawn"]] == [label for label, _ in verified["drawn"]]
        changed = [
            label
            for (label, alone), (_, beside) in zip(plain["drawn"], verified["drawn"], strict=True)
            if alone != beside
        ]
        assert not changed, f"rank {rank}: verify changed what was drawn: {changed}"
    verdicts = [(label, ok) for label, ok, _ in runs[True][0]["verdicts"]]
    assert all([(v[0], v[1]) for v in r["verdicts"]] == verdicts for r in runs[True])
    assert len(verdicts) == 18 and not runs[False][0]["verdicts"]
    failed = [(label, text) for label, ok, text in runs[True][0]["verdicts"] if not ok]
    assert not failed, failed

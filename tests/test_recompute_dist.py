"""DTensor ops under activation checkpointing and torch.compile, on two gloo ranks (one pool).

Each rank compares a checkpointed run with the plain one, bit for bit: every
gradient of every step and the next draw of every stream (DTensor's included)
afterwards; a rank returns what differs. The compiled-code tests at the end
compare compiled code with the same code run eagerly, on the two ranks' mesh
and on a one-rank mesh of each rank (``dist_compile_checks``).
"""

from __future__ import annotations

import dist_compile_checks as compile_checks
import dist_recompute_checks as checks
import pytest
import torch
from helpers import pool_fixture

from hwrng.testing import DistributedPool

pool = pool_fixture(2, timeout=300)

EVERY_STREAM = ["default", "named", "dtensor", "fork_rng", "invariant", "user_region"]


@pytest.mark.parametrize(
    "flavour",
    ["reentrant", "non_reentrant", "wrapper", "wrapper_reentrant", "selective", "composable"],
)
def test_dtensor_dropout_redraws_beside_every_stream(pool: DistributedPool, flavour: str) -> None:
    assert pool.run(checks.oracle, flavour, EVERY_STREAM) == [[], []]


@pytest.mark.parametrize("flavour", ["no_preserve", "wrapper_no_preserve"])
def test_dtensor_dropout_redraws_without_torch_rewinding(
    pool: DistributedPool, flavour: str
) -> None:
    """preserve_rng_state=False (torchtitan's apply_ac passes it): torch rewinds nothing, and
    the DTensor op still redraws its forward's mask from the journal."""
    kinds = [kind for kind in EVERY_STREAM if kind != "default"]
    assert pool.run(checks.oracle, flavour, kinds) == [[], []]


@pytest.mark.parametrize("flavour", ["reentrant", "non_reentrant", "composable"])
def test_dtensor_ops_in_a_backward_draw_as_without_checkpointing(
    pool: DistributedPool, flavour: str
) -> None:
    """A DTensor dropout in a custom Function's backward and in a tensor hook (gradient
    noise), beside one in the forward: the block's backward, which a reentrant checkpoint
    runs inside its own, is no recomputation."""
    kinds = ["dtensor", "function:dtensor", "hook:dtensor"]
    assert pool.run(checks.oracle, flavour, kinds) == [[], []]


@pytest.mark.parametrize("inner", ["nested", "save_on_cpu"])
def test_composable_checkpoint_redraws_dtensor_dropout_under_the_blocks_own_hooks(
    pool: DistributedPool, inner: str
) -> None:
    """The composable checkpoint(module) over a block whose random part pushes saved-tensor
    hooks of its own (a nested checkpoint, save_on_cpu): every stream, DTensor's included."""
    assert pool.run(checks.oracle, "composable", EVERY_STREAM, inner=inner) == [[], []]


@pytest.mark.parametrize("flavour", ["no_preserve", "wrapper_no_preserve"])
def test_dtensor_dropout_redraws_in_a_forward_inside_fork_rng(
    pool: DistributedPool, flavour: str
) -> None:
    """preserve_rng_state=False (torchtitan's apply_ac), each forward inside hwrng.fork_rng():
    at a recomputed op the generator stands where the forward's op found it, though torch
    rewound nothing; the backward must leave it there."""
    kinds = [kind for kind in EVERY_STREAM if kind != "default"]
    assert pool.run(checks.oracle, flavour, kinds, forked=True) == [[], []]


def test_interleaved_microbatches_redraw_dtensor_dropout(pool: DistributedPool) -> None:
    """1F1B order: microbatch k recomputed after the forwards of k+1 and k+2."""
    assert pool.run(checks.oracle, "non_reentrant", EVERY_STREAM, "interleaved") == [[], []]


@pytest.mark.parametrize("kinds", [["dtensor"], ["default", "dtensor"], EVERY_STREAM], ids="+".join)
def test_compiled_checkpoints_redraw_dtensor_dropout(
    pool: DistributedPool, kinds: list[str]
) -> None:
    """torch.compile (aot_eager): a block of DTensor ops alone, or beside plain draws, is
    traced whole (compiled code saves the mask); beside a named state, fork_rng or an
    invariant op the block breaks the graph and its checkpoint runs eagerly."""
    assert pool.run(checks.oracle, "compiled", kinds) == [[], []]


@pytest.mark.parametrize("flavour", ["reentrant", "non_reentrant"])
def test_dtensor_dropout_alone_keeps_its_positions(pool: DistributedPool, flavour: str) -> None:
    """The CPU counter must not take a recomputation's positions for progress.

    A recomputation repeats its forward's positions in reverse block order; were
    they remembered as the latest, the next step's first op would start where
    the last block's op of this step did, and repeat its numbers.
    """
    assert pool.run(checks.oracle, flavour, ["default", "dtensor"]) == [[], []]


# -- compiled code against eager code (dist_compile_checks) ---------------------------------

_DREW_NOTHING = "refused: a compiled DTensor random op drew nothing"


@pytest.mark.parametrize("mesh_kind", ["two_ranks", "one_rank"])
def test_compiled_dtensor_ops_draw_what_eager_code_draws(
    pool: DistributedPool, mesh_kind: str
) -> None:
    """Plain and DTensor draws interleaved, a checkpointed DTensor dropout, backward: eager
    and aot_eager give eager code's tensors and positions, bit for bit. Inductor running
    torch's random ops (``fallback_random``) does too on torch 2.13; where it schedules a
    DTensor op's draw outside hwrng's region (torch 2.10) the region refuses at run time."""
    backends = ["eager", "aot_eager", "inductor_fallback_random"]
    for found in pool.run(compile_checks.compiled_matches_eager, mesh_kind, backends):
        assert found["eager"] == [] and found["aot_eager"] == []
        fallback = found["inductor_fallback_random"]
        assert fallback == [] or str(fallback).startswith(_DREW_NOTHING), fallback
        if torch.__version__.startswith("2.13."):
            assert fallback == []


def test_inductor_drawing_its_own_numbers_is_refused(pool: DistributedPool) -> None:
    """Inductor's own random numbers would draw at none of hwrng's offsets: refused while
    compiling, naming the fix, nothing drawn."""
    for report in pool.run(compile_checks.inductor_is_refused, "two_ranks"):
        assert "DTensorHookError" in report["message"]
        assert "fallback_random = True" in report["message"]
        assert "aot_eager" in report["message"]
        assert report["generator_untouched"]


def test_torch_alone_differs_only_under_inductor(pool: DistributedPool) -> None:
    """The same program without hwrng, on the same torch: aot_eager draws what eager code
    draws; inductor draws its own numbers (the first plain draw already differs)."""
    for found in pool.run(compile_checks.torch_alone, ["aot_eager", "inductor"]):
        assert found["aot_eager"] == []
        assert 0 in found["inductor"]


def test_plain_draws_in_a_compiled_checkpoint_differ_only_where_torchs_do(
    pool: DistributedPool,
) -> None:
    """backend="eager" runs a compiled checkpoint with preserve_rng_state=False (torch 2.13):
    the block's plain dropout redraws other numbers, with or without hwrng; hwrng adds no
    difference of its own. aot_eager saves the masks: equal."""
    for found in pool.run(
        compile_checks.plain_draws_in_a_compiled_checkpoint, ["eager", "aot_eager"]
    ):
        assert found["hwrng"]["aot_eager"] == [] and found["torch"]["aot_eager"] == []
        assert set(found["hwrng"]["eager"]) <= set(found["torch"]["eager"])


def test_invariant_mode_refuses_compiled_code(pool: DistributedPool) -> None:
    """install(invariant=True): a compiled DTensor random op is refused while tracing."""
    for message in pool.run(compile_checks.invariant_mode_is_refused):
        assert "hwrng's invariant mode does not run under torch.compile" in message

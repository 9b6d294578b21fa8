"""The recomputation oracle with DTensor ops, on two gloo ranks (one pool for the module).

Each rank compares a checkpointed run with the plain one, bit for bit: every
gradient of every step and the next draw of every stream (DTensor's included)
afterwards; a rank returns what differs.
"""

from __future__ import annotations

import dist_recompute_checks as checks
import pytest
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


def test_interleaved_microbatches_redraw_dtensor_dropout(pool: DistributedPool) -> None:
    """1F1B order: microbatch k recomputed after the forwards of k+1 and k+2."""
    assert pool.run(checks.oracle, "non_reentrant", EVERY_STREAM, "interleaved") == [[], []]


@pytest.mark.parametrize("kinds", [["dtensor"], ["named", "dtensor", "fork_rng"]], ids="+".join)
def test_compiled_checkpoints_redraw_dtensor_dropout(
    pool: DistributedPool, kinds: list[str]
) -> None:
    """torch.compile: a block of DTensor ops alone is traced whole (compiled code saves the
    mask); beside a named state and fork_rng the checkpoint runs eagerly around compiled parts.

    No plain draw sits beside the DTensor op here: compiled code reorders a plain
    random op and a DTensor op's region (they share no data), so the two draw
    otherwise than in eager code with or without checkpointing (on main as here).
    """
    assert pool.run(checks.oracle, "compiled", kinds) == [[], []]


@pytest.mark.parametrize("flavour", ["reentrant", "non_reentrant"])
def test_dtensor_dropout_alone_keeps_its_positions(pool: DistributedPool, flavour: str) -> None:
    """The CPU counter must not take a recomputation's positions for progress.

    A recomputation repeats its forward's positions in reverse block order; were
    they remembered as the latest, the next step's first op would start where
    the last block's op of this step did, and repeat its numbers.
    """
    assert pool.run(checks.oracle, flavour, ["default", "dtensor"]) == [[], []]

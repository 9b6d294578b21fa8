"""Checkpoints record the invariant ops' contract, and refuse a resume under another one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch
from torch.distributed.tensor import Shard

import hwrng
from hwrng import invariant
from hwrng.checkpoint._capture import document_digest


def _resigned(document: dict[str, Any], contract: object) -> dict[str, Any]:
    """``document`` as if written by a job under ``contract``, its digest made to match."""
    changed = {**document, "written_by": {**document["written_by"], "invariant": contract}}
    changed["digest"] = document_digest(changed)
    return changed


def test_a_checkpoint_records_the_contract_its_invariant_values_follow(
    cpu: hwrng.Platform,
) -> None:
    hwrng.manual_seed(3, platform=cpu)
    spec = hwrng.ShardSpec((4, 4), (2,), (Shard(0),), (0,))
    invariant.uniform_(torch.empty(2, 4), spec)
    assert hwrng.state_dict(cpu)["written_by"]["invariant"] == invariant.CONTRACT


def test_another_contract_is_refused_before_anything_changes(cpu: hwrng.Platform) -> None:
    hwrng.manual_seed(3, platform=cpu)
    document = hwrng.state_dict(cpu)
    older = _resigned(document, "hwrng-philox4x32-10-v1")
    hwrng.manual_seed(99, platform=cpu)
    before = torch.get_rng_state()
    with pytest.raises(hwrng.CheckpointError, match="under contract 'hwrng-philox4x32-10-v1'"):
        hwrng.load_state_dict(older, platform=cpu)
    with pytest.raises(hwrng.CheckpointError, match="contract"):
        hwrng.load_state_dict(older, platform=cpu, on_mismatch="reseed")
    assert torch.equal(torch.get_rng_state(), before), "a refused state changed the generator"
    # the same contract, or none recorded (no invariant values drawn, or an older hwrng), restores
    hwrng.load_state_dict(_resigned(document, invariant.CONTRACT), platform=cpu)
    hwrng.load_state_dict(_resigned(document, None), platform=cpu)
    assert torch.equal(torch.get_rng_state(), document["torch_cpu"])


_FRESH = textwrap.dedent(
    """
    import sys, torch, hwrng
    from hwrng import invariant
    from torch.distributed.tensor import Shard
    hwrng.manual_seed(5, platform="cpu")
    print(hwrng.state_dict("cpu")["written_by"].get("invariant"))
    if sys.argv[1] == "draw":
        spec = hwrng.ShardSpec((8,), (2,), (Shard(0),), (1,))
        invariant.normal_(torch.empty(4), spec)
    print(hwrng.state_dict("cpu")["written_by"].get("invariant"))
    """
)


@pytest.mark.parametrize("draw", [True, False], ids=["draws", "never-draws"])
def test_a_job_that_drew_no_invariant_value_records_none(draw: bool) -> None:
    """In a fresh process: nothing recorded until an invariant op draws."""
    result = subprocess.run(
        [sys.executable, "-c", _FRESH, "draw" if draw else "no"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
        check=True,
    )
    first, second = result.stdout.split()
    assert first == "None"
    assert second == (invariant.CONTRACT if draw else "None")

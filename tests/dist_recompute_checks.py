"""What each rank runs in test_recompute_dist.py: the recomputation oracle with DTensor ops.

Two ranks, one mesh dim (tensor parallel): each block's activations are this
rank's shard of a row-sharded tensor, and the block draws from every stream --
the default generator, the rank's own named state (a different seed on each
rank, as Megatron seeds its tensor-parallel stream), a DTensor dropout on the
sharded tensor, ``fork_rng``, an invariant op on the rank's shard and a
region on a user's generator (importable by the spawned ranks).
"""

from __future__ import annotations

import functools
from typing import Any

import recompute_harness as harness
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

import hwrng

SEED = 31


def _run(flavour: str, kinds: tuple[str, ...], schedule: str, **options: Any) -> Any:
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    spec = hwrng.ShardSpec((2 * harness.ROWS, harness.WIDTH), (2,), (Shard(0),), (rank,))
    tracker = hwrng.RNGStatesTracker("cpu")
    tracker.add("model-parallel-rng", SEED + 2718 + rank)

    def dtensor_dropout(local: torch.Tensor) -> torch.Tensor:
        sharded = DTensor.from_local(local, mesh, [Shard(0)], run_check=False)
        return torch.nn.functional.dropout(sharded, 0.5).to_local()

    def next_dtensor() -> torch.Tensor:
        return distribute_tensor(torch.empty(8, 8), mesh, [Shard(0)]).uniform_().to_local()

    run = harness.train if schedule == "steps" else harness.interleaved
    return run(
        flavour,
        kinds,
        seed=SEED,
        tracker=tracker,
        spec=spec,
        dtensor=dtensor_dropout,
        next_dtensor=next_dtensor,
        **options,
    )


def oracle(
    flavour: str,
    kinds: list[str],
    schedule: str = "steps",
    inner: str | None = None,
    forked: bool = False,
) -> list[str]:
    """This rank's differences between ``flavour`` and the plain run (empty: none).

    ``inner`` wraps each block's random part in saved-tensor hooks of its own
    (``recompute_harness.Block``), in the checkpointed run; ``forked`` runs each
    step's forward inside ``hwrng.fork_rng()``, in both runs.
    """
    options: dict[str, Any] = {}
    if forked:
        options["forward_context"] = functools.partial(hwrng.fork_rng, platform="cpu")
    checkpointed = options if inner is None else {**options, "inner": inner}
    hwrng.dtensor.install("cpu")
    try:
        expected = _run("plain", tuple(kinds), schedule, **options)
        got = _run(flavour, tuple(kinds), schedule, **checkpointed)
    finally:
        hwrng.dtensor.uninstall()
    return harness.mismatches(expected, got)

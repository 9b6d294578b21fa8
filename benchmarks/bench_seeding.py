"""Seeding and verifying eight real gloo ranks (dp2 x pp2 x tp2, seeds sharded along pp and tp).

Baselines measured in the same run, on the same ranks: ``torch.manual_seed``
(what a job does without hwrng) for seeding, and, for verifying, a bare
``all_gather`` of 64 bytes per rank over the world -- the one collective
:func:`hwrng.verify` made before it compared ranks along the mesh's dims (now
four small reductions and one gather of the tp ranks on this mesh).
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.distributed as dist
from _timing import Result, measure
from torch.distributed.device_mesh import init_device_mesh

import hwrng
from hwrng.testing import DistributedPool

NPROC = 8
MESH = (("dp", 2), ("pp", 2), ("tp", 2))


def on_rank(quick: bool) -> list[Result]:
    """Time seeding and verifying on this rank; every rank runs the same calls in the same order."""
    mesh = init_device_mesh(
        "cpu", tuple(size for _, size in MESH), mesh_dim_names=tuple(name for name, _ in MESH)
    )
    inner = 10 if quick else 50
    payload = torch.zeros(64, dtype=torch.uint8)
    gathered = [torch.empty_like(payload) for _ in range(dist.get_world_size())]

    def seed() -> None:
        hwrng.manual_seed(1234, mesh, sharded_dims=("pp", "tp"))

    def check() -> None:
        if not hwrng.verify().ok:
            raise AssertionError("verify failed right after manual_seed")

    results: list[Result] = []
    if dist.get_rank() == 0:  # seeding needs no collective: time it alone, the others idle
        results = measure(
            f"seeding rank 0 of {NPROC} gloo ranks (the others idle)",
            {
                "torch.manual_seed": lambda: torch.manual_seed(1234),
                "hwrng.seed_everything": lambda: hwrng.seed_everything(1234),
                "hwrng.manual_seed (mesh, sharded pp, tp)": seed,
            },
            baseline="torch.manual_seed",
            inner=inner,
            samples=7 if quick else 15,
        )
    dist.barrier()
    seed()
    results += measure(
        f"verifying {NPROC} gloo ranks (a collective)",
        {
            "all_gather of 64 bytes": lambda: dist.all_gather(gathered, payload),
            "hwrng.verify()": check,
        },
        baseline="all_gather of 64 bytes",
        inner=inner,
        samples=7 if quick else 15,
    )
    return results


def run(platform: hwrng.Platform, quick: bool) -> list[Result]:
    """Run on eight ranks; seeding as rank 0 timed it, verifying as the slowest rank did."""
    del platform  # gloo ranks on the host
    with DistributedPool(NPROC) as pool:
        by_rank: list[list[Result]] = pool.run(on_rank, quick)
    seeding = [r for r in by_rank[0] if r.group.startswith("seeding")]
    verifying = [[r for r in results if r.group.startswith("verifying")] for results in by_rank]
    slowest = [
        max(column, key=lambda result: result.median_us) for column in zip(*verifying, strict=True)
    ]
    base = {r.group: r.median_us for r in slowest if r.baseline is None}
    return seeding + [
        r if r.baseline is None else replace(r, ratio=r.median_us / base[r.group]) for r in slowest
    ]

"""seed_plan for 1,048,576 ranks, against a Python loop over the same formula."""

from __future__ import annotations

import math

from _timing import Result, measure

import hwrng

MESH = {"dp": 64, "pp": 16, "tp": 8, "cp": 128}
SHARDED = ["pp", "tp", "cp"]


def python_loop(seed: int) -> list[int]:
    """The baseline: a rank's index among the sharded dims, one rank at a time, in plain Python."""
    names = list(MESH)
    seeds = []
    for rank in range(math.prod(MESH.values())):
        coordinate, rest = {}, rank
        for name in reversed(names):
            coordinate[name] = rest % MESH[name]
            rest //= MESH[name]
        index = 0
        for name in SHARDED:
            index = index * MESH[name] + coordinate[name]
        seeds.append((seed + index) % 2**64)
    return seeds


def run(platform: hwrng.Platform, quick: bool) -> list[Result]:
    """Time ``seed_plan`` and the loop; check first that both give the same seeds."""
    del platform  # host-only
    if python_loop(123) != hwrng.seed_plan(123, MESH, SHARDED).tolist():
        raise AssertionError("seed_plan and the Python loop disagree")
    world = math.prod(MESH.values())
    return measure(
        f"seed plan for {world:,} ranks {MESH}, sharded {SHARDED}",
        {
            "Python loop": lambda: python_loop(123),
            "hwrng.seed_plan": lambda: hwrng.seed_plan(123, MESH, SHARDED),
        },
        baseline="Python loop",
        inner=1,
        samples=3 if quick else 7,
    )

"""seed_plan for 1,048,576 ranks, against a Python loop over the same formula.

Run: python benchmarks/bench_seed_plan.py
"""

from __future__ import annotations

import math
import time

from _timing import machine, median_ns

import hwrng

MESH = {"dp": 64, "pp": 16, "tp": 8, "cp": 128}
SHARDED = ["pp", "tp", "cp"]


def python_loop(seed: int) -> list[int]:
    """The baseline: the RFC's formula, one rank at a time, in plain Python."""
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


def main() -> None:
    world = math.prod(MESH.values())
    print(f"seed_plan over {world:,} ranks, mesh {MESH}, sharded {SHARDED}")
    print(machine())
    plan_ns = median_ns(lambda: hwrng.seed_plan(123, MESH, SHARDED), inner=1, samples=15)
    start = time.perf_counter_ns()
    baseline = python_loop(123)
    loop_ns = time.perf_counter_ns() - start
    assert baseline == hwrng.seed_plan(123, MESH, SHARDED).tolist(), "both must agree"
    print(f"hwrng.seed_plan (median of 15): {plan_ns / 1e6:9.1f} ms")
    print(f"Python loop (1 run):            {loop_ns / 1e6:9.1f} ms")
    print(f"speed-up: {loop_ns / plan_ns:.0f}x")


if __name__ == "__main__":
    main()

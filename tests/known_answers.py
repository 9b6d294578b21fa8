"""The contract's known answers (``invariant_kat.json`` of hwrng-conformance), drawn by hwrng.

Shared by the CPU tests, the Triton interpreter's check, the CUDA test and
``benchmarks/cuda_kernel_check.py``: one reading of the file and one way to draw a case.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch
from hwrng_conformance import invariant_reference as reference

from hwrng import _philox as philox

KNOWN: dict[str, Any] = json.loads(reference.KAT_PATH.read_text(encoding="utf-8"))
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bool": torch.bool,
}
_BITS = {torch.float32: torch.int32, torch.float64: torch.int64}


def bits_of(values: torch.Tensor) -> list[int]:
    """The bit pattern of each value, as non-negative ints (bool: 0 or 1), on any device."""
    if values.dtype == torch.bool:
        return values.to(torch.int64).reshape(-1).tolist()
    width = values.element_size() * 8
    as_int = values.view(_BITS.get(values.dtype, torch.int16)).to(torch.int64)
    return [b & ((1 << width) - 1) for b in as_int.reshape(-1).tolist()]


def draw_case(case: dict[str, Any], index: philox.Indices) -> torch.Tensor:
    """Case ``case`` of the known answers, drawn by hwrng at ``index``."""
    seed, position, op = case["seed"], case["position"], case["op"]
    if op == "bernoulli":
        return philox.bernoulli_mask(seed, position, index, case["p"])
    parameters = {k: case[k] for k in ("low", "high", "mean", "std", "a", "b") if k in case}
    fill: Callable[..., torch.Tensor] = getattr(philox, op)
    return fill(seed, position, index, DTYPES[case["dtype"]], **parameters)


def mismatches(device: str) -> list[str]:
    """Every known answer drawn on ``device`` by both paths; the runs that differ, by name.

    A described shard (:class:`hwrng._philox.ShardIndices`) takes the fused Triton kernel
    where it serves ``device``; a flat index takes the generic path's torch ops. Each case
    is drawn as a whole ``(12, 8)`` tensor and as rows of a ``(2**58, 8)`` tensor far out.
    """
    wrong = []
    for number, case in enumerate(KNOWN["cases"]):
        (_, values), *far = case["runs"]
        label = f"case {number} {case['op']} {case['dtype']}"
        whole = [torch.arange(12, device=device), torch.arange(8, device=device)]
        shards = [((whole, (12, 8)), values, "")]
        for start, row in far:
            dims = [torch.tensor([start // 8], device=device), torch.arange(8, device=device)]
            shards.append(((dims, (2**58, 8)), row, f", row {start // 8}"))
        for (dims, shape), expected, where in shards:
            for path, index in (
                ("described shard", philox.ShardIndices(tuple(dims), shape)),
                ("flat index", philox.flat_index(dims, shape)),
            ):
                if bits_of(draw_case(case, index)) != [int(v, 16) for v in expected]:
                    wrong.append(f"{label} ({path}{where})")
    return wrong

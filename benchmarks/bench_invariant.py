"""Placement-invariant ops (:mod:`hwrng.invariant`) against torch's native ones, one shard.

The invariant ops compute Philox4x32-10 of every element's global index, then
the contract's float32 arithmetic: on the CPU in kernels numba compiles (where
numba is installed: ``hwrng[fast]``) or in torch tensor ops, on CUDA with
Triton in one fused kernel; torch's native ops run one kernel. Baseline: the
native op on a tensor of the same size. On the CPU each op of a shard is also
timed on the tensor ops (``HWRNG_INVARIANT_CPU=tensor``), in the same run.
(On the CPU torch's ``uniform_``, ``normal_`` and dropout draw from the
Mersenne Twister one number after another, on one core whatever
``torch.get_num_threads()`` says; hwrng's CPU paths run on one thread too.)
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from _timing import Result, measure
from torch.distributed.tensor import Replicate, Shard

import hwrng
import hwrng.invariant


def _cases(x: torch.Tensor, spec: hwrng.ShardSpec) -> dict[str, dict[str, Callable[[], object]]]:
    """Per op: torch's native op, then hwrng's invariant one on the shard ``spec`` of ``x``."""
    replicated = hwrng.ShardSpec(tuple(x.shape), (2,), (Replicate(),), (1,))
    return {
        "uniform_": {
            "torch uniform_": x.uniform_,
            "hwrng.invariant.uniform_, a shard": lambda: hwrng.invariant.uniform_(x, spec),
            "hwrng.invariant.uniform_, replicated": lambda: hwrng.invariant.uniform_(x, replicated),
        },
        "normal_": {
            "torch normal_": x.normal_,
            "hwrng.invariant.normal_, a shard": lambda: hwrng.invariant.normal_(x, spec),
        },
        "dropout(p=0.1)": {
            "torch dropout(p=0.1)": lambda: torch.nn.functional.dropout(x, 0.1),
            "hwrng.invariant.dropout(p=0.1), a shard": lambda: hwrng.invariant.dropout(
                x, spec, 0.1
            ),
        },
        "trunc_normal_": {
            "torch nn.init.trunc_normal_": lambda: torch.nn.init.trunc_normal_(x),
            "hwrng.invariant.trunc_normal_, a shard": lambda: hwrng.invariant.trunc_normal_(
                x, spec
            ),
        },
    }


_SETTING = "HWRNG_INVARIANT_CPU"
_GIVEN = os.environ.get(_SETTING)  # the path as the environment chose it


def _path(value: str | None) -> Callable[[], None]:
    """Set hwrng's CPU path for the next sample (None: as the environment chose it)."""

    def switch() -> None:
        chosen = _GIVEN if value is None else value
        if chosen is None:
            os.environ.pop(_SETTING, None)
        else:
            os.environ[_SETTING] = chosen

    return switch


def run(platform: hwrng.Platform, quick: bool) -> list[Result]:
    """Time uniform, normal and dropout at 2**16 and 2**24 elements, one of two shards."""
    device = platform.device()
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    results: list[Result] = []
    for log2 in (16, 24):
        rows = 2 ** (log2 - 10)
        x = torch.empty(rows, 1024, device=device)
        spec = hwrng.ShardSpec((2 * rows, 1024), (2,), (Shard(0),), (1,))
        slow = log2 == 24 and device.type == "cpu"
        for op, cases in _cases(x, spec).items():
            before: dict[str, Callable[[], None]] = {name: _path(None) for name in cases}
            if device.type == "cpu":  # the same shard on the tensor ops, beside
                shard = next(name for name in cases if name.endswith(", a shard"))
                cases[f"{shard}, tensor ops"] = cases[shard]
                before[f"{shard}, tensor ops"] = _path("tensor")
            results += measure(
                f"{op} on 2**{log2} float32 ({device.type})",
                cases,
                baseline=next(iter(cases)),
                inner=(2 if quick else 5) if slow else (10 if quick else 50),
                samples=5 if quick else 11,
                sync=sync,
                before=before,
            )
            _path(None)()
    return results

"""The bandwidth step: how fast hwrng.invariant fills memory, against torch and the card's peak.

``2**log2`` float32 values (2**26 by default: 256 MiB), one whole tensor on a
1-rank mesh, in the same run: ``hwrng.invariant.uniform_`` against
``torch.rand(out=)``, ``normal_`` against ``torch.randn(out=)``, ``dropout``
(p=0.1) against ``torch.nn.functional.dropout``, and a device-to-device copy.
Each time is the median of interleaved launches, timed by CUDA events on a GPU
(``time.perf_counter`` on the CPU). Bandwidth counts the bytes an op must move
(a fill writes 4 bytes a value; dropout and the copy read 4 and write 4), over
10**9 bytes a GB. The card's peak is NVIDIA's datasheet figure for its name
(:data:`PEAK_GBS`), else the measured copy (said so), else unknown.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch.distributed.tensor import Shard

import hwrng
import hwrng.invariant
from acceptance._figures import run_probe

#: Peak memory bandwidth, GB/s, from NVIDIA's datasheets, by ``torch.cuda.get_device_name()``.
PEAK_GBS: dict[str, float] = {
    "NVIDIA B200": 8000,
    "NVIDIA H200": 4800,
    "NVIDIA H200 NVL": 4800,
    "NVIDIA H100 80GB HBM3": 3350,  # SXM5
    "NVIDIA H100 NVL": 3900,
    "NVIDIA H100 PCIe": 2000,
    "NVIDIA A100-SXM4-80GB": 2039,
    "NVIDIA A100-SXM4-40GB": 1555,
    "NVIDIA A100 80GB PCIe": 1935,
    "NVIDIA A100-PCIE-40GB": 1555,
    "NVIDIA L40S": 864,
    "NVIDIA A10": 600,
    "NVIDIA L4": 300,
    "Tesla V100-SXM2-16GB": 900,
    "Tesla V100-SXM2-32GB": 900,
    "Tesla T4": 320,
}
#: The ops compared: (name, torch's op, bytes moved per value)
OPS = (("uniform", "torch.rand", 4), ("normal", "torch.randn", 4), ("dropout", "F.dropout", 8))
DROPOUT_P = 0.1


def reference_bandwidth(device_name: str, copy_gbs: float | None) -> tuple[float | None, str]:
    """The bandwidth a percentage is of, and where it comes from."""
    if device_name in PEAK_GBS:
        return PEAK_GBS[device_name], f"NVIDIA's datasheet peak for {device_name}"
    if copy_gbs:
        return copy_gbs, "the measured copy (the card is not in the table of peaks)"
    return None, "unknown"


def timed(cases: dict[str, Callable[[], object]], device: str, repeats: int) -> dict[str, float]:
    """The median time of each case in milliseconds, launches interleaved case by case."""
    cuda = device == "cuda"
    for launch in cases.values():  # warm up: the first call compiles the kernels
        launch()
    if cuda:
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, launch in cases.items():
            if cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                launch()
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end))
            else:
                began = time.perf_counter()
                launch()
                times[name].append((time.perf_counter() - began) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def _cases(device: str, log2: int) -> dict[str, Callable[[], object]]:
    shape = (2 ** (log2 - 10), 1024)
    spec = hwrng.ShardSpec(shape, (1,), (Shard(0),), (0,))
    out = torch.empty(shape, device=device)
    x = torch.ones(shape, device=device)
    copy = torch.empty(shape, device=device)
    return {
        "hwrng uniform": lambda: hwrng.invariant.uniform_(out, spec, platform=device),
        "torch uniform": lambda: torch.rand(shape, out=out),
        "hwrng normal": lambda: hwrng.invariant.normal_(out, spec, platform=device),
        "torch normal": lambda: torch.randn(shape, out=out),
        "hwrng dropout": lambda: hwrng.invariant.dropout(x, spec, DROPOUT_P, platform=device),
        "torch dropout": lambda: torch.nn.functional.dropout(x, DROPOUT_P),
        "copy": lambda: copy.copy_(x),
    }


def _kernel_path(device: str) -> str:
    from hwrng._philox import _triton as fused

    why = fused.why_unavailable(device)
    return "the fused Triton kernel" if why is None else f"the generic path ({why})"


def _percent(gbs: float, reference: float | None) -> float | None:
    return None if reference is None else round(100 * gbs / reference, 1)


def main() -> tuple[str, str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--log2", type=int, default=26, help="2**LOG2 float32 values (>= 10)")
    parser.add_argument("--repeats", type=int, default=None, help="default: 20 on CUDA, 5 on CPU")
    args = parser.parse_args()
    if args.log2 < 10:
        parser.error("--log2 must be at least 10")
    repeats = args.repeats or (20 if args.device == "cuda" else 5)
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    medians = timed(_cases(args.device, args.log2), args.device, repeats)
    values = 2**args.log2
    copy_gbs = 8 * values / medians["copy"] / 1e6
    reference, source = reference_bandwidth(device_name, copy_gbs)
    ops: dict[str, dict[str, Any]] = {}
    for op, torch_op, per_value in OPS:
        mine, theirs = medians[f"hwrng {op}"], medians[f"torch {op}"]
        mine_gbs, theirs_gbs = per_value * values / mine / 1e6, per_value * values / theirs / 1e6
        ops[op] = {
            "torch op": torch_op,
            "hwrng ms": round(mine, 4),
            "torch ms": round(theirs, 4),
            "ratio": round(mine / theirs, 3),
            "hwrng GB/s": round(mine_gbs, 3),
            "torch GB/s": round(theirs_gbs, 3),
            "hwrng % of peak": _percent(mine_gbs, reference),
            "torch % of peak": _percent(theirs_gbs, reference),
            "hwrng % of copy": _percent(mine_gbs, copy_gbs),
        }
        print(
            f"{op:8} hwrng {mine:9.3f} ms {mine_gbs:9.2f} GB/s   {torch_op:11} {theirs:9.3f} ms "
            f"{theirs_gbs:9.2f} GB/s   {mine / theirs:6.2f}x"
        )
    print(
        f"copy {medians['copy']:.3f} ms, {copy_gbs:.2f} GB/s; peak: {reference:.2f} GB/s, {source}"
    )
    figures = {
        "device": device_name,
        "values": values,
        "log2": args.log2,
        "timer": "CUDA events" if args.device == "cuda" else "time.perf_counter",
        "repeats": repeats,
        "path": _kernel_path(args.device),
        "copy GB/s": round(copy_gbs, 3),
        "peak GB/s": None if reference is None else round(reference, 3),
        "peak source": source,
        "ops": ops,
    }
    said = ", ".join(f"{op} {o['ratio']:.2f}x torch" for op, o in ops.items())
    return "passed", f"2**{args.log2} float32 on {device_name}: {said}", figures


if __name__ == "__main__":
    raise SystemExit(run_probe(main))

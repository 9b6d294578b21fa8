"""Timing helpers shared by the benchmarks: medians of repeated samples, and the machine."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch

import hwrng


def median_ns(
    body: Callable[[], object], *, inner: int, samples: int = 15, warmup: int = 2
) -> float:
    """Median over ``samples`` of the mean time of ``inner`` calls, in nanoseconds per call."""
    for _ in range(warmup):
        for _ in range(inner):
            body()
    results = []
    for _ in range(samples):
        start = time.perf_counter_ns()
        for _ in range(inner):
            body()
        results.append((time.perf_counter_ns() - start) / inner)
    return statistics.median(results)


def machine() -> str:
    """One line naming the machine, torch, hwrng and the date."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            cpu = next(
                line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    today = datetime.date.today().isoformat()
    return (
        f"{cpu} ({os.cpu_count()} cores){gpu}; torch {torch.__version__}, "
        f"hwrng {hwrng.__version__}, python {platform.python_version()}; {today}"
    )

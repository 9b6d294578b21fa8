"""Timing helpers shared by the benchmarks: medians and spreads of repeated samples, the machine."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import hwrng


@dataclass(frozen=True)
class Result:
    """One measured case: the median time per call and its spread, and its baseline's name."""

    group: str
    name: str
    median_us: float
    spread_us: float  # interquartile range of the samples
    samples: int
    baseline: str | None = None
    ratio: float | None = None
    note: str = ""

    def as_dict(self) -> dict[str, object]:
        """Plain values for the JSON file."""
        return asdict(self)


def mean_us(body: Callable[[], object], *, inner: int, sync: Callable[[], object] | None) -> float:
    """The mean time (us) of ``inner`` calls, synchronising the device at the end if asked."""
    start = time.perf_counter_ns()
    for _ in range(inner):
        body()
    if sync is not None:
        sync()
    return (time.perf_counter_ns() - start) / inner / 1000


def measure(
    group: str,
    cases: dict[str, Callable[[], object]],
    *,
    baseline: str,
    inner: int,
    samples: int = 15,
    sync: Callable[[], object] | None = None,
    notes: dict[str, str] | None = None,
    before: dict[str, Callable[[], object]] | None = None,
) -> list[Result]:
    """Time every case, interleaved sample by sample so drift hits all alike; ratio to ``baseline``.

    ``before[name]``, if given, runs untimed before each sample of that case
    (to switch a global setting the case needs).
    """
    prepare = before or {}
    for name, body in cases.items():  # warm every case first
        prepare.get(name, _nothing)()
        mean_us(body, inner=inner, sync=sync)
    timings: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(samples):
        for name, body in cases.items():
            prepare.get(name, _nothing)()
            timings[name].append(mean_us(body, inner=inner, sync=sync))
    base = statistics.median(timings[baseline])
    out = []
    for name, values in timings.items():
        quartiles = statistics.quantiles(values, n=4)
        median = statistics.median(values)
        out.append(
            Result(
                group=group,
                name=name,
                median_us=median,
                spread_us=quartiles[2] - quartiles[0],
                samples=samples,
                baseline=None if name == baseline else baseline,
                ratio=None if name == baseline else median / base,
                note=(notes or {}).get(name, ""),
            )
        )
    return out


def _nothing() -> None:
    return None


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one intra-op thread inside; the caller's count is restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def one_rank_group(backend: str = "gloo") -> Iterator[None]:
    """A ``torch.distributed`` group of this process alone, for one-device meshes."""
    import torch.distributed as dist

    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group(backend, init_method=f"file://{tmp}/rdv", rank=0, world_size=1)
        try:
            yield
        finally:
            dist.destroy_process_group()


def machine() -> dict[str, str]:
    """The machine, device, torch, hwrng, python and date, for the results' header."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            cpu = next(
                line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    return {
        "cpu": f"{cpu} ({os.cpu_count()} cores)",
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
        "torch": torch.__version__,
        "hwrng": hwrng.__version__,
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }


def command_line(script: str, argv: list[str] | None) -> str:
    """How ``benchmarks/<script>`` was run (``argv``, else this process's), for the header."""
    arguments = argv if argv is not None else sys.argv[1:]
    return " ".join(["python3", f"benchmarks/{script}", *arguments])


def write_results(out: Path, stem: str, markdown: str, document: dict[str, object]) -> None:
    """Write ``<stem>.md`` and ``<stem>.json`` under ``out`` (made if missing), and say so."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(markdown, encoding="utf-8")
    (out / f"{stem}.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out / stem}.md and .json")

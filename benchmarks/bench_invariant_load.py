"""The invariant ops' CPU paths against torch's ops, alone and with N processes drawing at once.

``hwrng check`` and every multi-rank CPU test run several ranks on a few
cores; a path whose ops are parallel regions can collapse there (threads wait
at barriers for descheduled threads), while alone it looks fine. So each
setting runs ``--procs`` processes at once (1: alone), all started together,
each timing torch's op and hwrng's on one shard of ``2**--log2`` float32
values, interleaved sample by sample; the ratio is per process (hwrng's
median over torch's, the same process, the same minutes), and the table gives
the median of the processes' ratios and their range.

hwrng's ops are timed on each of its CPU paths (``--paths``, in the same
processes, switched by ``HWRNG_INVARIANT_CPU`` between calls): ``compiled``,
the kernels numba compiles (``hwrng._philox._compiled``), and ``tensor``, the
generic path of torch tensor ops. ``--compile-cost`` also measures what the
compiled path's first call costs in a fresh process: numba's compilation with
an empty cache, then the load from its on-disk cache.

Usage::

    python3 benchmarks/bench_invariant_load.py                       # alone, then 8 processes
    python3 benchmarks/bench_invariant_load.py --procs 1 8 --threads 1 2
    python3 benchmarks/bench_invariant_load.py --paths compiled      # the compiled path only
    python3 benchmarks/bench_invariant_load.py --hwrng-threads process   # the tensor ops on the
                                                                        # process's threads
    python3 benchmarks/bench_invariant_load.py --compile-cost --procs     # first calls only

``--threads`` is each process's ``torch.set_num_threads`` (what torch's ops
run on). Both of hwrng's CPU paths run on one thread whatever it is (the
compiled kernels are single-threaded; the tensor ops set one intra-op thread,
``hwrng._philox._distributions``); ``--hwrng-threads process`` lets the tensor
ops use the process's threads instead, as they did before, for comparison.
torch's ops are the in-place fills (``uniform_``, ``normal_``: the kernels of
``rand`` and ``randn`` without the allocation, as hwrng's ops fill in place)
and ``torch.nn.functional.dropout``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _timing import command_line, machine, write_results

RESULTS = Path(__file__).resolve().parent / "results"
OPS = ("uniform", "normal", "dropout")
PATHS = ("compiled", "tensor")
SETTING = "HWRNG_INVARIANT_CPU"  # hwrng's CPU path, read at every op


def _cases(log2: int) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """Per op: torch's op and hwrng's, on one shard of ``2**log2`` float32 values."""
    from torch.distributed.tensor import Shard

    import hwrng
    import hwrng.invariant

    rows = 2 ** (log2 - 10)
    x = torch.empty(rows, 1024)
    spec = hwrng.ShardSpec((2 * rows, 1024), (2,), (Shard(0),), (1,))
    return {
        "uniform": (x.uniform_, lambda: hwrng.invariant.uniform_(x, spec)),
        "normal": (x.normal_, lambda: hwrng.invariant.normal_(x, spec)),
        "dropout": (
            lambda: torch.nn.functional.dropout(x, 0.1),
            lambda: hwrng.invariant.dropout(x, spec, 0.1),
        ),
    }


def _worker(
    settings: dict[str, Any], barrier: Any, results: Any, rank: int
) -> None:  # pragma: no cover - runs in a child process
    torch.set_num_threads(settings["threads"])
    if settings["hwrng_threads"] == "process":
        from hwrng._philox import _distributions

        _distributions._INTRA_OP_THREADS = None
    cases = _cases(settings["log2"])
    paths = settings["paths"]
    for torch_op, hwrng_op in cases.values():  # warm up (compile), and settle the allocator
        torch_op()
        for path in paths:
            os.environ[SETTING] = path
            hwrng_op()
    barrier.wait()
    times: dict[str, list[float]] = {f"{op} {who}": [] for op in cases for who in ("torch", *paths)}
    for _ in range(settings["samples"]):
        for op, (torch_op, hwrng_op) in cases.items():
            for who in ("torch", *paths):
                body = torch_op if who == "torch" else hwrng_op
                os.environ[SETTING] = who
                start = time.perf_counter()
                body()
                times[f"{op} {who}"].append(time.perf_counter() - start)
    results.put((rank, {name: statistics.median(v) * 1e3 for name, v in times.items()}))
    barrier.wait()  # every process keeps drawing until the last one has measured


def measure(
    procs: int, threads: int, log2: int, samples: int, hwrng_threads: str, *, paths: list[str]
) -> dict[str, Any]:
    """One setting: ``procs`` processes of ``threads`` torch threads each, drawing at once."""
    context = mp.get_context("spawn")
    barrier = context.Barrier(procs)
    results = context.Queue()
    settings = {
        "threads": threads,
        "log2": log2,
        "samples": samples,
        "hwrng_threads": hwrng_threads,
        "paths": paths,
    }
    workers = [
        context.Process(target=_worker, args=(settings, barrier, results, rank))
        for rank in range(procs)
    ]
    load_before = os.getloadavg()[0]
    for worker in workers:
        worker.start()
    medians = dict(results.get() for _ in range(procs))
    for worker in workers:
        worker.join()
        if worker.exitcode:
            raise RuntimeError(f"a worker exited with {worker.exitcode}")
    row: dict[str, Any] = {
        "procs": procs,
        "torch_threads": threads,
        "hwrng_threads": hwrng_threads,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }
    for op in OPS:
        row[op] = {"torch_ms": statistics.median(m[f"{op} torch"] for m in medians.values())}
        for path in paths:
            ratios = [m[f"{op} {path}"] / m[f"{op} torch"] for m in medians.values()]
            row[op][path] = {
                "hwrng_ms": statistics.median(m[f"{op} {path}"] for m in medians.values()),
                "ratio": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
            }
    return row


_FIRST_CALLS = """
import json, os, sys, time
import torch
from torch.distributed.tensor import Shard
import hwrng, hwrng.invariant as inv
from hwrng._philox import _compiled
torch.set_num_threads(1)
spec = hwrng.ShardSpec((64, 64), (1,), (Shard(0),), (0,))
ops = {
    "uniform float32": lambda: inv.uniform_(torch.empty(64, 64), spec),
    "normal float32": lambda: inv.normal_(torch.empty(64, 64), spec),
    "dropout float32": lambda: inv.dropout(torch.ones(64, 64), spec, 0.1),
    "trunc_normal float32": lambda: inv.trunc_normal_(torch.empty(64, 64), spec),
    "uniform float64": lambda: inv.uniform_(torch.empty(64, 64, dtype=torch.float64), spec),
    "normal float64": lambda: inv.normal_(torch.empty(64, 64, dtype=torch.float64), spec),
    "trunc_normal float64": lambda: inv.trunc_normal_(
        torch.empty(64, 64, dtype=torch.float64), spec
    ),
}
start = time.perf_counter()
assert _compiled.why_unavailable() is None, _compiled.why_unavailable()  # imports numba
costs = {"import numba": time.perf_counter() - start}
for name, op in ops.items():
    start = time.perf_counter()
    op()
    first = time.perf_counter() - start
    start = time.perf_counter()
    op()
    costs[name] = first - (time.perf_counter() - start)  # what the first call costs more
print(json.dumps(costs))
"""


def compile_cost() -> dict[str, dict[str, float]]:
    """The compiled path's first-call costs in fresh processes: compiling, then the cache load.

    Both processes use one empty cache directory of their own (``NUMBA_CACHE_DIR``): the
    first compiles every kernel and writes it there, the second loads it.
    """
    costs = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, SETTING: "compiled"}
        for label in ("compile (empty cache)", "load (from the cache)"):
            done = subprocess.run(
                [sys.executable, "-c", _FIRST_CALLS],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            costs[label] = json.loads(done.stdout.strip().splitlines()[-1])
    return costs


def render(
    header: dict[str, str],
    rows: list[dict[str, Any]],
    command: str,
    log2: int,
    costs: dict[str, dict[str, float]] | None,
) -> str:
    """The rows (and the first-call costs) as a Markdown page."""
    lines = ["# hwrng's invariant ops on the CPU, alone and under load", ""]
    lines += [f"- {key}: {value}" for key, value in header.items()]
    lines += [f"- command: `{command}`", ""]
    if rows:
        lines += [
            f"One shard of 2**{log2} float32 values. Each process times torch's op and "
            "hwrng's on each path, interleaved; ratio = hwrng / torch in the same process (the "
            "median over the processes, and their range). Load: the 1-minute load average "
            "before and after the setting ran.",
            "",
            "| processes | torch threads | op | torch (ms) | hwrng path | hwrng (ms) | ratio "
            "| range | load |",
            "|---:|---:|---|---:|---|---:|---:|---|---|",
        ]
        for row in rows:
            for op in OPS:
                cell = row[op]
                for path in PATHS:
                    if path not in cell:
                        continue
                    mine = cell[path]
                    threads = "" if path == "compiled" else f" ({row['hwrng_threads']} thread)"
                    spread = f"{mine['ratio_min']:.2f}-{mine['ratio_max']:.2f}x"
                    lines.append(
                        f"| {row['procs']} | {row['torch_threads']} | {op} "
                        f"| {cell['torch_ms']:,.1f} | {path}{threads} | {mine['hwrng_ms']:,.1f} "
                        f"| {mine['ratio']:.2f}x | {spread} "
                        f"| {row['load_before']:.1f} / {row['load_after']:.1f} |"
                    )
    if costs:
        lines += [
            "",
            "The compiled path's first call in a fresh process, beyond a warm call (s): "
            "numba's compilation with an empty cache, then the load from its cache.",
            "",
            "| | " + " | ".join(costs) + " |",
            "|---|" + "---:|" * len(costs),
        ]
        for name in next(iter(costs.values())):
            lines.append(
                f"| {name} | " + " | ".join(f"{c[name]:.2f}" for c in costs.values()) + " |"
            )
        lines.append(
            "| total | " + " | ".join(f"{sum(c.values()):.2f}" for c in costs.values()) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, nargs="*", default=[1, 8], help="none: no settings")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--hwrng-threads", choices=("one", "process"), nargs="+", default=["one"])
    parser.add_argument("--paths", choices=PATHS, nargs="+", default=list(PATHS))
    parser.add_argument("--log2", type=int, default=24)
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument(
        "--compile-cost", action="store_true", help="also measure the compiled path's first call"
    )
    parser.add_argument("--out", type=Path, help="write NAME.md and NAME.json here")
    parser.add_argument("--name", default=None, help="the results' file name (no suffix)")
    args = parser.parse_args(argv)
    rows = []
    costs = None
    if args.compile_cost:
        costs = compile_cost()
        for label, cost in costs.items():
            print(
                f"{label}: "
                + "  ".join(f"{name} {seconds:.2f} s" for name, seconds in cost.items())
                + f"  (total {sum(cost.values()):.2f} s)",
                flush=True,
            )
    for procs in args.procs:
        for threads in args.threads:
            for hwrng_threads in args.hwrng_threads:
                row = measure(
                    procs, threads, args.log2, args.samples, hwrng_threads, paths=args.paths
                )
                rows.append(row)
                print(
                    f"{procs} procs, torch threads {threads}: "
                    + "  ".join(
                        f"{op} {path} {row[op][path]['hwrng_ms']:.0f}/"
                        f"{row[op]['torch_ms']:.0f} ms = {row[op][path]['ratio']:.2f}x"
                        for op in OPS
                        for path in args.paths
                    )
                    + f"  (load {row['load_before']:.1f} -> {row['load_after']:.1f})",
                    flush=True,
                )
    if args.out:
        header = {"device": "cpu", **machine()}
        name = args.name or f"cpu-{header['date']}-invariant-load"
        command = command_line("bench_invariant_load.py", argv)
        write_results(
            args.out,
            name,
            render(header, rows, command, args.log2, costs),
            {"machine": header, "rows": rows, "first_call_s": costs},
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

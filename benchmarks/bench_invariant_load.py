"""The invariant ops' CPU path against torch's ops, alone and with N processes drawing at once.

``hwrng check`` and every multi-rank CPU test run several ranks on a few
cores; a path whose ops are parallel regions can collapse there (threads wait
at barriers for descheduled threads), while alone it looks fine. So each
setting runs ``--procs`` processes at once (1: alone), all started together,
each timing torch's op and hwrng's on one shard of ``2**--log2`` float32
values, interleaved sample by sample; the ratio is per process (hwrng's
median over torch's, the same process, the same minutes), and the table gives
the median of the processes' ratios and their range.

Usage::

    python3 benchmarks/bench_invariant_load.py                       # alone, then 8 processes
    python3 benchmarks/bench_invariant_load.py --procs 1 8 --threads 1 2
    python3 benchmarks/bench_invariant_load.py --hwrng-threads process   # hwrng's ops on the
                                                                        # process's threads

``--threads`` is each process's ``torch.set_num_threads`` (what torch's ops
run on). hwrng's CPU path runs on one intra-op thread whatever it is
(``hwrng._philox._distributions``); ``--hwrng-threads process`` lets it use
the process's threads instead, as it did before, for comparison.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _timing import machine

RESULTS = Path(__file__).resolve().parent / "results"
OPS = ("uniform", "normal", "dropout")


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
    for torch_op, hwrng_op in cases.values():  # warm up, and settle the allocator
        torch_op()
        hwrng_op()
    barrier.wait()
    times: dict[str, list[float]] = {
        f"{op} {who}": [] for op in cases for who in ("torch", "hwrng")
    }
    for _ in range(settings["samples"]):
        for op, (torch_op, hwrng_op) in cases.items():
            for who, body in (("torch", torch_op), ("hwrng", hwrng_op)):
                start = time.perf_counter()
                body()
                times[f"{op} {who}"].append(time.perf_counter() - start)
    results.put((rank, {name: statistics.median(v) * 1e3 for name, v in times.items()}))
    barrier.wait()  # every process keeps drawing until the last one has measured


def measure(
    procs: int, threads: int, log2: int, samples: int, hwrng_threads: str
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
        ratios = [m[f"{op} hwrng"] / m[f"{op} torch"] for m in medians.values()]
        row[op] = {
            "torch_ms": statistics.median(m[f"{op} torch"] for m in medians.values()),
            "hwrng_ms": statistics.median(m[f"{op} hwrng"] for m in medians.values()),
            "ratio": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
    return row


def render(header: dict[str, str], rows: list[dict[str, Any]], command: str, log2: int) -> str:
    """The rows as a Markdown page."""
    lines = ["# hwrng's invariant ops on the CPU, alone and under load", ""]
    lines += [f"- {key}: {value}" for key, value in header.items()]
    lines += [f"- command: `{command}`", ""]
    lines += [
        f"One shard of 2**{log2} float32 values. Each process times torch's op and hwrng's, "
        "interleaved; ratio = hwrng / torch in the same process (the median over the "
        "processes, and their range). Load: the 1-minute load average before and after the "
        "setting ran.",
        "",
        "| processes | torch threads | hwrng threads | op | torch (ms) | hwrng (ms) | ratio "
        "| range | load |",
        "|---:|---:|---|---|---:|---:|---:|---|---|",
    ]
    for row in rows:
        for op in OPS:
            cell = row[op]
            lines.append(
                f"| {row['procs']} | {row['torch_threads']} | {row['hwrng_threads']} | {op} "
                f"| {cell['torch_ms']:,.1f} | {cell['hwrng_ms']:,.1f} | {cell['ratio']:.2f}x "
                f"| {cell['ratio_min']:.2f}-{cell['ratio_max']:.2f}x "
                f"| {row['load_before']:.1f} / {row['load_after']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--hwrng-threads", choices=("one", "process"), nargs="+", default=["one"])
    parser.add_argument("--log2", type=int, default=24)
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--out", type=Path, help="write NAME.md and NAME.json here")
    parser.add_argument("--name", default=None, help="the results' file name (no suffix)")
    args = parser.parse_args(argv)
    rows = []
    for procs in args.procs:
        for threads in args.threads:
            for hwrng_threads in args.hwrng_threads:
                row = measure(procs, threads, args.log2, args.samples, hwrng_threads)
                rows.append(row)
                print(
                    f"{procs} procs, torch threads {threads}, hwrng {hwrng_threads}: "
                    + "  ".join(
                        f"{op} {row[op]['hwrng_ms']:.0f}/{row[op]['torch_ms']:.0f} ms "
                        f"= {row[op]['ratio']:.2f}x"
                        for op in OPS
                    )
                    + f"  (load {row['load_before']:.1f} -> {row['load_after']:.1f})",
                    flush=True,
                )
    if args.out:
        header = {"device": "cpu", **machine()}
        command = "python3 benchmarks/bench_invariant_load.py " + " ".join(
            argv if argv is not None else sys.argv[1:]
        )
        name = args.name or f"cpu-{header['date']}-invariant-load"
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{name}.md").write_text(
            render(header, rows, command.strip(), args.log2), encoding="utf-8"
        )
        (args.out / f"{name}.json").write_text(
            json.dumps({"machine": header, "rows": rows}, indent=1) + "\n", encoding="utf-8"
        )
        print(f"wrote {args.out / name}.md and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

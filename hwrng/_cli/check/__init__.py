"""``hwrng check``: the main job -- prove replicas equal and shards distinct on this machine.

The command resolves its arguments before any rank starts (the platform, the
number of ranks, the mesh, the sharded dims, the process group's backend),
then starts the ranks itself (a :class:`~hwrng.testing.DistributedPool`) or,
under torchrun, runs in the processes torchrun started. What each rank runs
is in ``_job``, the report in ``_report``, torchrun's side in ``_launcher``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from hwrng._cli._arguments import parse_dims, parse_mesh, positive
from hwrng._cli._status import EXIT_FAILED, EXIT_PASSED, STATUS_WORDS
from hwrng._cli.check._job import DEFAULT_TIMEOUT_S, default_mesh, run_rank
from hwrng._cli.check._launcher import (
    check_launcher_environment,
    local_ranks,
    run_in_torchrun,
    under_torchrun,
)
from hwrng._cli.check._report import CheckReport, format_report
from hwrng._exceptions import MeshError
from hwrng._plan import rank_seed
from hwrng._platform import Platform, collective_backend
from hwrng._registry import get_platform
from hwrng.hookspecs import hookimpl
from hwrng.testing import DistributedPool, WorkerError
from hwrng.verify._timeout import MAX_TIMEOUT_S, MAX_TIMEOUT_WORDS

__all__ = ["cpu_rank_limit", "hwrng_register_commands", "run_check"]


#: Seconds a rank's run may take beyond ``--timeout``: its own work (seeding, drawing, a model),
#: so that a rank waiting for another is named by verify's timeout, not by the pool's.
RUN_SLACK_S = 60.0


def _seconds(text: str) -> float:
    """A positive, finite number of seconds, at most what ``hwrng.verify`` takes."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    if value > MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_TIMEOUT_WORDS} (a collective's clock arithmetic overflows "
            f"beyond about 7.4e9 s), got {text}"
        )
    return value


def cpu_rank_limit() -> int:
    """The most CPU ranks ``hwrng check`` starts on this machine: ``max(8, 4 * cores)``."""
    return max(8, 4 * (os.cpu_count() or 1))


def _progress(text: str) -> None:
    print(f"hwrng check: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _ranks_stdout_discarded() -> Iterator[None]:
    """The ranks started in the block print nowhere: stdout is the report's alone.

    The ranks inherit this process's standard streams. torch 2.10 and 2.11's gloo
    prints a line on stdout for every process group it connects ("[Gloo] Rank 0 is
    connected to ..."), which would come before the report, and break ``--json``.
    A rank reports through its pipe, and its errors on stderr, which stays.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as nowhere:
            os.dup2(nowhere.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _resolve(args: argparse.Namespace) -> tuple[Platform, int, dict[str, int], list[str], str]:
    """Resolve and check what ``hwrng check`` will run, before any rank starts."""
    check_launcher_environment()
    platform = get_platform(args.backend)
    torchrun = under_torchrun()
    devices = platform.device_count() if platform.one_rank_per_device else None
    if args.nproc is not None:
        nproc = args.nproc
    elif torchrun:
        nproc = int(os.environ["WORLD_SIZE"])
    elif args.mesh is not None:
        nproc = math.prod(args.mesh.values())
    else:
        nproc = devices if devices is not None else 8
    if torchrun and nproc != int(os.environ["WORLD_SIZE"]):
        raise MeshError(f"--nproc {nproc}, but torchrun started {os.environ['WORLD_SIZE']} ranks")
    if devices is not None and not torchrun and nproc > devices:
        raise MeshError(
            f"--nproc {nproc}, but this machine has {devices} {platform.name} device(s): "
            "hwrng check runs one process per device (use torchrun across machines)"
        )
    if devices is None and not torchrun and nproc > cpu_rank_limit():
        raise MeshError(
            f"--nproc {nproc}, but this machine runs at most {cpu_rank_limit()} CPU ranks "
            f"(4 per core, at least 8; it has {os.cpu_count()} core(s)): use torchrun across "
            "machines"
        )
    mesh = args.mesh if args.mesh is not None else default_mesh(nproc)
    if math.prod(mesh.values()) != nproc:
        raise MeshError(
            f"--mesh {', '.join(f'{k}={v}' for k, v in mesh.items())} has "
            f"{math.prod(mesh.values())} ranks, not {nproc}"
        )
    sharded = args.sharded if args.sharded is not None else [d for d in ("pp", "tp") if d in mesh]
    rank_seed(args.seed, dict.fromkeys(mesh, 0), mesh, sharded)  # refuse bad dims or seed now
    backend = collective_backend(platform, local_ranks() if torchrun else nproc)
    return platform, nproc, mesh, sharded, backend


def run_check(args: argparse.Namespace) -> int:
    """Run the check; exit status 0 when every check passed, 1 when one failed."""
    platform, nproc, mesh, sharded, backend = _resolve(args)
    started = time.perf_counter()
    if under_torchrun():
        try:
            report, ok = run_in_torchrun(
                mesh, sharded, args.seed, platform.name, backend, timeout=args.timeout
            )
        except Exception as error:  # torchrun stops the other ranks when this one exits
            raise WorkerError(
                f"rank {os.environ.get('RANK', '?')} crashed: {type(error).__name__}: {error}"
            ) from error
    else:
        progress = None if args.json else _progress
        try:
            with (
                _ranks_stdout_discarded(),
                DistributedPool(
                    nproc,
                    backend=backend,
                    platform=platform.name,
                    timeout=args.timeout + RUN_SLACK_S,
                    progress=progress,
                ) as pool,
            ):
                if progress is not None:
                    progress("seeding, drawing and verifying on every rank")
                results = pool.run(run_rank, mesh, sharded, args.seed, platform.name, args.timeout)
        except WorkerError as error:
            raise WorkerError(error.summary()) from error
        except (OSError, RuntimeError) as error:  # the rendezvous or a process could not start
            raise WorkerError(
                f"the ranks could not be started: {type(error).__name__}: {error}"
            ) from error
        report = CheckReport.from_dict(results[0])  # every rank returns the same report
        report.seconds = time.perf_counter() - started
        ok = report.ok
    status = EXIT_PASSED if ok else EXIT_FAILED
    if report is not None:
        document = {**report.to_dict(), "status": STATUS_WORDS[status], "exit_status": status}
        print(json.dumps(document, indent=2) if args.json else format_report(report))
    return status


@hookimpl
def hwrng_register_commands(subcommands: argparse._SubParsersAction[Any]) -> None:
    """Add ``hwrng check``."""
    check = subcommands.add_parser(
        "check",
        help="prove replicas equal and shards distinct on this machine (the main job)",
        description="Start ranks on a backend, seed them, run DTensor random ops and a "
        "tensor-parallel model's initialisation and dropout, verify every stream, and print "
        "a report. Under torchrun it runs in the processes torchrun started. Exit status: 0 "
        "every check passed, 1 a check failed, 2 bad arguments or environment, 3 a rank "
        "crashed or the ranks could not be started (--json says which, as JSON).",
    )
    check.add_argument("--backend", metavar="NAME", help="the platform (default: auto-selected)")
    check.add_argument(
        "--nproc",
        type=positive,
        default=None,
        help="ranks (default: 8 on the CPU, one per device)",
    )
    check.add_argument(
        "--mesh", type=parse_mesh, default=None, help="dims and sizes (default: dp=2,pp=2,tp=2)"
    )
    check.add_argument(
        "--sharded",
        type=parse_dims,
        default=None,
        help="sharded dims, slowest first (default: pp,tp)",
    )
    check.add_argument("--seed", type=int, default=123, help="the job's seed (default 123)")
    check.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="how long a rank waits for the others: in hwrng.verify and in each collective "
        f"(default {DEFAULT_TIMEOUT_S:g}, at most {MAX_TIMEOUT_WORDS}); starting the ranks and "
        f"each rank's run may take {RUN_SLACK_S:g} s more",
    )
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(func=run_check)

"""The ``hwrng`` command line: ``backends``, ``plan``, ``check``, and commands plugins add.

The work of ``check`` lives in ``hwrng._cli._job_check`` and table formatting
in ``hwrng._cli._table``.

Plugins add subcommands through the :func:`~hwrng.hookspecs.hwrng_register_commands`
hook (the conformance suite adds ``hwrng conformance`` that way), so this
module imports nothing from them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from hwrng._cli._table import format_table
from hwrng._exceptions import HwrngError, MeshError
from hwrng._mesh import unravel_index
from hwrng._plan import rank_seed, seed_plan
from hwrng._platform import Platform
from hwrng._registry import Registry, default_registry, get_platform
from hwrng._version import __version__
from hwrng.testing import WorkerError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

__all__ = ["build_parser", "main"]


def _cmd_backends(args: argparse.Namespace) -> int:
    registry = default_registry()
    rows = registry.list_platforms()
    if args.json:
        print(json.dumps([{**vars(r), "available": r.available} for r in rows], indent=2))
        return 0
    table = []
    for row in rows:
        package = f"{row.distribution} {row.version}" if row.distribution else "(in-process)"
        status = "yes" if row.available else row.status
        table.append(
            [
                row.name,
                status,
                row.device_count if row.available else "-",
                row.dist_backend or "-",
                "-" if row.priority is None else row.priority,
                f"{package} [{row.plugin}]",
                row.reason or "",
            ]
        )
    print(
        format_table(
            ["BACKEND", "AVAILABLE", "DEVICES", "DIST", "PRIORITY", "PACKAGE [PLUGIN]", "WHY NOT"],
            table,
        )
    )
    if registry.disabled_plugins:
        print(f"\ndisabled by HWRNG_DISABLE_PLUGINS: {', '.join(registry.disabled_plugins)}")
    try:
        chosen = registry.get_platform()
        print(f"\nselected: {chosen.name}")
    except HwrngError as error:
        print(f"\nselected: none ({error})")
    return 0


def _parse_mesh(text: str) -> dict[str, int]:
    mesh: dict[str, int] = {}
    for part in text.split(","):
        name, sep, size = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"expected NAME=SIZE, got {part!r}")
        if name in mesh:
            raise argparse.ArgumentTypeError(f"mesh dim {name!r} given twice")
        try:
            mesh[name] = int(size)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"size of {name!r} is not an integer: {size!r}"
            ) from None
    return mesh


def _parse_dims(text: str) -> list[str]:
    return [d.strip() for d in text.split(",") if d.strip()]


#: ``hwrng plan --json`` lists every rank; past this many it refuses rather than print gigabytes.
JSON_RANK_LIMIT = 2**22


def _cmd_plan(args: argparse.Namespace) -> int:
    mesh: dict[str, int] = args.mesh
    names = list(mesh)
    world = math.prod(mesh.values())
    if args.json:
        if world > JSON_RANK_LIMIT:
            raise MeshError(
                f"--json lists every rank; {world:,} ranks is more than {JSON_RANK_LIMIT:,}"
            )
        seeds = seed_plan(args.seed, mesh, args.sharded)
        document = {"seed": args.seed, "mesh": mesh, "sharded": args.sharded}
        print(json.dumps({**document, "seeds": [int(s) for s in seeds]}))
        return 0
    rank_seed(args.seed, dict.fromkeys(names, 0), mesh, args.sharded)  # check before printing
    shown = world if args.limit == 0 else min(args.limit, world)
    rows = []
    sizes = [mesh[n] for n in names]
    for rank in range(shown):  # only the rows shown: the mesh may be far too large to list
        position = unravel_index(rank, sizes)  # exact Python ints: no 64-bit overflow
        coordinate = dict(zip(names, position, strict=True))
        seed = rank_seed(args.seed, coordinate, mesh, args.sharded)
        rows.append([rank, *coordinate.values(), seed])
    mesh_text = " x ".join(f"{n}={mesh[n]}" for n in names)
    sharded_text = ", ".join(args.sharded) if args.sharded else "none"
    print(f"seed {args.seed}, mesh {mesh_text} ({world} ranks), sharded dims: {sharded_text}")
    print(format_table(["rank", *names, "seed"], rows))
    if shown < world:
        print(f"... {world - shown} more ranks (--limit 0 prints all)")
    shared = [n for n in names if n not in args.sharded]
    distinct = math.prod(mesh[n] for n in args.sharded)  # exact: fewer than 2**64 ranks
    print(f"\n{distinct} distinct seed(s) over {world} ranks")
    if shared:
        print(f"ranks that differ only along {', '.join(shared)} share a seed (replicas)")
    else:
        print("every rank has its own seed")
    return 0


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


#: ``hwrng check``'s exit statuses, and the word ``--json`` gives each.
EXIT_PASSED, EXIT_FAILED, EXIT_BAD_ARGUMENTS, EXIT_CRASHED = 0, 1, 2, 3
_STATUS_WORDS = {
    EXIT_PASSED: "passed",
    EXIT_FAILED: "failed",
    EXIT_BAD_ARGUMENTS: "bad arguments",
    EXIT_CRASHED: "crashed",
}
#: Variables a launcher such as torchrun sets; ``hwrng check`` needs all of them or none.
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def cpu_rank_limit() -> int:
    """The most CPU ranks ``hwrng check`` starts on this machine: ``max(8, 4 * cores)``."""
    return max(8, 4 * (os.cpu_count() or 1))


class _UsageExit(SystemExit):
    """An argument the parser refused (exit status 2), with its one-line message."""

    def __init__(self, message: str) -> None:
        super().__init__(EXIT_BAD_ARGUMENTS)
        self.message = message


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: ``hwrng check: error: ...``."""

    def error(self, message: str) -> NoReturn:
        line = f"{self.prog}: error: {message}"
        print(line, file=sys.stderr)
        raise _UsageExit(line)

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse ignores a failed write; on stdout it must raise, so that --help and
        # --version into a closed pipe end as every command does (see main)
        if message and file is sys.stdout:
            file.write(message)
        else:
            super()._print_message(message, file)


def _status_document(status: int, error: str) -> str:
    return json.dumps(
        {"ok": False, "status": _STATUS_WORDS[status], "exit_status": status, "error": error}
    )


def _check_launcher_environment() -> None:
    """Refuse a partial launcher environment (RANK without MASTER_ADDR, ...) in one line."""
    import torch.distributed as dist

    present = [name for name in LAUNCHER_VARIABLES if name in os.environ]
    if not any(name in os.environ for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return
    if dist.is_available() and dist.is_initialized():
        return
    missing = [name for name in LAUNCHER_VARIABLES if name not in os.environ]
    if missing:
        raise MeshError(
            f"{', '.join(present)} set but {', '.join(missing)} not: run hwrng check under "
            "torchrun (which sets all of them), or unset them to let hwrng check start its "
            "own ranks"
        )
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"):
        if not os.environ[name].strip().isdigit():
            raise MeshError(f"{name}={os.environ[name]!r} is not a non-negative integer")


def _progress(text: str) -> None:
    print(f"hwrng check: {text}", file=sys.stderr, flush=True)


def _check_arguments(
    args: argparse.Namespace,
) -> tuple[Platform, int, dict[str, int], list[str], str]:
    """Resolve and check what ``hwrng check`` will run, before any rank starts."""
    from hwrng._cli._job_check import default_mesh, under_torchrun

    _check_launcher_environment()
    platform = get_platform(args.backend)
    torchrun = under_torchrun()
    devices = platform.device_count() if platform.device_type != "cpu" else None
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
    backend = platform.dist_backend if devices is not None else "gloo"
    return platform, nproc, mesh, sharded, backend


def _cmd_check(args: argparse.Namespace) -> int:
    from hwrng._cli._job_check import (
        CheckReport,
        format_report,
        run_in_torchrun,
        run_rank,
        under_torchrun,
    )
    from hwrng.testing import DistributedPool

    platform, nproc, mesh, sharded, backend = _check_arguments(args)
    started = time.perf_counter()
    if under_torchrun():
        try:
            report, ok = run_in_torchrun(mesh, sharded, args.seed, platform.name, backend)
        except Exception as error:  # torchrun stops the other ranks when this one exits
            raise WorkerError(
                f"rank {os.environ.get('RANK', '?')} crashed: {type(error).__name__}: {error}"
            ) from error
    else:
        progress = None if args.json else _progress
        try:
            with DistributedPool(
                nproc, backend=backend, platform=platform.name, timeout=300, progress=progress
            ) as pool:
                if progress is not None:
                    progress("seeding, drawing and verifying on every rank")
                results = pool.run(run_rank, mesh, sharded, args.seed, platform.name)
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
        document = {**report.to_dict(), "status": _STATUS_WORDS[status], "exit_status": status}
        print(json.dumps(document, indent=2) if args.json else format_report(report))
    return status


def _add_plugin_commands(commands: argparse._SubParsersAction[Any], registry: Registry) -> None:
    """Let every plugin add its subcommands; a plugin that fails is named, never fatal."""
    for impl in registry.plugin_manager.hook.hwrng_register_commands.get_hookimpls():
        try:
            impl.function(subcommands=commands)
        except (Exception, SystemExit) as error:  # a plugin's hook may fail in any way
            print(
                f"hwrng: plugin {impl.plugin_name!r} could not add its commands: "
                f"{type(error).__name__}: {error}",
                file=sys.stderr,
            )


def build_parser(registry: Registry | None = None) -> argparse.ArgumentParser:
    """Return the argument parser of the ``hwrng`` command, with the plugins' commands."""
    parser = _Parser(
        prog="hwrng",
        description="Random-number state for distributed PyTorch training on any hardware.",
    )
    parser.add_argument("--version", action="version", version=f"hwrng {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    backends = commands.add_parser("backends", help="list every registered platform")
    backends.add_argument("--json", action="store_true", help="print JSON instead of a table")
    backends.set_defaults(func=_cmd_backends)

    plan = commands.add_parser("plan", help="print the seed of every rank of a mesh")
    plan.add_argument(
        "--mesh", type=_parse_mesh, required=True, help="dims and sizes: dp=2,pp=2,tp=2"
    )
    plan.add_argument(
        "--sharded", type=_parse_dims, default=[], help="sharded dims, slowest first: pp,tp"
    )
    plan.add_argument("--seed", type=int, required=True, help="the job's seed, in [0, 2**64)")
    plan.add_argument(
        "--limit", type=_non_negative, default=1024, help="print at most this many ranks (0: all)"
    )
    plan.add_argument("--json", action="store_true", help="print JSON instead of a table")
    plan.set_defaults(func=_cmd_plan)

    check = commands.add_parser(
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
        type=_positive,
        default=None,
        help="ranks (default: 8 on the CPU, one per device)",
    )
    check.add_argument(
        "--mesh", type=_parse_mesh, default=None, help="dims and sizes (default: dp=2,pp=2,tp=2)"
    )
    check.add_argument(
        "--sharded",
        type=_parse_dims,
        default=None,
        help="sharded dims, slowest first (default: pp,tp)",
    )
    check.add_argument("--seed", type=int, default=123, help="the job's seed (default 123)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(func=_cmd_check)

    _add_plugin_commands(commands, registry or default_registry())
    return parser


def _stop_on_sigterm() -> None:
    """Turn SIGTERM (what CI timeouts send) into SystemExit, so cleanup code runs.

    The pools of ranks that ``check`` and ``conformance`` start are closed by
    ``finally`` blocks; with the default handler the process would die first.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return  # the embedding program has its own

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


#: The exit status when the reader of stdout left early (``hwrng plan ... | head``):
#: 128 + SIGPIPE, what a shell reports for a command that SIGPIPE ended (``seq 1e6 | head``).
EXIT_BROKEN_PIPE = 141


def _stdout_reader_left() -> bool:
    """Whether stdout is a pipe (or socket) whose reading end is closed.

    Tells a reader that left from a BrokenPipeError of something else (a pipe
    to a rank, say), which must not pass silently. Where ``select.poll`` is
    missing (Windows) the answer is False, and the error is raised as before.
    """
    try:
        descriptor = sys.stdout.fileno()
        poller = select.poll()
    except (AttributeError, OSError, ValueError):
        return False
    poller.register(descriptor, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _discard_stdout() -> None:
    """Point stdout's descriptor at the null device.

    What is still buffered is then flushed there at exit, instead of raising
    BrokenPipeError again as "Exception ignored" on stderr.
    """
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, sys.stdout.fileno())
    finally:
        os.close(null)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``hwrng`` command line and return its exit status.

    Every command stops quietly, with status :data:`EXIT_BROKEN_PIPE` (141),
    when the reader of its output leaves early (``hwrng plan ... | head``).
    """
    try:
        try:
            status = _run(argv)
        except SystemExit:  # --help, --version, a refused argument: what they printed too
            sys.stdout.flush()
            raise
        # a reader that left shows here, not in the interpreter's flush at exit
        sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_reader_left():
            raise
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    return status


def _run(argv: Sequence[str] | None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    json_check = arguments[:1] == ["check"] and "--json" in arguments
    parser = build_parser()
    try:
        args = parser.parse_args(arguments)
    except _UsageExit as refused:
        if json_check:
            print(_status_document(EXIT_BAD_ARGUMENTS, refused.message))
        raise
    _stop_on_sigterm()
    try:
        status: int = args.func(args)
    except HwrngError as error:
        crashed = args.command == "check" and isinstance(error, WorkerError)
        code = EXIT_CRASHED if crashed else EXIT_BAD_ARGUMENTS
        line = f"hwrng {args.command}: {'crashed' if crashed else 'error'}: {error}"
        print(line, file=sys.stderr)
        if json_check:
            print(_status_document(code, line))
        return code
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

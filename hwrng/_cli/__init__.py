"""The ``hwrng`` command line: a frame, and commands that plugins and hwrng add alike.

Every command -- hwrng's own ``backends`` (``backends``), ``plan`` (``plan``)
and ``check`` (the ``check`` package), and those plugins add, such as the
conformance suite's ``hwrng conformance`` -- registers through the
:func:`~hwrng.hookspecs.hwrng_register_commands` hook: hwrng's own modules are
registered as plugins here, before the installed plugins are asked, as
pytest registers its own. This frame parses, runs the command's ``func``,
turns an :class:`~hwrng.HwrngError` into one line (exit status 2, or 3 for a
crashed ``check``), and stops quietly when the reader of stdout leaves early.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from hwrng._cli._status import EXIT_BAD_ARGUMENTS, EXIT_BROKEN_PIPE, EXIT_CRASHED, status_document
from hwrng._exceptions import HwrngError, WorkerError
from hwrng._registry import Registry, default_registry
from hwrng._version import __version__

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

__all__ = ["BUILTIN_COMMANDS", "build_parser", "main"]

#: hwrng's own commands: modules implementing ``hwrng_register_commands``, in the order
#: ``hwrng --help`` lists them (plugins' commands follow, by plugin name).
BUILTIN_COMMANDS = ("hwrng._cli.backends", "hwrng._cli.plan", "hwrng._cli.check")


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


def _register_builtins(registry: Registry) -> None:
    manager = registry.plugin_manager
    for name in BUILTIN_COMMANDS:
        if not manager.has_plugin(name):
            manager.register(importlib.import_module(name), name=name)


def _add_commands(commands: argparse._SubParsersAction[Any], registry: Registry) -> None:
    """Let every plugin add its subcommands, hwrng's first; one that fails is named, not fatal."""
    impls = registry.plugin_manager.hook.hwrng_register_commands.get_hookimpls()
    order = {name: position for position, name in enumerate(BUILTIN_COMMANDS)}
    for impl in sorted(impls, key=lambda i: (order.get(i.plugin_name, len(order)), i.plugin_name)):
        try:
            impl.function(subcommands=commands)
        except (Exception, SystemExit) as error:  # a plugin's hook may fail in any way
            print(
                f"hwrng: plugin {impl.plugin_name!r} could not add its commands: "
                f"{type(error).__name__}: {error}",
                file=sys.stderr,
            )


def build_parser(registry: Registry | None = None) -> argparse.ArgumentParser:
    """Return the argument parser of the ``hwrng`` command, with every command on it."""
    chosen = registry or default_registry()
    _register_builtins(chosen)
    parser = _Parser(
        prog="hwrng",
        description="Random-number state for distributed PyTorch training on any hardware.",
    )
    parser.add_argument("--version", action="version", version=f"hwrng {__version__}")
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    _add_commands(commands, chosen)
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

    Every command stops quietly, with status 141 (128 + SIGPIPE), when the
    reader of its output leaves early (``hwrng plan ... | head``).
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
            print(status_document(EXIT_BAD_ARGUMENTS, refused.message))
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
            print(status_document(code, line))
        return code
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

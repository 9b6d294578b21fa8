"""``hwrng conformance``: the suite's command, added to ``hwrng`` through a plugin hook.

This module is what the ``hwrng`` entry point named ``conformance`` loads. It
imports neither pytest nor the suite: they load when the command runs, so
``hwrng --help`` stays fast and a missing pytest is one clear line rather
than a traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

import hwrng
from hwrng_conformance._exceptions import SuiteUnavailableError

__all__ = ["MIN_NPROC", "hwrng_register_commands", "run_command"]

#: The multi-process rules need at least this many ranks.
MIN_NPROC = 2


def _nproc(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < MIN_NPROC:
        raise argparse.ArgumentTypeError(
            f"must be >= {MIN_NPROC}: the multi-process rules need at least {MIN_NPROC} ranks "
            f"(got {value})"
        )
    return value


def run_command(args: argparse.Namespace) -> int:
    """Run the suite (:func:`hwrng_conformance.runner.run_conformance`) on the backends asked for.

    A ``--backend`` hwrng cannot use here is refused before pytest starts
    (:class:`~hwrng_conformance._exceptions.BackendOptionError`, one line), and
    so is a machine without pytest (:class:`~hwrng_conformance._exceptions.SuiteUnavailableError`:
    an install with ``--no-deps`` leaves out hwrng-conformance's requirement on it).
    """
    if importlib.util.find_spec("pytest") is None:
        raise SuiteUnavailableError(
            "pytest is not installed, and the suite's rules run under it: "
            'pip install "pytest>=8.0" (hwrng-conformance requires it; '
            "pip install --no-deps leaves it out)"
        )
    from hwrng_conformance.runner import run_conformance

    return run_conformance(args.backend or [], nproc=args.nproc, extra=args.pytest_args)


@hwrng.hookimpl
def hwrng_register_commands(subcommands: argparse._SubParsersAction[Any]) -> None:
    """Add ``hwrng conformance``."""
    command = subcommands.add_parser(
        "conformance", help="run the conformance suite against a backend on this machine"
    )
    command.add_argument(
        "--backend",
        action="append",
        metavar="NAME",
        help="backend to check (repeatable; default: every available backend)",
    )
    command.add_argument(
        "--nproc",
        type=_nproc,
        default=None,
        help=f"processes for the multi-process rules (default 4, at least {MIN_NPROC})",
    )
    command.add_argument(
        "pytest_args", nargs=argparse.REMAINDER, help="after --: extra arguments for pytest"
    )
    command.set_defaults(func=run_command)

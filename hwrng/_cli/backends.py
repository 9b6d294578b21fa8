"""``hwrng backends``: every registered platform, whether it can run here, and which is chosen.

It also says which path the invariant ops take on the CPU: the kernels numba
compiles, or torch's tensor ops (and why).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from hwrng._cli._table import format_table
from hwrng._exceptions import HwrngError
from hwrng._registry import default_registry
from hwrng.hookspecs import hookimpl

__all__ = ["hwrng_register_commands", "run_backends"]


def run_backends(args: argparse.Namespace) -> int:
    """List the platforms (a table, or JSON with ``--json``); exit status 0."""
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
    print(f"\ninvariant ops on the CPU: {_invariant_cpu_path()}")
    if registry.disabled_plugins:
        print(f"\ndisabled by HWRNG_DISABLE_PLUGINS: {', '.join(registry.disabled_plugins)}")
    try:
        chosen = registry.get_platform()
        print(f"\nselected: {chosen.name}")
    except HwrngError as error:
        print(f"\nselected: none ({error})")
    return 0


def _invariant_cpu_path() -> str:
    """Which path ``hwrng.invariant``'s ops take on the CPU, and why (numba or tensor ops)."""
    from hwrng import _philox

    try:
        return _philox.cpu_path()
    except HwrngError as error:  # an unknown HWRNG_INVARIANT_CPU: what every op would say
        return f"refused ({error})"


@hookimpl
def hwrng_register_commands(subcommands: argparse._SubParsersAction[Any]) -> None:
    """Add ``hwrng backends``."""
    command = subcommands.add_parser("backends", help="list every registered platform")
    command.add_argument("--json", action="store_true", help="print JSON instead of a table")
    command.set_defaults(func=run_backends)

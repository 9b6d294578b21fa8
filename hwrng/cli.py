"""What a plugin's command may use: the ``hwrng`` command line's table and exit statuses.

A plugin adds subcommands through the
:func:`~hwrng.hookspecs.hwrng_register_commands` hook, exactly as hwrng's own
``backends``, ``plan`` and ``check`` do. Printing its tables with
:func:`format_table` and returning these statuses makes its output read like
theirs.
"""

from __future__ import annotations

from hwrng._cli._status import EXIT_BAD_ARGUMENTS, EXIT_CRASHED, EXIT_FAILED, EXIT_PASSED
from hwrng._cli._table import format_table

__all__ = ["EXIT_BAD_ARGUMENTS", "EXIT_CRASHED", "EXIT_FAILED", "EXIT_PASSED", "format_table"]

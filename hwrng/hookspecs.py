"""The hooks a hwrng plugin implements.

A plugin is any object or module with functions marked by :data:`hookimpl`.
Installed plugins are found through the ``hwrng`` entry-point group, and
hwrng's own register there like anyone's: the CPU backend
(``cpu = hwrng.backends.cpu``, in the ``hwrng`` distribution itself), the
accelerator backends (``cuda = hwrng_cuda`` in ``hwrng-cuda``, ``npu =
hwrng_npu`` in ``hwrng-npu``) and the conformance suite's command
(``conformance = hwrng_conformance.command`` in ``hwrng-conformance``). Each
plugin is imported once, on its own (one that fails to import or to answer
is reported as broken and never stops the others), and a plugin whose
distribution requires another hwrng is reported and not used. A backend
distribution looks like this::

    # pyproject.toml of a backend distribution
    [project.entry-points.hwrng]
    acme = "hwrng_acme"

    # hwrng_acme/__init__.py
    import hwrng

    class AcmePlatform(hwrng.DeviceModulePlatform):
        name = "acme"
        dist_backend = "acmeccl"

    @hwrng.hookimpl
    def hwrng_platforms():
        return [AcmePlatform()]

Plugins that live in the process rather than in a distribution register with
:func:`hwrng.register_plugin`. What a platform overrides, and what it must not
(the methods :class:`hwrng.Platform` marks final), is in "Writing a backend"
(``docs/conformance.md``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from hwrng._platform import Platform

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec", "hwrng_platforms", "hwrng_register_commands"]

#: The pluggy project name, also the entry-point group plugins register under.
PROJECT_NAME = "hwrng"

#: Marks a function as the specification of a hwrng hook.
hookspec = pluggy.HookspecMarker(PROJECT_NAME)

#: Marks a plugin's function as an implementation of a hwrng hook.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def hwrng_platforms() -> Sequence[Platform]:
    """Return the platforms this plugin provides.

    Called when the registry first answers, and again after a plugin is
    registered or unregistered in the process. Constructing a platform
    must be cheap and must not import device extensions: do that lazily in
    :meth:`~hwrng.Platform.unavailable_reason` (as
    :class:`~hwrng.DeviceModulePlatform` does). Return every platform the
    plugin knows, available or not; hwrng asks each whether it can run.

    Returns
    -------
    Sequence[Platform]
        Instances of :class:`~hwrng.Platform` subclasses, one per platform name.
    """
    raise NotImplementedError  # pragma: no cover - a specification, never called


@hookspec
def hwrng_register_commands(subcommands: argparse._SubParsersAction[Any]) -> None:
    """Add subcommands to the ``hwrng`` command line.

    Called when the command line starts, with the ``add_subparsers()`` object
    of the ``hwrng`` parser. Add a parser and give it a ``func`` default that
    takes the parsed arguments and returns the exit status::

        @hwrng.hookimpl
        def hwrng_register_commands(subcommands):
            command = subcommands.add_parser("hello", help="say hello")
            command.set_defaults(func=lambda args: print("hello") or 0)

    Import heavy dependencies inside ``func``, not at the plugin's import, so
    that ``hwrng --help`` stays fast and a missing optional dependency becomes
    one clear line when the command runs. An :class:`~hwrng.HwrngError` raised
    by ``func`` is printed as ``hwrng NAME: error: ...`` with exit status 2.
    """
    raise NotImplementedError  # pragma: no cover - a specification, never called

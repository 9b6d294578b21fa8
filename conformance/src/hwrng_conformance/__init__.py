"""hwrng's conformance suite: proves that a backend honours :class:`hwrng.Platform`.

A hardware vendor runs it on its own machine::

    hwrng conformance --backend acme

which runs every rule (one pytest test per rule, in ``hwrng_conformance.suite``)
against the ``acme`` platform, prints a table of rules with pass/fail/skip and
why, and a one-line verdict; the exit status is non-zero on any failure. The
same run through pytest directly::

    pytest -p hwrng_conformance.plugin --pyargs hwrng_conformance.suite --hwrng-backend acme

See :mod:`hwrng_conformance.plugin` for the options and fixtures.
"""

from __future__ import annotations

from hwrng.testing import DistributedPool, WorkerError

__all__ = ["DistributedPool", "WorkerError"]

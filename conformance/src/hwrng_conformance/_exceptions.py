"""Every error the conformance suite's command raises on purpose (each an ``hwrng`` error)."""

from __future__ import annotations

import hwrng

__all__ = ["BackendOptionError", "SuiteUnavailableError"]


class BackendOptionError(hwrng.BackendError):
    """A ``--backend`` names no usable platform."""


class SuiteUnavailableError(hwrng.HwrngError, RuntimeError):
    """The suite cannot run here: pytest, which runs its rules, is not installed."""

"""Every error the conformance suite's command raises on purpose (each an ``hwrng`` error)."""

from __future__ import annotations

import hwrng

__all__ = ["BackendOptionError"]


class BackendOptionError(hwrng.BackendError):
    """A ``--backend`` names no usable platform."""

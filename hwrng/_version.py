"""The installed version of hwrng."""

from __future__ import annotations

import importlib.metadata

__all__ = ["__version__"]

try:
    __version__ = importlib.metadata.version("hwrng")
except importlib.metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0+unknown"

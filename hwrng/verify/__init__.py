"""``hwrng.verify``: replicas agree and shards differ, judged for every pair of ranks.

Call :func:`hwrng.verify` (this package's :func:`verify`) on every rank of the
job; it returns a :class:`~hwrng.VerifyReport`, the same on every rank. What it
proves and what it costs: "Verifying and checking a job" in the documentation.
The modules behind it, one job each, are listed in the architecture page.
"""

from __future__ import annotations

from hwrng.verify._api import verify
from hwrng.verify._report import StreamVerdict, VerifyReport

__all__ = ["StreamVerdict", "VerifyReport", "verify"]

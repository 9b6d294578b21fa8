"""The version of the Philox ops' contract, and whether this process has drawn under it.

The contract is the counter layout (:mod:`hwrng._philox._bits`) and the
bit-to-float mapping (:mod:`hwrng._philox._distributions`), written out in
``docs/invariant.md``: everything that decides the values of the invariant
ops. Any change to either, however small, is a new version; the version is
recorded in checkpoints of jobs that drew invariant values, so that a resume
under another contract -- which would draw other numbers -- is refused instead
of silently diverging.

Versions
--------
1
    hwrng 0.1.0 before the float64-free path: float32, float16 and bfloat16
    results computed in float64 and rounded.
2
    Results of float32, float16 and bfloat16 computed in float32 and integer
    arithmetic alone (hwrng's own float32 ``ln``, ``sin``/``cos`` and inverse
    normal CDF); float64 results and every Bernoulli mask as in version 1.
"""

from __future__ import annotations

import threading

__all__ = ["CONTRACT", "CONTRACT_VERSION", "contract_name", "drawn", "record_draw"]

#: The version of the contract this hwrng computes.
CONTRACT_VERSION = 2


def contract_name(version: int) -> str:
    """The user-readable identifier of contract ``version``."""
    return f"hwrng-philox4x32-10-v{version}"


#: The identifier of the contract this hwrng computes, as checkpoints record it.
CONTRACT = contract_name(CONTRACT_VERSION)

_lock = threading.Lock()
_drawn = False


def record_draw() -> None:
    """Note that this process has drawn (or is set up to draw) values under :data:`CONTRACT`."""
    global _drawn
    with _lock:
        _drawn = True


def drawn() -> bool:
    """Whether this process has drawn invariant values, or installed invariant DTensor ops."""
    return _drawn

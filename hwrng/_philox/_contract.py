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
3
    ``SQRT(-0) = +0``. Version 2 took ``SQRT`` of Box-Muller's ``-2 ln(1) =
    -0`` by Newton's iteration from a negative guess: a normal pair whose
    first word made ``u1 = 1`` (2**-25 of float32 pairs, 2**-53 of float64
    values) drew values near 3e18 (float64: 1e153) for ``0``. Every other
    value as in version 2.
"""

from __future__ import annotations

import threading

from hwrng._exceptions import CheckpointError

__all__ = [
    "CONTRACT",
    "CONTRACT_VERSION",
    "check_recorded",
    "contract_name",
    "drawn",
    "record_draw",
    "recorded",
]

#: The version of the contract this hwrng computes.
CONTRACT_VERSION = 3


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


def recorded() -> str | None:
    """What a checkpoint records: :data:`CONTRACT` if this process drew under it, else ``None``."""
    return CONTRACT if drawn() else None


def check_recorded(value: object) -> None:
    """Refuse a checkpoint whose job drew invariant values under another contract.

    ``value`` is what the checkpoint recorded (``None``: no invariant values
    drawn, or a checkpoint older than the record). Resumed under another
    contract, the invariant ops would draw other numbers than the saved job
    would have: refused with :class:`~hwrng.CheckpointError`. Accepting one
    under :data:`CONTRACT` notes that this process continues that stream.
    """
    if value is None:
        return
    if value != CONTRACT:
        raise CheckpointError(
            f"refusing to restore this RNG state: its job drew placement-invariant values "
            f"under contract {value!r}, and this hwrng computes {CONTRACT!r}: resumed, the "
            "invariant ops would draw other numbers than the saved job would have (resume "
            "with the hwrng that wrote it, or start the invariant ops' stream afresh)"
        )
    record_draw()

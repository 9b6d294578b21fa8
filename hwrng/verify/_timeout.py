"""How long ``verify`` waits: the user's ``timeout=``, else the group's own, at most 5 minutes.

A job bounds its waits with the timeout its process groups were made with
(``init_process_group(timeout=...)``, ``new_group(timeout=...)``); verify
waits no longer by default. A timeout given is bounded too: gloo adds a
collective's timeout, in nanoseconds, to the system clock's reading in a
signed 64-bit count, so one beyond about 7.4e9 s (less each year: 2**63 ns
after 1970 is the year 2262) wraps -- from about 7.4e9 s a reduction with
every rank present never completes, and from about 9.2e9 s (2**63 ns alone)
it fails at once and leaves the process group unusable. :data:`MAX_TIMEOUT_S`
stays far inside that.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

from hwrng._collectives import group_timeout
from hwrng._exceptions import InvalidArgumentError, InvalidValueError

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_TIMEOUT_S",
    "MAX_TIMEOUT_WORDS",
    "check_timeout",
    "default_timeout",
]

#: The most ``verify`` waits by default, for every rank to arrive and for each collective
#: (less where the group's own timeout is less).
DEFAULT_TIMEOUT = datetime.timedelta(minutes=5)
#: The longest timeout taken, in seconds (about 31.7 years): far inside what every
#: backend's clock arithmetic holds (gloo's wraps from about 7.4e9 s).
MAX_TIMEOUT_S = 1e9
#: :data:`MAX_TIMEOUT_S` in words, for messages.
MAX_TIMEOUT_WORDS = "1e9 s (about 31 years)"


def check_timeout(timeout: object) -> float:
    """``timeout`` (seconds, or a :class:`datetime.timedelta`) in seconds.

    Refused alike on every rank, before any collective, unless it is a
    positive, finite duration of at most :data:`MAX_TIMEOUT_S`.
    """
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        try:
            seconds = float(timeout)
        except OverflowError:  # an int beyond a float's range
            seconds = math.inf
    else:
        raise InvalidArgumentError(
            f"timeout must be seconds or a datetime.timedelta, got {type(timeout).__name__}"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidValueError(f"timeout must be a positive, finite duration, got {timeout!r}")
    if seconds > MAX_TIMEOUT_S:
        raise InvalidValueError(
            f"timeout must be at most {MAX_TIMEOUT_WORDS}, got {timeout!r}: a collective's "
            "clock arithmetic overflows beyond about 7.4e9 s (gloo's then hangs or fails at once)"
        )
    return seconds


def default_timeout(group: Any) -> float:
    """The timeout ``verify`` takes when none is given: the group's own, at most 5 minutes.

    ``group`` is ``None`` for the default process group. Where the group's
    backend does not say its timeout (a third-party backend), 5 minutes.
    """
    ceiling = DEFAULT_TIMEOUT.total_seconds()
    own = group_timeout(group)
    return ceiling if own is None or own <= 0 else min(own, ceiling)

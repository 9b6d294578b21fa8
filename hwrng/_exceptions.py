"""Every exception hwrng raises on purpose, and the one warning class.

Each error derives from :class:`HwrngError` and from the built-in exception a
Python user would already catch, so ``except ValueError`` keeps working::

    HwrngError
    ├── InvalidArgumentError   (TypeError)    an argument of the wrong kind
    ├── InvalidValueError      (ValueError)   an argument of the right kind but out of range
    ├── InvalidSeedError       (ValueError)   a seed outside [0, 2**64)
    ├── InvalidOffsetError     (ValueError)   an offset < 0, >= 2**63 or not a multiple of 4
    ├── InvalidDeviceError     (ValueError)   a device or generator the platform does not manage
    ├── InvalidStateError      (ValueError)   an RNG state of the wrong kind, size or contents
    ├── MeshError              (ValueError)   an unusable mesh, dim, coordinate, placement, group
    ├── TrackerError           (ValueError)   a named-state name or seed clash
    │   └── UnknownStateError  (KeyError)     a named state that is not tracked
    ├── NestingError           (RuntimeError) a context entered where it cannot be
    ├── RecomputationError     (RuntimeError) a recomputation that would not redraw its forward
    ├── DistributedError       (RuntimeError) torch.distributed not set up as the call needs
    │   └── WorkerError                       ranks of a DistributedPool failed, died or hung
    ├── CheckpointError        (ValueError)   a saved RNG state that cannot be restored here
    ├── VerificationError      (RuntimeError) hwrng.verify found streams breaking the plan
    ├── DTensorHookError       (RuntimeError) torch's DTensor hook is not the one hwrng fits
    ├── TorchVersionError      (ImportError)  torch below hwrng's floor, met by ``import hwrng``
    └── BackendError                          choosing a backend failed
        ├── BackendNotFoundError    (LookupError)
        ├── BackendUnavailableError (RuntimeError)
        ├── DuplicateBackendError   (LookupError)
        └── AmbiguousBackendError   (LookupError)

Every class of the tree lives in this module; the distributions around the
core derive theirs from it (``hwrng_conformance``'s ``BackendOptionError`` is a
:class:`BackendError`).

:class:`HwrngWarning` marks what hwrng reports without refusing (a misspelt
plugin name in ``HWRNG_DISABLE_PLUGINS``, a resume that re-seeded instead of
restoring).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "AmbiguousBackendError",
    "BackendError",
    "BackendNotFoundError",
    "BackendUnavailableError",
    "CheckpointError",
    "DTensorHookError",
    "DistributedError",
    "DuplicateBackendError",
    "HwrngError",
    "HwrngWarning",
    "InvalidArgumentError",
    "InvalidDeviceError",
    "InvalidOffsetError",
    "InvalidSeedError",
    "InvalidStateError",
    "InvalidValueError",
    "MeshError",
    "NestingError",
    "RecomputationError",
    "TorchVersionError",
    "TrackerError",
    "UnknownStateError",
    "VerificationError",
    "WorkerError",
]


#: How a rank that gave no answer in time is described in :attr:`WorkerError.failures`.
NO_ANSWER = "no answer in time"


class HwrngError(Exception):
    """Base class of every error hwrng raises on purpose."""


class HwrngWarning(UserWarning):
    """Something hwrng did not refuse but that a user should know about."""


class InvalidArgumentError(HwrngError, TypeError):
    """An argument is of the wrong kind (a flag that is not ``True``/``False``, ...)."""


class InvalidValueError(HwrngError, ValueError):
    """An argument of the right kind but out of range (a probability above 1, low > high, ...)."""


class InvalidSeedError(HwrngError, ValueError):
    """A seed is not an integer in ``[0, 2**64)``."""


class InvalidOffsetError(HwrngError, ValueError):
    """A generator offset is negative, too large, or not a multiple of 4."""


class InvalidDeviceError(HwrngError, ValueError):
    """A device or generator does not belong to the platform, or is out of range."""


class InvalidStateError(HwrngError, ValueError):
    """An RNG state tensor has the wrong type, dtype, device, shape, size or contents."""


class MeshError(HwrngError, ValueError):
    """A device mesh, its dims, a coordinate, a placement or a process group is unusable."""


class TrackerError(HwrngError, ValueError):
    """A named-state name or seed is already tracked, or a name or state is unusable."""


class UnknownStateError(TrackerError, KeyError):
    """A state name that was never added (or was reset) was asked for."""

    def __str__(self) -> str:
        # KeyError quotes its message; an error message should read as a sentence.
        return str(self.args[0]) if self.args else ""


class NestingError(HwrngError, RuntimeError):
    """A context was entered where it cannot be: nested on one generator, or while forked."""


class RecomputationError(HwrngError, RuntimeError):
    """An activation-checkpoint recomputation cannot redraw what its forward drew.

    Raised at the recomputation, before it draws anything: the recomputation
    entered a random context its forward did not (or another one), or this
    torch's activation checkpointing is not the one hwrng reads. The message
    names the fix.
    """


class DistributedError(HwrngError, RuntimeError):
    """``torch.distributed`` is not available or not initialised as the call needs."""


class WorkerError(DistributedError):
    """One or more ranks failed (or died, or timed out) while running a function.

    Attributes
    ----------
    failures
        ``(rank, what happened)`` for each failing rank: a traceback, or why
        it gave no answer.
    """

    def __init__(self, message: str, failures: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.failures = failures

    def summary(self) -> str:
        """One line: the first rank that raised or died, and its error's last line."""
        if not self.failures:
            return str(self).splitlines()[0] if str(self) else "a rank failed"
        hung = tuple(r for r, text in self.failures if text.startswith(NO_ANSWER))
        failed = [(r, text) for r, text in self.failures if r not in hung] or list(self.failures)
        rank, text = failed[0]
        last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")
        line = f"rank {rank} failed: {last}"
        if len(failed) > 1:
            line += f" (and rank(s) {', '.join(str(r) for r, _ in failed[1:])})"
        if hung and len(failed) < len(self.failures):
            line += f"; rank(s) {', '.join(map(str, hung))} gave no answer"
        return line


class CheckpointError(HwrngError, ValueError):
    """A saved RNG state cannot be restored here; the message names what differs."""


class VerificationError(HwrngError, RuntimeError):
    """:func:`hwrng.verify` found streams that break the seed plan.

    Attributes
    ----------
    report
        The :class:`~hwrng.VerifyReport` with every failing stream, rank and coordinate.
    """

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report


class DTensorHookError(HwrngError, RuntimeError):
    """The installed torch's DTensor RNG hook is not the one hwrng's adapter fits."""


class TorchVersionError(HwrngError, ImportError):
    """The installed torch is older than hwrng's floor: ``import hwrng`` stops with it.

    An :class:`ImportError`, as any failed import: hwrng is not usable on that torch.
    """


class BackendError(HwrngError):
    """Base class of the errors about selecting a backend (a platform)."""


class BackendNotFoundError(BackendError, LookupError):
    """No registered plugin provides a platform of the requested name.

    Parameters
    ----------
    name
        The platform name that was asked for (or the device type torch's
        accelerator has, when none provides it).
    known
        The names of every platform that is registered.
    message
        What to say instead of the default, which names the known backends.
    """

    def __init__(self, name: str, known: Iterable[str], message: str | None = None) -> None:
        self.name = name
        self.known = sorted(known)
        listed = ", ".join(self.known) if self.known else "none"
        super().__init__(message or f"no hwrng backend named {name!r}; known backends: {listed}")


class BackendUnavailableError(BackendError, RuntimeError):
    """A platform is registered but cannot run on this machine.

    Parameters
    ----------
    name
        The platform name.
    reason
        Why it is unavailable, in words a user can act on.
    """

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"hwrng backend {name!r} is unavailable: {reason}")


class DuplicateBackendError(BackendError, LookupError):
    """Two or more plugins provide a platform of the same name.

    Parameters
    ----------
    name
        The contested platform name.
    providers
        A description of each plugin that claims it.
    """

    def __init__(self, name: str, providers: Iterable[str]) -> None:
        self.name = name
        self.providers = list(providers)
        super().__init__(
            f"hwrng backend {name!r} is provided by more than one plugin: "
            f"{' and '.join(self.providers)}; uninstall one, or leave one out with "
            "HWRNG_DISABLE_PLUGINS=<plugin name>"
        )


class AmbiguousBackendError(BackendError, LookupError):
    """Auto-selection found several available platforms of the same, highest priority.

    Parameters
    ----------
    names
        The tied platform names.
    priority
        Their common priority.
    """

    def __init__(self, names: Iterable[str], priority: int) -> None:
        self.names = sorted(names)
        self.priority = priority
        super().__init__(
            f"cannot choose a backend: {', '.join(self.names)} are all available with "
            f"priority {priority}; name one, e.g. HWRNG_BACKEND={self.names[0]}"
        )

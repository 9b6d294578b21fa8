"""The exceptions hwrng raises.

Every error hwrng raises on purpose derives from :class:`HwrngError`, and each
also derives from the built-in exception a Python user would expect
(``ValueError`` for bad input, ``LookupError`` for an unknown name,
``RuntimeError`` for a state the call cannot work in), so existing
``except ValueError`` blocks keep working.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "AmbiguousBackendError",
    "BackendError",
    "BackendNotFoundError",
    "BackendUnavailableError",
    "DTensorHookError",
    "DuplicateBackendError",
    "HwrngError",
    "InvalidDeviceError",
    "InvalidOffsetError",
    "InvalidSeedError",
    "InvalidStateError",
    "MeshError",
]


class HwrngError(Exception):
    """Base class of every error hwrng raises on purpose."""


class InvalidSeedError(HwrngError, ValueError):
    """A seed is not an integer in ``[0, 2**64)``."""


class InvalidOffsetError(HwrngError, ValueError):
    """A generator offset is negative, too large, or not a multiple of 4."""


class InvalidDeviceError(HwrngError, ValueError):
    """A device or generator does not belong to the platform, or is out of range."""


class InvalidStateError(HwrngError, ValueError):
    """An RNG state tensor has the wrong type, dtype, device, shape or size."""


class MeshError(HwrngError, ValueError):
    """A device mesh, its dims, a coordinate or a process group is unusable."""


class BackendError(HwrngError):
    """Base class of the errors about selecting a backend (a platform)."""


class BackendNotFoundError(BackendError, LookupError):
    """No registered plugin provides a platform of the requested name.

    Parameters
    ----------
    name
        The platform name that was asked for.
    known
        The names of every platform that is registered.
    """

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = sorted(known)
        listed = ", ".join(self.known) if self.known else "none"
        super().__init__(f"no hwrng backend named {name!r}; known backends: {listed}")


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


class DuplicateBackendError(BackendError):
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


class AmbiguousBackendError(BackendError):
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


class DTensorHookError(HwrngError, RuntimeError):
    """The installed torch's DTensor RNG hook is not the one hwrng's adapter fits."""

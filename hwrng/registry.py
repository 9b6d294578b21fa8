"""The plugin registry: finds backends and answers which platform to use.

Plugins come from the ``hwrng`` entry-point group (the built-in backends are
registered there too) and from :func:`register_plugin`. Loading is lazy and
happens once. A plugin that fails to import, to register or to answer its
hook is recorded as broken, with its error, and never stops the others.

Environment variables
---------------------
``HWRNG_BACKEND``
    Forces the platform :func:`get_platform` returns when called without a
    name.
``HWRNG_DISABLE_PLUGINS``
    Comma-separated entry-point names not to load, e.g. to settle two plugins
    that claim the same platform name.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pluggy
import torch

from hwrng import hookspecs
from hwrng.errors import (
    AmbiguousBackendError,
    BackendNotFoundError,
    BackendUnavailableError,
    DuplicateBackendError,
    InvalidDeviceError,
)
from hwrng.platform import Platform

__all__ = [
    "BACKEND_ENV",
    "DISABLE_ENV",
    "BrokenPlugin",
    "PlatformInfo",
    "Registry",
    "default_registry",
    "get_platform",
    "list_platforms",
    "register_plugin",
    "resolve_platform",
    "unregister_plugin",
]

BACKEND_ENV = "HWRNG_BACKEND"
DISABLE_ENV = "HWRNG_DISABLE_PLUGINS"


@dataclass(frozen=True)
class BrokenPlugin:
    """A plugin that could not be used, and why.

    Attributes
    ----------
    plugin
        The plugin's name (its entry-point name, or the name it was registered under).
    stage
        Where it failed: ``"import"``, ``"register"`` or ``"hook"``.
    error
        The error, as ``"ExceptionType: message"``.
    distribution, version
        The distribution that provides it, when known.
    """

    plugin: str
    stage: str
    error: str
    distribution: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class PlatformInfo:
    """One row of :func:`list_platforms`: a platform, or a broken plugin.

    Attributes
    ----------
    name
        The platform name; for a broken plugin, the plugin's name.
    status
        ``"available"``, ``"unavailable"``, ``"conflict"`` (another plugin
        claims the same name) or ``"broken"``.
    reason
        Why it is not available, or ``None``.
    device_count
        Devices visible to this process (0 unless available).
    dist_backend, priority
        The platform's attributes (``None`` for a broken plugin).
    plugin
        The name of the plugin that provides it.
    distribution, version
        The distribution that provides the plugin, ``None`` for in-process plugins.
    """

    name: str
    status: str
    reason: str | None
    device_count: int
    dist_backend: str | None
    priority: int | None
    plugin: str
    distribution: str | None
    version: str | None

    @property
    def available(self) -> bool:
        """Whether the platform can be used on this machine."""
        return self.status == "available"

    @property
    def broken(self) -> bool:
        """Whether this row reports a plugin that failed to load or answer."""
        return self.status == "broken"


@dataclass(frozen=True)
class _Provided:
    platform: Platform
    plugin: str
    distribution: str | None
    version: str | None

    def describe(self) -> str:
        origin = f"{self.distribution} {self.version}" if self.distribution else "in-process"
        return f"plugin {self.plugin!r} ({origin})"


def _check_platform(candidate: object) -> None:
    """Refuse a platform whose declared attributes would break selection or listing."""
    if not isinstance(candidate, Platform):
        raise TypeError(f"hwrng_platforms() returned {candidate!r}, not a hwrng.Platform")
    name = getattr(candidate, "name", None)
    if not isinstance(name, str) or not name or ":" in name:
        raise TypeError(f"{candidate!r} has no usable 'name' (a device type string): {name!r}")
    if not isinstance(getattr(candidate, "dist_backend", None), str):
        raise TypeError(f"platform {name!r} has no string 'dist_backend'")
    priority = getattr(candidate, "priority", None)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"platform {name!r} has a priority that is not an int: {priority!r}")
    capabilities = getattr(candidate, "capabilities", None)
    if not isinstance(capabilities, (frozenset, set)) or not all(
        isinstance(c, str) for c in capabilities
    ):
        raise TypeError(f"platform {name!r} has capabilities that are not a set of names")


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _parse_device(device_type: str | torch.device) -> tuple[str, int | None]:
    """Split ``"cuda:1"`` or ``torch.device("cuda", 1)`` into ``("cuda", 1)``."""
    if isinstance(device_type, torch.device):
        index: int | None = device_type.index
        return device_type.type, index
    if not isinstance(device_type, str):
        raise TypeError(
            f"device_type must be a name, a torch.device or None, got {type(device_type).__name__}"
        )
    name, sep, text = device_type.partition(":")
    name = name.strip()
    if not name:
        raise ValueError(f"empty backend name {device_type!r}")
    if not sep:
        return name, None
    if not text.strip().isdigit():
        raise InvalidDeviceError(f"{device_type!r} does not end in a device index")
    return name, int(text)


class Registry:
    """A set of hwrng plugins and the platforms they provide.

    Most code uses the process-wide registry through :func:`get_platform` and
    friends; tests and tools can build their own.

    Parameters
    ----------
    entry_point_group
        The entry-point group to load plugins from, or ``None`` to load none.
    """

    def __init__(self, entry_point_group: str | None = hookspecs.PROJECT_NAME) -> None:
        self._group = entry_point_group
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._loaded = False
        self._origins: dict[str, tuple[str | None, str | None]] = {}
        self._load_failures: list[BrokenPlugin] = []
        self._disabled: list[str] = []
        self._cache: tuple[dict[str, list[_Provided]], list[BrokenPlugin]] | None = None

    # -- loading --------------------------------------------------------------------

    def load(self) -> None:
        """Load the entry-point plugins; later calls do nothing."""
        if self._loaded:
            return
        self._loaded = True
        if self._group is None:
            return
        disabled = {
            name.strip() for name in os.environ.get(DISABLE_ENV, "").split(",") if name.strip()
        }
        for entry_point in sorted(
            importlib.metadata.entry_points(group=self._group), key=lambda ep: ep.name
        ):
            dist = getattr(entry_point, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            dist_version = dist.version if dist is not None else None
            if entry_point.name in disabled:
                self._disabled.append(entry_point.name)
                continue
            try:
                plugin = entry_point.load()
            except Exception as error:  # a plugin's import may fail in any way
                self._load_failures.append(
                    BrokenPlugin(
                        entry_point.name, "import", _error_text(error), dist_name, dist_version
                    )
                )
                continue
            self._register(plugin, entry_point.name, dist_name, dist_version)
        self._cache = None

    def _register(
        self, plugin: object, name: str, distribution: str | None, version: str | None
    ) -> None:
        if self._pm.has_plugin(name):
            self._load_failures.append(
                BrokenPlugin(
                    name,
                    "register",
                    f"ValueError: a plugin named {name!r} is already registered",
                    distribution,
                    version,
                )
            )
            return
        try:
            self._pm.register(plugin, name=name)
            self._pm.check_pending()
        except Exception as error:  # pluggy validation errors, or a duplicate object
            if self._pm.has_plugin(name):
                self._pm.unregister(name=name)
            self._load_failures.append(
                BrokenPlugin(name, "register", _error_text(error), distribution, version)
            )
            return
        self._origins[name] = (distribution, version)

    def register_plugin(self, plugin: object, name: str | None = None) -> str:
        """Register an in-process plugin and return the name it was registered under.

        Parameters
        ----------
        plugin
            A module or object with :data:`~hwrng.hookimpl` functions.
        name
            The plugin's name; by default pluggy's canonical name for the object.

        Raises
        ------
        ValueError
            If the name or the object is already registered, or the object's
            hooks do not match the specifications.
        """
        self.load()
        chosen = name or self._pm.get_canonical_name(plugin)
        if self._pm.has_plugin(chosen):
            raise ValueError(f"a hwrng plugin named {chosen!r} is already registered")
        try:
            self._pm.register(plugin, name=chosen)
            self._pm.check_pending()
        except Exception:  # leave nothing half-registered behind
            if self._pm.has_plugin(chosen):
                self._pm.unregister(name=chosen)
            raise
        self._origins[chosen] = (None, None)
        self._cache = None
        return chosen

    def unregister_plugin(self, plugin: object | str) -> None:
        """Unregister a plugin given by name or by the object that was registered.

        Raises
        ------
        ValueError
            If no such plugin is registered.
        """
        self.load()
        if isinstance(plugin, str):
            if not self._pm.has_plugin(plugin):
                raise ValueError(f"no hwrng plugin named {plugin!r} is registered")
            self._pm.unregister(name=plugin)
            self._origins.pop(plugin, None)
        else:
            name = self._pm.get_name(plugin)
            if name is None:
                raise ValueError(f"{plugin!r} is not a registered hwrng plugin")
            self._pm.unregister(plugin)
            self._origins.pop(name, None)
        self._cache = None

    @property
    def disabled_plugins(self) -> list[str]:
        """Entry-point names skipped because of ``HWRNG_DISABLE_PLUGINS``."""
        self.load()
        return list(self._disabled)

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """The underlying :class:`pluggy.PluginManager` (for inspection)."""
        self.load()
        return self._pm

    # -- collecting platforms -------------------------------------------------------

    def _collect(self) -> tuple[dict[str, list[_Provided]], list[BrokenPlugin]]:
        self.load()
        if self._cache is not None:
            return self._cache
        provided: dict[str, list[_Provided]] = {}
        broken = list(self._load_failures)
        for impl in self._pm.hook.hwrng_platforms.get_hookimpls():
            distribution, version = self._origins.get(impl.plugin_name, (None, None))
            try:
                answer = impl.function()
                if not isinstance(answer, Iterable) or isinstance(answer, (str, Platform)):
                    raise TypeError(
                        f"hwrng_platforms() must return a sequence of platforms, got {answer!r}"
                    )
                platforms = list(answer)
                for candidate in platforms:
                    _check_platform(candidate)
            except Exception as error:  # a plugin's hook may fail in any way
                broken.append(
                    BrokenPlugin(
                        impl.plugin_name, "hook", _error_text(error), distribution, version
                    )
                )
                continue
            for platform in platforms:
                assert isinstance(platform, Platform)  # checked above
                provided.setdefault(platform.name, []).append(
                    _Provided(platform, impl.plugin_name, distribution, version)
                )
        self._cache = (provided, broken)
        return self._cache

    def names(self) -> list[str]:
        """Return the sorted names of every registered platform."""
        return sorted(self._collect()[0])

    @property
    def broken_plugins(self) -> list[BrokenPlugin]:
        """Plugins that failed to import, register or answer their hook."""
        return list(self._collect()[1])

    # -- answering ------------------------------------------------------------------

    def get_platform(self, device_type: str | torch.device | None = None) -> Platform:
        """Return the platform for ``device_type``, or the best available one.

        Parameters
        ----------
        device_type
            A platform name (``"cuda"``), a device string (``"cuda:1"``), a
            :class:`torch.device`, or ``None``. With ``None``, the platform named
            by ``HWRNG_BACKEND`` if set, else the available platform of highest
            priority.

        Raises
        ------
        BackendNotFoundError
            No plugin provides a platform of that name.
        BackendUnavailableError
            The platform is registered but cannot run here (``reason`` says why),
            or, when auto-selecting, no platform is available.
        DuplicateBackendError
            More than one plugin provides that name.
        AmbiguousBackendError
            Auto-selection found a tie at the highest priority.
        InvalidDeviceError
            A device index the platform does not have (``"cuda:7"`` with 2 GPUs).
        """
        provided, _ = self._collect()
        if device_type is None:
            forced = os.environ.get(BACKEND_ENV, "").strip()
            if forced:
                return self._named(_parse_device(forced)[0], provided)
            return self._auto(provided)
        name, index = _parse_device(device_type)
        platform = self._named(name, provided)
        if index is not None:
            platform.device_index(index)  # refuse "cuda:7" on a machine with fewer devices
        return platform

    @staticmethod
    def _named(name: str, provided: dict[str, list[_Provided]]) -> Platform:
        providers = provided.get(name)
        if not providers:
            raise BackendNotFoundError(name, provided)
        if len(providers) > 1:
            raise DuplicateBackendError(name, [p.describe() for p in providers])
        platform = providers[0].platform
        platform.require_available()
        return platform

    @staticmethod
    def _auto(provided: dict[str, list[_Provided]]) -> Platform:
        ranked: list[tuple[int, str, list[_Provided]]] = []
        reasons: list[str] = []
        for name, providers in sorted(provided.items()):
            probes = [(p, _safe_reason(p.platform)) for p in providers]
            usable = [p for p, reason in probes if reason is None]
            if usable:
                ranked.append((max(p.platform.priority for p in usable), name, providers))
            else:
                reasons.append(f"{name}: {probes[0][1]}")
        if not ranked:
            raise BackendUnavailableError(
                "auto", "no registered platform is available (" + "; ".join(reasons) + ")"
            )
        best = max(priority for priority, _, _ in ranked)
        winners = [(name, providers) for priority, name, providers in ranked if priority == best]
        if len(winners) > 1:
            raise AmbiguousBackendError([name for name, _ in winners], best)
        name, providers = winners[0]
        if len(providers) > 1:
            raise DuplicateBackendError(name, [p.describe() for p in providers])
        return providers[0].platform

    def list_platforms(self) -> list[PlatformInfo]:
        """Describe every registered platform, then every broken plugin.

        Asking a platform whether it is available may import its extension
        (never one that is unsafe to import here; see
        :meth:`DeviceModulePlatform.import_blocker`).
        """
        provided, broken = self._collect()
        rows: list[PlatformInfo] = []
        for name, providers in sorted(provided.items()):
            for entry in providers:
                platform = entry.platform
                reason: str | None
                if len(providers) > 1:
                    others = [p.describe() for p in providers if p is not entry]
                    status, reason = "conflict", "also provided by " + ", ".join(others)
                else:
                    reason = _safe_reason(platform)
                    status = "available" if reason is None else "unavailable"
                rows.append(
                    PlatformInfo(
                        name=name,
                        status=status,
                        reason=reason,
                        device_count=_safe_count(platform) if status == "available" else 0,
                        dist_backend=platform.dist_backend,
                        priority=platform.priority,
                        plugin=entry.plugin,
                        distribution=entry.distribution,
                        version=entry.version,
                    )
                )
        rows.extend(
            PlatformInfo(
                name=failure.plugin,
                status="broken",
                reason=f"{failure.stage} failed: {failure.error}",
                device_count=0,
                dist_backend=None,
                priority=None,
                plugin=failure.plugin,
                distribution=failure.distribution,
                version=failure.version,
            )
            for failure in broken
        )
        return rows


def _safe_reason(platform: Platform) -> str | None:
    try:
        return platform.unavailable_reason()
    except Exception as error:  # a third-party probe must not break the listing
        return f"unavailable_reason() raised {_error_text(error)}"


def _safe_count(platform: Platform) -> int:
    try:
        return platform.device_count()
    except Exception:  # a third-party probe must not break the listing
        return 0


_default: Registry | None = None


def default_registry() -> Registry:
    """Return the process-wide registry, creating it on first use."""
    global _default
    if _default is None:
        _default = Registry()
    return _default


def get_platform(device_type: str | torch.device | None = None) -> Platform:
    """Return the platform for ``device_type`` from the process-wide registry.

    See :meth:`Registry.get_platform`.
    """
    return default_registry().get_platform(device_type)


def list_platforms() -> list[PlatformInfo]:
    """Describe every registered platform and broken plugin.

    See :meth:`Registry.list_platforms`.
    """
    return default_registry().list_platforms()


def register_plugin(plugin: ModuleType | Any, name: str | None = None) -> str:
    """Register an in-process plugin with the process-wide registry; return its name.

    Unregister it with :func:`unregister_plugin`, e.g. in a ``finally`` block.
    """
    return default_registry().register_plugin(plugin, name)


def unregister_plugin(plugin: object | str) -> None:
    """Unregister a plugin, by name or object, from the process-wide registry."""
    default_registry().unregister_plugin(plugin)


def resolve_platform(platform: Platform | str | torch.device | None) -> Platform:
    """Return ``platform`` itself, or the registry's answer for a name or ``None``."""
    if isinstance(platform, Platform):
        return platform
    return get_platform(platform)

"""The plugin registry: finds backends and answers which platform to use.

Plugins come from the ``hwrng`` entry-point group (the built-in backends are
registered there too) and from :func:`register_plugin`. Loading is lazy and
happens once per registry. pluggy's own ``load_setuptools_entrypoints`` does
not isolate plugins from each other -- one failing import aborts its loop --
so each entry point is imported on its own, under a time bound, and checked
against a scratch manager: a plugin that fails to import (even by calling
``sys.exit``), takes too long, or does not fit the hook specifications is
recorded as broken, naming it; the others load. The object that import gave
is the one registered (nothing imports a plugin twice), and each plugin's
distribution metadata is read once, when it loads: its name, version and
requirement on hwrng (``hwrng._pins``).

Environment variables
---------------------
``HWRNG_BACKEND``
    The platform :func:`get_platform` returns when called without a name
    (``cuda`` or ``cuda:1``).
``HWRNG_DISABLE_PLUGINS``
    Comma-separated entry-point names not to load, e.g. to settle two plugins
    that claim the same platform name. A name that matches no entry point is
    reported with a :class:`~hwrng.HwrngWarning`.
``HWRNG_PLUGIN_IMPORT_TIMEOUT``
    Seconds one plugin's import may take before it is recorded as broken
    (default 20).
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

import pluggy
import torch

from hwrng import hookspecs
from hwrng._exceptions import (
    AmbiguousBackendError,
    BackendNotFoundError,
    BackendUnavailableError,
    DuplicateBackendError,
    HwrngError,
    HwrngWarning,
    InvalidArgumentError,
    InvalidValueError,
)
from hwrng._pins import pin_mismatch
from hwrng._platform import Platform, parse_device
from hwrng._validation import positive_seconds_from_env
from hwrng._version import __version__

__all__ = [
    "BACKEND_ENV",
    "DISABLE_ENV",
    "IMPORT_TIMEOUT_ENV",
    "BrokenPlugin",
    "PlatformInfo",
    "PlatformStatus",
    "Registry",
    "default_registry",
    "get_platform",
    "hold_planned_platform",
    "list_platforms",
    "platform_in_force",
    "register_plugin",
    "unregister_plugin",
]

BACKEND_ENV = "HWRNG_BACKEND"
DISABLE_ENV = "HWRNG_DISABLE_PLUGINS"
IMPORT_TIMEOUT_ENV = "HWRNG_PLUGIN_IMPORT_TIMEOUT"
DEFAULT_IMPORT_TIMEOUT = 20.0

#: How a row of :func:`list_platforms` stands.
PlatformStatus = Literal["available", "unavailable", "conflict", "broken"]

#: Where a broken plugin failed.
FailureStage = Literal["import", "register", "hook"]


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
    stage: FailureStage
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
    status: PlatformStatus
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
    #: Why the distribution cannot serve this hwrng (it pins another version), read once.
    mismatch: str | None = None

    def reason(self) -> str | None:
        """Why this provider's platform cannot be used here, or ``None``."""
        return self.mismatch or _safe_reason(self.platform)

    def describe(self) -> str:
        origin = f"{self.distribution} {self.version}" if self.distribution else "in-process"
        return f"plugin {self.plugin!r} ({origin})"


@dataclass(frozen=True)
class _Origin:
    """What the registry reads of a plugin's distribution, once, when the plugin loads."""

    distribution: str
    version: str
    #: Why the distribution cannot serve this hwrng (its requirement on hwrng), or None.
    mismatch: str | None


@dataclass(frozen=True)
class _Snapshot:
    """What the plugins provide, collected once until a plugin is (un)registered."""

    provided: dict[str, list[_Provided]] = field(default_factory=dict)
    broken: list[BrokenPlugin] = field(default_factory=list)


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
    if not isinstance(getattr(candidate, "one_rank_per_device", None), bool):
        raise TypeError(f"platform {name!r} has a one_rank_per_device that is not a bool")
    overridden = sorted(
        method
        for method in Platform.final_methods
        if getattr(type(candidate), method) is not getattr(Platform, method)
    )
    if overridden:
        raise TypeError(
            f"platform {name!r} overrides {', '.join(overridden)}, which hwrng.Platform "
            "marks final (they check their input before acting): override the members they "
            "call instead (seed_device, seed_all_devices, select_device, counter, generator)"
        )


def _error_text(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"SystemExit: the plugin called sys.exit({error.code!r})"
    return f"{type(error).__name__}: {error}"


def _import_timeout() -> float:
    return positive_seconds_from_env(IMPORT_TIMEOUT_ENV, DEFAULT_IMPORT_TIMEOUT)


def _import_isolated(
    entry_point: importlib.metadata.EntryPoint, timeout: float
) -> tuple[object, str | None]:
    """Load an entry point's object on its own thread: ``(object, None)`` or ``(None, error)``.

    A thread bounds the wait (an import cannot be interrupted, so one that
    overruns keeps running in the background, but its plugin is never used)
    and catches ``SystemExit`` raised at import, which would end the process.
    """
    outcome: list[tuple[object, str | None]] = []

    def target() -> None:
        try:
            loaded = entry_point.load()
        except BaseException as error:
            outcome.append((None, _error_text(error)))
        else:
            outcome.append((loaded, None))

    worker = threading.Thread(target=target, name=f"hwrng-import-{entry_point.name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        return None, (
            f"TimeoutError: importing it took longer than {timeout:g} s ({IMPORT_TIMEOUT_ENV})"
        )
    return outcome[0]


def _hook_errors(plugin: object, name: str) -> str | None:
    """Register ``plugin`` in a scratch manager: the error pluggy would raise, or None."""
    scratch = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    scratch.add_hookspecs(hookspecs)
    try:
        scratch.register(plugin, name=name)
        scratch.check_pending()
    except Exception as error:  # pluggy's validation errors, or a plugin's own
        return _error_text(error)
    return None


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
        self._load_failures: list[BrokenPlugin] = []
        self._disabled: list[str] = []
        self._origins: dict[str, _Origin] = {}
        self._snapshot: _Snapshot | None = None
        self._lock = threading.RLock()

    # -- loading --------------------------------------------------------------------

    def load(self) -> None:
        """Load the entry-point plugins; later calls do nothing."""
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            if self._group is not None:
                self._load_entry_points(self._group)
            self._snapshot = None

    def _load_entry_points(self, group: str) -> None:
        entry_points = sorted(importlib.metadata.entry_points(group=group), key=lambda e: e.name)
        disabled = {
            name.strip() for name in os.environ.get(DISABLE_ENV, "").split(",") if name.strip()
        }
        names = {entry_point.name for entry_point in entry_points}
        unknown = sorted(disabled - names)
        if unknown:
            warnings.warn(
                f"{DISABLE_ENV} names {', '.join(map(repr, unknown))}, which no installed "
                f"plugin is called (installed: {', '.join(sorted(names)) or 'none'})",
                HwrngWarning,
                stacklevel=4,
            )
        timeout = _import_timeout()
        origins: dict[int, _Origin | None] = {}  # by distribution: its metadata is read once
        for entry_point in entry_points:
            name = entry_point.name
            if name in disabled:
                if name not in self._disabled:
                    self._disabled.append(name)
                continue
            dist = getattr(entry_point, "dist", None)
            if id(dist) not in origins:
                origins[id(dist)] = _origin_of(dist)
            origin = origins[id(dist)]
            plugin, failure = _import_isolated(entry_point, timeout)
            stage: FailureStage = "import"
            if failure is None:
                stage, failure = "register", _hook_errors(plugin, name)
            if failure is None and self._pm.has_plugin(name):
                failure = f"ValueError: a plugin named {name!r} is already registered"
            if failure is None:
                try:
                    self._pm.register(plugin, name=name)
                except ValueError as error:  # the same object under another entry point's name
                    failure = _error_text(error)
            if failure is not None:
                self._load_failures.append(
                    BrokenPlugin(
                        name,
                        stage,
                        failure,
                        None if origin is None else origin.distribution,
                        None if origin is None else origin.version,
                    )
                )
            elif origin is not None:
                self._origins[name] = origin

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
        InvalidValueError
            If the name or the object is already registered.
        InvalidArgumentError
            If the object's hooks do not match the specifications (pluggy's
            ``PluginValidationError`` is its ``__cause__``).
        """
        with self._lock:
            self.load()
            chosen = name or self._pm.get_canonical_name(plugin)
            if self._pm.has_plugin(chosen):
                raise InvalidValueError(f"a hwrng plugin named {chosen!r} is already registered")
            try:
                self._pm.register(plugin, name=chosen)
                self._pm.check_pending()
            except Exception as error:  # leave nothing half-registered behind
                if self._pm.has_plugin(chosen):
                    self._pm.unregister(name=chosen)
                if isinstance(error, pluggy.PluginValidationError):
                    raise InvalidArgumentError(
                        f"plugin {chosen!r} does not fit hwrng's hook specifications: {error}"
                    ) from error
                raise
            self._snapshot = None
            return chosen

    def unregister_plugin(self, plugin: object | str) -> None:
        """Unregister a plugin given by name or by the object that was registered.

        Raises
        ------
        InvalidValueError
            If no such plugin is registered.
        """
        with self._lock:
            self.load()
            if isinstance(plugin, str):
                if not self._pm.has_plugin(plugin):
                    raise InvalidValueError(f"no hwrng plugin named {plugin!r} is registered")
                self._pm.unregister(name=plugin)
            else:
                if self._pm.get_name(plugin) is None:
                    raise InvalidValueError(f"{plugin!r} is not a registered hwrng plugin")
                self._pm.unregister(plugin)
            self._snapshot = None

    @property
    def disabled_plugins(self) -> list[str]:
        """Entry-point names skipped because of ``HWRNG_DISABLE_PLUGINS``."""
        self.load()
        return list(self._disabled)

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """The underlying :class:`pluggy.PluginManager` (for inspection and other hooks)."""
        self.load()
        return self._pm

    # -- collecting platforms -------------------------------------------------------

    def _collect(self) -> _Snapshot:
        with self._lock:
            self.load()
            if self._snapshot is not None:
                return self._snapshot
            snapshot = _Snapshot(broken=list(self._load_failures))
            for impl in self._pm.hook.hwrng_platforms.get_hookimpls():
                origin = self._origins.get(impl.plugin_name)
                distribution = None if origin is None else origin.distribution
                version = None if origin is None else origin.version
                mismatch = None if origin is None else origin.mismatch
                try:
                    platforms = _platforms_from(impl.function())
                except (Exception, SystemExit) as error:  # a plugin's hook may fail in any way
                    snapshot.broken.append(
                        BrokenPlugin(
                            impl.plugin_name, "hook", _error_text(error), distribution, version
                        )
                    )
                    continue
                for platform in platforms:
                    snapshot.provided.setdefault(platform.name, []).append(
                        _Provided(platform, impl.plugin_name, distribution, version, mismatch)
                    )
            self._snapshot = snapshot
            return snapshot

    def names(self) -> list[str]:
        """Return the sorted names of every registered platform."""
        return sorted(self._collect().provided)

    @property
    def broken_plugins(self) -> list[BrokenPlugin]:
        """Plugins that failed to import, register or answer their hook."""
        return list(self._collect().broken)

    # -- answering ------------------------------------------------------------------

    def get_platform(self, device_type: str | torch.device | None = None) -> Platform:
        """Return the platform for ``device_type``, or the best available one.

        Parameters
        ----------
        device_type
            A platform name (``"cuda"``), a device string (``"cuda:1"``), a
            :class:`torch.device`, or ``None``. With ``None``, the platform named
            by ``HWRNG_BACKEND`` if set (a device string such as ``cuda:1`` has
            its index checked too), else the available platform of highest priority.

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
            A device index the platform does not have (``"cuda:7"`` with 2 GPUs),
            or a device string that names no platform (``":0"``).
        InvalidArgumentError
            ``device_type`` is neither a name, a device nor ``None``.
        """
        provided = self._collect().provided
        if device_type is None:
            forced = os.environ.get(BACKEND_ENV, "").strip()
            if not forced:
                return self._auto(provided)
            try:
                name, index = parse_device(forced)
            except HwrngError as error:
                raise type(error)(f"{BACKEND_ENV}={forced!r}: {error}") from None
        else:
            name, index = parse_device(device_type)
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
        reason = providers[0].reason()
        if reason is not None:
            raise BackendUnavailableError(name, reason)
        return platform

    @staticmethod
    def _auto(provided: dict[str, list[_Provided]]) -> Platform:
        ranked: list[tuple[int, str, list[_Provided]]] = []
        reasons: list[str] = []
        for name, providers in sorted(provided.items()):
            probes = [(p, p.reason()) for p in providers]
            usable = [p for p, reason in probes if reason is None]
            if usable:
                ranked.append((max(p.platform.priority for p in usable), name, providers))
            else:
                reasons.append(f"{name}: {probes[0][1]}")
        _refuse_a_missed_accelerator(provided, ranked)
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
        snapshot = self._collect()
        rows: list[PlatformInfo] = []
        for name, providers in sorted(snapshot.provided.items()):
            for entry in providers:
                platform = entry.platform
                status: PlatformStatus
                reason: str | None
                if len(providers) > 1:
                    others = [p.describe() for p in providers if p is not entry]
                    status, reason = "conflict", "also provided by " + ", ".join(others)
                else:
                    reason = entry.reason()
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
            for failure in snapshot.broken
        )
        return rows


def _origin_of(dist: importlib.metadata.Distribution | None) -> _Origin | None:
    """Read a plugin distribution's metadata once: name, version, its requirement on hwrng."""
    if dist is None:
        return None
    metadata = dist.metadata  # parses the METADATA file: once per distribution
    name, version = str(metadata["Name"]), str(metadata["Version"])
    requires = metadata.get_all("Requires-Dist") or []
    return _Origin(name, version, pin_mismatch(name, version, requires, __version__))


def _platforms_from(answer: object) -> list[Platform]:
    if not isinstance(answer, Iterable) or isinstance(answer, (str, Platform)):
        raise TypeError(f"hwrng_platforms() must return a sequence of platforms, got {answer!r}")
    platforms = list(answer)
    for candidate in platforms:
        _check_platform(candidate)
    return platforms


#: What to install for the accelerators whose backends are this repository's distributions.
INSTALL_COMMANDS = {"cuda": 'pip install "hwrng[cuda]"', "npu": 'pip install "hwrng[npu]"'}


def current_accelerator() -> str | None:
    """The device type of torch's accelerator if one is usable here, else ``None``.

    ``torch.accelerator.current_accelerator()`` names the accelerator a torch
    build was made for even on a machine without one (torch 2.15's CUDA wheel on
    a host without a GPU says ``cuda``): only one ``torch.accelerator.is_available()``
    confirms counts.
    """
    try:
        device = torch.accelerator.current_accelerator()
        if device is None or not torch.accelerator.is_available():
            return None
    except Exception:  # an accelerator's runtime can fail to answer: then there is none to miss
        return None
    return str(device.type)


def _refuse_a_missed_accelerator(
    provided: dict[str, list[_Provided]], ranked: list[tuple[int, str, list[_Provided]]]
) -> None:
    """Refuse to auto-select when torch has an accelerator that no usable backend serves.

    Picking the CPU then would seed and checkpoint the host only, while the
    job's random ops run on the accelerator: a silent CPU-only hwrng.
    """
    accelerator = current_accelerator()
    if accelerator is None:
        return
    usable = {p.platform.device_type for _, _, providers in ranked for p in providers}
    if accelerator in usable:
        return
    present = [p for ps in provided.values() for p in ps if p.platform.device_type == accelerator]
    use_cpu = f"(to use the CPU on purpose: {BACKEND_ENV}=cpu, or platform='cpu')"
    if present:
        raise BackendUnavailableError(
            present[0].platform.name,
            f"torch's accelerator is {accelerator!r}, but its hwrng backend cannot run: "
            f"{present[0].reason()}; hwrng will not fall back to the CPU {use_cpu}",
        )
    install = INSTALL_COMMANDS.get(
        accelerator, f"install an hwrng backend for {accelerator!r} (see 'Writing a backend')"
    )
    raise BackendNotFoundError(
        accelerator,
        provided,
        f"torch's accelerator is {accelerator!r}, but no installed hwrng backend provides it: "
        f"{install} {use_cpu}",
    )


def _safe_reason(platform: Platform) -> str | None:
    try:
        return platform.unavailable_reason()
    except (Exception, SystemExit) as error:  # a third-party probe must not break the listing
        return f"unavailable_reason() raised {_error_text(error)}"


def _safe_count(platform: Platform) -> int:
    try:
        return platform.device_count()
    except (Exception, SystemExit):  # a third-party probe must not break the listing
        return 0


_default: Registry | None = None
_default_lock = threading.Lock()


def default_registry() -> Registry:
    """Return the process-wide registry, creating it on first use."""
    global _default
    with _default_lock:
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


#: The platform the seed plan in force was made for (``None``: no plan is in force). Written by
#: ``hwrng._seeding.record_seeding`` alone, whenever the plan in force changes.
_planned: str | None = None


def hold_planned_platform(name: str | None) -> None:
    """Record the platform of the seed plan now in force (``None``: no plan is in force)."""
    global _planned
    _planned = name


def platform_in_force(platform: Platform | str | torch.device | None = None) -> Platform:
    """The platform an entry point's ``platform=`` argument means.

    The argument itself when given (a :class:`~hwrng.Platform`, or a name or
    device the registry answers for); with ``None``, the platform of the seed
    plan in force (:func:`hwrng.current_seeding`), so that after
    ``hwrng.manual_seed(1, platform="cpu")`` every later call without
    ``platform=`` acts on the CPU too, even where torch reports an accelerator;
    with no plan in force, the registry's choice (``HWRNG_BACKEND``, then
    auto-selection: :func:`hwrng.get_platform`).

    Every hwrng entry point that takes ``platform=`` resolves it here, once per
    call, and passes the :class:`~hwrng.Platform` it got down, so that one call
    never reads two platforms.

    Raises
    ------
    BackendError
        As :func:`hwrng.get_platform`, for the platform chosen.
    """
    if isinstance(platform, Platform):
        return platform
    if platform is None and _planned is not None:
        return get_platform(_planned)
    return get_platform(platform)

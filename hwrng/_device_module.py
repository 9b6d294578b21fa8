"""``DeviceModulePlatform``: a whole :class:`~hwrng.Platform` over a torch device module.

torch requires a device module (``torch.cuda``, ``torch.xpu``, a PrivateUse1
module such as ``torch.npu``) to provide a small API, written down here as
:class:`DeviceModule`; this base builds a platform on it, so a backend for
such a device is a few class attributes.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, ClassVar, Protocol

import torch

from hwrng._device_counter import DeviceCounter
from hwrng._exceptions import BackendUnavailableError
from hwrng._platform import CounterView, DeviceLike, Platform

__all__ = ["DeviceModule", "DeviceModulePlatform"]


class DeviceModule(Protocol):
    """What :class:`DeviceModulePlatform` needs of a torch device module.

    torch's own contract for a device module (``torch/utils/backend_registration.py``)
    asks for these; ``default_generators``, ``init``, ``is_initialized``,
    ``set_device`` and ``get_device_name`` are used where a module has them.
    """

    def is_available(self) -> bool:
        """Whether a device of this type can be used."""

    def device_count(self) -> int:
        """The number of visible devices."""

    def current_device(self) -> int:
        """The index of the current device."""

    def manual_seed(self, seed: int) -> None:
        """Seed the current device's default generator."""

    def manual_seed_all(self, seed: int) -> None:
        """Seed every device's default generator."""

    def get_rng_state(self, device: Any = ...) -> torch.Tensor:
        """A device's generator state."""

    def set_rng_state(self, new_state: torch.Tensor, device: Any = ...) -> None:
        """Set a device's generator state."""


class DeviceModulePlatform(Platform):
    """Base for accelerators that follow torch's device-module API.

    torch requires a device module (``torch.cuda``, ``torch.xpu``, a
    PrivateUse1 module such as ``torch.npu``) to provide ``is_available``,
    ``device_count``, ``current_device``, ``manual_seed(_all)`` and
    ``get/set_rng_state``, and most expose ``default_generators``. This base
    builds a whole :class:`Platform` on that, with a :class:`PhiloxCounter`
    for generators with offsets, and the emulated :class:`MersenneCounter` for
    those without (a generator derived from the CPU's, as PyTorch's reference
    PrivateUse1 backend OpenReg has).
    A backend sets :attr:`name`, :attr:`dist_backend` and, when the device type
    comes from an extension, :attr:`extension_module`::

        class XPUPlatform(DeviceModulePlatform):
            name = "xpu"
            dist_backend = "xccl"

    The extension is imported only when the platform is asked whether it is
    available, never while plugins load.

    Attributes
    ----------
    extension_module
        The package that registers the device type with torch (``"torch_npu"``),
        or ``None`` when torch itself ships it.
    install_hint
        What to tell a user whose machine lacks :attr:`extension_module`.
    counter_type
        The :class:`CounterView` class for this device's generators, made once
        per platform by its :meth:`CounterView.for_platform`. The default
        serves each generator as it is: through its native offsets (as
        :class:`PhiloxCounter`), else its 16-byte Philox state, else torch's
        Mersenne-Twister state (as :class:`hwrng.MersenneCounter`). A backend
        sets :class:`hwrng.MersenneCounter` (a software device over CPU
        generators), :class:`PhiloxCounter`, or a view of its own.
    """

    priority: ClassVar[int] = 100
    extension_module: ClassVar[str | None] = None
    install_hint: ClassVar[str] = ""
    counter_type: ClassVar[type[CounterView]] = DeviceCounter
    #: Why :attr:`extension_module` cannot serve, once it was not found or failed to import:
    #: asked again on every auto-selection (each op on the default generator), the search of
    #: ``sys.path`` (or a failing import, run again) cost more than a small op itself. An
    #: extension installed or mended after that is seen by a new process.
    _extension_refusal: str | None = None

    def __init__(self) -> None:
        self._counter: CounterView = self.counter_type.for_platform(self)
        self._module: DeviceModule | None = None
        self._generators: tuple[torch.Generator, ...] | None = None

    @property
    def counter(self) -> CounterView:
        """The counter view, a :attr:`counter_type` made for this platform."""
        return self._counter

    def import_blocker(self) -> str | None:
        """Say why importing :attr:`extension_module` here would be unsafe, or ``None``.

        Called before the import; the base allows it. Override for extensions
        that break the process in some environments.
        """
        return None

    def load_device_module(self) -> DeviceModule:
        """Import the extension if needed and return the torch device module.

        Raises
        ------
        BackendUnavailableError
            If the extension is missing, unsafe to import here, or fails to import.
        """
        if self._module is not None:
            return self._module
        extension = self.extension_module
        if extension is not None:
            if self._extension_refusal is not None:
                raise BackendUnavailableError(self.name, self._extension_refusal)
            if importlib.util.find_spec(extension) is None:
                hint = f"; {self.install_hint}" if self.install_hint else ""
                self._extension_refusal = f"{extension} is not installed{hint}"
                raise BackendUnavailableError(self.name, self._extension_refusal)
            blocker = self.import_blocker()
            if blocker is not None:
                raise BackendUnavailableError(self.name, blocker)
            try:
                importlib.import_module(extension)
            except Exception as error:  # an extension can fail in many ways; report any
                self._extension_refusal = (
                    f"importing {extension} failed: {type(error).__name__}: {error}"
                )
                raise BackendUnavailableError(self.name, self._extension_refusal) from error
        try:
            module = self.find_device_module()
        except RuntimeError as error:
            raise BackendUnavailableError(
                self.name, f"torch has no device module for {self.name!r}: {error}"
            ) from error
        self._module = module
        return module

    def find_device_module(self) -> DeviceModule:
        """Return the device module, once :attr:`extension_module` is imported.

        By default ``torch.get_device_module(self.name)``; a software device
        that is not a torch device type returns its own module.
        """
        module: DeviceModule = torch.get_device_module(self.name)
        return module

    def unavailable_reason(self) -> str | None:
        """Say why the device cannot be used here, or ``None``."""
        try:
            module = self.load_device_module()
            if not module.is_available():
                return self.not_available_detail(module)
            if module.device_count() < 1:
                return f"torch.{self.name}.device_count() is 0"
        except BackendUnavailableError as error:
            return error.reason
        except Exception as error:  # is_available must never raise out of a probe
            return f"probing {self.name} failed: {type(error).__name__}: {error}"
        return None

    def not_available_detail(self, module: DeviceModule) -> str:
        """Explain a ``False`` from ``module.is_available()``; override for detail."""
        return f"torch.{self.name}.is_available() is False"

    @property
    def device_handle(self) -> DeviceModule:
        """The torch device module, imported on first use."""
        return self.load_device_module()

    def device_count(self) -> int:
        """Return the number of visible devices, 0 when the platform is unavailable."""
        if not self.is_available():
            return 0
        return int(self.device_handle.device_count())

    def current_device(self) -> int:
        """Return the current device index."""
        self.require_available()
        return int(self.device_handle.current_device())

    def _initialised(self) -> bool:
        probe = getattr(self.device_handle, "is_initialized", None)
        return bool(probe()) if callable(probe) else True

    def generator(self, device: DeviceLike = None) -> torch.Generator:
        """Return the default generator of ``device``, initialising the device module.

        After the first call the generators are cached: the current device's
        is then a list lookup (this runs for every tracked op).
        """
        cached = self._generators
        if cached is not None and device is None:
            return cached[int(self.device_handle.current_device())]
        self.require_available()
        index = self.device_index(device)
        module = self.device_handle
        init = getattr(module, "init", None)
        if callable(init):
            init()
        generators = getattr(module, "default_generators", None)
        if generators is None or len(generators) <= index:
            raise BackendUnavailableError(
                self.name, f"torch.{self.name}.default_generators has no generator {index}"
            )
        if len(generators) == self.device_count():
            self._generators = tuple(generators)
        generator = generators[index]
        assert isinstance(generator, torch.Generator)
        return generator

    def seed_device(self, seed: int, device: DeviceLike = None) -> None:
        """Seed ``device``; before the device module is initialised, lazily.

        Like ``torch.cuda.manual_seed``, seeding the current device before
        initialisation is queued rather than creating a context now, so that a
        process that has not yet chosen its device does not open one on device 0.
        """
        self.require_available()
        if device is None and not self._initialised():
            self.device_handle.manual_seed(seed)
            return
        super().seed_device(seed, device)

    def seed_all_devices(self, seed: int) -> None:
        """Seed every device; before the device module is initialised, lazily."""
        self.require_available()
        if not self._initialised():
            self.device_handle.manual_seed_all(seed)
            return
        super().seed_all_devices(seed)

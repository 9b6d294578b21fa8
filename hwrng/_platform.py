"""The platform interface: everything hwrng needs from a kind of hardware.

A :class:`Platform` describes one torch device type (``"cpu"``, ``"cuda"``,
``"npu"``, ...): whether it can run here, its devices, their default
generators, their RNG state, a counter view of each generator, and a
collective broadcast. hwrng's seeding, offset tracking, forking and
checkpointing are written once against this interface.

Backends implement it as pluggy plugins (see :mod:`hwrng.hookspecs`).
:class:`~hwrng.DeviceModulePlatform` (in ``_device_module``) is a ready base for
accelerators that follow torch's device-module API (``torch.cuda``,
``torch.npu``, ``torch.xpu``, ...): a backend for such a device is a few class
attributes.

Every public method checks its input and raises before changing any state.
The methods that check are marked :func:`typing.final`: a backend does not
override them (mypy says so, and the registry refuses a platform that does),
but the members they call -- :meth:`Platform.seed_device`,
:meth:`Platform.seed_all_devices`, :meth:`Platform.select_device`, the counter
view, the generators -- which receive checked values.
"""

from __future__ import annotations

import abc
import operator
from typing import Any, ClassVar, TypeAlias, final

import torch
import torch.distributed as dist

from hwrng._exceptions import (
    BackendUnavailableError,
    DistributedError,
    InvalidArgumentError,
    InvalidDeviceError,
    InvalidValueError,
)
from hwrng._state_digest import default_state_digest
from hwrng._validation import (
    apply_state,
    check_index,
    check_offset,
    check_seed,
    check_state_tensor,
)

__all__ = [
    "HOST_COLLECTIVE_BACKEND",
    "CounterView",
    "DeviceLike",
    "Platform",
    "collective_backend",
    "parse_device",
]

#: The ``torch.distributed`` backend that runs any number of ranks on one host, over
#: CPU tensors: what :func:`collective_backend` falls back to.
HOST_COLLECTIVE_BACKEND = "gloo"

#: How a device may be named: an index, ``"cuda:1"``, a :class:`torch.device`,
#: or ``None`` for the platform's current device.
DeviceLike: TypeAlias = "int | str | torch.device | None"


def _is_torch_device_type(name: str) -> bool:
    try:
        torch.device(name)
    except (RuntimeError, TypeError):
        return False
    return True


def parse_device(device: str | torch.device) -> tuple[str, int | None]:
    """Split ``"cuda:1"`` or ``torch.device("cuda", 1)`` into ``("cuda", 1)``.

    The one parser of device strings: the registry reads ``HWRNG_BACKEND`` and
    ``get_platform``'s argument with it, platforms read device names with it.

    Raises
    ------
    InvalidDeviceError
        For a string that names no device type, or ends in something that is
        not a device index.
    InvalidArgumentError
        For anything that is neither a string nor a :class:`torch.device`.
    """
    if isinstance(device, torch.device):
        index: int | None = device.index
        return device.type, index
    if not isinstance(device, str):
        raise InvalidArgumentError(
            f"a device must be a name or a torch.device, got {type(device).__name__}"
        )
    name, sep, text = device.partition(":")
    name = name.strip()
    if not name:
        raise InvalidDeviceError(f"empty backend name in {device!r} (expected e.g. 'cuda:0')")
    if not sep:
        return name, None
    if not text.strip().isdigit():
        raise InvalidDeviceError(f"{device!r} does not end in a device index")
    return name, int(text)


class CounterView(abc.ABC):
    """How a platform reads and positions a generator as ``(seed, offset)``.

    hwrng's sharded-random-op logic is written against one model of a
    generator: a seed, and an offset counted in the units of a counter-based
    (Philox) generator, in multiples of 4. What hwrng relies on is only this:
    the same ``(seed, offset)`` gives the same draws, and different offsets
    give different draws. It never assumes that offsets are positions in one
    sequence (on Ascend NPUs each offset selects an independent stream).
    :class:`~hwrng.PhiloxCounter` serves native counters and
    :class:`~hwrng.MersenneCounter` emulates one; it lives here, beside the
    :class:`Platform` that hands it out, because each names the other.

    Implementations receive values already checked by the :class:`~hwrng.Platform`
    that calls them: a generator of the platform's device type, a seed in
    ``[0, 2**64)`` and an offset that is a multiple of 4 in ``[0, 2**63)``.
    """

    @classmethod
    def for_platform(cls, platform: Platform) -> CounterView:
        """Make the view a platform uses (see :attr:`hwrng.DeviceModulePlatform.counter_type`).

        The base calls the class without arguments; a view that needs to know
        something of its platform overrides this.
        """
        del platform  # this view needs nothing of it
        return cls()

    @abc.abstractmethod
    def read(self, generator: torch.Generator) -> tuple[int, int]:
        """Return the ``(seed, offset)`` the generator will draw from next.

        An emulated view may move the generator to the position it reports
        (see :class:`~hwrng.MersenneCounter`), so that the pair determines the
        next draws.
        """

    def peek(self, generator: torch.Generator) -> tuple[int, int]:
        """Return what :meth:`read` would, changing nothing: neither the generator nor the view.

        For native counters the two are the same; hwrng's own checks use this
        one, so that a call refused after reading has changed nothing, and a
        call that only looks (``hwrng.verify``) leaves every later read as it
        would have been without it. An emulated view that remembers positions
        (:class:`~hwrng.MersenneCounter`) overrides it.
        """
        seed, offset, _ = self.locate(generator)
        return seed, offset

    def locate(self, generator: torch.Generator) -> tuple[int, int, bool]:
        """:meth:`peek`, and whether the generator already sits exactly at that position.

        ``False`` only for an emulated view whose generator has drawn since it
        was positioned: :meth:`read` would move it there. A caller that then
        positions the generator itself (a tracked region) reads through this:
        an emulated view remembers what it answered, as :meth:`read` does.
        """
        seed, offset = self.read(generator)
        return seed, offset, True

    @abc.abstractmethod
    def write(self, generator: torch.Generator, seed: int, offset: int) -> None:
        """Position the generator at ``(seed, offset)``.

        Afterwards :meth:`read` returns ``(seed, offset)`` and the next draws are
        fully determined by the pair. ``write(g, s, 0)`` must seed exactly as the
        platform's ``manual_seed(s)`` does.
        """

    def rewrite(self, generator: torch.Generator, seed: int, offset: int) -> None:
        """Put the generator back at ``(seed, offset)``, a position it held before.

        A recomputation of an activation checkpoint repeats its forward's
        positions; this positions the generator as :meth:`write` does without
        counting the position as progress, where a view keeps a record of
        progress (an emulated view's history). Natively counted generators
        have none: the base calls :meth:`write`.
        """
        self.write(generator, seed, offset)


class Platform(abc.ABC):
    """One kind of hardware, as hwrng's random-state logic sees it.

    Subclasses set the class attributes and implement the abstract members;
    the concrete methods here validate input and then use those members.

    Attributes
    ----------
    name
        The platform's name, which is the torch device type of its devices
        (``"cuda"``); also the name ``HWRNG_BACKEND`` and
        :func:`hwrng.get_platform` use.
    dist_backend
        The ``torch.distributed`` backend for this hardware (``"nccl"``,
        ``"hccl"``, ``"gloo"``).
    priority
        Auto-selection picks the available platform of highest priority.
        Accelerators use 100, the CPU 0; a software or debugging device
        should use a negative number so it never wins by default.
    capabilities
        Named optional behaviours the conformance suite checks or skips by:
        ``"dtensor"`` means torch's random ops on this device type's tensors
        draw from :meth:`generator`, so DTensor random ops can be tracked.
    one_rank_per_device
        Whether :attr:`dist_backend` needs each process on a device of its own
        (NCCL, HCCL: one rank per GPU or NPU). ``True`` by default, the safe
        answer for an accelerator; ``False`` for the CPU and for software
        devices whose backend (gloo) runs any number of ranks on one device.
        :func:`hwrng.collective_backend` reads it to choose a process group's
        backend, and ``hwrng check`` to choose how many ranks a machine runs.
    final_methods
        The methods a backend must not override, each marked
        :func:`typing.final`: those that check their input before they act,
        and :meth:`position`, through which every write of a position passes
        (a backend changes how positions are written through :attr:`counter`).
        The registry refuses a platform whose class overrides one; mypy reports
        it first.
    """

    name: ClassVar[str]
    dist_backend: ClassVar[str]
    priority: ClassVar[int] = 0
    capabilities: ClassVar[frozenset[str]] = frozenset({"dtensor"})
    one_rank_per_device: ClassVar[bool] = True
    final_methods: ClassVar[frozenset[str]] = frozenset(
        {
            "broadcast",
            "check_generator",
            "device_index",
            "get_seed_offset",
            "is_available",
            "manual_seed",
            "manual_seed_all",
            "position",
            "require_available",
            "set_device",
            "set_rng_state",
            "set_seed_offset",
            "uses_host_generator",
        }
    )

    # -- availability ---------------------------------------------------------------

    @abc.abstractmethod
    def unavailable_reason(self) -> str | None:
        """Say why the platform cannot run here, or return ``None`` if it can.

        Must not raise and must not import anything that could break the
        process (see :class:`~hwrng.DeviceModulePlatform` for lazy imports).
        """

    @final
    def is_available(self) -> bool:
        """Return ``True`` if the platform can run on this machine."""
        return self.unavailable_reason() is None

    @final
    def require_available(self) -> None:
        """Raise :class:`~hwrng.BackendUnavailableError` unless the platform can run here."""
        reason = self.unavailable_reason()
        if reason is not None:
            raise BackendUnavailableError(self.name, reason)

    # -- devices --------------------------------------------------------------------

    @property
    def device_type(self) -> str:
        """The torch device type of this platform's generators and tensors.

        The same as :attr:`name` for every real device; a software device that
        keeps its state in CPU generators (see ``examples/``) returns ``"cpu"``.
        """
        return self.name

    @property
    def dispatch_key(self) -> str:
        """The name of torch's dispatch key for this platform's tensors.

        ``"CUDA"``, ``"XPU"``, ``"PrivateUse1"`` (an out-of-tree device such as
        Ascend's ``npu``), ``"CPU"``: the key torch dispatches an operator on a
        tensor of :attr:`device_type` to, derived from it by torch
        (``torch._C._dispatch_key_for_device``). :func:`hwrng.dtensor.install`
        registers hwrng's kernel of torch's ``run_dtensor_rng_op`` operator (how
        torch >= 2.14 runs DTensor random ops on an accelerator) for this key, and
        refuses a platform whose key is not the one torch routes its tensors to.
        Override it only for a device type torch cannot name yet when the
        platform is created; the value must be a ``torch._C.DispatchKey`` name.
        """
        return str(torch._C._dispatch_key_for_device(self.device_type))

    @property
    @abc.abstractmethod
    def device_handle(self) -> Any:
        """The torch device module (``torch.cuda``, ``torch.npu``, ``torch.cpu``, ...)."""

    @property
    @abc.abstractmethod
    def counter(self) -> CounterView:
        """How this platform reads and positions a generator as ``(seed, offset)``."""

    @abc.abstractmethod
    def device_count(self) -> int:
        """Return the number of devices visible to this process (0 when unavailable)."""

    @abc.abstractmethod
    def current_device(self) -> int:
        """Return the index of the process's current device."""

    @abc.abstractmethod
    def generator(self, device: DeviceLike = None) -> torch.Generator:
        """Return the default generator of ``device`` (default: the current device).

        This is the generator torch's random ops on that device draw from when
        no ``generator=`` is passed.
        """

    @final
    def device_index(self, device: DeviceLike = None) -> int:
        """Normalise ``device`` to an index in ``[0, device_count())``.

        Parameters
        ----------
        device
            An index, a string such as ``"cuda:1"``, a :class:`torch.device`, or
            ``None`` for the current device. A device of another type is refused.

        Raises
        ------
        InvalidDeviceError
            If ``device`` is of another device type or out of range.
        """
        if device is None:
            return self.current_device()
        if isinstance(device, bool):
            raise InvalidDeviceError(f"device must be an index or a device name, not {device!r}")
        if not isinstance(device, (str, torch.device)):
            try:
                index = operator.index(device)
            except TypeError:
                raise InvalidDeviceError(
                    f"device must be an index, a device name or a torch.device, got {device!r}"
                ) from None
        else:
            device_type, parsed_index = parse_device(device)
            if device_type != self.device_type:
                known = _is_torch_device_type(device_type)
                what = f"a {device_type} device" if known else "not a device"
                raise InvalidDeviceError(
                    f"device {device!r} is {what}; the {self.name} platform "
                    f"manages {self.device_type} devices"
                )
            if parsed_index is None:  # "cuda" without an index
                return self.current_device()
            index = parsed_index
        count = self.device_count()
        if not 0 <= index < count:
            raise InvalidDeviceError(
                f"device index {index} is out of range: the {self.name} platform has "
                f"{count} device(s)"
            )
        return index

    def device(self, device: DeviceLike = None) -> torch.device:
        """Return the :class:`torch.device` for ``device`` (default: the current one)."""
        return torch.device(self.device_type, self.device_index(device))

    @final
    def set_device(self, device: DeviceLike) -> None:
        """Make ``device`` this process's current device, as ``torch.accelerator.set_device_index``.

        A rank binds itself to its device with it before joining a process
        group (:class:`hwrng.testing.DistributedPool`, ``hwrng check``). On the
        CPU's one device it changes nothing.

        Raises
        ------
        BackendUnavailableError
            If the platform cannot run here.
        InvalidDeviceError
            If ``device`` is not one of the platform's devices; nothing changes.
        """
        self.require_available()
        self.select_device(self.device_index(device))

    def select_device(self, index: int) -> None:
        """Make device ``index`` (checked by :meth:`set_device`) the current device.

        The base calls the device module's ``set_device``; a module without one
        can only stay on its current device.
        """
        setter = getattr(self.device_handle, "set_device", None)
        if callable(setter):
            setter(index)
        elif index != self.current_device():
            raise InvalidDeviceError(
                f"the {self.name} platform cannot select device {index}: its device module "
                "has no set_device"
            )

    @property
    @final
    def uses_host_generator(self) -> bool:
        """Whether this platform's devices draw from the host generator.

        The host generator is torch's CPU default generator. ``True`` for the
        CPU backend's one device; ``False`` for an accelerator and for a
        software device with generators of its own. hwrng then seeds, forks,
        saves and compares the host generator once, not again as a device.
        Derived from :attr:`device_type` and :meth:`generator` (the latter
        only for a platform whose devices are of the host's type, so an
        accelerator is never initialised to answer); the conformance suite
        checks that a platform's devices all draw from the host generator or
        none does.
        """
        host = torch.default_generator
        return self.device_type == host.device.type and self.generator() is host

    # -- RNG state ------------------------------------------------------------------

    def get_rng_state(self, device: DeviceLike = None) -> torch.Tensor:
        """Return a copy of the RNG state of ``device`` as a CPU ``torch.uint8`` tensor.

        Never copies through device memory.
        """
        return self.generator(device).get_state()

    @final
    def set_rng_state(self, state: torch.Tensor, device: DeviceLike = None) -> None:
        """Restore the RNG state of ``device`` from a tensor :meth:`get_rng_state` returned.

        Raises
        ------
        InvalidStateError
            If ``state`` is not a 1-D CPU ``torch.uint8`` tensor of the size of this
            device's state. The generator is left untouched.
        """
        generator = self.generator(device)
        expected = generator.get_state().numel()
        where = f"RNG state for {generator.device}"
        apply_state(generator, check_state_tensor(state, expected, str(generator.device)), where)

    @final
    def manual_seed(self, seed: int, device: DeviceLike = None) -> None:
        """Seed the default generator of ``device`` (default: the current device).

        Afterwards :meth:`get_seed_offset` of that generator reads ``(seed, 0)``.

        Raises
        ------
        InvalidSeedError
            If ``seed`` is not an integer in ``[0, 2**64)``; nothing is seeded.
        """
        self.seed_device(check_seed(seed), device)

    @final
    def manual_seed_all(self, seed: int) -> None:
        """Seed the default generator of every device of this platform with ``seed``.

        Raises
        ------
        InvalidSeedError
            If ``seed`` is not an integer in ``[0, 2**64)``; nothing is seeded.
        """
        self.seed_all_devices(check_seed(seed))

    def seed_device(self, seed: int, device: DeviceLike = None) -> None:
        """Seed ``device`` with a seed :meth:`manual_seed` checked: position it at ``(seed, 0)``."""
        self.position(self.generator(device), seed, 0)

    def seed_all_devices(self, seed: int) -> None:
        """Seed every device with a seed :meth:`manual_seed_all` checked."""
        for index in range(self.device_count()):
            self.position(self.generator(index), seed, 0)

    def state_digest(self, state: torch.Tensor) -> bytes:
        """A digest of what a generator of this platform in ``state`` will draw.

        ``state`` is a state :meth:`get_rng_state` (or :meth:`state_tensor`)
        returned. Two states that will draw the same numbers must digest alike
        and two that will draw different numbers apart: :func:`hwrng.verify`
        compares ranks' streams by it, so bytes that never change a draw must
        not enter it. The conformance suite checks both on the device.

        The base digests a state of torch's CPU generator layout (5,056 bytes,
        as generators derived from torch's CPU generator keep) by
        :func:`hwrng.mersenne_state_digest` -- from the state that draws: the
        words output before the next twist, the words that twist makes and a
        valid cached normal sample, never the stored seed, word 0's low 31 bits
        or other bytes no draw reads -- and any other state whole
        (:func:`hwrng.whole_state_digest`), right for a Philox ``(seed,
        offset)`` state. A platform whose state holds bytes that do not change
        its draws overrides it; the conformance rule
        ``state_digest_leaves_out_exactly_the_bits_no_draw_reads`` perturbs
        states bit by bit and compares with the generator's own draws.
        """
        return default_state_digest(state)

    # -- counter view ---------------------------------------------------------------

    @final
    def check_generator(self, generator: object) -> torch.Generator:
        """Return ``generator`` after checking it is a generator of this platform's devices.

        Raises
        ------
        InvalidDeviceError
            If it is not a :class:`torch.Generator` on this platform's device type.
        """
        if not isinstance(generator, torch.Generator):
            raise InvalidDeviceError(f"expected a torch.Generator, got {type(generator).__name__}")
        if generator.device.type != self.device_type:
            raise InvalidDeviceError(
                f"a generator on {generator.device} does not belong to the {self.name} "
                f"platform ({self.device_type} devices)"
            )
        return generator

    @final
    def get_seed_offset(self, generator: torch.Generator) -> tuple[int, int]:
        """Return the ``(seed, offset)`` that ``generator`` will draw from next.

        The offset is counted in the units of a counter-based generator and is
        a multiple of 4. The same ``(seed, offset)`` always gives the same
        draws; different offsets give different draws; the answer depends only
        on the generator's state. An emulated counter (the CPU's) may move a
        generator that has drawn since it was positioned to the position it
        reports, so that the pair determines the next draws there too.
        """
        return self.counter.read(self.check_generator(generator))

    @final
    def set_seed_offset(self, generator: torch.Generator, seed: int, offset: int) -> None:
        """Position ``generator`` at ``(seed, offset)``.

        Raises
        ------
        InvalidSeedError, InvalidOffsetError, InvalidDeviceError
            On a bad seed, an offset that is negative, ``>= 2**63`` or not a
            multiple of 4, or a generator of another device type; the generator
            is left untouched.
        """
        checked = self.check_generator(generator)
        seed_value = check_seed(seed)
        offset_value = check_offset(offset)
        self.position(checked, seed_value, offset_value)

    @final
    def position(self, generator: torch.Generator, seed: int, offset: int) -> None:
        """Put ``generator`` at ``(seed, offset)`` without checking the arguments.

        hwrng's own code calls this with values it has already checked or
        computed; everyone else calls :meth:`set_seed_offset`, which checks.
        A platform changes how positions are written through :attr:`counter`.
        """
        self.counter.write(generator, seed, offset)

    # -- named states ---------------------------------------------------------------
    # A named state (RNGStatesTracker) is an opaque holder the platform makes and swaps
    # in and out of a generator. The base keeps state tensors and copies them; a
    # platform whose generators can swap state objects (CUDA's graph-safe states)
    # overrides these four to swap without copying, which also works in graph capture.

    def detached_state(self, generator: torch.Generator, seed: int) -> object:
        """A new named state at ``(seed, 0)`` of ``generator``'s kind; ``generator`` stays as is."""
        saved = generator.get_state()
        try:
            self.position(generator, seed, 0)
            return generator.get_state()
        finally:
            generator.set_state(saved)

    def swap_in(self, generator: torch.Generator, state: object) -> object:
        """Make ``generator`` draw from ``state``; return a token that :meth:`swap_out` takes."""
        assert isinstance(state, torch.Tensor)
        previous = generator.get_state()
        generator.set_state(state)
        return previous

    def swap_out(self, generator: torch.Generator, token: object) -> object:
        """Undo :meth:`swap_in`: return the named state as it has advanced, restore ``token``."""
        assert isinstance(token, torch.Tensor)
        advanced = generator.get_state()
        generator.set_state(token)
        return advanced

    def state_tensor(self, state: object) -> torch.Tensor:
        """A CPU ``torch.uint8`` copy of a named state, for checkpoints."""
        assert isinstance(state, torch.Tensor)
        return state.clone()

    def state_from_tensor(self, generator: torch.Generator, tensor: torch.Tensor) -> object:
        """A named state from a tensor :meth:`state_tensor` made (checked by the caller)."""
        return tensor.clone()

    # -- collectives and determinism ------------------------------------------------

    @final
    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, group: dist.ProcessGroup | None = None
    ) -> None:
        """Broadcast ``tensor`` in place from global rank ``src`` over ``group``.

        Seeding never calls this: it is for callers that choose to share
        state, and for the conformance suite.

        Raises
        ------
        DistributedError
            If ``torch.distributed`` is not initialised.
        """
        if not isinstance(tensor, torch.Tensor):
            raise InvalidArgumentError(
                f"broadcast needs a torch.Tensor, got {type(tensor).__name__}"
            )
        if not (dist.is_available() and dist.is_initialized()):
            raise DistributedError(
                "torch.distributed is not initialised: call "
                f"torch.distributed.init_process_group({self.dist_backend!r}) first"
            )
        dist.broadcast(tensor, src=src, group=group)

    def enable_determinism(self) -> dict[str, str]:
        """Turn on this platform's own deterministic-algorithm switches.

        :func:`hwrng.manual_seed` calls it with ``deterministic=True``, after
        ``torch.use_deterministic_algorithms(True)``. The base does nothing.

        Returns
        -------
        dict
            What was changed, setting name to new value, for logs.
        """
        return {}

    def stream_capturing(self) -> bool:
        """Whether the current stream is being captured into a graph (CUDA graphs).

        During capture a counter must not read or move a generator through
        host-side calls; :class:`~hwrng.PhiloxCounter` asks this. The base
        captures nothing.
        """
        return False

    def describe_device(self) -> str:
        """Name the hardware behind the current device, for reports (``hwrng check``).

        The base asks the device module's ``get_device_name``, if it has one.
        """
        names = getattr(self.device_handle, "get_device_name", None)
        if callable(names):
            try:
                return str(names(self.current_device()))
            except Exception as error:  # a name is for display only
                return f"{self.name} device ({type(error).__name__})"
        return f"{self.name} device"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def collective_backend(platform: Platform, local_ranks: int) -> str:
    """Return the ``torch.distributed`` backend for ``local_ranks`` processes of ``platform``.

    The platform's :attr:`~Platform.dist_backend` where it can serve that
    many processes on this host: always when the platform does not need a
    device per rank (:attr:`~Platform.one_rank_per_device` is ``False``, as on
    the CPU), else when the host has a device for each. Otherwise ``gloo``,
    which runs any number of ranks over CPU tensors (e.g. one GPU shared by
    four processes): the group's collectives then carry CPU tensors.
    ``hwrng check`` and the conformance suite choose their process group's
    backend with it; so can a backend's own multi-process tests.

    Parameters
    ----------
    platform
        The platform the processes use.
    local_ranks
        How many processes of the job run on this host (under torchrun,
        ``LOCAL_WORLD_SIZE``), at least 1.

    Returns
    -------
    str
        A ``torch.distributed`` backend name.

    Raises
    ------
    InvalidValueError
        If ``local_ranks`` is not an integer >= 1.

    Examples
    --------
    >>> import hwrng
    >>> hwrng.collective_backend(hwrng.get_platform("cpu"), 8)
    'gloo'
    """
    count = check_index(local_ranks, "local_ranks", minimum=1, error=InvalidValueError)
    if not platform.one_rank_per_device or platform.device_count() >= count:
        return platform.dist_backend
    return HOST_COLLECTIVE_BACKEND

"""Every private part of torch the DTensor adapter touches: checked, patched, put back.

:func:`check` runs before :func:`hwrng.dtensor.install` changes anything and
names every private attribute that moved, so a torch upgrade fails loudly
instead of silently. :class:`Patches` applies, and :meth:`Patches.undo` undoes,
what the adapter changes besides the tracker itself:

* ``_random.is_rng_supported_mesh`` says True for the platform's meshes, so
  DTensor's own ``manual_seed(seed, mesh)`` seeds (torchtitan seeds pipeline
  stages through it) instead of warning and doing nothing on a CPU mesh;
* ``log_normal_``, ``exponential_``, ``geometric_``, ``cauchy_`` and ``random_``,
  which torch does not treat as random ops (every shard drew the same numbers),
  get DTensor op handlers that run them in the tracked region;
* torch's ``run_dtensor_rng_op`` -- how torch runs plain DTensor random ops on
  an accelerator (2.12 to 2.14: CUDA; 2.15: ``torch.accelerator.current_accelerator()``;
  torch 2.10 and 2.11 have no such operator and run every DTensor random op in
  the tracker's region), asking the tracker only for offsets -- gets a kernel that draws through
  hwrng's region, with the seed common to the op's mesh, for the platform's
  dispatch key (:attr:`hwrng.Platform.dispatch_key`: ``CUDA``, ``XPU``,
  ``PrivateUse1``, ...) and for ``BackendSelect``. :func:`kernel_key` checks,
  before anything changes, that the key is the one torch routes the platform's
  tensors to.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from hwrng._exceptions import DTensorHookError, MeshError
from hwrng._platform import Platform

__all__ = ["EXTRA_RANDOM_OPS", "MIN_TORCH", "Patches", "check", "kernel_key"]

#: The oldest torch whose DTensor RNG hook this adapter is written for: 2.9 is the first
#: release whose ``_distribute_region`` takes a user's generator (pytorch/pytorch#159933).
#: hwrng itself needs 2.10. The check is made on what torch has, never on its version.
MIN_TORCH = (2, 9)

#: The torch from which plain DTensor random ops on an accelerator run through
#: ``run_dtensor_rng_op``, asking the tracker for ``_compute_rng_offsets`` (2.12: CUDA; read
#: from the 2.12.0 and 2.12.1 wheels, 2.11 has neither).
RNG_OP_TORCH = (2, 12)


def _named(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))


def _extra_random_ops() -> list[Any]:
    aten = torch.ops.aten
    return [
        aten.log_normal_.default,
        aten.exponential_.default,
        aten.geometric_.default,
        aten.cauchy_.default,
        aten.random_.default,
        aten.random_.to,
        getattr(aten.random_, "from"),
    ]


#: In-place random ops torch's DTensor does not route through the tracker.
EXTRA_RANDOM_OPS = (
    "log_normal_",
    "exponential_",
    "geometric_",
    "cauchy_",
    "random_",
)


def check() -> ModuleType:
    """Import torch's DTensor RNG module after checking everything the adapter relies on.

    Each private part is checked for itself, on what the installed torch has
    (never its version): the tracker hook every torch since 2.9 has, and
    ``run_dtensor_rng_op`` with the tracker's ``_compute_rng_offsets`` only
    where this torch routes DTensor random ops through that operator.

    Raises
    ------
    DTensorHookError
        Naming every private attribute that is missing or changed shape, and
        the torch that has it.
    """
    found = torch.__version__
    needs = f"torch >= {_named(MIN_TORCH)}"
    try:
        from torch.distributed.tensor import DTensor, _random
    except ImportError as error:
        raise DTensorHookError(
            f"torch {found} has no torch.distributed.tensor._random ({needs} has): {error}"
        ) from error
    problems = [
        f"no _random.{name}"
        for name in ("_rng_tracker", "OffsetBasedRNGTracker", "is_rng_supported_mesh")
        if not hasattr(_random, name)
    ]
    base = getattr(_random, "OffsetBasedRNGTracker", None)
    if base is not None:
        region = getattr(base, "_distribute_region", None)
        if region is None:
            problems.append("no OffsetBasedRNGTracker._distribute_region")
        else:
            params = list(inspect.signature(region).parameters)
            if params[:3] != ["self", "spec", "generator"]:
                problems.append(
                    f"_distribute_region takes {params}, not (self, spec, generator) as {needs} "
                    "does (pytorch/pytorch#159933)"
                )
        if not isinstance(getattr(base, "distribute_region_enabled", None), property):
            problems.append("no distribute_region_enabled property")
    handlers = getattr(getattr(DTensor, "_op_dispatcher", None), "_custom_op_handlers", None)
    if not isinstance(handlers, dict):
        problems.append("no DTensor._op_dispatcher._custom_op_handlers dict")
    problems += _rng_op_problems(base)
    if problems:
        raise DTensorHookError(
            f"torch {found}'s DTensor RNG hook differs from the one hwrng's adapter fits "
            f"({needs}): " + "; ".join(problems)
        )
    return _random


def _rng_prims() -> Any:
    try:
        from torch._prims import rng_prims
    except ImportError:
        return None
    return rng_prims


def _rng_op_problems(base: Any) -> list[str]:
    """What hooking ``run_dtensor_rng_op`` needs and this torch lacks (nothing without the op).

    A torch without the operator runs every DTensor random op in the
    tracker's region: there is nothing more to hook. A torch with it calls the
    tracker's ``_compute_rng_offsets`` and then the operator's kernel, which
    the adapter replaces: both must be there in the shape it fits, or some
    DTensor random ops would run torch's kernel, not hwrng's.
    """
    op = getattr(_rng_prims(), "run_dtensor_rng_op", None)
    if op is None:
        return []
    problems = []
    needs = f"torch >= {_named(RNG_OP_TORCH)}"
    if not isinstance(getattr(op, "py_kernels", None), dict) or not hasattr(op, "_dispatch_cache"):
        problems.append(
            f"run_dtensor_rng_op has no py_kernels dict and _dispatch_cache, as {needs} has"
        )
    if base is not None and not callable(getattr(base, "_compute_rng_offsets", None)):
        problems.append(
            "this torch routes DTensor random ops through run_dtensor_rng_op but its "
            f"OffsetBasedRNGTracker has no _compute_rng_offsets, as {needs} has"
        )
    return problems


def _rng_op() -> Any:
    """Torch's ``run_dtensor_rng_op`` where this torch has it (see :func:`check`), else ``None``."""
    return getattr(_rng_prims(), "run_dtensor_rng_op", None)


def kernel_key(platform: Platform) -> Any:
    """The ``torch._C.DispatchKey`` hwrng's ``run_dtensor_rng_op`` kernel is registered for.

    Returns ``None`` on a torch without ``run_dtensor_rng_op`` (before 2.12), which
    runs every DTensor random op in the tracker's region.

    Raises
    ------
    DTensorHookError
        If ``platform.dispatch_key`` is not a dispatch key, torch names no key
        for the platform's device type, or torch would route the platform's
        tensors to another key: its DTensor random ops would then run a kernel
        that is not hwrng's (torch's own, or none).
    """
    if _rng_op() is None:
        return None
    from torch._C import DispatchKey

    name = platform.dispatch_key
    key = getattr(DispatchKey, name, None) if isinstance(name, str) else None
    if not isinstance(key, DispatchKey):
        raise DTensorHookError(
            f"the {platform.name} platform's dispatch_key {name!r} is not a torch DispatchKey name"
        )
    try:
        routed = str(torch._C._dispatch_key_for_device(platform.device_type))
    except RuntimeError as error:
        raise DTensorHookError(
            f"torch {torch.__version__} names no dispatch key for the {platform.name} "
            f"platform's device type {platform.device_type!r}: {error}"
        ) from error
    if routed != name:
        raise DTensorHookError(
            f"torch routes {platform.device_type} tensors to dispatch key {routed}, but the "
            f"{platform.name} platform's dispatch_key is {name}: its DTensor random ops would "
            f"run torch's run_dtensor_rng_op kernel at {routed}, not hwrng's"
        )
    return key


def _random_inplace_handler(op_call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run an in-place random op on a DTensor's local shard inside the tracked region."""
    from torch.distributed.tensor import DTensor, _random

    target = args[0]
    if any(p.is_partial() for p in target.placements):
        raise MeshError(f"{op_call}: a random op on a Partial DTensor is not supported")
    kwargs = dict(kwargs or {})
    generator = kwargs.pop("generator", None)
    local_args = tuple(a._local_tensor if isinstance(a, DTensor) else a for a in args)
    tracker = _random._rng_tracker
    if (
        tracker is not None
        and tracker.distribute_region_enabled
        and not target._local_tensor.is_meta
    ):
        with tracker._distribute_region(target._spec, generator):
            op_call(*local_args, **kwargs)
    else:
        op_call(*local_args, **kwargs)
    return target


def set_op_handlers(ops: Any, handler: Any) -> dict[Any, Any]:
    """Make ``handler`` DTensor's custom handler of each op; return the handlers it replaced."""
    from torch.distributed.tensor import DTensor

    table = DTensor._op_dispatcher._custom_op_handlers
    replaced = {op: table.get(op) for op in ops}
    for op in ops:
        table[op] = handler
    return replaced


def restore_op_handlers(replaced: dict[Any, Any], handler: Any) -> None:
    """Undo :func:`set_op_handlers`, for the ops that ``handler`` still handles."""
    from torch.distributed.tensor import DTensor

    table = DTensor._op_dispatcher._custom_op_handlers
    for op, previous in replaced.items():
        if table.get(op) is handler:
            if previous is None:
                table.pop(op, None)
            else:
                table[op] = previous


@dataclass
class Patches:
    """What :func:`hwrng.dtensor.install` changed besides the tracker, so it can be undone."""

    module: ModuleType
    platform: Platform
    supported_mesh: Any = None
    handlers: dict[Any, Any] = field(default_factory=dict)
    kernels: dict[Any, Any] = field(default_factory=dict)

    def apply(self, tracker: Any) -> None:
        """Patch the three hooks for ``tracker`` (see the module notes)."""
        original = getattr(self.module, "is_rng_supported_mesh")  # noqa: B009 - private to mypy
        device_type = self.platform.device_type

        def is_rng_supported_mesh(device_mesh: Any) -> bool:
            return bool(device_mesh.device_type == device_type or original(device_mesh))

        self.supported_mesh = original
        setattr(self.module, "is_rng_supported_mesh", is_rng_supported_mesh)  # noqa: B010
        self.handlers.update(set_op_handlers(_extra_random_ops(), _random_inplace_handler))
        cuda_op = _rng_op()
        device_key = kernel_key(self.platform)
        if cuda_op is not None and device_key is not None:
            from torch._C import DispatchKey

            kernel = _rng_op_kernel(tracker)
            for key in dict.fromkeys((device_key, DispatchKey.BackendSelect)):
                self.kernels[key] = cuda_op.py_kernels.get(key)
                cuda_op.py_kernels[key] = kernel
            cuda_op._dispatch_cache.clear()

    def undo(self) -> None:
        """Put back what :meth:`apply` changed (handlers only where still ours)."""
        if self.supported_mesh is not None:
            setattr(self.module, "is_rng_supported_mesh", self.supported_mesh)  # noqa: B010
        restore_op_handlers(self.handlers, _random_inplace_handler)
        cuda_op = _rng_op()
        if cuda_op is not None and self.kernels:
            for key, previous in self.kernels.items():
                if previous is None:
                    cuda_op.py_kernels.pop(key, None)
                else:
                    cuda_op.py_kernels[key] = previous
            cuda_op._dispatch_cache.clear()


def _rng_op_kernel(tracker: Any) -> Any:
    """A kernel for ``run_dtensor_rng_op`` that draws through hwrng's region.

    torch calls the tracker's ``_compute_rng_offsets(spec)`` and then this
    operator with the offsets; the tracker leaves the seed choice for the op in
    between (``take_pending_chooser``). In compiled code the operator runs
    without that call, and draws with the generator's own seed, as torch does.
    """
    platform = tracker.hwrng_platform

    def kernel(start: int, end: int, op: Any, *args: Any, **kwargs: Any) -> Any:
        first = args[0] if args else None
        device = first.device if isinstance(first, torch.Tensor) else None
        generator = platform.generator(device)
        choose = tracker.take_pending_chooser()
        with tracker.hwrng_tracker.positioned_by(
            start, end, generator, via_default=False, choose_seed=choose
        ):
            return op(*args, **kwargs)

    return kernel

"""Route DTensor's random ops through hwrng, on any platform.

``torch.distributed.tensor`` runs a random op (``uniform_``, ``normal_``,
``nn.init.*``, dropout, ``torch.distributed.tensor.rand``/``randn``) inside
its RNG tracker. torch's own tracker refuses CPU meshes -- and without one
every shard of a DTensor on a CPU mesh gets the same numbers -- its offsets
collide for tiny or multiply-sharded shards (see :func:`hwrng.shard_offsets`),
and it draws with each rank's own seed, so replicated DTensors differ on ranks
seeded apart (Megatron's tensor-parallel seeds, the RFC's sharded groups).

:func:`install` puts hwrng's tracker in its place. A DTensor op then draws
with a seed common to every rank of its mesh -- the plan in force
(:func:`hwrng.current_seeding`) restricted to the sharded dims outside that
mesh, so pipeline stages still differ -- at hwrng's offsets in the device's
default generator: replicas draw equal numbers, shards independent ones,
every rank of the mesh ends at one offset, and each rank's generator keeps its
own seed for local randomness. Offsets stay in the default generator, so the
recomputation of an activation checkpoint draws the same masks again.

When no plan is known (ranks seeded by ``torch.manual_seed`` or
:func:`hwrng.seed_everything`), or the generator was re-seeded since the plan
(or holds a named state in a fork), the op draws with the generator's own
seed, as torch does: replicas then agree only if the ranks' seeds do, which
:func:`hwrng.verify` checks.

It works under torch's ``LocalTensorMode`` (simulated ranks), and under
``torch.compile`` (ordered custom ops position the generator when the graph
runs) with the ``eager`` and ``aot_eager`` backends, and with inductor where
``torch._inductor.config.fallback_random`` is on: inductor's own random
numbers would ignore hwrng's offsets and seeds, and are refused with
:class:`~hwrng.DTensorHookError`. Where torch runs accelerator DTensor random ops through its
``run_dtensor_rng_op`` operator (torch >= 2.12), hwrng's kernel of that operator
is registered for the platform's :attr:`~hwrng.Platform.dispatch_key` (``CUDA``,
``XPU``, ``PrivateUse1``, ...). It also routes ``log_normal_``, ``exponential_``, ``geometric_``,
``cauchy_`` and ``random_`` (left out by torch: every shard drew the same
numbers), and makes DTensor's own ``manual_seed(seed, mesh)`` seed on a CPU
mesh. It hooks private parts of torch, checked at :func:`install`.
"""

from __future__ import annotations

from typing import Any

from hwrng._exceptions import DTensorHookError
from hwrng._platform import Platform
from hwrng._registry import platform_in_force
from hwrng._validation import check_flag
from hwrng.dtensor._hooks import EXTRA_RANDOM_OPS, MIN_TORCH, Patches, check, kernel_key
from hwrng.dtensor._invariant import InvariantPatches
from hwrng.dtensor._tracker import tracker_class

__all__ = ["EXTRA_RANDOM_OPS", "MIN_TORCH", "install", "installed_platform", "uninstall"]

_NOT_INSTALLED = object()
_previous: Any = _NOT_INSTALLED
_patches: Patches | None = None
_invariant: InvariantPatches | None = None


def install(platform: Platform | str | None = None, *, invariant: bool = False) -> None:
    """Make DTensor random ops use hwrng's seeds and offsets on ``platform``'s generators.

    Installing again replaces hwrng's tracker (e.g. for another platform);
    :func:`uninstall` then restores whatever tracker was there before the
    first install.

    Parameters
    ----------
    platform
        A :class:`~hwrng.Platform`, a name, or ``None`` for the platform in force
        (the seed plan's, else :func:`hwrng.get_platform`'s choice).
    invariant
        Also make ``uniform_``, ``normal_``, ``bernoulli_``, dropout,
        ``torch.distributed.tensor.rand``/``randn``, ``nn.init.trunc_normal_``
        and the ``nn.init`` functions built on them placement-invariant
        (:mod:`hwrng.invariant`): ``full_tensor()`` equals, bit for bit, what
        the same call gives on one device, at any mesh and placement. Their
        numbers are not torch's; other ops keep the ordinary behaviour.

    Raises
    ------
    DTensorHookError
        If the installed torch's hook is not the one this adapter fits (naming
        every private attribute that differs), the platform lacks the
        ``"dtensor"`` capability, or torch would route the platform's DTensor
        random ops to a ``run_dtensor_rng_op`` kernel that is not hwrng's (its
        :attr:`~hwrng.Platform.dispatch_key` is not the key torch dispatches its
        device type's tensors to). Nothing is changed then.
    """
    global _previous, _patches, _invariant
    check_flag(invariant, "invariant")
    resolved = platform_in_force(platform)
    resolved.require_available()
    if "dtensor" not in resolved.capabilities:
        raise DTensorHookError(
            f"the {resolved.name} platform does not have the 'dtensor' capability: random "
            "ops on its tensors do not draw from its generators"
        )
    module = check()
    kernel_key(resolved)
    tracker = tracker_class(module.OffsetBasedRNGTracker)(resolved)
    if _patches is not None:
        _patches.undo()
    if _invariant is not None:
        _invariant.undo()
        _invariant = None
    if _previous is _NOT_INSTALLED:
        _previous = getattr(module, "_rng_tracker")  # noqa: B009 - private, invisible to mypy
    setattr(module, "_rng_tracker", tracker)  # noqa: B010 - private, invisible to mypy
    _patches = Patches(module, resolved)
    _patches.apply(tracker)
    if invariant:
        _invariant = InvariantPatches()
        _invariant.apply()


def uninstall() -> bool:
    """Restore the DTensor tracker (and hooks) in place before :func:`install`.

    Returns
    -------
    bool
        ``True`` if hwrng's tracker was installed and is now removed, ``False``
        if it was not installed.
    """
    global _previous, _patches, _invariant
    if _previous is _NOT_INSTALLED:
        return False
    from torch.distributed.tensor import _random

    if _invariant is not None:
        _invariant.undo()
        _invariant = None
    if _patches is not None:
        _patches.undo()
        _patches = None
    setattr(_random, "_rng_tracker", _previous)  # noqa: B010 - a private attribute mypy cannot see
    _previous = _NOT_INSTALLED
    return True


def installed_platform() -> Platform | None:
    """Return the platform of the installed hwrng tracker, or ``None``."""
    if _previous is _NOT_INSTALLED:
        return None
    from torch.distributed.tensor import _random

    platform = getattr(getattr(_random, "_rng_tracker", None), "hwrng_platform", None)
    return platform if isinstance(platform, Platform) else None

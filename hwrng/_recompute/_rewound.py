"""What torch rewound before a recomputation, read from torch's own record of the checkpoint.

torch's checkpoint saves, at the forward, its CPU generator and the default
generators of the devices of the checkpoint's tensor inputs, and puts them
back before recomputing, unless ``preserve_rng_state=False``. It keeps what it
decided: attributes ``preserve_rng_state``, ``had_device_in_fwd``,
``fwd_devices`` and ``device_type`` of a reentrant checkpoint's ``ctx``, and
cells of the same names in the ``recompute_fn`` closure of a non-reentrant
``_CheckpointFrame``. A generator's state cannot tell it: a forward run inside
``fork_rng`` leaves the state where the forward found it, rewound or not.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from hwrng._exceptions import RecomputationError

if TYPE_CHECKING:
    from hwrng._platform import Platform

__all__ = ["REWIND_NAMES", "Rewound", "rewound"]

#: What torch keeps, per checkpoint, of the default generators it rewinds before recomputing.
REWIND_NAMES = ("preserve_rng_state", "had_device_in_fwd", "fwd_devices", "device_type")


class Rewound(NamedTuple):
    """The default generators torch put back to their forward states for a recomputation.

    Attributes
    ----------
    preserved
        ``preserve_rng_state``: torch rewound its CPU generator (and no generator if false).
    device_type
        The device type whose default generators torch rewound (``devices``).
    devices
        The indices of those devices: the devices of the checkpoint's tensor inputs.
    """

    preserved: bool
    device_type: str
    devices: tuple[int, ...]

    def covers(self, generator: torch.Generator, platform: Platform) -> bool:
        """Whether torch rewound ``generator`` (one of ``platform``'s, or torch's CPU one)."""
        if not self.preserved:
            return False
        if generator is torch.default_generator:
            return True
        if platform.name != self.device_type:
            return False
        return any(generator is platform.generator(index) for index in self.devices)


def rewound(owner: object) -> Rewound:
    """The default generators torch rewound before recomputing the checkpoint ``owner``.

    ``owner`` is torch's object for the checkpoint: a reentrant ``ctx`` or a
    ``_CheckpointFrame``.

    Raises
    ------
    RecomputationError
        If torch's record of it cannot be read (hwrng then cannot tell where
        the recomputation's generators must end).
    """
    try:
        recompute = getattr(owner, "recompute_fn", None)
        if recompute is None:  # a reentrant checkpoint's ctx
            values = {name: getattr(owner, name, None) for name in REWIND_NAMES}
        else:
            cells = dict(zip(recompute.__code__.co_freevars, recompute.__closure__, strict=True))
            values = {name: _cell_value(cells[name]) for name in REWIND_NAMES}
        preserved = values["preserve_rng_state"]
        if preserved is None:
            raise LookupError("no preserve_rng_state")
        if not preserved:
            return Rewound(False, "", ())
        devices: Any = values["fwd_devices"] if values["had_device_in_fwd"] else ()
        return Rewound(True, str(values["device_type"]), tuple(int(d) for d in devices))
    except (AttributeError, LookupError, TypeError, ValueError) as error:
        raise RecomputationError(
            f"torch {torch.__version__} keeps no readable record of the generators its "
            f"checkpoint rewound ({type(error).__name__}: {error}); hwrng cannot tell where this "
            "recomputation must leave them. Run the block without activation checkpointing"
        ) from error


def _cell_value(cell: types.CellType) -> object:
    """A closure cell's value; ``None`` for a cell never assigned (torch skips some)."""
    try:
        return cell.cell_contents
    except ValueError:
        return None

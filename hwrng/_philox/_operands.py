"""Constant operands of the generic path's tensor ops, in the form each device takes fastest.

On the CPU a Python number given to a torch op is converted to a tensor on
every call (about 2.5 us, more than the op itself costs on a cache-sized
batch); a 0-dim CPU tensor of the op's dtype is taken as it is, and gives the
same result, bit for bit (the Python number is rounded to the op's dtype
either way). The generic path runs a few hundred such ops a batch, so on the
CPU its constants are 0-dim tensors, made once and kept. Elsewhere (CUDA, an
NPU, MPS...) a Python number stays a Python number: a device's kernels take it
as a kernel argument, where a CPU tensor could mean a copy or a refusal.

No tensor is kept while a dispatch mode is active (a fake or recording mode
would make tensors that must not outlive it): the ops then take Python numbers.
"""

from __future__ import annotations

import threading

import torch

__all__ = ["Maker", "Operand", "on_the_host", "operand", "operands_for"]

#: a constant as an op takes it: a 0-dim CPU tensor, or a Python number
Operand = torch.Tensor | int | float

_lock = threading.Lock()
_kept: dict[tuple[torch.dtype, str], torch.Tensor] = {}
_MOST_KEPT = 4096  # parameters vary from call to call: past this many, start afresh


def _key(value: float, dtype: torch.dtype) -> tuple[torch.dtype, str]:
    # float.hex tells -0.0 from 0.0 (equal, with equal hashes, as dict keys)
    return dtype, value.hex() if isinstance(value, float) else str(value)


def _in_a_mode() -> bool:
    return bool(torch._C._len_torch_dispatch_stack())


def operand(value: float, dtype: torch.dtype, cpu: bool) -> Operand:
    """``value`` as the operand of an op on tensors of ``dtype``, on the CPU (``cpu``) or not.

    Parameters
    ----------
    value : int or float
        The constant, exactly representable in ``dtype`` or rounded to it as
        the op would round a Python number (to nearest, ties to even).
    dtype : torch.dtype
        The dtype of the op's tensors.
    cpu : bool
        Whether the op's tensors are CPU tensors.

    Returns
    -------
    torch.Tensor or int or float
        A kept 0-dim CPU tensor of ``dtype`` holding ``value``, or ``value``
        itself off the CPU and while a dispatch mode is active.
    """
    if not cpu or _in_a_mode():
        return value
    key = _key(value, dtype)
    kept = _kept.get(key)
    if kept is None:
        if isinstance(value, float) and not dtype.is_floating_point:
            raise TypeError(f"a float operand {value} for an op on {dtype}")
        with torch.inference_mode(False), torch.no_grad():
            kept = torch.tensor(value, dtype=dtype, device="cpu")
        with _lock:
            if len(_kept) >= _MOST_KEPT:
                _kept.clear()
            _kept[key] = kept
    return kept


class Maker:
    """``maker(value)``: :func:`operand` for one dtype and device."""

    __slots__ = ("cpu", "dtype")

    def __init__(self, dtype: torch.dtype, cpu: bool) -> None:
        self.dtype = dtype
        self.cpu = cpu and not _in_a_mode()

    def __call__(self, value: float) -> Operand:
        """The operand of ``value``."""
        if not self.cpu:
            return value
        return operand(value, self.dtype, True)

    def all(self, values: tuple[float, ...]) -> tuple[Operand, ...]:
        """The operands of several values."""
        return tuple(self(v) for v in values)


def on_the_host(device: torch.device) -> bool:
    """Whether ``device`` is the host's memory, where the CPU's kernels run."""
    return device.type == torch.default_generator.device.type


def operands_for(like: torch.Tensor) -> Maker:
    """A function that makes operands for ops on tensors of ``like``'s dtype and device."""
    return Maker(like.dtype, like.is_cpu)

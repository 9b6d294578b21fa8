"""Checks of user input, one per kind, shared by every layer and run before any state changes.

Each check reads its input exactly once (a generator or ``map`` object is
materialised, never iterated twice) and returns the normalised value; every
refusal is an :class:`~hwrng.HwrngError`.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from hwrng._exceptions import (
    InvalidArgumentError,
    InvalidOffsetError,
    InvalidSeedError,
    InvalidStateError,
    MeshError,
)

__all__ = [
    "MAX_OFFSET",
    "SEED_MODULUS",
    "apply_state",
    "check_dim_names",
    "check_flag",
    "check_index",
    "check_offset",
    "check_seed",
    "check_state_tensor",
    "int_tuple",
]

#: Seeds live in ``[0, SEED_MODULUS)``; mesh-derived seeds wrap modulo it.
SEED_MODULUS = 2**64

#: Offsets are stored as a signed 64-bit integer by the Philox generators.
MAX_OFFSET = 2**63 - 1


def _is_boolean(value: object) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return True
    return isinstance(value, torch.Tensor) and value.dtype == torch.bool


def _as_int(value: object, what: str, error: type[Exception]) -> int:
    """``operator.index(value)``, refusing booleans of every kind (``True``, ``np.True_``, ...)."""
    if _is_boolean(value):
        raise error(f"{what} must be an integer, not a boolean ({value!r})")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise error(f"{what} must be an integer, got {type(value).__name__} {value!r}") from None


def check_seed(seed: object, what: str = "seed") -> int:
    """Return ``seed`` as an ``int`` after checking it lies in ``[0, 2**64)``.

    Parameters
    ----------
    seed
        Anything usable as an integer index (``int``, ``numpy.int64``, a 0-d
        integer tensor); booleans of any kind are refused.
    what
        How to name the value in the error message.

    Raises
    ------
    InvalidSeedError
        If ``seed`` is not an integer, is negative, or is ``>= 2**64``.
    """
    value = _as_int(seed, what, InvalidSeedError)
    if value < 0:
        raise InvalidSeedError(f"{what} must be >= 0, got {value}")
    if value >= SEED_MODULUS:
        raise InvalidSeedError(f"{what} must be < 2**64, got {value}")
    return value


def check_offset(offset: object, what: str = "offset") -> int:
    """Return ``offset`` as an ``int`` after checking it is a valid generator offset.

    Offsets are counted in the units of a counter-based generator and must be
    multiples of 4 in ``[0, 2**63)``, as for torch's CUDA Philox generator.

    Raises
    ------
    InvalidOffsetError
        If ``offset`` is not an integer, is negative, too large, or not a multiple of 4.
    """
    value = _as_int(offset, what, InvalidOffsetError)
    if value < 0:
        raise InvalidOffsetError(f"{what} must be >= 0, got {value}")
    if value > MAX_OFFSET:
        raise InvalidOffsetError(f"{what} must be < 2**63, got {value}")
    if value % 4:
        raise InvalidOffsetError(f"{what} must be a multiple of 4, got {value}")
    return value


def check_index(
    value: object, what: str, *, minimum: int = 0, error: type[Exception] = MeshError
) -> int:
    """Return ``value`` as an ``int`` after checking it is an integer ``>= minimum``.

    For ranks, coordinates, sizes and ids: ``error`` (a :class:`MeshError` by
    default) on anything else, booleans included.
    """
    bound = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
    try:
        number = _as_int(value, what, error)
    except error:
        raise error(f"{what} must be {bound}, got {value!r}") from None
    if number < minimum:
        raise error(f"{what} must be {bound}, got {number}")
    return number


def int_tuple(
    values: Iterable[object], what: str, *, minimum: int = 0, error: type[Exception] = MeshError
) -> tuple[int, ...]:
    """Return ``values`` as a tuple of ints ``>= minimum``, reading the iterable once.

    A string is refused (it iterates as characters), as is anything that is
    not iterable.
    """
    if isinstance(values, (str, bytes)):
        raise error(f"{what} must be a sequence of integers, got {values!r}")
    try:
        items = tuple(values)
    except TypeError:
        raise error(f"{what} must be a sequence of integers, got {values!r}") from None
    numbers = []
    for item in items:
        if _is_boolean(item):
            raise error(f"{what} must be a sequence of integers, got {items!r}")
        try:
            numbers.append(operator.index(item))  # type: ignore[arg-type]
        except TypeError:
            raise error(f"{what} must be a sequence of integers, got {items!r}") from None
    for number in numbers:
        if number < minimum:
            raise error(f"{what} must hold integers >= {minimum}, got {tuple(numbers)}")
    return tuple(numbers)


def check_dim_names(values: object, what: str = "sharded_dims") -> tuple[str, ...]:
    """Return mesh dim names as a tuple after checking they are ordered, unique strings.

    The order matters (the first dim varies slowest), so a set -- whose order
    differs from process to process -- and a one-shot iterator are refused.
    """
    if isinstance(values, (str, bytes)):
        raise MeshError(
            f"{what} must be a sequence of dim names such as [{values!r}], "
            f"not the string {values!r}"
        )
    if not isinstance(values, Sequence):
        raise MeshError(
            f"{what} must be an ordered sequence (a list or tuple) of dim names, got "
            f"{type(values).__name__}: the order decides which dim varies slowest, "
            "and a set's order differs from process to process"
        )
    names = tuple(values)
    for name in names:
        if not isinstance(name, str):
            raise MeshError(f"{what} must hold dim names (str), got {name!r}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise MeshError(f"{what} lists {', '.join(map(repr, repeated))} more than once")
    return names


def check_flag(value: object, name: str) -> bool:
    """Return ``value`` after checking it is ``True`` or ``False`` (not merely truthy).

    Raises
    ------
    InvalidArgumentError
        For anything else: a string such as ``"no"`` is truthy and would turn
        an option on.
    """
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")
    return value


def positive_seconds_from_env(name: str, default: float) -> float:
    """The positive number of seconds in environment variable ``name``, or ``default`` if unset.

    Raises
    ------
    InvalidArgumentError
        If the variable is set to anything but a positive number.
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:  # also refuses nan
        raise InvalidArgumentError(f"{name}={text!r} is not a positive number")
    return value


def check_state_tensor(state: object, expected_numel: int, where: str) -> torch.Tensor:
    """Check that ``state`` can replace an RNG state of ``expected_numel`` bytes.

    Parameters
    ----------
    state
        The candidate state.
    expected_numel
        The size in bytes of the state it would replace.
    where
        What the state is for (e.g. ``"cuda:0"``), for the message.

    Returns
    -------
    torch.Tensor
        ``state`` itself.

    Raises
    ------
    InvalidStateError
        If ``state`` is not a contiguous 1-D ``torch.uint8`` CPU tensor of
        ``expected_numel`` elements.
    """
    if not isinstance(state, torch.Tensor):
        raise InvalidStateError(
            f"RNG state for {where} must be a torch.Tensor, got {type(state).__name__}"
        )
    if state.dtype != torch.uint8:
        raise InvalidStateError(
            f"RNG state for {where} must have dtype torch.uint8, got {state.dtype}"
        )
    if state.device.type != "cpu":
        raise InvalidStateError(
            f"RNG state for {where} must be a CPU tensor, got one on {state.device}"
        )
    if state.dim() != 1:
        raise InvalidStateError(
            f"RNG state for {where} must be 1-D, got shape {tuple(state.shape)}"
        )
    if state.numel() != expected_numel:
        raise InvalidStateError(
            f"RNG state for {where} must have {expected_numel} bytes, got {state.numel()}"
        )
    if not state.is_contiguous():
        raise InvalidStateError(f"RNG state for {where} must be contiguous (use .contiguous())")
    return state


def apply_state(generator: torch.Generator, state: torch.Tensor, where: str) -> None:
    """Set ``generator`` to a fresh copy of ``state``; a refusal becomes an InvalidStateError.

    The copy matters: torch reads a state through its storage, so a view into a
    larger buffer (``packed[a.numel():]``, contiguous and 1-D) is read from the
    wrong place, and one near the buffer's end crashes the process. torch
    checks a state's contents (an mt19937 ``left`` out of range, say) before it
    changes anything, so a refused state leaves the generator as it was.
    """
    try:
        generator.set_state(state.clone(memory_format=torch.contiguous_format))
    except RuntimeError as error:
        raise InvalidStateError(f"{where} is not a valid state: {error}") from None

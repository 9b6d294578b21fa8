"""Checks of user input shared by every layer, run before any state changes."""

from __future__ import annotations

import operator

import torch

from hwrng.errors import InvalidOffsetError, InvalidSeedError, InvalidStateError

__all__ = [
    "MAX_OFFSET",
    "SEED_MODULUS",
    "apply_state",
    "check_flag",
    "check_offset",
    "check_seed",
    "check_state_tensor",
]

#: Seeds live in ``[0, SEED_MODULUS)``; mesh-derived seeds wrap modulo it.
SEED_MODULUS = 2**64

#: Offsets are stored as a signed 64-bit integer by the Philox generators.
MAX_OFFSET = 2**63 - 1


def _as_int(value: object, what: str, error: type[ValueError]) -> int:
    if isinstance(value, bool):
        raise error(f"{what} must be an integer, not a bool ({value!r})")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise error(f"{what} must be an integer, got {type(value).__name__} {value!r}") from None


def check_seed(seed: object, what: str = "seed") -> int:
    """Return ``seed`` as an ``int`` after checking it lies in ``[0, 2**64)``.

    Parameters
    ----------
    seed
        Anything usable as an integer index (``int``, ``numpy.int64``, ...);
        ``bool`` is refused.
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
        If ``state`` is not a 1-D ``torch.uint8`` CPU tensor of ``expected_numel`` elements.
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
    """Set ``generator`` to ``state``; the generator's own refusal becomes an InvalidStateError.

    torch checks a state's contents (an mt19937 ``left`` out of range, say)
    before it changes anything, so a refused state leaves the generator as it was.
    """
    try:
        generator.set_state(state)
    except RuntimeError as error:
        raise InvalidStateError(f"{where} is not a valid state: {error}") from None


def check_flag(value: object, name: str) -> bool:
    """Return ``value`` after checking it is ``True`` or ``False`` (not merely truthy)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value

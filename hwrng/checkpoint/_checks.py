"""Checking one rank's saved state before anything changes: restore it, re-derive, or refuse.

:func:`verdict` reads a document :func:`~hwrng.state_dict` wrote and returns
what loading it here would do -- a :class:`Restore` (every value checked and
converted) or a :class:`~hwrng.checkpoint._reseed.Reseed` -- or raises
:class:`~hwrng.CheckpointError` naming what differs or what is corrupt. It
refuses a state from another backend, rank, world size, mesh or device
count, an unknown format, one whose content no longer matches its digest,
and one holding an impossible value: the digest guards against damage, not
against a crafted file, so every value is also checked as a fresh argument
would be. Nothing here changes any stream.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from hwrng._counters import U64
from hwrng._exceptions import CheckpointError, HwrngError
from hwrng._host import HOST_COUNTER, host_generator, mersenne_offset
from hwrng._mesh import MeshLayout
from hwrng._philox._contract import check_recorded as check_invariant_contract
from hwrng._plan import Seeding
from hwrng._platform import Platform
from hwrng._seeding import current_seeding
from hwrng._states import RNGStatesTracker, live_trackers
from hwrng._validation import apply_state, check_offset, check_seed, check_state_tensor
from hwrng._version import __version__
from hwrng.checkpoint._capture import (
    FORMAT,
    PYTHON_WORDS,
    device_generators,
    document_digest,
    written_by,
)
from hwrng.checkpoint._reseed import Reseed, plan_reseed

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = [
    "OnMismatch",
    "Restore",
    "check_on_mismatch",
    "checked_plan",
    "examine",
    "position_on_plan",
    "verdict",
]

#: What a load does when the state was written elsewhere: refuse, or re-derive the streams.
OnMismatch = Literal["error", "reseed"]


@dataclass
class Restore:
    """Everything a restore will apply, checked and converted beforehand."""

    python: tuple[Any, ...]
    numpy: tuple[Any, ...]
    torch_cpu: torch.Tensor
    host_reading: dict[str, Any]
    devices: list[torch.Tensor]
    pythonhashseed: str | None
    plan: Seeding | None
    trackers: dict[str, tuple[RNGStatesTracker, dict[str, torch.Tensor]]]


def check_on_mismatch(on_mismatch: object) -> None:
    """Refuse an ``on_mismatch`` other than ``"error"`` or ``"reseed"``."""
    if on_mismatch not in ("error", "reseed"):
        raise CheckpointError(f"on_mismatch must be 'error' or 'reseed', got {on_mismatch!r}")


def _require(document: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in document:
        raise CheckpointError(f"not an hwrng RNG state, or a corrupt one: it has no {key!r}")
    value = document[key]
    if not isinstance(value, kind):
        raise CheckpointError(
            f"corrupt hwrng RNG state: {key!r} is {type(value).__name__}, not "
            f"{getattr(kind, '__name__', kind)}"
        )
    return value


def _check_header(document: object) -> Mapping[str, Any]:
    if not isinstance(document, Mapping):
        raise CheckpointError(
            "an hwrng RNG state is a mapping (from hwrng.state_dict), got "
            f"{type(document).__name__}"
        )
    version = _require(document, "format", int)
    if version != FORMAT:
        raise CheckpointError(
            f"RNG state format {version} is not one this hwrng ({__version__}) reads "
            f"(it reads format {FORMAT})"
        )
    digest = _require(document, "digest", str)
    if document_digest(document) != digest:
        raise CheckpointError(
            "corrupt hwrng RNG state: its content does not match its digest "
            "(a value was changed or cut short after it was saved)"
        )
    return document


def _differences(written: Mapping[str, Any], here: Mapping[str, Any]) -> list[str]:
    names = {
        "backend": "backend",
        "rank": "rank",
        "world_size": "world size",
        "mesh": "mesh",
        "device_count": "device count",
    }
    return [
        f"{label} {written.get(key)!r} (here {here[key]!r})"
        for key, label in names.items()
        if written.get(key) != here[key]
    ]


def _checked_python(data: Any) -> tuple[Any, ...]:
    try:
        words = data["words"]
        state = (int(data["version"]), tuple(int(w) for w in words.tolist()), data["gauss"])
        if words.numel() != PYTHON_WORDS:
            raise ValueError(f"{words.numel()} words, not {PYTHON_WORDS}")
        random.Random().setstate(state)  # Python's own checks, on a scratch generator
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise CheckpointError(f"corrupt hwrng RNG state: 'python' is unusable: {error}") from None
    return state


def _checked_numpy(data: Any) -> tuple[Any, ...]:
    try:
        state = (
            str(data["kind"]),
            data["keys"].numpy().astype(np.uint32),
            int(data["pos"]),
            int(data["has_gauss"]),
            float(data["cached_gaussian"]),
        )
        np.random.RandomState().set_state(state)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise CheckpointError(f"corrupt hwrng RNG state: 'numpy' is unusable: {error}") from None
    return state


def _checked_generator_state(
    state: Any, like: torch.Generator, where: str, platform: Platform
) -> torch.Tensor:
    try:
        expected = like.get_state().numel()
        tensor = check_state_tensor(state, expected, where).clone()
        scratch = torch.Generator(device=like.device)
        apply_state(scratch, tensor, where)
        if like is host_generator() or platform.counter is HOST_COUNTER:
            # hwrng's own positions are encoded in the state; read without the
            # counter's memo (reading a scratch generator through it would add to it)
            seed = scratch.initial_seed() & U64
            offset = mersenne_offset(tensor.numpy().tobytes(), seed)
        else:
            seed, offset = platform.counter.peek(scratch)
        check_seed(seed, f"{where}: the seed")
        if offset is not None:
            check_offset(offset, f"{where}: the offset")
    except HwrngError as error:
        raise CheckpointError(f"unusable hwrng RNG state: {error}") from None
    return tensor


def _checked_host_reading(data: Any) -> dict[str, Any]:
    try:
        anchors = [
            (check_seed(s, "an anchor's seed"), check_offset(o, "an anchor's offset"))
            for s, o in data["anchors"]
        ]
        memo = data["memo"]
        if memo is not None:
            memo = check_offset(memo, "the remembered offset")
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"corrupt hwrng RNG state: 'host_reading': {error!r}") from None
    except HwrngError as error:
        raise CheckpointError(f"unusable hwrng RNG state: 'host_reading': {error}") from None
    return {"anchors": anchors, "memo": memo}


def _checked_position(data: Any) -> tuple[int, int]:
    try:
        seed, offset = data
        return check_seed(seed, "the position's seed"), check_offset(offset, "the position")
    except (TypeError, ValueError) as error:
        if isinstance(error, HwrngError):
            raise CheckpointError(f"unusable hwrng RNG state: 'position': {error}") from None
        raise CheckpointError(f"corrupt hwrng RNG state: 'position': {error!r}") from None


def checked_plan(data: Any) -> Seeding | None:
    """A saved seed plan, checked (``None`` stays ``None``)."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise CheckpointError("corrupt hwrng RNG state: 'plan' is not a mapping")
    try:
        plan = Seeding.from_dict(data)
        for dim in plan.dims:
            if dim.coordinate < 0 or dim.weight < 0 or (dim.size is not None and dim.size < 1):
                raise ValueError(f"dim {dim.name!r} has a negative coordinate or weight")
    except (KeyError, TypeError, ValueError, HwrngError) as error:
        raise CheckpointError(f"corrupt hwrng RNG state: 'plan': {error}") from None
    return plan


def _checked_trackers(data: Any) -> dict[str, tuple[RNGStatesTracker, dict[str, torch.Tensor]]]:
    if not isinstance(data, Mapping):
        raise CheckpointError("corrupt hwrng RNG state: 'trackers' is not a mapping")
    live = live_trackers()
    saved = {name: states for name, states in data.items() if states}
    missing = sorted(set(saved) - set(live))
    if missing:
        raise CheckpointError(
            f"the state holds named states of tracker(s) {missing}, but no live "
            "RNGStatesTracker has that name: create them (with the same name=) before loading"
        )
    unsaved = sorted(n for n, t in live.items() if t.names and n not in saved)
    if unsaved:
        raise CheckpointError(
            f"live tracker(s) {unsaved} hold named states the saved state does not have; "
            "reset() them first if that is intended"
        )
    checked = {}
    for name, states in saved.items():
        tracker = live[name]
        try:
            copies, _ = tracker.check_states(states)
        except HwrngError as error:
            raise CheckpointError(f"tracker {name!r}: {error}") from None
        checked[name] = (tracker, copies)
    return checked


def _check_everything(document: Mapping[str, Any], platform: Platform) -> Restore:
    host = host_generator()
    devices = device_generators(platform)
    saved_devices = _require(document, "devices", list)
    if len(saved_devices) != len(devices):
        raise CheckpointError(
            f"the state holds {len(saved_devices)} device state(s); here there are {len(devices)}"
        )
    hash_seed = _require(document, "pythonhashseed", (str, type(None)))
    if hash_seed is not None and not (hash_seed == "random" or hash_seed.isdecimal()):
        raise CheckpointError(f"corrupt hwrng RNG state: PYTHONHASHSEED {hash_seed!r}")
    _checked_position(document.get("position"))
    return Restore(
        python=_checked_python(_require(document, "python", Mapping)),
        numpy=_checked_numpy(_require(document, "numpy", Mapping)),
        torch_cpu=_checked_generator_state(document.get("torch_cpu"), host, "torch_cpu", platform),
        host_reading=_checked_host_reading(_require(document, "host_reading", Mapping)),
        devices=[
            _checked_generator_state(state, generator, f"device {index}", platform)
            for index, (state, generator) in enumerate(zip(saved_devices, devices, strict=True))
        ],
        pythonhashseed=hash_seed,
        plan=checked_plan(_require(document, "plan", (Mapping, type(None)))),
        trackers=_checked_trackers(document.get("trackers")),
    )


def position_on_plan(plan: Seeding, position: Any) -> int:
    """The saved DTensor position, if the saved default generator was on the plan's stream."""
    seed, offset = _checked_position(position)
    return offset if seed == plan.rank_seed else 0


def _reseed_verdict(
    document: Mapping[str, Any], mesh: DeviceMesh | None, why: str, platform: Platform
) -> Reseed:
    """Plan a re-derivation from one saved rank's state (a file of :func:`hwrng.save`)."""
    plan = checked_plan(document.get("plan"))
    position = 0 if plan is None else position_on_plan(plan, document.get("position"))
    return plan_reseed(plan, position, mesh, platform, why)


def examine(document: object, mesh: DeviceMesh | None, platform: Platform) -> Restore | str:
    """The :class:`Restore` loading ``document`` here would apply, or why it was written elsewhere.

    Why: ``"it was written with world size 2 (here 4), ..."``, naming every
    difference of backend, rank, world size, mesh and device count (the rest
    of the state is then left unchecked: it cannot be restored here). A
    corrupt or unusable document raises a :class:`~hwrng.CheckpointError`.
    """
    checked = _check_header(document)
    written = _require(checked, "written_by", Mapping)
    check_invariant_contract(written.get("invariant"))
    current = current_seeding()
    here = written_by(platform, current)
    if mesh is not None:
        here["mesh"] = MeshLayout.of(mesh).to_dict()
    elif current is None or current.layout is None:
        here["mesh"] = written.get("mesh")  # no mesh declared here: the saved plan comes back
    differences = _differences(written, here)
    if differences:
        return "it was written with " + ", ".join(differences)
    return _check_everything(checked, platform)


def verdict(
    document: object,
    on_mismatch: OnMismatch,
    mesh: DeviceMesh | None,
    platform: Platform,
) -> Restore | Reseed:
    """Everything checked: what loading ``document`` here would do, or a CheckpointError."""
    found = examine(document, mesh, platform)
    if isinstance(found, Restore):
        return found
    if on_mismatch == "reseed":
        assert isinstance(document, Mapping)  # examine checked it
        return _reseed_verdict(document, mesh, found, platform)
    raise CheckpointError(f"refusing to restore this RNG state: {found}")

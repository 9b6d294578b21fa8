"""Exact resume: every RNG stream of this rank saved, checked, and restored bit for bit.

:func:`state_dict` returns this rank's complete RNG state as tensors and plain
values (``torch.save`` / ``torch.load(weights_only=True)`` round-trip it);
:func:`load_state_dict` checks *everything* before it changes *anything*, and
refuses, naming what differs, a state from another backend, rank, world size,
mesh or device count, an unknown format, or one whose content no longer matches
its digest, or one holding an impossible value. ``on_mismatch="reseed"`` is
the explicit way across a change of world size: every stream is re-derived
from the saved seed plan for the new mesh, the default generator continues at
the saved DTensor position, and a warning says so. :func:`save` is atomic,
and replaces only a regular file.
:class:`hwrng.RNGState` (in ``_dcp``) carries all ranks' states through DCP.

What is saved, per rank (format 3)::

    format, written_by {hwrng, backend, device_count, rank, world_size, mesh, sharded_dims,
                invariant: the invariant ops' contract, if the job drew any (another is refused)}
    python      random.getstate()           numpy  the legacy global generator
    torch_cpu   the host generator's state  host_reading  what makes it read as it does
    devices     every device of the platform (not only the current one)
    position    [seed, offset] of the current device's default generator: where the
                DTensor stream stands (``on_mismatch="reseed"`` continues it there)
    pythonhashseed, plan (the seed plan in force), trackers {name: {state: tensor}}
    digest      BLAKE2b of all of the above

The DTensor adapter keeps no state of its own: its position is the device
generators' offsets (and, on the CPU, ``host_reading``), so it is restored
with them. The digest guards against damage, not against a crafted file:
every value is also checked as a fresh argument would be.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import random
import stat
import tempfile
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from hwrng._claims import claim, claim_for
from hwrng._collectives import rank_and_size
from hwrng._counters import U64
from hwrng._exceptions import CheckpointError, HwrngError, HwrngWarning
from hwrng._host import HOST_COUNTER, _decode, host_generator
from hwrng._mesh import MeshLayout
from hwrng._philox._contract import check_recorded as check_invariant_contract
from hwrng._philox._contract import recorded as invariant_contract
from hwrng._plan import Seeding, generation_seed, plan_for_mesh
from hwrng._platform import Platform
from hwrng._registry import resolve_platform
from hwrng._seeding import current_seeding, record_seeding, seed_streams, seeded_mesh
from hwrng._states import RNGStatesTracker, live_trackers
from hwrng._validation import apply_state, check_offset, check_seed, check_state_tensor
from hwrng._version import __version__

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["FORMAT", "OnMismatch", "load", "load_state_dict", "save", "state_dict"]

#: The format :func:`state_dict` writes; :func:`load_state_dict` reads this one only.
FORMAT = 3

OnMismatch = Literal["error", "reseed"]

_PYTHON_WORDS = 625


def _canonical(value: Any, out: io.BytesIO) -> None:
    """Feed ``value`` to a digest in one canonical byte form (tensors by dtype, shape, bytes)."""
    if isinstance(value, torch.Tensor):
        out.write(f"T{value.dtype}{tuple(value.shape)}".encode())
        out.write(value.detach().cpu().contiguous().numpy().tobytes())
    elif isinstance(value, Mapping):
        out.write(b"{")
        for key in sorted(value, key=repr):
            out.write(repr(key).encode())
            _canonical(value[key], out)
        out.write(b"}")
    elif isinstance(value, (list, tuple)):
        out.write(b"[")
        for item in value:
            _canonical(item, out)
        out.write(b"]")
    else:
        out.write(repr(value).encode())
        out.write(b";")


def _digest(document: Mapping[str, Any]) -> str:
    buffer = io.BytesIO()
    _canonical({k: v for k, v in document.items() if k != "digest"}, buffer)
    return hashlib.blake2b(buffer.getvalue(), digest_size=16).hexdigest()


def _python_state() -> dict[str, Any]:
    version, words, gauss = random.getstate()
    return {"version": version, "words": torch.tensor(words, dtype=torch.int64), "gauss": gauss}


def _numpy_state() -> dict[str, Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {
        "kind": str(kind),
        "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def _written_by(platform: Platform, seeding: Seeding | None) -> dict[str, Any]:
    rank, world_size = rank_and_size()
    layout = seeding.layout if seeding is not None else None
    written = {
        "hwrng": __version__,
        "backend": platform.name,
        "device_count": platform.device_count(),
        "rank": rank,
        "world_size": world_size,
        "mesh": None if layout is None else layout.to_dict(),
        "sharded_dims": None if seeding is None else list(seeding.sharded_dims),
    }
    contract = invariant_contract()
    if contract is not None:  # the job drew placement-invariant values
        written["invariant"] = contract
    return written


def _device_generators(platform: Platform) -> list[torch.Generator]:
    host = host_generator()
    if platform.device_type == "cpu" and platform.generator() is host:
        return []
    return [platform.generator(i) for i in range(platform.device_count())]


def state_dict(platform: Platform | str | None = None) -> dict[str, Any]:
    """Return this rank's complete RNG state, for ``torch.save`` or a DCP checkpoint.

    Covers Python's ``random``, NumPy's legacy global generator, torch's CPU
    generator, every device of the platform, ``PYTHONHASHSEED`` as recorded,
    the seed plan in force, the DTensor adapter's position, and every named
    state of every live :class:`~hwrng.RNGStatesTracker`, by tracker name.
    Reading changes nothing.

    Parameters
    ----------
    platform
        Whose devices to save; by default the plan's platform, else
        :func:`hwrng.get_platform`'s choice.

    Returns
    -------
    dict
        Tensors and plain values (see the module notes), versioned
        (``"format"``) and digested (``"digest"``).
    """
    seeding = current_seeding()
    if platform is None and seeding is not None:
        platform = seeding.platform
    resolved = resolve_platform(platform)
    host = host_generator()
    devices = _device_generators(resolved)
    _refuse_inside_a_fork(host, *devices)
    current = resolved.generator()
    with claim(host, *devices):
        seed, offset = resolved.counter.peek(current)
        document: dict[str, Any] = {
            "format": FORMAT,
            "written_by": _written_by(resolved, seeding),
            "python": _python_state(),
            "numpy": _numpy_state(),
            "torch_cpu": host.get_state(),
            "host_reading": HOST_COUNTER.export(host),
            "devices": [g.get_state() for g in devices],
            "position": [seed, offset],
            "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
            "plan": None if seeding is None else seeding.to_dict(),
            "trackers": {name: t.get_states() for name, t in live_trackers().items()},
        }
    document["digest"] = _digest(document)
    return document


def _refuse_inside_a_fork(*generators: torch.Generator) -> None:
    """Refuse a snapshot taken while a fork holds a temporary state in a generator.

    Inside ``RNGStatesTracker.fork``, ``fork_rng`` or ``isolate_rng`` (or a
    tracked region) the default generator holds a state the block will throw
    away, and the stream it replaced is parked elsewhere: a snapshot would save
    the wrong stream as the default one and lose the real one.
    """
    forked = sorted(
        f"{name!r}: {sorted(t.forked)}" for name, t in live_trackers().items() if t.forked
    )
    me = threading.current_thread().name
    held = [g for g in generators if (c := claim_for(g)).depth > 0 and c.owner == me]
    if forked or held:
        inside = (
            f"RNGStatesTracker.fork of {', '.join(forked)}"
            if forked
            else "fork_rng, isolate_rng, an RNGStatesTracker.fork or a tracked region"
        )
        raise CheckpointError(
            f"hwrng.state_dict() was called inside {inside}: the generators hold a state "
            "that the block throws away, and the stream it replaced is parked until the "
            "block ends; take the RNG state outside the block"
        )


@dataclass
class _Restore:
    """Everything :func:`load_state_dict` will apply, checked and converted beforehand."""

    python: tuple[Any, ...]
    numpy: tuple[Any, ...]
    torch_cpu: torch.Tensor
    host_reading: dict[str, Any]
    devices: list[torch.Tensor]
    pythonhashseed: str | None
    plan: Seeding | None
    trackers: dict[str, tuple[RNGStatesTracker, dict[str, torch.Tensor]]]


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
    if _digest(document) != digest:
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
        if words.numel() != _PYTHON_WORDS:
            raise ValueError(f"{words.numel()} words, not {_PYTHON_WORDS}")
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
            offset = _decode(tensor.numpy().tobytes(), seed)
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


def _checked_plan(data: Any) -> Seeding | None:
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


def _check_everything(document: Mapping[str, Any], platform: Platform) -> _Restore:
    host = host_generator()
    devices = _device_generators(platform)
    saved_devices = _require(document, "devices", list)
    if len(saved_devices) != len(devices):
        raise CheckpointError(
            f"the state holds {len(saved_devices)} device state(s); here there are {len(devices)}"
        )
    hash_seed = _require(document, "pythonhashseed", (str, type(None)))
    if hash_seed is not None and not (hash_seed == "random" or hash_seed.isdecimal()):
        raise CheckpointError(f"corrupt hwrng RNG state: PYTHONHASHSEED {hash_seed!r}")
    _checked_position(document.get("position"))
    return _Restore(
        python=_checked_python(_require(document, "python", Mapping)),
        numpy=_checked_numpy(_require(document, "numpy", Mapping)),
        torch_cpu=_checked_generator_state(document.get("torch_cpu"), host, "torch_cpu", platform),
        host_reading=_checked_host_reading(_require(document, "host_reading", Mapping)),
        devices=[
            _checked_generator_state(state, generator, f"device {index}", platform)
            for index, (state, generator) in enumerate(zip(saved_devices, devices, strict=True))
        ],
        pythonhashseed=hash_seed,
        plan=_checked_plan(_require(document, "plan", (Mapping, type(None)))),
        trackers=_checked_trackers(document.get("trackers")),
    )


def _apply(restore: _Restore, platform: Platform) -> None:
    host = host_generator()
    devices = _device_generators(platform)
    with claim(host, *devices):
        random.setstate(restore.python)
        np.random.set_state(restore.numpy)
        host.set_state(restore.torch_cpu)
        HOST_COUNTER.restore(host, restore.host_reading)
        for generator, state in zip(devices, restore.devices, strict=True):
            generator.set_state(state)
        if restore.pythonhashseed is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = restore.pythonhashseed
        for tracker, states in restore.trackers.values():
            tracker.set_states(states)
        record_seeding(restore.plan)


@dataclass
class _Reseed:
    """A checked re-derivation: the new plan, where the device streams continue, and why.

    ``fresh``: the checkpoint held nothing to continue from, so every stream,
    the devices' too, starts at the beginning of the new plan's seeds.
    """

    plan: Seeding
    position: int
    why: str
    fresh: bool = False


def _refuse_reseed_while_forked(why: str) -> None:
    forked = sorted(name for name, t in live_trackers().items() if t.forked)
    if forked:
        raise CheckpointError(
            f"cannot re-derive the streams ({why}) while trackers {forked} hold a forked state"
        )


def _plan_fresh(why: str) -> _Reseed:
    """Plan a re-derivation when the checkpoint holds no hwrng state at all; change nothing.

    The plan in force moves to its next resume generation, *seed included*
    (``generation_seed(seed, g)``): without a saved position nothing can
    continue, and new seeds are the way not to repeat the saved job's draws.
    """
    plan = current_seeding()
    if plan is None:
        raise CheckpointError(
            f"cannot re-derive the streams ({why}): no seed plan is in force to derive "
            "them from; seed with hwrng.manual_seed first"
        )
    _refuse_reseed_while_forked(why)
    generation = plan.generation + 1
    fresh = dataclasses.replace(
        plan, seed=generation_seed(plan.seed, generation), generation=generation
    )
    return _Reseed(fresh, 0, why, fresh=True)


def _where_position(plan: Seeding, position: Any) -> int:
    """The saved DTensor position, if the saved default generator was on the plan's stream."""
    seed, offset = _checked_position(position)
    return offset if seed == plan.rank_seed else 0


def _plan_reseed(
    saved: Seeding | None,
    position: int,
    mesh: DeviceMesh | None,
    platform: Platform,
    why: str,
) -> _Reseed:
    """Plan the re-derivation of this rank's streams from the saved job's plan; change nothing.

    The new plan is the saved one (seed, sharded dims) for ``mesh``, one
    resume generation later; a single process without a mesh is every
    sharded dim's coordinate 0.
    """
    if saved is None:
        raise CheckpointError(
            f"cannot re-derive the streams ({why}): the saved state records no seed plan"
        )
    _, world_size = rank_and_size()
    if mesh is not None:
        try:
            plan = plan_for_mesh(saved.seed, mesh, saved.sharded_dims, platform.name, saved.source)
        except HwrngError as error:
            raise CheckpointError(f"cannot re-derive the streams ({why}): {error}") from None
    elif saved.layout is not None and world_size > 1:
        raise CheckpointError(
            f"cannot re-derive the streams ({why}): the plan was made on a mesh, so "
            "pass the new one: on_mismatch='reseed', mesh=new_mesh"
        )
    elif saved.layout is None and saved.dims:
        raise CheckpointError(
            f"cannot re-derive the streams ({why}): the saved plan ({saved.source}) was not "
            "made on a DeviceMesh; seed the new mesh yourself"
        )
    else:  # one process: every coordinate is 0
        plan = Seeding(saved.seed, (), platform.name, saved.source)
    _refuse_reseed_while_forked(why)
    plan = dataclasses.replace(plan, generation=saved.generation + 1, named=saved.named)
    return _Reseed(plan, position, why)


def _reseed_verdict(
    document: Mapping[str, Any], mesh: DeviceMesh | None, why: str, platform: Platform
) -> _Reseed:
    """Plan a re-derivation from one saved rank's state (a file of :func:`save`)."""
    plan = _checked_plan(document.get("plan"))
    position = 0 if plan is None else _where_position(plan, document.get("position"))
    return _plan_reseed(plan, position, mesh, platform, why)


def _carry_out_reseed(reseed: _Reseed, platform: Platform, mesh: DeviceMesh | None) -> None:
    plan = reseed.plan
    own = plan.rank_seed
    host = host_generator()
    devices = _device_generators(platform) or [host]
    trackers = {name: t for name, t in live_trackers().items() if t.names}
    if reseed.fresh:
        with claim(host, *devices):
            seed_streams(own, platform)
            for tracker in trackers.values():
                tracker.set_states(tracker.generation_states(plan.generation))
            record_seeding(plan, seeded_mesh())
        warnings.warn(
            f"hwrng: nothing was restored ({reseed.why}); every stream was re-derived as resume "
            f"generation {plan.generation} of the plan in force, from the seed "
            f"generation_seed(seed, {plan.generation}) = {plan.seed}, and named states "
            f"{sorted(trackers) or ''} alike: new streams, which repeat nothing the saved job "
            "drew and do not continue it.",
            HwrngWarning,
            stacklevel=4,
        )
        return
    with claim(host, *devices):
        seed_streams(generation_seed(own, plan.generation), platform)
        for generator in devices:  # the DTensor stream (and the devices) continue
            platform.position(generator, own, reseed.position)
        for tracker in trackers.values():
            tracker.set_states(tracker.generation_states(plan.generation))
        record_seeding(plan, mesh)
    warnings.warn(
        f"hwrng: the RNG state was not restored ({reseed.why}); every stream was re-derived "
        f"from the saved seed plan (seed {plan.seed}, sharded {list(plan.sharded_dims)}) for "
        f"this mesh as resume generation {plan.generation}: the device generators continue "
        f"at the saved DTensor position (offset {reseed.position}); random, NumPy, "
        f"{'' if devices == [host] else 'torch CPU, '}PYTHONHASHSEED and named states "
        f"{sorted(trackers) or ''} start streams of their own, keyed by their seeds and the "
        "generation, never one the saved job drew.",
        HwrngWarning,
        stacklevel=4,
    )


def _verdict(
    document: object,
    on_mismatch: OnMismatch,
    mesh: DeviceMesh | None,
    platform: Platform,
) -> _Restore | _Reseed:
    """Everything checked: what loading ``document`` here would do, or a CheckpointError."""
    checked = _check_header(document)
    written = _require(checked, "written_by", Mapping)
    check_invariant_contract(written.get("invariant"))
    current = current_seeding()
    here = _written_by(platform, current)
    if mesh is not None:
        here["mesh"] = MeshLayout.of(mesh).to_dict()
    elif current is None or current.layout is None:
        here["mesh"] = written.get("mesh")  # no mesh declared here: the saved plan comes back
    differences = _differences(written, here)
    if differences:
        why = "it was written with " + ", ".join(differences)
        if on_mismatch == "reseed":
            return _reseed_verdict(checked, mesh, why, platform)
        raise CheckpointError(f"refusing to restore this RNG state: {why}")
    return _check_everything(checked, platform)


def _carry_out(verdict: _Restore | _Reseed, platform: Platform, mesh: DeviceMesh | None) -> None:
    if isinstance(verdict, _Reseed):
        _carry_out_reseed(verdict, platform, mesh)
    else:
        _apply(verdict, platform)


def _check_on_mismatch(on_mismatch: object) -> None:
    if on_mismatch not in ("error", "reseed"):
        raise CheckpointError(f"on_mismatch must be 'error' or 'reseed', got {on_mismatch!r}")


def load_state_dict(
    document: Mapping[str, Any],
    *,
    on_mismatch: OnMismatch = "error",
    mesh: DeviceMesh | None = None,
    platform: Platform | str | None = None,
) -> None:
    """Restore this rank's RNG state from :func:`state_dict`, bit for bit, or refuse.

    Every check runs before anything changes: a refused state leaves every
    generator, ``random``, NumPy, every named state and the plan as they were.
    Every value is checked as a fresh argument would be (seeds, offsets, state
    sizes), whether or not the digest matches.

    Parameters
    ----------
    document
        What :func:`state_dict` returned (e.g. after ``torch.load(weights_only=True)``).
    on_mismatch
        ``"error"`` (default): refuse a state written by another backend, rank,
        world size, mesh or device count. ``"reseed"``: in those cases re-derive
        every stream from the saved seed plan for the new ``mesh`` instead (as
        :func:`hwrng.manual_seed` would), continue the default generator at the
        saved DTensor position, and warn (:class:`~hwrng.HwrngWarning`); named
        states stay as they are.
    mesh
        The new mesh, for ``on_mismatch="reseed"``.
    platform
        Whose devices to restore; by default :func:`hwrng.get_platform`'s choice
        (a state from another backend is refused, naming both).

    Raises
    ------
    CheckpointError
        Naming what differs or what is corrupt, before anything changes.
    """
    _check_on_mismatch(on_mismatch)
    resolved = resolve_platform(platform)
    _carry_out(_verdict(document, on_mismatch, mesh, resolved), resolved, mesh)


def _to_bytes(document: Mapping[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(dict(document), buffer)
    return buffer.getvalue()


def _from_bytes(blob: bytes, what: str) -> Any:
    try:
        return torch.load(io.BytesIO(blob), weights_only=True)
    except Exception as error:
        raise CheckpointError(
            f"{what} is not a readable hwrng RNG state (truncated or corrupt): "
            f"{type(error).__name__}: {error}"
        ) from None


def _file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


#: What :func:`save` calls each kind of file it refuses to replace, by ``stat`` test.
_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link that does not resolve (a loop)"),
)


def _destination(target: str) -> str:
    """The regular file (existing or not) that saving to ``target`` replaces; else refuse.

    ``target``'s symbolic links are followed to the end: the file to replace is
    the one the last link names, so that the links survive the rename.
    """
    resolved = os.path.realpath(target)
    via = "" if resolved == os.path.abspath(target) else f" (which resolves to {resolved!r})"
    if target.endswith(("/", os.sep)):
        kind = "a directory (the path ends with a separator)"
    else:
        try:
            mode = os.lstat(resolved).st_mode
        except FileNotFoundError:
            return resolved  # created by the rename (a missing directory fails there)
        except OSError as error:
            raise CheckpointError(
                f"cannot save the RNG state to {target!r}{via}: {type(error).__name__}: {error}"
            ) from error
        if stat.S_ISREG(mode):
            return resolved
        kind = next((name for test, name in _NOT_REGULAR if test(mode)), "a special file")
    raise CheckpointError(
        f"cannot save the RNG state to {target!r}{via}: it is {kind}, not a regular file; "
        "it was left as it is and nothing was written"
    )


def save(path: str | os.PathLike[str], platform: Platform | str | None = None) -> None:
    """``torch.save`` this rank's :func:`state_dict` to ``path`` (one file per rank), atomically.

    The state is written to a temporary file in the same directory and renamed
    over the file only once complete: a failed save leaves the previous file as
    it was (and no temporary file).

    Only a regular file is ever replaced. ``path`` may name a regular file or
    nothing yet (the file is created); a symbolic link is followed, through
    every link, to the file the last one names, and that file is replaced or
    created under the same rule, so the links stay as they are (a dangling
    link gets the file it names, as :func:`open` would create it). Anything
    else -- a directory, a character or block device, a FIFO, a socket, a
    link loop -- is refused before anything is written, and is neither
    replaced nor written into.

    The check is made before the state is written and again just before the
    rename, but the two are separate steps: a process that puts something
    other than a regular file at the path in between (or re-points a link)
    can still have it replaced: save into a directory only you can write to,
    above all as root.

    Raises
    ------
    CheckpointError
        If ``path`` is not a regular file (or a link to one, or nothing yet),
        saying what it is; or if the file cannot be written (a missing
        directory, a full disk, a file size limit), naming the path, with the
        cause chained.
    """
    target = os.fspath(path)
    _destination(target)  # refuse what is not a regular file before serialising anything
    _write_atomically(target, _to_bytes(state_dict(platform)))


def _write_atomically(target: str, blob: bytes) -> None:
    """Write ``blob`` beside the file ``target`` resolves to, and rename it over that file.

    The rules of :func:`save`: only a regular file (or nothing yet) is replaced,
    links are followed and survive.
    """
    destination = _destination(target)
    temporary: str | None = None
    try:
        descriptor, temporary = tempfile.mkstemp(
            prefix=f".{os.path.basename(destination)}.",
            suffix=".tmp",
            dir=os.path.dirname(destination),
        )
        with os.fdopen(descriptor, "wb") as file:
            os.fchmod(file.fileno(), _file_mode())
            file.write(blob)
            file.flush()
            os.fsync(file.fileno())
        if _destination(target) != destination:
            raise CheckpointError(
                f"cannot save the RNG state to {target!r}: a symbolic link on the path was "
                f"changed while saving (it resolved to {destination!r}); nothing was replaced"
            )
        os.replace(temporary, destination)
        temporary = None
    except (OSError, RuntimeError) as error:
        raise CheckpointError(
            f"cannot save the RNG state to {target!r} (the previous file, if any, is "
            f"unchanged): {type(error).__name__}: {error}"
        ) from error
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):  # best effort: the save already failed
                os.unlink(temporary)


def load(
    path: str | os.PathLike[str],
    *,
    on_mismatch: OnMismatch = "error",
    mesh: DeviceMesh | None = None,
    platform: Platform | str | None = None,
) -> None:
    """Restore this rank's RNG state from a file :func:`save` wrote (see :func:`load_state_dict`).

    Raises
    ------
    CheckpointError
        Also for a file that is missing, truncated or corrupt.
    """
    try:
        with open(path, "rb") as file:
            blob = file.read()
    except OSError as error:
        raise CheckpointError(f"cannot read the RNG state {os.fspath(path)!r}: {error}") from None
    load_state_dict(
        _from_bytes(blob, repr(os.fspath(path))),
        on_mismatch=on_mismatch,
        mesh=mesh,
        platform=platform,
    )

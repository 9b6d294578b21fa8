"""Where a call runs with respect to ``torch.utils.checkpoint``, read from torch's own frames.

torch's activation checkpointing runs a block twice: the forward (whose
activations it drops) and, in the backward, a recomputation. It has no hook
for a library to learn which of the two is running, so this module reads it
from the Python stack and from the saved-tensor hooks torch pushes:

* reentrant (``use_reentrant=True``): the forward runs inside
  ``CheckpointFunction.forward(ctx, ...)``, the recomputation inside
  ``CheckpointFunction.backward(ctx, ...)``; ``ctx`` (one per checkpoint
  call) ties the two together, and the backward's graph task names the run.
* non-reentrant (``use_reentrant=False``, ``checkpoint_wrapper``, selective
  checkpointing, the composable ``checkpoint(module)``): the forward runs while
  ``checkpoint()`` (``_checkpoint_impl`` from torch 2.15) holds the generator
  ``_checkpoint_without_reentrant_generator`` (``..._impl``) suspended at its
  ``yield`` (its local ``new_frame`` is the checkpoint's ``_CheckpointFrame``),
  and the saved-tensor hooks torch pushes for it (``_checkpoint_hook``) close
  over that frame; the recomputation runs inside the hook's ``unpack_hook``,
  whose locals ``frame`` and ``gid`` name the checkpoint and the run.

These are private details of torch. :func:`layout` checks, once, that the
installed torch has each of them (the same in torch 2.10 to 2.15); where one
is missing, :func:`enclosing` refuses a recomputation loudly instead of
guessing (a fork in the backward pass while a frame of
``torch/utils/checkpoint.py`` is on the stack).
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Hashable
from dataclasses import dataclass
from functools import cache
from pathlib import PurePath
from typing import Any, NamedTuple

import torch

from hwrng._exceptions import RecomputationError

__all__ = ["Enclosing", "TorchLayout", "enclosing", "layout", "unsupported_reason"]


@dataclass(frozen=True)
class TorchLayout:
    """The code objects of torch's checkpointing that mark where a call runs."""

    reentrant_forward: types.CodeType
    reentrant_backward: types.CodeType
    checkpoint: types.CodeType  # the frame whose local ``gen`` is the generator below
    generator: types.CodeType
    pack_hook: types.CodeType
    pack_frame_cell: int
    unpack_hook: types.CodeType


class Enclosing(NamedTuple):
    """The checkpoints a call runs in (a named tuple: one is made per random context).

    Attributes
    ----------
    recording
        torch's objects (``_CheckpointFrame`` or a reentrant ``ctx``) of the
        checkpointed forwards the call runs in, innermost first: each will be
        recomputed, so what the call starts from is recorded for each.
    replaying
        ``(owner, run)`` of the innermost recomputation the call runs in, or
        ``None``: ``owner`` is the checkpoint being recomputed, ``run`` names
        this recomputation of it (a backward pass may recompute it again).
    """

    recording: tuple[object, ...]
    replaying: tuple[object, Hashable] | None


def _nested_code(function: object, name: str) -> types.CodeType:
    code = getattr(function, "__code__", None)
    if code is None:
        raise LookupError(f"{function!r} has no code")
    for constant in code.co_consts:
        if inspect.iscode(constant) and constant.co_name == name:
            return constant
    raise LookupError(f"{code.co_qualname} defines no {name}")


def _require(code: types.CodeType, names: tuple[str, ...], where: str) -> None:
    known = set(code.co_varnames) | set(code.co_cellvars) | set(code.co_freevars)
    missing = [name for name in names if name not in known]
    if missing:
        raise LookupError(f"{where} has no local {', '.join(missing)}")


def _non_reentrant_forward(module: types.ModuleType) -> tuple[types.CodeType, types.CodeType]:
    """The code of the generator that brackets a non-reentrant forward, and of its caller.

    torch 2.10 to 2.14: ``checkpoint`` holds ``_checkpoint_without_reentrant_generator``
    in its local ``gen``; torch 2.15: ``_checkpoint_impl`` holds
    ``_checkpoint_without_reentrant_generator_impl`` there (the former name
    became a shim returning it).
    """
    impl = getattr(module, "_checkpoint_without_reentrant_generator_impl", None)
    if impl is not None and hasattr(module, "_checkpoint_impl"):
        generator, caller = impl, inspect.unwrap(module._checkpoint_impl)
    else:
        generator = module._checkpoint_without_reentrant_generator
        caller = inspect.unwrap(module.checkpoint)
    if not inspect.isgeneratorfunction(generator):
        raise LookupError(f"{generator.__qualname__} is not a generator function")
    _require(caller.__code__, ("gen",), f"torch.utils.checkpoint.{caller.__qualname__}")
    _require(generator.__code__, ("new_frame",), generator.__qualname__)
    return generator.__code__, caller.__code__


def _read_layout() -> TorchLayout:
    from torch.utils import checkpoint as module

    reentrant = module.CheckpointFunction
    forward = inspect.unwrap(reentrant.forward).__code__
    backward = inspect.unwrap(reentrant.backward).__code__
    generator, checkpoint = _non_reentrant_forward(module)
    pack = _nested_code(module._checkpoint_hook.__init__, "pack_hook")
    unpack = _nested_code(module._checkpoint_hook.__init__, "unpack_hook")
    _require(forward, ("ctx",), "CheckpointFunction.forward")
    _require(backward, ("ctx",), "CheckpointFunction.backward")
    _require(unpack, ("frame", "gid"), "_checkpoint_hook's unpack_hook")
    if "frame" not in pack.co_freevars:
        raise LookupError("_checkpoint_hook's pack_hook does not close over its frame")
    return TorchLayout(
        reentrant_forward=forward,
        reentrant_backward=backward,
        checkpoint=checkpoint,
        generator=generator,
        pack_hook=pack,
        pack_frame_cell=pack.co_freevars.index("frame"),
        unpack_hook=unpack,
    )


@cache
def _layout_or_reason() -> TorchLayout | str:
    try:
        return _read_layout()
    except (AttributeError, LookupError, TypeError) as error:
        version = torch.__version__
        return f"torch {version}'s torch.utils.checkpoint is not the one hwrng reads: {error}"


def layout() -> TorchLayout | None:
    """The installed torch's checkpointing layout, or ``None`` where it is not hwrng's to read."""
    found = _layout_or_reason()
    return found if isinstance(found, TorchLayout) else None


def unsupported_reason() -> str | None:
    """Why hwrng cannot follow this torch's activation checkpointing, or ``None`` if it can."""
    found = _layout_or_reason()
    return found if isinstance(found, str) else None


_CHECKPOINT_FILE = PurePath("torch", "utils", "checkpoint.py")


def _in_checkpoint_file(frame: types.FrameType | None) -> bool:
    while frame is not None:
        if PurePath(frame.f_code.co_filename).parts[-3:] == _CHECKPOINT_FILE.parts:
            return True
        frame = frame.f_back
    return False


def _suspended_frame(generator: object, code: types.CodeType) -> object | None:
    """The ``_CheckpointFrame`` of a non-reentrant checkpoint whose forward is running."""
    if not isinstance(generator, types.GeneratorType) or generator.gi_code is not code:
        return None
    frame = generator.gi_frame
    return None if frame is None else frame.f_locals.get("new_frame")


def _hooked_frame(found: TorchLayout, hooks: Any) -> object | None:
    """The ``_CheckpointFrame`` whose saved-tensor ``hooks`` are innermost, if a checkpoint's."""
    pack = hooks[0]
    code = getattr(pack, "__code__", None)
    closure = getattr(pack, "__closure__", None)
    if code is not found.pack_hook or closure is None:
        return None
    owner: object = closure[found.pack_frame_cell].cell_contents
    return owner


def enclosing() -> Enclosing | None:
    """The checkpoints the caller runs in; ``None`` outside every one.

    Costs three calls into torch outside checkpointed code (grad mode on, no
    saved-tensor hooks, no backward running); inside it, a walk up the stack.

    Raises
    ------
    RecomputationError
        If this torch's checkpointing is not the one hwrng reads and the call
        runs in one of its recomputations.
    """
    task = torch._C._current_graph_task_id()
    hooks: Any = torch._C._autograd._top_saved_tensors_default_hooks(False)
    if task == -1 and hooks is None and torch.is_grad_enabled():
        return None
    found = layout()
    start = sys._getframe(1)
    if found is None:
        if task != -1 and _in_checkpoint_file(start):
            raise RecomputationError(
                f"{unsupported_reason()}; it cannot make this recomputation redraw what the "
                "forward drew. Checkpoint the block with hwrng's supported torch (2.10 to 2.15) "
                "or run it without activation checkpointing"
            )
        return None
    recording: list[object] = []
    replaying: tuple[object, Hashable] | None = None
    frame: types.FrameType | None = start
    while frame is not None:
        code = frame.f_code
        if code is found.reentrant_forward:
            recording.append(frame.f_locals["ctx"])
        elif code is found.checkpoint:
            owner = _suspended_frame(frame.f_locals.get("gen"), found.generator)
            if owner is not None:
                recording.append(owner)
        elif code is found.reentrant_backward:
            replaying = (frame.f_locals["ctx"], ("graph task", task))
            break
        elif code is found.unpack_hook:
            local = frame.f_locals
            replaying = (local["frame"], ("gid", local["gid"]))
            break
        frame = frame.f_back
    if hooks is not None:  # the composable checkpoint(module) shows its forward by its hooks only
        owner = _hooked_frame(found, hooks)
        if owner is not None and not any(owner is known for known in recording):
            recording.insert(0, owner)
    if not recording and replaying is None:
        return None
    return Enclosing(tuple(recording), replaying)

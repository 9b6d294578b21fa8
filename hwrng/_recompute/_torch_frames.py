"""Where a call runs with respect to ``torch.utils.checkpoint``, read from torch's own frames.

torch's activation checkpointing runs a block twice: the forward (whose
activations it drops) and, in the backward, a recomputation. It has no hook
for a library to learn which of the two is running, so this module reads it
from the Python stack and from the saved-tensor hooks torch pushes:

* reentrant (``use_reentrant=True``): the forward runs inside
  ``CheckpointFunction.forward(ctx, ...)``, the recomputation inside
  ``CheckpointFunction.backward(ctx, ...)``; ``ctx`` (one per checkpoint
  call) ties the two together, and the backward's graph task names the run.
  After the recomputation, ``CheckpointFunction.backward`` runs the block's own
  backward through ``torch.autograd.backward``: what runs under that call (a
  custom Function's backward, a tensor hook) is no recomputation, and draws as
  it would without checkpointing.
* non-reentrant (``use_reentrant=False``, ``checkpoint_wrapper``, selective
  checkpointing): the forward runs while ``checkpoint()`` (``_checkpoint_impl``
  from torch 2.15) holds the generator ``_checkpoint_without_reentrant_generator``
  (``..._impl``) suspended at its ``yield`` (its local ``new_frame`` is the
  checkpoint's ``_CheckpointFrame``); the recomputation runs inside the
  saved-tensor hooks' ``unpack_hook``, whose locals ``frame`` and ``gid`` name
  the checkpoint and the run.
* the composable ``checkpoint(module)`` runs the same generator from the
  module's forward hooks and keeps it in the module's composable state
  (``_CheckpointState._ac_generator``): its forward is read from the frames of
  ``Module._call_impl`` on the stack, whatever saved-tensor hooks the block
  pushes over the checkpoint's own (a nested checkpoint, ``save_on_cpu``).

Which default generators torch rewinds for a recomputation is read from the
same objects (``hwrng._recompute._rewound``).

These are private details of torch. :func:`layout` checks, once, that the
installed torch has each of them (the same in torch 2.10 to 2.15); where one
is missing, :func:`enclosing` refuses a recomputation loudly instead of
guessing (a fork in the backward pass while a frame of
``torch/utils/checkpoint.py`` is on the stack).
"""

from __future__ import annotations

import importlib
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
from hwrng._recompute._rewound import REWIND_NAMES

__all__ = [
    "Enclosing",
    "Recomputation",
    "TorchLayout",
    "enclosing",
    "layout",
    "unsupported_reason",
]


@dataclass(frozen=True)
class TorchLayout:
    """The code objects and names of torch's checkpointing that mark where a call runs."""

    reentrant_forward: types.CodeType
    reentrant_backward: types.CodeType
    block_backward: types.CodeType  # torch.autograd.backward, as the reentrant backward calls it
    checkpoint: types.CodeType  # the frame whose local ``gen`` is the generator below
    generator: types.CodeType
    pack_hook: types.CodeType
    pack_frame_cell: int
    unpack_hook: types.CodeType
    module_call: types.CodeType  # Module._call_impl: a composable checkpoint's forward runs in it
    # where a module keeps its composable states, and the checkpoint's state class (both None
    # without torch.distributed, where no composable checkpoint can run)
    composable_key: str | None
    composable_state: type | None


class Recomputation(NamedTuple):
    """The innermost recomputation a call runs in.

    Attributes
    ----------
    owner
        torch's object for the checkpoint being recomputed (a reentrant ``ctx``
        or a ``_CheckpointFrame``).
    run
        This recomputation of it (a retained graph may recompute it again).
    """

    owner: object
    run: Hashable


class Enclosing(NamedTuple):
    """The checkpoints a call runs in (a named tuple: one is made per random context).

    Attributes
    ----------
    recording
        torch's objects (``_CheckpointFrame`` or a reentrant ``ctx``) of the
        checkpointed forwards the call runs in, innermost first: each will be
        recomputed, so what the call starts from is recorded for each.
    replaying
        The innermost recomputation the call runs in, or ``None``.
    """

    recording: tuple[object, ...]
    replaying: Recomputation | None


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


def _require_attributes(code: types.CodeType, names: tuple[str, ...], where: str) -> None:
    missing = [name for name in names if name not in code.co_names]
    if missing:
        raise LookupError(f"{where} uses no {', '.join(missing)}")


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
    recompute = _nested_code(generator, "recompute_fn")
    _require(recompute, REWIND_NAMES, f"{generator.__qualname__}'s recompute_fn")
    _require_attributes(
        module._CheckpointFrame.__init__.__code__, ("recompute_fn",), "_CheckpointFrame"
    )
    return generator.__code__, caller.__code__


def _composable() -> tuple[str, type] | None:
    """Where modules keep the composable checkpoint's state, and its class (None: no such API)."""
    if not torch.distributed.is_available():
        return None
    contract = importlib.import_module("torch.distributed._composable.contract")
    activation = importlib.import_module("torch.distributed._composable.checkpoint_activation")
    state = activation._CheckpointState
    missing = {"enable_hook", "_ac_generator"} - set(inspect.get_annotations(state))
    if missing:
        raise LookupError(
            f"the composable checkpoint's state keeps no {', '.join(sorted(missing))}"
        )
    key = contract.STATE_KEY
    if not isinstance(key, str):
        raise LookupError("the composable API's STATE_KEY is not a string")
    return key, state


def _read_layout() -> TorchLayout:
    from torch.utils import checkpoint as module

    reentrant = module.CheckpointFunction
    forward = inspect.unwrap(reentrant.forward).__code__
    backward = inspect.unwrap(reentrant.backward).__code__
    generator, checkpoint = _non_reentrant_forward(module)
    pack = _nested_code(module._checkpoint_hook.__init__, "pack_hook")
    unpack = _nested_code(module._checkpoint_hook.__init__, "unpack_hook")
    call = inspect.unwrap(torch.nn.Module._call_impl).__code__
    _require(forward, ("ctx",), "CheckpointFunction.forward")
    _require(backward, ("ctx",), "CheckpointFunction.backward")
    _require_attributes(forward, REWIND_NAMES, "CheckpointFunction.forward")
    _require_attributes(backward, ("autograd", "backward"), "CheckpointFunction.backward")
    _require(unpack, ("frame", "gid"), "_checkpoint_hook's unpack_hook")
    _require(call, ("self",), "Module._call_impl")
    if "frame" not in pack.co_freevars:
        raise LookupError("_checkpoint_hook's pack_hook does not close over its frame")
    composable = _composable()
    return TorchLayout(
        reentrant_forward=forward,
        reentrant_backward=backward,
        block_backward=inspect.unwrap(torch.autograd.backward).__code__,
        checkpoint=checkpoint,
        generator=generator,
        pack_hook=pack,
        pack_frame_cell=pack.co_freevars.index("frame"),
        unpack_hook=unpack,
        module_call=call,
        composable_key=None if composable is None else composable[0],
        composable_state=None if composable is None else composable[1],
    )


@cache
def _layout_or_reason() -> TorchLayout | str:
    try:
        return _read_layout()
    except (AttributeError, LookupError, TypeError, ImportError) as error:
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


def _composable_frame(found: TorchLayout, module: object) -> object | None:
    """The ``_CheckpointFrame`` of ``module``'s composable checkpoint, if its forward is running."""
    if found.composable_key is None or found.composable_state is None:
        return None
    states = getattr(module, "__dict__", {}).get(found.composable_key)
    if not isinstance(states, dict):
        return None
    for state in states.values():
        if isinstance(state, found.composable_state) and getattr(state, "enable_hook", False):
            # (hooks off: the module's own recomputation, which holds no generator of its own)
            return _suspended_frame(getattr(state, "_ac_generator", None), found.generator)
    return None


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
        runs in one of its recomputations (or in the backward of a reentrant
        checkpoint's block, which cannot be told from one then).
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
    recording, replaying = _walk(found, start, task, hooks)
    if hooks is not None:  # a composable forward whose module call hwrng cannot see
        owner = _hooked_frame(found, hooks)
        if owner is not None and not any(owner is known for known in recording):
            recording.insert(0, owner)
    if not recording and replaying is None:
        return None
    return Enclosing(tuple(recording), replaying)


def _walk(
    found: TorchLayout, start: types.FrameType, task: int, hooks: Any
) -> tuple[list[object], Recomputation | None]:
    """The checkpointed forwards around ``start``, out to the innermost recomputation."""
    recording: list[object] = []
    callee: types.FrameType | None = None
    frame: types.FrameType | None = start
    while frame is not None:
        code = frame.f_code
        owner: object | None = None
        if code is found.reentrant_forward:
            owner = frame.f_locals["ctx"]
        elif code is found.checkpoint:
            owner = _suspended_frame(frame.f_locals.get("gen"), found.generator)
        elif code is found.module_call and hooks is not None:
            owner = _composable_frame(found, frame.f_locals.get("self"))
        elif code is found.reentrant_backward:
            if callee is None or callee.f_code is not found.block_backward:
                return recording, Recomputation(frame.f_locals["ctx"], ("graph task", task))
            # else the block's own backward, after its recomputation: nothing to replay there
        elif code is found.unpack_hook:
            local = frame.f_locals
            return recording, Recomputation(local["frame"], ("gid", local["gid"]))
        if owner is not None and not any(owner is known for known in recording):
            recording.append(owner)
        callee, frame = frame, frame.f_back
    return recording, None

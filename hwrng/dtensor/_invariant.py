"""``hwrng.dtensor.install(invariant=True)``: DTensor random ops with placement-invariant values.

DTensor op handlers fill each rank's local shard with :mod:`hwrng.invariant`'s
values -- a pure function of (seed, op position, global index) -- so
``full_tensor()`` equals what the same call gives on one device, at any mesh
and placement (``Shard`` on any dim, several mesh dims, uneven splits,
``_StridedShard``; ``Partial`` counts as replicated). The op's seed is the
mesh's common seed, its position the default generator's offset, which then
advances as for any tracked op.

Made invariant: ``uniform_``, ``normal_``, ``bernoulli_``/``bernoulli``,
``native_dropout``, ``rand_like``/``randn_like``, ``torch.distributed.tensor.rand``
/ ``randn``, ``nn.init.trunc_normal_`` (by inverse CDF) and ``nn.functional.dropout``
(through ``native_dropout`` on every device, so its scale is the contract's
``f32(1 / (1 - p))`` and a ``Partial`` input stays ``Partial``: dropout is linear);
``nn.init``'s uniform, normal, kaiming and xavier functions are built on the first two.
Everything else keeps the ordinary tracked behaviour. Compiled code and
LocalTensorMode are refused in this mode (with an error), not served other
numbers. Checkpoints of a process in this mode record the contract
(:data:`hwrng.invariant.CONTRACT`) and refuse to resume under another.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from hwrng import _philox, invariant
from hwrng._exceptions import DTensorHookError
from hwrng._philox._contract import record_draw
from hwrng.dtensor._hooks import restore_op_handlers, set_op_handlers
from hwrng.dtensor._local_ranks import local_tensor_mode

__all__ = ["InvariantPatches"]


def _tracker() -> Any:
    from torch.distributed.tensor import _random

    return _random._rng_tracker


def _refuse_unsupported(op: object) -> None:
    if torch._guards.detect_fake_mode() is not None:
        raise DTensorHookError(
            f"{op}: hwrng's invariant mode does not run under torch.compile; install the "
            "adapter without invariant=True for compiled code"
        )
    if local_tensor_mode() is not None:
        raise DTensorHookError(f"{op}: hwrng's invariant mode does not run under LocalTensorMode")


def _where(target: Any, generator: torch.Generator | None) -> tuple[Any, Any, Any]:
    """Where ``target``'s values come from: shard spec, seed chooser, platform.

    The chooser is the mesh's, or none for an explicit ``generator``.
    """
    from hwrng.dtensor._tracker import _shard_spec

    tracker = _tracker()
    spec = _shard_spec(target._spec)
    choose = None if generator is not None else tracker.hwrng_seeds.chooser(target._spec.mesh)
    return spec, choose, tracker.hwrng_platform


def _fill_local(
    target: Any,
    local: torch.Tensor,
    generator: torch.Generator | None,
    draw: _philox.Draw,
) -> torch.Tensor:
    spec, choose, platform = _where(target, generator)
    return invariant._fill(local, spec, generator, platform, draw, choose_seed=choose)


def _like(target: Any, local: torch.Tensor, *, replicated: bool = False) -> Any:
    """A DTensor laid out as ``target``, holding ``local`` (of its own dtype).

    ``replicated``: ``Replicate`` where ``target`` is ``Partial`` -- for values drawn
    there, which every rank of a Partial dim holds alike.
    """
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

    spec = target._spec
    placements = spec.placements
    if replicated:
        placements = tuple(Replicate() if p.is_partial() else p for p in placements)
    meta = TensorMeta(spec.shape, spec.stride, local.dtype)
    new_spec = DTensorSpec(spec.mesh, placements, tensor_meta=meta)
    return DTensor(local, new_spec, requires_grad=False)  # type: ignore[no-untyped-call]


def _args(
    args: tuple[Any, ...], kwargs: dict[str, Any], names: list[str], defaults: list[Any]
) -> list[Any]:
    values = list(args[1:]) + [None] * len(names)
    return [
        kwargs.get(name, values[i] if values[i] is not None else default)
        for i, (name, default) in enumerate(zip(names, defaults, strict=True))
    ]


Fill = Callable[[Any, torch.Tensor, tuple[Any, ...], dict[str, Any], Any], Any]


def _uniform(target: Any, local: torch.Tensor, args: Any, kwargs: Any, generator: Any) -> Any:
    low, high = _args(args, kwargs, ["from", "to"], [0.0, 1.0])
    _fill_local(
        target, local, generator, _philox.drawer("uniform", local.dtype, low=low, high=high)
    )
    return target


def _normal(target: Any, local: torch.Tensor, args: Any, kwargs: Any, generator: Any) -> Any:
    mean, std = _args(args, kwargs, ["mean", "std"], [0.0, 1.0])
    _fill_local(target, local, generator, _philox.drawer("normal", local.dtype, mean=mean, std=std))
    return target


def _bernoulli_(target: Any, local: torch.Tensor, args: Any, kwargs: Any, generator: Any) -> Any:
    (prob,) = _args(args, kwargs, ["p"], [0.5])
    _fill_local(target, local, generator, _philox.drawer("bernoulli", local.dtype, p=prob))
    return target


def _bernoulli(target: Any, local: torch.Tensor, args: Any, kwargs: Any, generator: Any) -> Any:
    out = torch.empty_like(local)
    _fill_local(target, out, generator, _philox.drawer("bernoulli", out.dtype, p=local))
    return _like(target, out)


def _random_like(normal: bool) -> Fill:
    # torch.rand_like is uniform on [0, 1), randn_like standard normal.
    op = "normal" if normal else "uniform"
    parameters = {"mean": 0.0, "std": 1.0} if normal else {"low": 0.0, "high": 1.0}

    def like(target: Any, local: torch.Tensor, args: Any, kwargs: Any, generator: Any) -> Any:
        dtype = kwargs.get("dtype") or local.dtype
        draw = _philox.drawer(op, dtype, **parameters)  # refuses a dtype it cannot fill
        out = torch.empty_like(local, dtype=dtype)
        _fill_local(target, out, generator, draw)
        return _like(target, out)

    return like


def _native_dropout(
    target: Any, local: torch.Tensor, args: Any, kwargs: Any, generator: Any
) -> Any:
    """The contract's dropout, drawn as ``hwrng.invariant.dropout`` draws it.

    As there, ``p`` of 0 or 1 and evaluation draw nothing (the mask all true,
    or all false for ``p = 1``); the output is linear in the input, so a
    Partial input gives a Partial output, while the mask, the same on every
    rank of a Partial dim (its backward multiplies a gradient by it), is
    Replicate there.
    """
    probability, train = _args(args, kwargs, ["p", "train"], [0.5, True])
    if not train or probability == 0.0:
        output, keep = local.clone(), torch.ones_like(local, dtype=torch.bool)
    elif probability == 1.0:
        output = local * torch.zeros((), dtype=local.dtype, device=local.device)
        keep = torch.zeros_like(local, dtype=torch.bool)
    else:
        spec, choose, platform = _where(target, generator)
        with invariant._dropout_draw(
            local, spec, probability, generator=generator, platform=platform, choose_seed=choose
        ) as draw:
            output, keep = draw(local)
    return _like(target, output), _like(target, keep, replicated=True)


def _kinds() -> dict[Any, Fill]:
    aten = torch.ops.aten
    return {
        aten.uniform_.default: _uniform,
        aten.normal_.default: _normal,
        aten.bernoulli_.float: _bernoulli_,
        aten.bernoulli.default: _bernoulli,
        aten.rand_like.default: _random_like(normal=False),
        aten.randn_like.default: _random_like(normal=True),
        aten.native_dropout.default: _native_dropout,
    }


def _handler(op_call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Every invariant op: refuse what cannot be served, then fill the local shard."""
    _refuse_unsupported(op_call)
    kwargs = dict(kwargs or {})
    generator = kwargs.pop("generator", None)
    target = args[0]
    local = target._local_tensor
    tracker = _tracker()
    if local.is_meta or tracker is None or not tracker.distribute_region_enabled:
        raise DTensorHookError(f"{op_call}: invariant ops need a materialised tensor")
    return _kinds()[op_call](target, local, args, kwargs, generator)


def _dtensor_random(kind: str) -> Callable[..., Any]:
    """Invariant ``torch.distributed.tensor.rand``/``randn``: an empty DTensor, then filled."""
    from torch.distributed.tensor import empty

    def create(*size: Any, requires_grad: bool = False, **kwargs: Any) -> Any:
        tensor = empty(*size, **kwargs)
        with torch.no_grad():
            tensor.uniform_() if kind == "rand" else tensor.normal_()
        return tensor.requires_grad_(requires_grad)

    create.__name__ = kind
    create.__doc__ = f"torch.distributed.tensor.{kind} with hwrng's placement-invariant values."
    return create


def _trunc_normal(original: Callable[..., Any]) -> Callable[..., Any]:
    """``nn.init.trunc_normal_`` by inverse CDF for DTensors; the original for the rest."""

    def trunc_normal_(  # noqa: PLR0917 - torch.nn.init.trunc_normal_'s own signature
        tensor: Any,
        mean: float = 0.0,
        std: float = 1.0,
        a: float = -2.0,
        b: float = 2.0,
        generator: torch.Generator | None = None,
    ) -> Any:
        from torch.distributed.tensor import DTensor

        if not isinstance(tensor, DTensor) or tensor._local_tensor.is_meta:
            return original(tensor, mean, std, a, b, generator=generator)
        _refuse_unsupported("nn.init.trunc_normal_")
        local = tensor._local_tensor
        draw = _philox.drawer("trunc_normal", local.dtype, mean=mean, std=std, a=a, b=b)
        with torch.no_grad():
            _fill_local(tensor, local, generator, draw)
        return tensor

    trunc_normal_.__doc__ = original.__doc__
    return trunc_normal_


def _dropout(original: Callable[..., Any]) -> Callable[..., Any]:
    """``nn.functional.dropout`` of a DTensor through ``native_dropout``, on every device.

    torch runs ``native_dropout`` only for an out-of-place dropout on an accelerator; on
    the CPU, and in place on any device, it composes dropout of ``bernoulli_``, an
    in-place division by ``1 - p`` and a multiplication. That scale is ``1 / f32(1 - p)``,
    not the contract's ``f32(1 / (1 - p))`` (another last bit for about one ``p`` in
    four), and on a ``Partial`` input the mask is ``Partial`` too: torch 2.10 refuses the
    division, later torches sum the mask over the Partial dim. The rest -- another
    tensor, evaluation, ``p`` of 0 or 1, no elements -- is torch's own dropout, which
    draws nothing there.
    """

    def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        from torch.distributed.tensor import DTensor

        if (
            not isinstance(input, DTensor)
            or not training
            or not 0.0 < p < 1.0
            or input._local_tensor.is_meta
            or input.numel() == 0
        ):
            return original(input, p, training, inplace)
        output, _ = torch.ops.aten.native_dropout(input, p, True)
        return input.copy_(output) if inplace else output

    dropout.__doc__ = original.__doc__
    return dropout


class InvariantPatches:
    """The handlers and function swaps of invariant mode, undone by :meth:`undo`."""

    def __init__(self) -> None:
        self._handlers: dict[Any, Any] = {}
        self._functions: list[tuple[Any, str, Any]] = []

    def apply(self) -> None:
        """Install the invariant handlers and functions."""
        import torch.distributed.tensor as dtensor_module
        from torch.distributed.tensor import _api

        record_draw()  # checkpoints of this process record the contract its values follow
        self._handlers.update(set_op_handlers(_kinds(), _handler))
        rand, randn = _dtensor_random("rand"), _dtensor_random("randn")
        swaps = [
            (dtensor_module, "rand", rand),
            (_api, "rand", rand),
            (dtensor_module, "randn", randn),
            (_api, "randn", randn),
            (torch.nn.init, "trunc_normal_", _trunc_normal(torch.nn.init.trunc_normal_)),
            (torch.nn.functional, "dropout", _dropout(torch.nn.functional.dropout)),
        ]
        for module, name, new in swaps:
            self._functions.append((module, name, getattr(module, name)))
            setattr(module, name, new)

    def undo(self) -> None:
        """Put back what :meth:`apply` changed (handlers only where still ours)."""
        restore_op_handlers(self._handlers, _handler)
        for module, name, original in reversed(self._functions):
            setattr(module, name, original)
        self._handlers.clear()
        self._functions.clear()

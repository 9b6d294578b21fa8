"""Small helpers the rules share: drawing numbers, comparing them, refusing float64."""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import hwrng

__all__ = ["Float64Refused", "all_distinct", "draw", "draw_default", "refuse_float64"]


def draw(generator: torch.Generator, count: int = 32) -> torch.Tensor:
    """Draw ``count`` uniform numbers from ``generator``; return them on the CPU."""
    return torch.rand(count, generator=generator, device=generator.device).cpu()


def draw_default(
    platform: hwrng.Platform, device: int | None = None, count: int = 32
) -> torch.Tensor:
    """Draw from the platform's default generator of ``device`` (current by default)."""
    return draw(platform.generator(device), count)


def all_distinct(draws: list[torch.Tensor]) -> bool:
    """Whether no two of ``draws`` are equal."""
    return all(
        not torch.equal(draws[i], draws[j])
        for i in range(len(draws))
        for j in range(i + 1, len(draws))
    )


class Float64Refused(AssertionError):
    """An op touched a float64 tensor inside :func:`refuse_float64`."""


def refuse_float64() -> TorchDispatchMode:
    """A dispatch mode that fails any op reading, writing or making a float64 tensor.

    Used as a context manager: ``with refuse_float64(): ...``. Python numbers
    passed to ops are not tensors and pass; so do ops on every other dtype.
    It plays a device without float64 (Ascend's kernels, MPS) on any device.
    """
    return _RefuseFloat64()  # type: ignore[no-untyped-call]


class _RefuseFloat64(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if kwargs.get("dtype") == torch.float64 or _has_float64((args, kwargs)):
            raise Float64Refused(f"{func} was called with a float64 tensor")
        out = func(*args, **kwargs)
        if _has_float64(out):
            raise Float64Refused(f"{func} made a float64 tensor")
        return out


def _has_float64(tree: Any) -> bool:
    return any(
        isinstance(leaf, torch.Tensor) and leaf.dtype == torch.float64
        for leaf in pytree.tree_leaves(tree)
    )

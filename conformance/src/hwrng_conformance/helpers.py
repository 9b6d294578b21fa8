"""Small helpers the rules share: drawing numbers and comparing them."""

from __future__ import annotations

import torch

import hwrng

__all__ = ["all_distinct", "draw", "draw_default"]


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

"""Seed formulas as trainers write them, and the ranks they give one seed by accident.

A :class:`Formula` is one stream's seed as ``seed + offset + sum(weight *
coordinate)`` over named dims (Megatron-LM's expert stream is ``seed + 100*pp
+ 1024 + 100*ep + etp``), with the dims its ranks are meant to draw apart
along. :func:`collisions` finds the coordinates that the formula gives one
seed though they differ along those dims -- Megatron's ``(pp=0, ep=1)`` and
``(pp=1, ep=0)`` -- over a layout of dim sizes, vectorised over the grid of
those dims only (never the whole world). Pure; presets warn with it at seeding
time, ``hwrng plan --preset`` prints it, and ``hwrng.verify`` names a formula
as the cause of the failure it explains.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hwrng._mesh import strides, unravel_index
from hwrng._validation import SEED_MODULUS

__all__ = ["STREAM_BITS", "Collision", "Formula", "collisions", "linear_formula"]

#: Where hwrng's collision-free formulas put the stream's number: above every rank's index.
STREAM_BITS = 48


@dataclass(frozen=True)
class Formula:
    """One stream's seed: ``(seed + sum of its terms) % 2**64``.

    Attributes
    ----------
    stream
        The stream's name (``"expert-parallel-rng"``, or ``"seed"`` for the
        default generators).
    terms
        ``(dim, weight)`` terms, in the order the author writes them; a term of
        dim ``""`` is a constant. A dim the coordinate lacks counts 0.
    along
        The dims along which the stream's ranks are meant to draw apart.
    author
        Whose formula it is, for messages (``"Megatron-LM"``).
    """

    stream: str
    terms: tuple[tuple[str, int], ...]
    along: tuple[str, ...]
    author: str

    @property
    def offset(self) -> int:
        """The constant the formula adds to the job's seed."""
        return sum(weight for dim, weight in self.terms if not dim)

    def weight(self, dim: str) -> int:
        """What one step along ``dim`` adds to the seed."""
        return sum(weight for d, weight in self.terms if d == dim)

    def seed(self, seed: int, coordinate: Mapping[str, int]) -> int:
        """The stream's seed at ``coordinate`` (missing dims count 0)."""
        total = seed + sum(w * (coordinate.get(d, 0) if d else 1) for d, w in self.terms)
        return total % SEED_MODULUS

    def describe(self) -> str:
        """``seed + 100*pp + 1024 + 100*ep + etp``: the formula as its author writes it."""
        parts = ["seed"]
        for dim, weight in self.terms:
            if not dim and weight % 2**STREAM_BITS == 0:
                parts += [f"{weight >> STREAM_BITS}*2**{STREAM_BITS}"] if weight else []
            elif not dim:
                parts.append(str(weight))
            elif weight:
                parts.append(dim if weight == 1 else f"{weight}*{dim}")
        return " + ".join(parts)


def linear_formula(
    stream: str, number: int, along: Sequence[str], sizes: Mapping[str, int], author: str
) -> Formula:
    """The collision-free formula hwrng offers: ``seed + number * 2**48 + linear index``.

    Distinct coordinates along ``along`` get distinct indices below ``2**48``,
    and streams of different ``number`` lie ``2**48`` apart, so no two
    (stream, coordinate) pairs share a seed for layouts below ``2**48`` ranks.
    """
    shape = [sizes.get(d, 1) for d in along]
    if math.prod(shape) >= 2**STREAM_BITS:
        raise ValueError(f"{math.prod(shape)} coordinates along {list(along)} do not fit 48 bits")
    terms = (("", number << STREAM_BITS), *zip(along, strides(shape), strict=True))
    return Formula(stream, terms, tuple(along), author)


@dataclass(frozen=True)
class Collision:
    """Two coordinates a formula gives one seed, though they should draw apart.

    Attributes
    ----------
    formula
        The formula at fault.
    seed
        The seed they share.
    first, second
        Their coordinates along the formula's ``along`` dims (the lower first).
    """

    formula: Formula
    seed: int
    first: dict[str, int]
    second: dict[str, int]

    def describe(self) -> str:
        """One line naming the stream, both coordinates, the seed and the formula."""
        return (
            f"{self.formula.stream}: {self.first} and {self.second} share seed {self.seed} "
            f"({self.formula.author}'s formula {self.formula.describe()})"
        )


def collisions(
    formula: Formula, seed: int, sizes: Mapping[str, int], limit: int = 16
) -> tuple[list[Collision], int]:
    """Coordinates along ``formula.along`` that share a seed, over a layout of ``sizes``.

    Returns the first ``limit`` collisions (the lowest coordinates first) and
    how many seeds are shared in all. Dims of ``along`` missing from ``sizes``
    count as size 1.
    """
    along = list(formula.along)
    shape = [int(sizes.get(d, 1)) for d in along]
    count = math.prod(shape)
    if count < 2:
        return [], 0
    index = np.arange(count, dtype=np.uint64)
    seeds = np.full(count, (seed + formula.offset) % SEED_MODULUS, dtype=np.uint64)
    for dim, size, stride in zip(along, shape, strides(shape), strict=True):
        coordinate = (index // np.uint64(stride)) % np.uint64(size)
        seeds += coordinate * np.uint64(formula.weight(dim) % SEED_MODULUS)  # wraps mod 2**64
    values, first_at, counts = np.unique(seeds, return_index=True, return_counts=True)
    shared = np.flatnonzero(counts > 1)
    found = []
    for value in sorted(shared, key=lambda v: int(first_at[v]))[:limit]:
        at = np.flatnonzero(seeds == values[value])[:2]
        first, second = (dict(zip(along, unravel_index(int(p), shape), strict=True)) for p in at)
        found.append(Collision(formula, int(values[value]), first, second))
    return found, int(shared.size)

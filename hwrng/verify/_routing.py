"""Where a record goes: to the rank that owns its key, one axis at a time.

The judged ranks form a grid (the mesh's dims of size > 1, or the whole
group as one axis). For one check, the *varying axes* are those along which
some rank's observations differ from its neighbour's; along every other axis
the check is the same everywhere, so each *layer* -- the ranks that share
their coordinates on the other axes -- is a copy of every other, and judging
one layer judges them all. Within its layer a key is owned by the rank at
coordinates ``unravel(key mod layer size)`` along the varying axes. A record
reaches its owner in one :class:`~hwrng.verify._wire.Exchange` per varying
axis (dimension-ordered routing), merging with its equals at every hop, so a
rank only ever holds the distinct keys it was sent: about one per check in
the world, whatever its size, since keys are digests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from hwrng._mesh import unravel_index
from hwrng.verify._records import Holding, Tally, decode, encode
from hwrng.verify._wire import Exchange, Steps

__all__ = ["Place", "owner_coordinate", "route"]

R = TypeVar("R", Tally, Holding)


@dataclass(frozen=True)
class Place:
    """Where this rank sits among the judged ranks.

    Attributes
    ----------
    rank
        Its global rank (the name problems use).
    position, size
        Its position in the whole judged group, and the group's size.
    sizes
        The size of each axis (every one > 1); their product is ``size``.
    coordinate
        Its coordinate along each axis.
    """

    rank: int
    position: int
    size: int
    sizes: tuple[int, ...]
    coordinate: tuple[int, ...]

    def __post_init__(self) -> None:
        if math.prod(self.sizes) != self.size or len(self.sizes) != len(self.coordinate):
            raise ValueError(
                f"axes {self.sizes} at {self.coordinate} do not make {self.size} ranks"
            )


def owner_coordinate(key: int, axes: Sequence[int], place: Place, axis: int) -> int:
    """The coordinate along ``axis`` of the owner of ``key`` among layers varying along ``axes``."""
    if axis not in axes:
        return place.coordinate[axis]
    sizes = [place.sizes[a] for a in axes]
    owner = unravel_index(key % math.prod(sizes), sizes)
    return owner[list(axes).index(axis)]


def route(
    records: list[R],
    place: Place,
    varying: Mapping[int, Sequence[int]],
    merge: Callable[[list[R]], list[R]],
) -> Steps[list[R]]:
    """Bring every record to its owner: one exchange per axis some check varies along.

    ``varying[check]`` lists the axes (ascending) along which ``check``'s layers
    are laid out; a record of that check stays on its coordinate along any
    other axis. Every rank must call this with the same ``varying``. Returns
    the records this rank owns, merged.
    """
    hops = sorted({axis for axes in varying.values() for axis in axes})
    held = merge(records)
    for axis in hops:
        outgoing: dict[int, list[Tally | Holding]] = {}
        for record in held:
            target = owner_coordinate(record.routing_key, varying[record.check], place, axis)
            outgoing.setdefault(target, []).append(record)
        words = tuple(
            tuple(encode(outgoing[c])) if c in outgoing else () for c in range(place.sizes[axis])
        )
        received = yield Exchange(axis, words)
        held = merge([r for part in received if part for r in decode(part)])  # type: ignore[misc]
    return held

"""``OffsetTracker``: run a random op on a local shard at the right offset.

Written once against :class:`~hwrng.Platform`'s counter view, so it works on
every backend: a tracked region positions the generator with the platform's
``(seed, offset)`` view and never copies RNG state through device memory (on
CUDA it never synchronises with the device either).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import torch

from hwrng._claims import claim
from hwrng._exceptions import InvalidArgumentError, InvalidOffsetError, NestingError
from hwrng._platform import DeviceLike, Platform
from hwrng._registry import resolve_platform
from hwrng._sharding import ShardSpec, shard_offsets
from hwrng._validation import MAX_OFFSET, check_flag, check_seed

__all__ = ["OffsetTracker"]

_in_region = threading.local()


def _regions() -> set[int]:
    open_here: set[int] | None = getattr(_in_region, "ids", None)
    if open_here is None:
        open_here = _in_region.ids = set()
    return open_here


class OffsetTracker:
    """Places each rank's random draws for ops on sharded tensors.

    Inside :meth:`region`, a rank's generator sits at the start of its own
    shard's range; afterwards every rank's generator sits at the same offset,
    past every shard's range, so replicas draw equal numbers, shards
    independent ones, and the next op overlaps none of them.

    Regions on one generator are serialised across threads (see
    ``hwrng._claims``) and refused when nested in one thread.

    Parameters
    ----------
    platform
        A :class:`~hwrng.Platform`, a platform name, or ``None`` for
        :func:`hwrng.get_platform`'s choice.
    device
        The device whose default generator regions use when no generator is
        passed; by default the platform's current device at each region.

    Examples
    --------
    >>> import torch, hwrng
    >>> from torch.distributed.tensor import Shard
    >>> tracker = hwrng.OffsetTracker("cpu")
    >>> spec = hwrng.ShardSpec((8, 4), (2,), (Shard(0),), (1,))
    >>> with tracker.region(spec) as generator:
    ...     local = torch.rand(spec.local_shape, generator=generator)
    """

    def __init__(self, platform: Platform | str | None = None, device: DeviceLike = None) -> None:
        self.platform = resolve_platform(platform)
        self.device = None if device is None else self.platform.device_index(device)

    @contextlib.contextmanager
    def region(
        self,
        spec: ShardSpec,
        generator: torch.Generator | None = None,
        *,
        via_default: bool = False,
        draw_seed: int | None = None,
    ) -> Iterator[torch.Generator]:
        """Run the body as this rank's part of one random op on ``spec``.

        On entry the generator moves from ``(seed, offset)`` to ``(seed, offset
        + start_increment)``; on exit -- also when the body raises: the op's
        range counts as used -- to ``(seed, offset + end_increment)`` (see
        :func:`hwrng.shard_offsets`). A refused region changes nothing.

        Parameters
        ----------
        spec
            The sharded tensor the op fills.
        generator
            The generator to track: a user's :class:`torch.Generator`, whose
            advanced position stays in it, or ``None`` for the device's default
            generator.
        via_default
            For ops that can only draw from the device's default generator
            (DTensor pops a user's generator from an op's arguments): the
            default generator is put at ``generator``'s shard position for the
            body and restored exactly afterwards, and ``generator`` advances.
        draw_seed
            The seed the shard is drawn with, when it is not the tracked
            generator's own (DTensor ops draw with a seed common to their mesh,
            see :meth:`hwrng.Seeding.dtensor_seed`); the tracked generator keeps
            its seed and ends at ``offset + end_increment`` as always.

        Yields
        ------
        torch.Generator
            The generator the body must draw from.

        Raises
        ------
        InvalidArgumentError
            If ``spec`` is not a :class:`~hwrng.ShardSpec` or ``via_default`` not a bool.
        InvalidSeedError
            If ``draw_seed`` is not a seed.
        NestingError
            If a region is already open on the same generator in this thread.
        InvalidOffsetError
            If the op would move the offset past ``2**63``.
        """
        if not isinstance(spec, ShardSpec):
            raise InvalidArgumentError(f"region needs a ShardSpec, got {type(spec).__name__}")
        check_flag(via_default, "via_default")
        if draw_seed is None:
            choose = None
        else:
            fixed = check_seed(draw_seed, "draw_seed")
            choose = lambda own: fixed  # noqa: E731 - the one-line rule reads best here
        with self.positioned(spec, generator, via_default, choose) as drawn:
            yield drawn

    @contextlib.contextmanager
    def positioned(
        self,
        spec: ShardSpec,
        generator: torch.Generator | None,
        via_default: bool,
        choose_seed: Callable[[int], int] | None,
    ) -> Iterator[torch.Generator]:
        """:meth:`region` for hwrng's own callers, with arguments already checked.

        ``choose_seed`` maps the tracked generator's seed to the seed the shard
        is drawn with (``None``: the same seed).
        """
        platform = self.platform
        default = platform.generator(self.device)
        tracked = default if generator is None else platform.check_generator(generator)
        drawn = default if via_default else tracked
        start, end = shard_offsets(spec)
        with claim(drawn, tracked):
            open_here = _regions()
            keys = {id(drawn), id(tracked)}
            if open_here & keys:
                raise NestingError(
                    f"a tracked region is already open on the {tracked.device} generator; "
                    "regions on one generator do not nest (the inner op would draw inside "
                    "the outer op's shard ranges)"
                )
            seed, offset = platform.counter.peek(tracked)
            if offset + end > MAX_OFFSET:
                raise InvalidOffsetError(
                    f"the {tracked.device} generator is at offset {offset}; an op of "
                    f"{end} more would pass 2**63"
                )
            open_here.update(keys)
            try:
                saved = drawn.get_state() if drawn is not tracked else None
                draw_seed = seed if choose_seed is None else choose_seed(seed)
                platform.position(drawn, draw_seed, offset + start)
                try:
                    yield drawn
                finally:
                    if saved is not None:
                        drawn.set_state(saved)
                    platform.position(tracked, seed, offset + end)
            finally:
                open_here.difference_update(keys)

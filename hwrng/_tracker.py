"""``OffsetTracker``: run a random op on a local shard at the right offset.

Written once against :class:`~hwrng.Platform`'s counter view, so it works on
every backend: a tracked region positions the generator with the platform's
``(seed, offset)`` view and never copies RNG state through device memory (on
CUDA it never synchronises with the device either).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import torch

from hwrng import _recompute as recompute
from hwrng._claims import Claim, claim_for
from hwrng._exceptions import InvalidArgumentError, InvalidOffsetError, NestingError
from hwrng._platform import DeviceLike, Platform
from hwrng._registry import platform_in_force
from hwrng._sharding import ShardSpec, shard_offsets
from hwrng._validation import MAX_OFFSET, check_flag, check_seed

__all__ = ["OffsetTracker"]


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
        the platform in force (the seed plan's, else :func:`hwrng.get_platform`'s choice).
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
        self.platform = platform_in_force(platform)
        self.device = None if device is None else self.platform.device_index(device)

    def region(
        self,
        spec: ShardSpec,
        generator: torch.Generator | None = None,
        *,
        via_default: bool = False,
        draw_seed: int | None = None,
    ) -> AbstractContextManager[torch.Generator]:
        """Run the body as this rank's part of one random op on ``spec``.

        On entry the generator moves from ``(seed, offset)`` to ``(seed, offset
        + start_increment)``; on exit -- also when the body raises: the op's
        range counts as used -- to ``(seed, offset + end_increment)`` (see
        :func:`hwrng.shard_offsets`). A refused region changes nothing. In the
        recomputation of an activation checkpoint the region draws where its
        forward drew, and leaves the generator where the forward's did if torch
        rewound it to the forward's state (its default generators, unless
        ``preserve_rng_state=False``), else as it found it (a user's generator,
        which torch never rewinds).

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

        Returns
        -------
        contextlib.AbstractContextManager
            ``with tracker.region(spec) as generator:`` gives the generator the
            body must draw from.

        Raises
        ------
        InvalidArgumentError
            If ``spec`` is not a :class:`~hwrng.ShardSpec`, ``via_default`` not a
            bool, or ``generator`` not one of the platform's (when called).
        InvalidSeedError
            If ``draw_seed`` is not a seed (when called).
        NestingError
            If a region is already open on the same generator in this thread
            (when entered).
        InvalidOffsetError
            If the op would move the offset past ``2**63`` (when entered).
        """
        if not isinstance(spec, ShardSpec):
            raise InvalidArgumentError(f"region needs a ShardSpec, got {type(spec).__name__}")
        check_flag(via_default, "via_default")
        if generator is not None:
            self.platform.check_generator(generator)
        if draw_seed is None:
            choose = None
        else:
            fixed = check_seed(draw_seed, "draw_seed")
            choose = lambda own: fixed  # noqa: E731 - the one-line rule reads best here
        return _Region(self, shard_offsets(spec), generator, via_default=via_default, choose=choose)

    def positioned(
        self,
        spec: ShardSpec,
        generator: torch.Generator | None,
        *,
        via_default: bool,
        choose_seed: Callable[[int], int] | None,
    ) -> AbstractContextManager[torch.Generator]:
        """:meth:`region` for hwrng's own callers, with arguments already checked.

        ``choose_seed`` maps the tracked generator's seed to the seed the shard
        is drawn with (``None``: the same seed).
        """
        return _Region(
            self, shard_offsets(spec), generator, via_default=via_default, choose=choose_seed
        )

    def positioned_by(
        self,
        start: int,
        end: int,
        generator: torch.Generator | None,
        *,
        via_default: bool,
        choose_seed: Callable[[int], int] | None,
    ) -> AbstractContextManager[torch.Generator]:
        """:meth:`positioned` with the increments given (from :func:`hwrng.shard_offsets`)."""
        return _Region(self, (start, end), generator, via_default=via_default, choose=choose_seed)


class _Region:
    """One tracked region: a plain context-manager object, since it runs for every op.

    In a recomputation of an activation checkpoint (see ``hwrng._recompute``)
    the region starts where its forward's did, read from the checkpoint's
    journal, and leaves the tracked generator as the forward did where torch
    rewound it to the forward's state (the default generators, as torch's
    record of the checkpoint says), else as it found it (a user's generator,
    which torch never rewinds): a backward pass leaves every generator where an
    uninterrupted run would.
    """

    __slots__ = (
        "_choose",
        "_claims",
        "_drawn",
        "_end",
        "_generator",
        "_offsets",
        "_replaying",
        "_resume",
        "_saved",
        "_seed",
        "_tracked",
        "_tracker",
        "_via_default",
        "position",
    )

    def __init__(
        self,
        tracker: OffsetTracker,
        offsets: tuple[int, int],
        generator: torch.Generator | None,
        *,
        via_default: bool,
        choose: Callable[[int], int] | None,
    ) -> None:
        self._tracker = tracker
        self._offsets = offsets
        self._generator = generator
        self._via_default = via_default
        self._choose = choose
        self._claims: tuple[Claim, ...] = ()

    def __enter__(self) -> torch.Generator:
        platform = self._tracker.platform
        counter = platform.counter
        default = platform.generator(self._tracker.device)
        tracked = default if self._generator is None else self._generator
        drawn = default if self._via_default else tracked
        start, end = self._offsets
        claims = _acquire(drawn, tracked)
        try:
            if any(c.regions for c in claims):
                raise NestingError(
                    f"a tracked region is already open on the {tracked.device} generator; "
                    "regions on one generator do not nest (the inner op would draw inside "
                    "the outer op's shard ranges)"
                )
            where = recompute.site()
            replaying = where is not None and where.replaying
            resume: torch.Tensor | None = None  # a replay's generator to leave as it found it
            if replaying:
                assert where is not None
                key = _journal_key(tracked, self._generator, start, end)
                seed, offset = where.replay("region", key)
                resume = None if where.rewinds(tracked, platform) else tracked.get_state()
                settled = False
            else:
                seed, offset, settled = counter.locate(tracked)
                if offset + end > MAX_OFFSET:
                    raise InvalidOffsetError(
                        f"the {tracked.device} generator is at offset {offset}; an op of "
                        f"{end} more would pass 2**63"
                    )
                if where is not None:
                    key = _journal_key(tracked, self._generator, start, end)
                    where.record("region", key, (seed, offset))
            self._saved = drawn.get_state() if drawn is not tracked else None
            draw_seed = seed if self._choose is None else self._choose(seed)
            if replaying:
                counter.rewrite(drawn, draw_seed, offset + start)
            elif not (settled and drawn is tracked and start == 0 and draw_seed == seed):
                platform.position(drawn, draw_seed, offset + start)  # else: already there
        except BaseException:
            _release(claims)
            raise
        for entry in claims:
            entry.regions += 1
        self._claims = claims
        self._replaying, self._resume = replaying, resume
        self._drawn, self._tracked = drawn, tracked
        self._seed, self._end = seed, offset + end
        self.position = (draw_seed, offset + start)  # where the body draws from
        return drawn

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self._saved is not None:
                self._drawn.set_state(self._saved)
            if self._resume is not None:
                self._tracked.set_state(self._resume)
            elif self._replaying:
                self._tracker.platform.counter.rewrite(self._tracked, self._seed, self._end)
            else:
                self._tracker.platform.position(self._tracked, self._seed, self._end)
        finally:
            for entry in self._claims:
                entry.regions -= 1
            _release(self._claims)


def _journal_key(
    tracked: torch.Generator, generator: torch.Generator | None, start: int, end: int
) -> tuple[str, bool, int, int]:
    """What a recomputation's region must match: the generator it tracks and the op's range."""
    return (str(tracked.device), generator is None, start, end)


def _acquire(drawn: torch.Generator, tracked: torch.Generator) -> tuple[Claim, ...]:
    if drawn is tracked:
        entry = claim_for(tracked)
        entry.acquire(tracked)
        return (entry,)
    first, second = sorted((drawn, tracked), key=id)  # one global order: no deadlock
    claims = (claim_for(first), claim_for(second))
    claims[0].acquire(first)
    try:
        claims[1].acquire(second)
    except BaseException:
        claims[0].release()
        raise
    return claims


def _release(claims: tuple[Claim, ...]) -> None:
    for entry in reversed(claims):
        entry.release()

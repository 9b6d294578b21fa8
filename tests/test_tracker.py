"""OffsetTracker on the CPU backend, beyond the conformance rules."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor import Replicate, Shard

import hwrng

SPEC = hwrng.ShardSpec((8, 2), (2,), (Shard(0),), (1,))


def test_region_and_after(cpu: hwrng.Platform) -> None:
    tracker = hwrng.OffsetTracker("cpu")
    assert tracker.platform is cpu and tracker.device is None
    cpu.set_seed_offset(torch.default_generator, 3, 0)
    with tracker.region(SPEC) as generator:
        assert generator is torch.default_generator
        assert cpu.get_seed_offset(generator) == (3, 8)
        local = torch.rand(4, 2)
    assert cpu.get_seed_offset(torch.default_generator) == (3, 16)
    cpu.set_seed_offset(torch.default_generator, 3, 8)
    assert torch.equal(torch.rand(4, 2), local), "the shard drew from (seed, offset + start)"


def test_via_default_draws_from_the_default_generator_at_the_user_position(
    cpu: hwrng.Platform,
) -> None:
    tracker = hwrng.OffsetTracker(cpu)
    user = torch.Generator()
    cpu.set_seed_offset(user, 11, 100)
    cpu.set_seed_offset(torch.default_generator, 2, 0)
    default_state = torch.get_rng_state()
    with tracker.region(SPEC, user, via_default=True) as generator:
        assert generator is torch.default_generator
        assert cpu.get_seed_offset(generator) == (11, 108)
        drawn = torch.rand(4, 2)  # an op that cannot take a generator
    assert torch.equal(torch.get_rng_state(), default_state), "the default comes back exactly"
    assert cpu.get_seed_offset(user) == (11, 116)
    cpu.set_seed_offset(user, 11, 108)
    assert torch.equal(torch.rand(4, 2, generator=user), drawn)


def test_regions_on_one_generator_do_not_nest(cpu: hwrng.Platform) -> None:
    tracker = hwrng.OffsetTracker(cpu)
    cpu.set_seed_offset(torch.default_generator, 1, 0)
    with tracker.region(SPEC):
        with pytest.raises(RuntimeError, match="do not nest"), tracker.region(SPEC):
            pass  # pragma: no cover - never entered
        with tracker.region(SPEC, torch.Generator()):  # another generator is fine
            pass
    assert cpu.get_seed_offset(torch.default_generator) == (1, 16)
    with tracker.region(SPEC):  # and the guard is released afterwards
        pass


def test_region_refuses_to_pass_the_offset_limit(cpu: hwrng.Platform) -> None:
    tracker = hwrng.OffsetTracker(cpu)
    cpu.set_seed_offset(torch.default_generator, 1, 2**63 - 8)
    with (
        pytest.raises(hwrng.InvalidOffsetError, match="would pass 2\\*\\*63"),
        tracker.region(SPEC),
    ):
        pass  # pragma: no cover - never entered
    assert cpu.get_seed_offset(torch.default_generator) == (1, 2**63 - 8)


def test_region_input_checks(cpu: hwrng.Platform) -> None:
    tracker = hwrng.OffsetTracker(cpu)
    with pytest.raises(TypeError, match="needs a ShardSpec"), tracker.region((8, 2)):  # type: ignore[arg-type]
        pass  # pragma: no cover - never entered
    with pytest.raises(hwrng.InvalidDeviceError), tracker.region(SPEC, "gen"):  # type: ignore[arg-type]
        pass  # pragma: no cover - never entered
    with pytest.raises(hwrng.InvalidDeviceError):
        hwrng.OffsetTracker(cpu, device=1)
    assert hwrng.OffsetTracker(cpu, device="cpu").device == 0
    with pytest.raises(TypeError, match="via_default"), tracker.region(SPEC, via_default=1):  # type: ignore[arg-type]
        pass  # pragma: no cover - never entered


def test_two_consecutive_ops_share_no_values(cpu: hwrng.Platform) -> None:
    tracker = hwrng.OffsetTracker(cpu)
    replicated = hwrng.ShardSpec((16,), (2,), (Replicate(),), (0,))
    cpu.set_seed_offset(torch.default_generator, 9, 0)
    with tracker.region(replicated):
        first = torch.rand(16)
    with tracker.region(replicated):
        second = torch.rand(16)
    assert not set(first.tolist()) & set(second.tolist())


def test_activation_checkpointing_recomputes_the_same_mask(cpu: hwrng.Platform) -> None:
    """torch.utils.checkpoint restores the CPU state for the recomputation: a tracked op
    must read the same position and draw the same mask again, even after untracked draws."""
    from torch.utils.checkpoint import checkpoint

    tracker = hwrng.OffsetTracker(cpu)
    spec = hwrng.ShardSpec((16,), (2,), (Shard(0),), (1,))
    masks: list[torch.Tensor] = []

    def layer(x: torch.Tensor) -> torch.Tensor:
        torch.rand(1)  # an untracked draw first: the generator is off its position
        with tracker.region(spec):
            mask = (torch.rand(8) < 0.5).float()
        masks.append(mask)
        return x * mask

    hwrng.manual_seed(0, platform=cpu)
    x = torch.ones(8, requires_grad=True)
    checkpoint(layer, x, use_reentrant=False).sum().backward()
    assert len(masks) == 2
    assert torch.equal(masks[0], masks[1])
    assert x.grad is not None and torch.equal(x.grad, masks[0])


def test_fork_rng_around_a_region_changes_nothing_outside(cpu: hwrng.Platform) -> None:
    tracker = hwrng.OffsetTracker(cpu)
    hwrng.manual_seed(7, platform=cpu)
    torch.rand(3)
    before = cpu.get_seed_offset(torch.default_generator)
    with hwrng.fork_rng(platform=cpu), tracker.region(SPEC):
        torch.rand(4)
    assert cpu.get_seed_offset(torch.default_generator) == before


HUGE = hwrng.ShardSpec((2**62, 4), (1,), (Replicate(),), (0,))  # end 2**64: past 2**63


def test_a_refused_region_leaves_a_drawn_from_generator_as_it_was(cpu: hwrng.Platform) -> None:
    torch.manual_seed(21)
    torch.rand(3)
    before = torch.get_rng_state()
    tracker = hwrng.OffsetTracker(cpu)
    with (
        pytest.raises(hwrng.InvalidOffsetError, match="would pass 2\\*\\*63"),
        tracker.region(HUGE),
    ):
        pass  # pragma: no cover - never entered
    assert torch.equal(torch.get_rng_state(), before)


def test_a_refused_nested_region_leaves_the_outer_one_as_it_was(cpu: hwrng.Platform) -> None:
    tracker = hwrng.OffsetTracker(cpu)
    spec = hwrng.ShardSpec((8,), (2,), (Shard(0),), (1,))
    cpu.set_seed_offset(torch.default_generator, 3, 0)
    with tracker.region(spec):
        torch.rand(2)
        inside = torch.get_rng_state()
        with pytest.raises(hwrng.NestingError, match="do not nest"), tracker.region(spec):
            pass  # pragma: no cover - never entered
        assert torch.equal(torch.get_rng_state(), inside)

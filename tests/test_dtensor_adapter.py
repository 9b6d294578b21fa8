"""The DTensor adapter's install checks, in one process."""

from __future__ import annotations

from typing import ClassVar

import pytest
from torch.distributed.tensor import _random

import hwrng
from hwrng import dtensor
from hwrng.backends.cpu import CPUPlatform


@pytest.fixture(autouse=True)
def _clean() -> object:
    before = _random._rng_tracker
    yield
    dtensor.uninstall()
    assert _random._rng_tracker is before


def test_install_uninstall_round_trip() -> None:
    assert dtensor.installed_platform() is None
    assert dtensor.uninstall() is False
    dtensor.install("cpu")
    tracker = _random._rng_tracker
    assert isinstance(tracker, _random.OffsetBasedRNGTracker)
    assert dtensor.installed_platform() is hwrng.get_platform("cpu")
    dtensor.install("cpu")  # again: replaced, and uninstall still restores the original
    assert dtensor.uninstall() is True
    assert dtensor.installed_platform() is None


def test_platform_without_the_capability_is_refused() -> None:
    class NoDTensor(CPUPlatform):
        capabilities: ClassVar[frozenset[str]] = frozenset()

    with pytest.raises(hwrng.DTensorHookError, match="does not have the 'dtensor' capability"):
        dtensor.install(NoDTensor())
    assert dtensor.installed_platform() is None


def test_a_different_hook_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand in for a torch whose tracker hook changed shape."""

    def _distribute_region(self: object, device_mesh: object, placements: object) -> None:
        raise AssertionError("never called")

    monkeypatch.setattr(_random.OffsetBasedRNGTracker, "_distribute_region", _distribute_region)
    with pytest.raises(
        hwrng.DTensorHookError, match=r"_distribute_region takes \['self', 'device_mesh'"
    ):
        dtensor.install("cpu")


def test_a_hook_older_than_the_adapter_is_refused_naming_the_torch_it_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch 2.8's region took no user's generator: judged by what torch has, not its version."""
    import torch

    def _distribute_region(self: object, spec: object) -> None:
        raise AssertionError("never called")

    monkeypatch.setattr(_random.OffsetBasedRNGTracker, "_distribute_region", _distribute_region)
    monkeypatch.setattr(torch, "__version__", "2.15.0")  # a version string proves nothing
    with pytest.raises(
        hwrng.DTensorHookError, match=r"torch >= 2\.9 does \(pytorch/pytorch#159933"
    ):
        dtensor.install("cpu")
    assert dtensor.installed_platform() is None


def test_an_old_version_string_alone_refuses_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch, "__version__", "2.3.1")
    dtensor.install("cpu")
    assert dtensor.installed_platform() is hwrng.get_platform("cpu")


def test_run_dtensor_rng_op_is_hooked_exactly_where_torch_has_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch 2.10 and 2.11 have no run_dtensor_rng_op: every DTensor random op runs in the region,
    and the tracker's _compute_rng_offsets is not needed. From 2.12 torch routes accelerator
    DTensor random ops through the operator, asking the tracker for _compute_rng_offsets: a
    torch with the operator and without that method is refused, nothing changed."""
    from torch._prims import rng_prims

    if getattr(rng_prims, "run_dtensor_rng_op", None) is None:
        # this torch (2.10, 2.11): the method may be missing, as it is there
        monkeypatch.delattr(_random.OffsetBasedRNGTracker, "_compute_rng_offsets", raising=False)
        dtensor.install("cpu")
        assert dtensor.installed_platform() is hwrng.get_platform("cpu")
        return
    kernels = dict(rng_prims.run_dtensor_rng_op.py_kernels)
    monkeypatch.delattr(_random.OffsetBasedRNGTracker, "_compute_rng_offsets")
    with pytest.raises(
        hwrng.DTensorHookError, match=r"has no _compute_rng_offsets, as torch >= 2\.12"
    ):
        dtensor.install("cpu")
    assert dtensor.installed_platform() is None
    assert rng_prims.run_dtensor_rng_op.py_kernels == kernels


def test_uninstall_puts_back_every_hook() -> None:
    from torch.distributed.tensor import DTensor

    handlers = dict(DTensor._op_dispatcher._custom_op_handlers)
    supported = _random.is_rng_supported_mesh
    dtensor.install("cpu")
    assert _random.is_rng_supported_mesh is not supported
    assert len(DTensor._op_dispatcher._custom_op_handlers) == len(handlers) + 7
    dtensor.uninstall()
    assert _random.is_rng_supported_mesh is supported
    assert DTensor._op_dispatcher._custom_op_handlers == handlers


def test_compiled_dropout_draws_what_eager_draws(tmp_path: object) -> None:
    """torch.compile traces the region as two ordered ops: compiled == eager, bit for bit."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        f"""
        import torch, torch.distributed as dist, hwrng
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
        dist.init_process_group("gloo", init_method="file://{tmp_path}/rdv", rank=0, world_size=1)
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("tp",))
        hwrng.dtensor.install("cpu")
        step = lambda t: torch.nn.functional.dropout(t, p=0.5) + torch.rand_like(t)
        compiled = torch.compile(step, backend="aot_eager", fullgraph=False)
        x = distribute_tensor(torch.ones(4, 8), mesh, [Shard(0)])
        hwrng.manual_seed(7, mesh, sharded_dims=["tp"], platform="cpu")
        eager = [step(x).to_local() for _ in range(3)]
        position = hwrng.get_platform("cpu").counter.peek(torch.default_generator)
        hwrng.manual_seed(7, mesh, sharded_dims=["tp"], platform="cpu")
        traced = [compiled(x).to_local() for _ in range(3)]
        assert all(torch.equal(a, b) for a, b in zip(eager, traced)), "values differ"
        assert hwrng.get_platform("cpu").counter.peek(torch.default_generator) == position
        assert not torch.equal(eager[0], eager[1]), "each call draws anew"
        print("ok")
        dist.destroy_process_group()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_a_compiled_region_whose_generator_did_not_move_is_refused() -> None:
    """The run-time half of the inductor check: compiled code that positioned the generator for
    a DTensor op and drew nothing there (its draw made elsewhere) is refused, the generator left
    where eager code leaves it; a region with nothing to draw is not checked."""
    import torch

    dtensor.install("cpu")
    platform = hwrng.get_platform("cpu")
    hwrng.manual_seed(3, platform="cpu")
    seed, start = platform.get_seed_offset(torch.default_generator)
    torch.ops.hwrng.region_enter(0, 32, 0, 0, False, True)
    torch.rand(32)  # the op's draw, inside its region
    torch.ops.hwrng.region_exit()
    assert platform.get_seed_offset(torch.default_generator) == (seed, start + 32)
    torch.ops.hwrng.region_enter(0, 32, 0, 0, False, True)
    with pytest.raises(hwrng.DTensorHookError, match=r"drew nothing .* backend='aot_eager'"):
        torch.ops.hwrng.region_exit()
    assert platform.get_seed_offset(torch.default_generator) == (seed, start + 64)
    torch.ops.hwrng.region_enter(0, 0, 0, 0, False, False)  # an empty shard
    torch.ops.hwrng.region_exit()
    assert platform.get_seed_offset(torch.default_generator) == (seed, start + 64)

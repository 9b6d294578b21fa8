"""The cuda backend on a machine without CUDA: clean, explained unavailability; its switches."""

from __future__ import annotations

import os

import pytest
import torch
from hwrng_cuda import CUBLAS_WORKSPACE_CONFIG, CUDAPlatform

import hwrng

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@needs_no_cuda
def test_cuda_is_unavailable_with_a_reason() -> None:
    platform = CUDAPlatform()
    reason = platform.unavailable_reason()
    assert reason is not None
    if torch.version.cuda is None:
        assert reason == f"this torch build ({torch.__version__}) has no CUDA support"
    assert not platform.is_available() and platform.device_count() == 0
    with pytest.raises(hwrng.BackendUnavailableError, match="unavailable: "):
        hwrng.get_platform("cuda")
    for call in (platform.current_device, platform.generator, lambda: platform.manual_seed(1)):
        with pytest.raises(hwrng.BackendUnavailableError):
            call()
    assert (platform.name, platform.dist_backend, platform.priority) == ("cuda", "nccl", 100)


def test_cuda_determinism_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    changed = CUDAPlatform().enable_determinism()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert changed["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE_CONFIG == ":4096:8"
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    assert "CUBLAS_WORKSPACE_CONFIG" not in CUDAPlatform().enable_determinism()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8", "a user's own valid setting is kept"

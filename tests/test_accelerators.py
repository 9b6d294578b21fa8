"""The cuda and npu backends on a machine without them: clean, explained unavailability."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hwrng
from hwrng._registry import Registry
from hwrng.backends.cuda import CUBLAS_WORKSPACE_CONFIG, CUDAPlatform
from hwrng.backends.npu import NPUPlatform

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


def test_npu_is_unavailable_without_importing_torch_npu() -> None:
    code = (
        "import sys, hwrng\n"
        "rows = {r.name: r for r in hwrng.list_platforms()}\n"
        "print(rows['npu'].reason)\n"
        "assert 'torch_npu' not in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "torch_npu is not installed; on an Ascend host with CANN: pip install 'hwrng[npu]'"
    )


def test_npu_reports_a_broken_torch_npu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch-npu installed without CANN fails on import: hwrng reports it and carries on."""
    package = tmp_path / "torch_npu"
    package.mkdir()
    (package / "__init__.py").write_text(
        "raise OSError('libascendcl.so: cannot open shared object file')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    try:
        platform = NPUPlatform()
        reason = platform.unavailable_reason()
        if torch.cuda.is_available():
            assert reason is not None and "refuses to load beside a CUDA device" in reason
        else:
            assert (
                reason == "importing torch_npu failed: OSError: "
                "libascendcl.so: cannot open shared object file"
            )
        registry = Registry()
        assert registry.get_platform().name in {"cpu", "cuda"}
    finally:
        sys.modules.pop("torch_npu", None)


def test_npu_without_a_device_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An importable torch_npu that registers no 'npu' device module."""
    (tmp_path / "torch_npu.py").write_text("REGISTERED = False\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    try:
        reason = NPUPlatform().unavailable_reason()
        if not torch.cuda.is_available():
            assert reason is not None and reason.startswith("torch has no device module for 'npu'")
    finally:
        sys.modules.pop("torch_npu", None)


def test_cuda_determinism_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    changed = CUDAPlatform().enable_determinism()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert changed["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE_CONFIG == ":4096:8"
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    assert "CUBLAS_WORKSPACE_CONFIG" not in CUDAPlatform().enable_determinism()
    import os

    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8", "a user's own valid setting is kept"


def test_npu_determinism_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HCCL_DETERMINISTIC", raising=False)
    assert NPUPlatform().enable_determinism() == {"HCCL_DETERMINISTIC": "true"}
    assert NPUPlatform().enable_determinism() == {}

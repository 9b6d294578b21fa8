"""The npu backend on a machine without Ascend: clean, explained unavailability, never an import."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hwrng_npu import NPUPlatform

from hwrng._registry import Registry


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
        "torch_npu is not installed; on an Ascend host with CANN: "
        "pip install 'hwrng-npu[torch-npu]'"
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


def test_npu_determinism_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HCCL_DETERMINISTIC", raising=False)
    assert NPUPlatform().enable_determinism() == {"HCCL_DETERMINISTIC": "true"}
    assert NPUPlatform().enable_determinism() == {}

"""The environment step: the device, driver, CUDA, torch, Triton, pytest and hwrng's distributions.

Passes when hwrng imports and its platform for ``--device`` is available;
its figures head the report. The commit is git's where the tree has its
``.git``, else ``HWRNG_COMMIT``, else the record ``--prepare`` left in the
wheelhouse, checked against the tree (:mod:`acceptance.provenance`).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acceptance import provenance
from acceptance._figures import run_probe
from acceptance.wheelhouse import WHEELHOUSE

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = (
    "torch",
    "triton",
    "numpy",
    "pluggy",
    "packaging",
    "pytest",
    "hypothesis",
    "setuptools",
    "hwrng",
    "hwrng-cuda",
    "hwrng-conformance",
)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def _torch_floor() -> str:
    """The torch hwrng's installed metadata requires (``torch>=X``), or ``unknown``."""
    try:
        required = importlib.metadata.requires("hwrng") or []
    except importlib.metadata.PackageNotFoundError:
        return "unknown (hwrng is not installed)"
    for requirement in required:
        found = re.fullmatch(r"torch\s*(>=\s*[\w.]+)", requirement.split(";")[0].strip())
        if found:
            return found.group(1).replace(" ", "")
    return "unknown"


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({type(error).__name__})"
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if "model name" in line)
    except (OSError, StopIteration):
        model = platform.processor() or platform.machine()
    return f"{model} ({os.cpu_count()} cores)"


def _cuda_device() -> dict[str, Any]:
    import torch

    properties = torch.cuda.get_device_properties(0)
    smi = _run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "--id=0"]
        if shutil.which("nvidia-smi")
        else ["false"]
    )
    try:  # the CUDA driver API's version, as torch's CUDA build reads it
        driver_api = int(torch._C._cuda_getDriverVersion())
    except (AttributeError, RuntimeError):
        driver_api = 0
    return {
        "device": properties.name,
        "devices visible": torch.cuda.device_count(),
        "SMs": properties.multi_processor_count,
        "compute capability": f"{properties.major}.{properties.minor}",
        "memory GiB": round(properties.total_memory / 2**30, 1),
        "driver": smi,
        "CUDA driver API": f"{driver_api // 1000}.{driver_api % 1000 // 10}"
        if driver_api
        else "unknown",
        "CUDA runtime (torch)": torch.version.cuda or "none",
    }


def main() -> tuple[str, str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    device = parser.parse_args().device
    figures: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu(),
        "load average (1, 5, 15 min)": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
        "python": platform.python_version(),
        "hwrng commit": provenance.commit(ROOT, ROOT / WHEELHOUSE, dict(os.environ)),
        "hwrng's torch floor": _torch_floor(),
        **{f"{name} version": _version(name) for name in DISTRIBUTIONS},
    }
    import torch

    if device == "cuda":
        if not torch.cuda.is_available():
            return "failed", "torch sees no CUDA device", figures
        figures.update(_cuda_device())
    else:
        figures["device"] = f"CPU: {figures['cpu']}"
    try:
        import hwrng

        figures["hwrng platform"] = hwrng.get_platform(device).describe_device()
    except Exception as error:  # the report still gets the machine's figures
        return "failed", f"hwrng's {device} platform: {type(error).__name__}: {error}", figures
    summary = (
        f"{figures['device']}, torch {torch.__version__}, triton {figures['triton version']}, "
        f"hwrng {hwrng.__version__} ({figures['hwrng commit'][:12]}), pytest "
        f"{figures['pytest version']}"
    )
    return "passed", summary, figures


if __name__ == "__main__":
    raise SystemExit(run_probe(main))

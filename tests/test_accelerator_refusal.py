"""A torch accelerator that no installed backend provides is refused, never served by the CPU.

Each case runs in a fresh interpreter that registers a PrivateUse1 device type in Python
(``torch.accelerator.current_accelerator()`` then reports it), since such a registration
lasts as long as the process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import hwrng

SETUP = """
import torch, hwrng
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

_setup_privateuseone_for_python_backend("hwrngpu")
assert torch.accelerator.current_accelerator().type == "hwrngpu"
"""


def _run(body: str, env: dict[str, str] | None = None) -> str:
    import os

    result = subprocess.run(
        [sys.executable, "-c", SETUP + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


@pytest.mark.parametrize(
    "call",
    ["hwrng.get_platform()", "hwrng.manual_seed(7)", "hwrng.RNGStatesTracker()"],
)
def test_every_entry_point_refuses_with_what_to_install(call: str) -> None:
    out = _run(
        f"""
        state = torch.get_rng_state()
        try:
            {call}
        except hwrng.BackendNotFoundError as error:
            print(error)
        print("unchanged" if torch.equal(torch.get_rng_state(), state) else "CHANGED")
        """
    )
    message, unchanged = out.splitlines()
    assert message == (
        "torch's accelerator is 'hwrngpu', but no installed hwrng backend provides it: install "
        "an hwrng backend for 'hwrngpu' (see 'Writing a backend') (to use the CPU on purpose: "
        "HWRNG_BACKEND=cpu, or platform='cpu')"
    )
    assert unchanged == "unchanged"


def test_the_cpu_on_purpose_is_the_documented_way() -> None:
    out = _run(
        """
        print(hwrng.get_platform("cpu").name, hwrng.manual_seed(7, platform="cpu"))
        print(hwrng.get_platform().name)
        """,
        env={"HWRNG_BACKEND": "cpu"},
    )
    assert out.splitlines() == ["cpu 7", "cpu"]


def test_hwrng_check_refuses_in_one_line() -> None:
    out = _run(
        """
        import contextlib, io
        from hwrng._cli import main
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            status = main(["check"])
        print(status)
        print(err.getvalue().strip())
        """
    )
    status, line = out.splitlines()
    assert status == "2"
    assert line.startswith("hwrng check: error: torch's accelerator is 'hwrngpu'")


BACKEND = """
from hwrng.backends.cpu import CPUPlatform

class HwrngpuPlatform(CPUPlatform):
    name = "hwrngpu"
    priority = 50
    REASON = None

    @property
    def device_type(self):
        return "hwrngpu"

    def unavailable_reason(self):
        return self.REASON

class Plugin:
    @hwrng.hookimpl
    def hwrng_platforms(self):
        return [HwrngpuPlatform()]

hwrng.register_plugin(Plugin(), name="hwrngpu-backend")
"""


def test_an_accelerator_whose_backend_cannot_run_is_refused_with_the_reason() -> None:
    out = _run(
        BACKEND
        + """
HwrngpuPlatform.REASON = "no hwrngpu device is visible"
try:
    hwrng.get_platform()
except hwrng.BackendUnavailableError as error:
    print(error)
"""
    )
    assert "its hwrng backend cannot run: no hwrngpu device is visible" in out
    assert "hwrng will not fall back to the CPU" in out


def test_an_accelerator_with_its_backend_is_selected() -> None:
    assert _run(BACKEND + "print(hwrng.get_platform().name)") == "hwrngpu"


@pytest.mark.skipif(
    not (
        torch.accelerator.current_accelerator() is not None and not torch.accelerator.is_available()
    ),
    reason="needs a torch built for an accelerator on a machine without one (a CUDA wheel "
    "on a CPU host, as the torch 2.15 cell of the version matrix)",
)
def test_a_torch_built_for_an_absent_accelerator_selects_the_cpu() -> None:
    """torch names the accelerator it was built for even where there is none: no refusal."""
    from hwrng._registry import current_accelerator

    assert current_accelerator() is None
    assert hwrng.get_platform().name == "cpu"

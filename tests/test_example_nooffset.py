"""A backend whose generators have no offsets (as PyTorch's reference PrivateUse1 backend OpenReg):
hwrng emulates their counter, so the minimal backend passes every conformance rule -- the
invariant ops' known answers included -- and the verdict names the profile.

The example (``examples/hwrng-example-nooffset``) is installed offline into a temporary
directory, as a vendor's distribution would be; the counter view is also checked in process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import install_example

import hwrng
from hwrng._device_counter import DeviceCounter
from hwrng._host import MersenneCounter

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "hwrng-example-nooffset"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return install_example(EXAMPLE, tmp_path_factory.mktemp("example"))


def conformance(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "hwrng", "conformance", "--backend", "nooffset"]
    return subprocess.run(
        [*command, "--nproc", "2", *extra], capture_output=True, text=True, env=env, timeout=600
    )


def test_the_offsetless_backend_conforms_with_its_profile(installed: dict[str, str]) -> None:
    result = conformance(installed)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    verdict = result.stdout.strip().splitlines()[-1]
    assert verdict.startswith("hwrng conformance: backend nooffset CONFORMS ("), verdict
    assert "; profile float64, no-offsets;" in verdict
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("nooffset ")]
    invariant_rows = [row for row in rows if row[1].startswith("invariant_")]
    assert len(invariant_rows) == 16 and all(row[2] == "PASS" for row in invariant_rows)


def test_the_no_float64_profile_refuses_float64_and_skips_its_rules(
    installed: dict[str, str],
) -> None:
    result = conformance(installed, "--", "--hwrng-profile", "no-float64")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    verdict = result.stdout.strip().splitlines()[-1]
    assert verdict.startswith("hwrng conformance: backend nooffset CONFORMS ("), verdict
    assert "; profile no-float64 (asked for), no-offsets;" in verdict
    skipped = [line for line in result.stdout.splitlines() if " SKIP " in line]
    float64 = [line for line in skipped if "float64]" in line]
    assert len(float64) == 3 and all("lacks capability 'float64'" in s for s in float64)


# -- in process: the counter view of offset-less generators -------------------------------


def test_an_offsetless_generator_is_positioned_through_its_state() -> None:
    """A device generator whose get_offset raises (a CPU generator, as OpenReg's) is read and
    written as (seed, offset) through the emulated view: the pair decides the next draws."""
    generator = torch.Generator()
    with pytest.raises(RuntimeError):
        generator.get_offset()
    view = DeviceCounter()
    assert view.view(generator) is view.emulated
    view.write(generator, 2**40 + 3, 4096)
    assert view.read(generator) == (2**40 + 3, 4096)
    first = torch.rand(8, generator=generator)
    seed, offset = view.read(generator)
    assert seed == 2**40 + 3 and offset != 4096, "drawing moved it"
    following = torch.rand(8, generator=generator)
    view.write(generator, 2**40 + 3, 4096)
    assert torch.equal(torch.rand(8, generator=generator), first)
    view.write(generator, seed, offset)
    assert torch.equal(torch.rand(8, generator=generator), following)


class _VendorGenerator:
    """A vendor's generator without offsets whose state is neither layout hwrng knows."""

    device = torch.device("cpu")

    def get_offset(self) -> int:
        raise RuntimeError("this generator does not use offsets")

    def get_state(self) -> torch.Tensor:
        return torch.zeros(40, dtype=torch.uint8)


def test_a_generator_hwrng_cannot_position_is_refused_clearly() -> None:
    view = DeviceCounter()
    with pytest.raises(hwrng.InvalidStateError, match=r"must provide its own hwrng\.CounterView"):
        view.read(_VendorGenerator())  # type: ignore[arg-type]
    assert isinstance(view.emulated, MersenneCounter)

"""What hwrng loads of torch: nothing beyond ``import torch``, until a function needs more.

Every rank of every job imports hwrng, and every ``hwrng plan`` or ``hwrng backends`` starts
it. torch's compiler stack (``torch._dynamo``, which brings ``torch._inductor``, FSDP and
``torch.distributed.tensor`` with it) took longer to import than torch itself; it loads when
torch.compile, the DTensor adapter or an invariant op is first used, never at import. Each
check runs in a fresh interpreter: this process's ``sys.modules`` holds whatever earlier tests
loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

#: torch's compiler stack and the distributed packages hwrng uses only on demand.
HEAVY = (
    "torch._dynamo",
    "torch._inductor",
    "torch.distributed.tensor",
    "torch.distributed.checkpoint",
    "torch.distributed.fsdp",
)

_LOADED = """
def loaded(names):
    return sorted({n for n in names for m in sys.modules if m == n or m.startswith(n + ".")})

def torch_modules(before):
    return sorted(m for m in set(sys.modules) - before if m == "torch" or m.startswith("torch."))
"""

_IMPORT = f"""
import json, sys
HEAVY = {HEAVY!r}
{_LOADED}
import torch
alone, torch_alone = set(sys.modules), loaded(HEAVY)
import hwrng
report = {{
    "torch_alone": torch_alone,
    "added": torch_modules(alone),
    "heavy": loaded(HEAVY),
    "hwrng": loaded(["hwrng.dtensor", "hwrng.invariant"]),
}}
# the lazy submodules, reached as attributes: still nothing heavy
reached = [hwrng.dtensor.install, hwrng.invariant.uniform_, hwrng.presets.megatron_seeds]
reached.append(hwrng.testing.DistributedPool)
report["attributes"] = loaded(HEAVY)
# an invariant op's first call is under torch.compile: the graph break names the op
from torch.distributed.tensor import Replicate
spec = hwrng.ShardSpec((4,), (1,), (Replicate(),), (0,))
draw = lambda: hwrng.invariant.uniform_(torch.empty(4), spec)
compiled = torch.compile(draw, backend="eager", fullgraph=True)
try:
    compiled()
except Exception as refused:
    report["refusal"] = type(refused).__name__ + ": " + str(refused)
report["first_call"] = loaded(["torch._dynamo"])
print(json.dumps(report))
"""


def _python(code: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def imported() -> dict[str, Any]:
    result = _python(_IMPORT)
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return report


def test_import_hwrng_loads_no_torch_module_beyond_import_torch(imported: dict[str, Any]) -> None:
    assert imported["torch_alone"] == [], "this torch loads them itself: the check sees nothing"
    assert imported["added"] == []
    assert imported["heavy"] == []


def test_the_lazy_submodules_load_when_reached_and_bring_nothing_heavy(
    imported: dict[str, Any],
) -> None:
    assert imported["hwrng"] == [], "verify must not import the DTensor adapter or invariant ops"
    assert imported["attributes"] == []


def test_an_invariant_ops_first_call_under_compile_breaks_the_graph_naming_it(
    imported: dict[str, Any],
) -> None:
    """The graph break is set up on first use; a first use under fullgraph=True is refused
    as every later one is (the rest of the behaviour: tests/test_invariant_compile.py)."""
    assert imported["first_call"] == ["torch._dynamo"]
    refusal = imported.get("refusal", "")
    assert refusal.startswith("Unsupported: ")
    assert "hwrng.invariant.uniform_ reads the generator's position" in refusal
    assert "fullgraph=False" in refusal and "outside the compiled function" in refusal


_COMMAND = f"""
import atexit, json, runpy, sys
HEAVY = {HEAVY!r}
{_LOADED}
import torch
alone = set(sys.modules)
out = sys.argv[1]

def report():
    with open(out, "w") as f:
        json.dump({{"added": torch_modules(alone), "heavy": loaded(HEAVY)}}, f)

atexit.register(report)
sys.argv = ["hwrng", *sys.argv[2:]]
runpy.run_module("hwrng", run_name="__main__", alter_sys=True)  # python -m hwrng ...
"""


@pytest.mark.parametrize(
    "command",
    [["plan", "--mesh", "dp=2,tp=2", "--sharded", "tp", "--seed", "1"], ["backends"]],
    ids=["plan", "backends"],
)
def test_the_command_line_starts_without_them(command: list[str], tmp_path: Path) -> None:
    out = tmp_path / "loaded.json"
    result = _python(_COMMAND, str(out), *command)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()  # the command ran and printed its answer
    loaded = json.loads(out.read_text())
    assert loaded == {"added": [], "heavy": []}

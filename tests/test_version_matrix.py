"""The version matrix (noxfile.py) runs what the range claims: the selections name real files,
and the cells at its edges (torch 2.10, the floor, and 2.15, the newest) keep the suites that
meet the private torch parts differing between releases.

noxfile.py is read as text (its literal tuples), so the check runs where nox is not installed.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The suites both edges must run (issue 38: core, seeding, resume, DTensor, invariant and
#: ``hwrng check``; recomputation reads private torch frames; verify's arrival reads a process
#: group's timeout from its backend, and its digest torch's CPU state layout), as path prefixes.
EDGES_MUST_RUN = (
    "tests/test_counters.py",
    "tests/test_generator_table.py",
    "tests/test_platform_",
    "tests/test_registry.py",
    "tests/test_states.py",
    "tests/test_tracker.py",
    "tests/test_fork.py",
    "tests/test_torch_features.py",
    "tests/test_seeding",
    "tests/test_checkpoint.py",
    "tests/test_resume_dist.py",
    "tests/test_dtensor_",
    "tests/test_invariant",
    "tests/test_philox",
    "tests/test_recompute",
    "tests/test_check_cli.py",
    "tests/test_graph_states.py",
    "tests/test_verify_timeout_dist.py",
    "tests/test_verify_digest.py",
    "tests/test_import_cost.py",
)


def _literals() -> dict[str, object]:
    """noxfile.py's module-level names bound to literals."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                try:
                    found[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    continue
    return found


def test_every_path_a_selection_names_exists() -> None:
    literals = _literals()
    paths = [*literals["ADAPTER_TESTS"], *literals["SAME_ON_EVERY_TORCH"]]  # type: ignore[misc]
    missing = [path for path in paths if not (ROOT / path).is_file()]
    assert missing == [], f"noxfile.py names files that do not exist: {missing}"


def test_the_edge_cells_run_the_suites_they_are_judged_by() -> None:
    left_out = _literals()["SAME_ON_EVERY_TORCH"]
    assert isinstance(left_out, tuple) and left_out
    for prefix in EDGES_MUST_RUN:
        kept = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(f"{prefix}*"))
        assert kept, f"no test file matches {prefix}"
        dropped = [path for path in kept if path in left_out]
        assert dropped == [], f"the torch 2.10 and 2.15 cells leave out {dropped}"
    source = (ROOT / "noxfile.py").read_text()
    assert 'EDGE_SELECTION = tuple(f"--ignore={path}" for path in SAME_ON_EVERY_TORCH)' in source
    for torch in ("2.10.0", "2.15.0"):
        cell = source[source.index(f'"{torch}": Cell(') :].split("),", 1)[0]
        assert "selection=EDGE_SELECTION" in cell, f"torch {torch} does not run EDGE_SELECTION"


def test_the_gpu_machines_torch_runs_the_recompute_tests() -> None:
    adapter = _literals()["ADAPTER_TESTS"]
    assert "tests/test_recompute.py" in adapter  # type: ignore[operator]
    assert "tests/test_recompute_dist.py" in adapter  # type: ignore[operator]

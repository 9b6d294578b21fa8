"""Collection rules for runs from the repository root: the docstring examples.

``--doctest-modules`` (pyproject) collects the examples of every module of every
distribution of the repository (``hwrng``, ``backends/*/src``, ``conformance/src``);
a module whose optional dependency is not importable here is left out, decided
by looking the dependency up, not by a fixed list of machines. The conformance
suite (``conformance/src/hwrng_conformance/suite``) runs as tests on the CPU
backend, through the plugin the root configuration loads.
"""

from __future__ import annotations

import importlib.util


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


_NEEDS = {
    "backends/npu/src": "torch_npu",
    "hwrng/_philox/_triton.py": "triton",
    "hwrng/integrations/lightning.py": "lightning",
    "hwrng/integrations/accelerate.py": "accelerate",
    "hwrng/integrations/torchtitan.py": "torchtitan",
}

collect_ignore = [path for path, dependency in _NEEDS.items() if _missing(dependency)]

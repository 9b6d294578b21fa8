"""What the project documents for the torch a step runs on, that a step judges by.

docs/cuda-graphs-compile.md ("DTensor random ops, backend by backend"):
inductor with ``fallback_random`` on gives a compiled DTensor random op eager
code's values on torch 2.13, but on torch 2.10 and 2.11 schedules its draw
outside hwrng's region, and hwrng refuses the graph when it runs (a
``DTensorHookError`` saying the region drew nothing) -- the documented
refusal, which passes there and fails elsewhere. The DTensor invariant mode
refuses compiled code on every torch (a ``DTensorHookError`` naming
torch.compile).
"""

from __future__ import annotations

import re

#: The torches on which the docs document the refusal when the graph runs.
RUN_REFUSAL_TORCHES = ((2, 10), (2, 11))
#: What that refusal says (``hwrng.dtensor._tracker``).
RUN_REFUSAL = "drew nothing from the generator hwrng positioned for it"


def release(version: str) -> tuple[int, int] | None:
    """A torch version's (major, minor): ``"2.11.0+cu130"`` -> ``(2, 11)``; None if unreadable."""
    found = re.match(r"\s*(\d+)\.(\d+)", version)
    return None if found is None else (int(found.group(1)), int(found.group(2)))


def compile_refusal(case: str, refusal: str, torch_version: str) -> bool:
    """Whether the docs document ``refusal`` (a DTensorHookError's words) of ``case`` here.

    ``case`` is the compile step's case name; the DTensor invariant mode's cases
    name "invariant mode".
    """
    if "invariant mode" in case:
        return "torch.compile" in refusal
    return RUN_REFUSAL in refusal and release(torch_version) in RUN_REFUSAL_TORCHES

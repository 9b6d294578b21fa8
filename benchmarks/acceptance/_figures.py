"""Where a probe writes its verdict and figures, for the runner to read back."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The environment variable that names the file a step's probe writes its result to.
FIGURES_ENV = "HWRNG_ACCEPTANCE_FIGURES"


def write(verdict: str, summary: str, figures: dict[str, Any]) -> None:
    """Write a probe's verdict (``passed``, ``failed``, ``partial``), summary and figures."""
    document = {"verdict": verdict, "summary": summary, "figures": figures}
    target = os.environ.get(FIGURES_ENV)
    text = json.dumps(document, indent=1, default=str) + "\n"
    if target:
        Path(target).write_text(text, encoding="utf-8")
    print(f"{verdict}: {summary}")


def run_probe(main: Callable[[], tuple[str, str, dict[str, Any]]]) -> int:
    """Run a probe's ``main`` and write what it returns; the exit status (0 passed, 1 not).

    An exception escapes (Python prints its traceback): the runner then finds no
    figures and calls the step crashed, with the traceback in its output.
    """
    verdict, summary, figures = main()
    write(verdict, summary, figures)
    return 0 if verdict == "passed" else 1

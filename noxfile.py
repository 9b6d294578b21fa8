"""nox sessions of this branch: only ``trainers`` (to merge into the main noxfile)."""

from __future__ import annotations

import nox

# The trainer releases hwrng.integrations is tested against, with the torch they install with.
TRAINERS_TORCH = "2.13.0"


@nox.session(python="3.11")
def trainers(session: nox.Session) -> None:
    """hwrng.integrations against the pinned Lightning, accelerate and torchtitan (CPU, gloo)."""
    session.install(
        f"torch=={TRAINERS_TORCH}", "--index-url", "https://download.pytorch.org/whl/cpu"
    )
    constraints = session.create_tmp() + "/torch-pin.txt"
    with open(constraints, "w") as pin:
        pin.write(f"torch=={TRAINERS_TORCH}\n")
    session.install("-c", constraints, "-e", ".[test,lightning,accelerate,torchtitan]")
    session.run("python", "-m", "pytest", "tests/integrations", "-q", *session.posargs)

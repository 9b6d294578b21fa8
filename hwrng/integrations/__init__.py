"""hwrng inside the trainers people already use: one module per trainer.

Each module imports its trainer, so import the one you use, never this
package's siblings by accident (``hwrng`` itself imports no trainer)::

    from hwrng.integrations.lightning import HwrngCallback      # pip install "hwrng[lightning]"
    from hwrng.integrations.accelerate import prepare_rng        # pip install "hwrng[accelerate]"
    from hwrng.integrations import torchtitan as hwrng_titan     # pip install "hwrng[torchtitan]"

:class:`AllRanksRNGState` is what the Lightning and accelerate integrations put
in their trainer's checkpoint: trainers that write one file from rank 0 get
every rank's streams in it.
"""

from __future__ import annotations

from hwrng.integrations._gathered import AllRanksRNGState

__all__ = ["AllRanksRNGState"]

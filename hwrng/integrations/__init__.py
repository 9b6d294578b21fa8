"""hwrng inside the trainers people already use: one module per trainer.

Each module imports its trainer, so import the one you use, never this
package's siblings by accident (``hwrng`` itself imports no trainer)::

    from hwrng.integrations.lightning import HwrngCallback      # pip install "hwrng[lightning]"
    from hwrng.integrations.accelerate import prepare_rng        # pip install "hwrng[accelerate]"
    from hwrng.integrations import torchtitan as hwrng_titan     # pip install "hwrng[torchtitan]"

Each checkpoints every rank's streams with :class:`hwrng.RNGState`, whether
the trainer saves through DCP (torchtitan) or writes rank 0's dict alone
(Lightning's Trainer and Fabric, accelerate).
"""

from __future__ import annotations

__all__: list[str] = []

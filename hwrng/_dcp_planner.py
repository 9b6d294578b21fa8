"""``RNGLoadPlanner``: DCP's default load planner, letting ``RNGState`` see what is missing.

A rank that a grown world added has no ``rank_<r>`` key in the checkpoint, and
DCP's default planner stops the whole load at the first missing key. This
planner leaves out of the load exactly the keys an :class:`~hwrng.RNGState`
of this process returned and the checkpoint lacks -- nothing else: a missing
model key still fails as it does by default -- so that ``RNGState`` finds
them unfilled and decides (re-derives under ``on_mismatch="reseed"``, or
refuses on every rank). A checkpoint of hwrng's layout 1 (one ``ranks`` key)
is recognised here and refused by ``RNGState`` with a clear error.
"""

from __future__ import annotations

from typing import Any

from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

from hwrng._dcp import JOB_KEY, OLD_LAYOUT_KEY, owner_of

__all__ = ["RNGLoadPlanner"]


class RNGLoadPlanner(DefaultLoadPlanner):
    """A ``DefaultLoadPlanner`` under which missing hwrng entries reach :class:`hwrng.RNGState`.

    Takes every argument ``DefaultLoadPlanner`` takes. Use it to load a
    checkpoint written by fewer ranks than load it::

        state = {"model": model_state, "rng": hwrng.RNGState(on_mismatch="reseed", mesh=mesh)}
        dcp.load(state, checkpoint_id=path, planner=hwrng.RNGLoadPlanner())

    A planner of your own can do the same by subclassing this one.
    """

    def create_local_plan(self) -> Any:
        """Leave out this process's hwrng keys the checkpoint lacks, then plan as the default."""
        if self.metadata is None:  # DCP sets it before planning; the default raises too
            return super().create_local_plan()
        present = self.metadata.state_dict_metadata
        for fqn, value in list(self.state_dict.items()):
            owner = owner_of(value)
            if owner is None or fqn in present:
                continue
            del self.state_dict[fqn]
            prefix, _, key = fqn.rpartition(".")
            owner._missing.add(key)
            old = f"{prefix}.{OLD_LAYOUT_KEY}" if prefix else OLD_LAYOUT_KEY
            if key == JOB_KEY and old in present:
                owner._old_layout = True
        return super().create_local_plan()

"""DCP planners for per-rank entries: ``RNGLoadPlanner`` and ``RNGSavePlanner``.

``RNGLoadPlanner`` is DCP's default load planner, letting ``RNGState`` see what is missing.

A rank that a grown world added has no ``rank_<r>`` key in the checkpoint, and
DCP's default planner stops the whole load at the first missing key. This
planner leaves out of the load exactly the keys an :class:`~hwrng.RNGState`
of this process returned and the checkpoint lacks -- nothing else: a missing
model key still fails as it does by default -- so that ``RNGState`` finds
them unfilled and decides (re-derives under ``on_mismatch="reseed"``, or
refuses on every rank). A checkpoint of hwrng's layout 1 (one ``ranks`` key)
is recognised here and refused by ``RNGState`` with a clear error.

``RNGSavePlanner`` is DCP's default save planner with one step made linear.
Planning a save, DCP's coordinator merges every rank's key mappings with
``dict(ChainMap(*mappings))``, whose cost is the number of keys times the
number of ranks that hold them late in the chain: with a key of its own on
every rank (hwrng's, Megatron's per-rank RNG objects) it grows with the square
of the world -- 17 s at 16,384 ranks on the development machine, some ten
minutes at 100,000. This planner merges them in one pass, to the same result.
It replaces a private step of DCP's planner, ``_create_global_plan``, which
every torch hwrng supports has (2.10 to 2.15): a torch without it is refused
when the planner is made, as the planner could not do its one job there.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import torch
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner

from hwrng._exceptions import CheckpointError
from hwrng.checkpoint._dcp import owner_of
from hwrng.checkpoint._job import JOB_KEY, OLD_LAYOUT_KEY

__all__ = ["RNGLoadPlanner", "RNGSavePlanner"]


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
            owner.missing.add(key)
            old = f"{prefix}.{OLD_LAYOUT_KEY}" if prefix else OLD_LAYOUT_KEY
            if key == JOB_KEY and old in present:
                owner.old_layout = True
        return super().create_local_plan()


def merge_step_problem(base: type) -> str | None:
    """What ``base`` lacks of the private step :class:`RNGSavePlanner` replaces, or ``None``."""
    step = getattr(base, "_create_global_plan", None)
    if not callable(step):
        return f"{base.__name__} has no _create_global_plan"
    params = list(inspect.signature(step).parameters)
    if params != ["self", "all_plans"]:
        return f"{base.__name__}._create_global_plan takes {params}, not (self, all_plans)"
    return None


class RNGSavePlanner(DefaultSavePlanner):
    """A ``DefaultSavePlanner`` whose coordinator merges the ranks' key mappings in linear time.

    Takes every argument ``DefaultSavePlanner`` takes and plans the same save
    (the same items on each rank, the same metadata); only the merge of every
    rank's mappings, which DCP does in time quadratic in the world when ranks
    hold keys of their own, takes one pass. Worth it from some thousands of
    ranks::

        dcp.save(state, checkpoint_id=path, planner=hwrng.RNGSavePlanner())

    Raises
    ------
    CheckpointError
        On a torch whose ``DefaultSavePlanner`` lacks the private step it
        replaces (torch 2.10 to 2.15 have it), before anything is planned.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        problem = merge_step_problem(DefaultSavePlanner)
        if problem is not None:
            raise CheckpointError(
                "RNGSavePlanner replaces a private step of DCP's save planner, which torch 2.10 "
                f"to 2.15 have and torch {torch.__version__} lacks ({problem}): use DCP's "
                "DefaultSavePlanner, which plans the same save"
            )
        super().__init__(*args, **kwargs)

    def _create_global_plan(self, all_plans: list[Any]) -> tuple[list[Any], Any]:
        if not self.flatten_state_dict:
            return super()._create_global_plan(all_plans)
        bare = [dataclasses.replace(plan, planner_data={}) for plan in all_plans]
        global_plan, metadata = super()._create_global_plan(bare)
        merged: dict[str, Any] = {}
        for plan in reversed(all_plans):  # the first plan that holds a key wins, as in ChainMap
            merged.update(plan.planner_data or {})
        restored = [
            dataclasses.replace(planned, planner_data=plan.planner_data)
            for planned, plan in zip(global_plan, all_plans, strict=True)
        ]
        return restored, dataclasses.replace(metadata, planner_data=merged)

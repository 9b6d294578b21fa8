"""Train the small transformer on 4 CPU ranks; checkpoint through DCP; resume; log what was drawn.

Run under torchrun (see this folder's README)::

    python3 -m torch.distributed.run --standalone --nproc-per-node 4 train.py --out runs/straight

Rank 0 prints one line per step and writes the run's record to ``OUT/launch-<n>.jsonl``
(one file per launch): every step's loss (its exact float32 bits), a digest of
every dropout mask drawn over the whole global batch, and digests of the
initial and final weights. ``compare.py`` judges runs by those records.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch.utils.data
from data import GlobalBatches, Progressions
from model import Config, Transformer, build
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Shard

import hwrng
import hwrng.dtensor

SEED = 1234
DATASET = 240  # samples: 30 steps of 8 per epoch
GLOBAL_BATCH = 8
LR = 3e-3


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the run's folder")
    parser.add_argument("--steps", type=int, default=30, help="train to this step (default 30)")
    parser.add_argument("--save-every", type=int, default=5, help="a DCP checkpoint every N steps")
    parser.add_argument("--mesh", default="2x2", help="dp x tp (default 2x2; 4x1, 1x4)")
    parser.add_argument(
        "--no-hwrng",
        action="store_true",
        help="hwrng's part off: torch.manual_seed on every rank, DCP of model and optimizer",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="resume from the last complete checkpoint in OUT/checkpoints",
    )
    parser.add_argument(
        "--resume-from",
        type=Path,
        help="resume from another run: its folder (its last complete checkpoint) or one "
        "checkpoint's folder (step-<n>)",
    )
    parser.add_argument(
        "--elastic",
        action="store_true",
        help="the checkpoint was saved on another mesh: hwrng re-derives the local streams "
        "(on_mismatch='reseed') and the DTensor stream continues at its saved position",
    )
    parser.add_argument(
        "--die-in-save",
        metavar="STEP:RANK",
        help="rank RANK SIGKILLs itself inside the save of step STEP, after writing its data "
        "and before the checkpoint's metadata",
    )
    return parser.parse_args(argv)


class AppState:
    """Model and optimizer as one DCP ``Stateful`` (FSDP2's sharded state dicts)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict[str, Any]:
        """The model's and optimizer's DTensor state dicts."""
        model, optimizer = get_state_dict(self.model, self.optimizer)
        return {"model": model, "optim": optimizer}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put what DCP read (resharded to this mesh) into the model and optimizer."""
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
        )


class TrainState:
    """The step reached: where the sampler continues."""

    def __init__(self, step: int = 0) -> None:
        self.step = step

    def state_dict(self) -> dict[str, Any]:
        """The step."""
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take the saved step."""
        self.step = int(state["step"])


class DyingWriter(FileSystemWriter):
    """DCP's file writer that SIGKILLs this process once its own data is on disk.

    The coordinator writes the checkpoint's ``.metadata`` only after every rank's
    data: a rank dying here leaves the step's folder without it, incomplete.
    """

    def write_data(self, plan: Any, planner: Any) -> Any:
        """Write this rank's files, then die."""
        written = super().write_data(plan, planner)
        written.wait()
        print(
            f"rank {dist.get_rank()}: SIGKILL inside the save, after writing its data, "
            f"before the checkpoint's metadata ({self.path})",
            flush=True,
        )
        os.kill(os.getpid(), signal.SIGKILL)
        return written


class Masks:
    """Every mask the model's dropouts draw, in order, with the dropout that drew it.

    A step's forward draws each dropout's mask once; the backward recomputes
    each checkpointed block (the last block first), which draws it again.
    """

    def __init__(self) -> None:
        self.drawn: list[tuple[torch.nn.Module, DTensor]] = []

    def __call__(self, dropout: torch.nn.Module, mask: DTensor) -> None:
        """Record ``mask``, drawn by ``dropout``."""
        self.drawn.append((dropout, mask))

    def check_recomputed(self, forward: int) -> list[DTensor]:
        """The forward's masks (the first ``forward`` drawn), each checked against its redraw."""
        first = self.drawn[:forward]
        again = {id(dropout): mask for dropout, mask in self.drawn[forward:]}
        if len(again) != forward or len(self.drawn) != 2 * forward:
            raise RuntimeError(f"{forward} masks in the forward, {len(self.drawn) - forward} again")
        for dropout, mask in first:
            if not torch.equal(mask.to_local(), again[id(dropout)].to_local()):
                raise RuntimeError(f"the recomputation of {dropout} drew another mask")
        return [mask for _, mask in first]


def _digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def _equal_fraction(full: torch.Tensor, dim: int, parts: int) -> float | None:
    """How much of the first of ``parts`` chunks along ``dim`` equals the second."""
    if parts < 2:
        return None
    first, second = full.chunk(parts, dim)[:2]
    return float((first == second).float().mean())


def _mean_equal(fulls: list[torch.Tensor], dims: list[int], parts: int) -> float | None:
    """The mean of :func:`_equal_fraction` over masks split along ``dims``; None if unsplit."""
    fractions = [_equal_fraction(full, dim, parts) for full, dim in zip(fulls, dims, strict=True)]
    present = [fraction for fraction in fractions if fraction is not None]
    return sum(present) / len(present) if present else None


def _tp_dim(tensor: DTensor) -> int:
    """The tensor dim a (dp, tp) DTensor is sharded along over tp."""
    placement = tensor.placements[1]
    if not isinstance(placement, Shard):
        raise ValueError(f"expected a tp shard, got {tensor.placements}")
    return placement.dim


def _weights(model: torch.nn.Module, tp: int) -> dict[str, Any]:
    """Digest of every parameter's full tensor, and how many have equal tp shards."""
    digests, equal = {}, 0
    for name, parameter in model.named_parameters():
        full = parameter.full_tensor() if isinstance(parameter, DTensor) else parameter
        digests[name.replace("_checkpoint_wrapped_module.", "")] = _digest(full)
        placements = parameter.placements if isinstance(parameter, DTensor) else ()
        tp_dims = [p.dim for p in placements[1:] if isinstance(p, Shard)]
        if tp_dims and _equal_fraction(full, tp_dims[0], tp) == 1.0:
            equal += 1
    return {"digests": digests, "tp_shards_equal": equal}


def _last_complete(root: Path) -> Path | None:
    """The newest ``step-<n>`` folder with DCP's ``.metadata`` (written last: complete)."""
    complete = sorted(path for path in root.glob("step-*") if (path / ".metadata").is_file())
    return complete[-1] if complete else None


class Job:
    """One launch: a mesh, the model, the loop, its checkpoints and its record."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rank = dist.get_rank()
        dp, tp = (int(n) for n in args.mesh.split("x"))
        self.dp, self.tp = dp, tp
        self.mesh: DeviceMesh | None = init_device_mesh(
            "cpu", (dp, tp), mesh_dim_names=("dp", "tp")
        )
        self.hwrng = not args.no_hwrng
        self.masks = Masks()
        self.log: Any = None
        die = args.die_in_save.split(":") if args.die_in_save else None
        self.die_at = (int(die[0]), int(die[1])) if die else None

    @property
    def live_mesh(self) -> DeviceMesh:
        """The job's (dp, tp) mesh, until the job ends."""
        assert self.mesh is not None
        return self.mesh

    def record(self, **fields: Any) -> None:
        """Append one record to this launch's file (rank 0)."""
        if self.rank == 0:
            self.log.write(json.dumps(fields) + "\n")
            self.log.flush()

    def seed(self) -> None:
        """Seed every rank; with hwrng, check every stream of every pair of ranks."""
        if not self.hwrng:
            torch.manual_seed(SEED)  # what a user writes without hwrng, on every rank
            return
        hwrng.dtensor.install(invariant=True)
        hwrng.manual_seed(SEED, self.live_mesh, sharded_dims=["dp"])
        self.verify("at the start")

    def verify(self, when: str) -> None:
        """Check every stream of every pair of ranks against the plan (a collective)."""
        report = hwrng.verify()
        report.raise_if_failed()
        if self.rank == 0:
            print(f"hwrng.verify {when}: {len(report.streams)} streams, all as the plan says")

    def checkpoint_state(self, app: AppState, train: TrainState) -> dict[str, Any]:
        """What goes into a DCP checkpoint: model, optimizer, step and (with hwrng) every stream."""
        state: dict[str, Any] = {"app": app, "train": train}
        if self.hwrng:
            if self.args.elastic:
                state["rng"] = hwrng.RNGState(on_mismatch="reseed", mesh=self.live_mesh)
            else:
                state["rng"] = hwrng.RNGState()
        return state

    def save(self, app: AppState, train: TrainState) -> None:
        """A DCP checkpoint of this step, in a folder of its own."""
        path = self.args.out / "checkpoints" / f"step-{train.step:04d}"
        writer: FileSystemWriter
        if self.die_at == (train.step, self.rank):
            writer = DyingWriter(path)
        else:
            writer = FileSystemWriter(path)
        started = time.perf_counter()
        dcp_save(self.checkpoint_state(app, train), storage_writer=writer)
        self.record(event="save", step=train.step, seconds=time.perf_counter() - started)

    def load(self, app: AppState, train: TrainState) -> Path | None:
        """Load the last complete checkpoint, if asked to resume; return it."""
        args = self.args
        if args.resume_from and (args.resume_from / ".metadata").is_file():
            path: Path | None = args.resume_from
        else:
            root = args.resume_from if args.resume_from else args.out if args.resume else None
            if root is None:
                return None
            path = _last_complete(root / "checkpoints")
            if path is None:
                raise SystemExit(f"no complete checkpoint in {root / 'checkpoints'}")
            if root == args.out:
                self.set_aside(path)
        planner = hwrng.RNGLoadPlanner() if self.hwrng else None
        dcp_load(self.checkpoint_state(app, train), checkpoint_id=path, planner=planner)
        return path

    def set_aside(self, resumed: Path) -> None:
        """Rename the incomplete checkpoints after ``resumed``: this run will save those steps."""
        if self.rank == 0:
            for path in sorted(resumed.parent.glob("step-*")):
                if path.name > resumed.name and path.suffix == "" and path.is_dir():
                    aside, count = path.with_name(f"{path.name}.incomplete"), 1
                    while aside.exists():
                        aside, count = path.with_name(f"{path.name}.incomplete-{count}"), count + 1
                    path.rename(aside)
                    print(f"{path.name}: no .metadata (a save cut short), set aside: {aside.name}")
        dist.barrier()

    def loader(self, epoch: int, start: int) -> Iterator[dict[str, torch.Tensor]]:
        """Batches of ``epoch`` for this rank, from step ``start`` of the epoch."""
        dp_rank = self.live_mesh.get_local_rank("dp")
        sampler = GlobalBatches(DATASET, GLOBAL_BATCH, dp_rank, self.dp, SEED, epoch, start)
        loader = torch.utils.data.DataLoader(
            Progressions(DATASET, Config.seq, Config.vocab, SEED),
            batch_sampler=sampler,
            num_workers=2,
            # Its own generator: making an iterator draws the workers' base seed from it,
            # not from the rank's default generator, which on the CPU is the DTensor
            # stream -- so a resume can make its iterator at any step.
            generator=torch.Generator().manual_seed(SEED * 1_000_003 + epoch),
            # tp ranks of one dp rank load the same samples: key the workers by dp rank
            worker_init_fn=hwrng.WorkerInitFn(rank=dp_rank) if self.hwrng else None,
        )
        return iter(loader)

    def step(
        self, model: Transformer, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor]
    ) -> dict[str, Any]:
        """One training step; returns what it drew and its loss, as rank 0 records them."""
        self.masks.drawn.clear()
        logits = model(batch["inputs"])
        loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
        drawn = len(self.masks.drawn)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        optimizer.zero_grad()
        forward = self.masks.check_recomputed(drawn)
        dp_group = self.live_mesh.get_group("dp")
        total = loss.detach().clone()
        dist.all_reduce(total, group=dp_group)
        mean = float(total / self.dp)
        samples = [torch.zeros_like(batch["sample"]) for _ in range(self.dp)]
        dist.all_gather(samples, batch["sample"], group=dp_group)
        fulls = [mask.full_tensor() for mask in forward]  # every position of the global batch
        tp_dims = [_tp_dim(mask) for mask in forward]
        return {
            "loss": mean,
            "loss_hex": mean.hex(),
            "masks": [_digest(full) for full in fulls],
            "kept": float(torch.cat([full.flatten() for full in fulls]).float().mean()),
            "tp_equal": _mean_equal(fulls, tp_dims, self.tp),
            "dp_equal": _mean_equal(fulls, [0] * len(fulls), self.dp),
            "samples": torch.cat(samples).tolist(),
        }

    def run(self) -> None:
        """Seed, build, maybe resume, train, checkpoint, record."""
        args = self.args
        args.out.mkdir(parents=True, exist_ok=True)
        if self.rank == 0:
            launch = len(list(args.out.glob("launch-*.jsonl")))
            self.log = open(args.out / f"launch-{launch}.jsonl", "w")  # noqa: SIM115
        started = time.perf_counter()
        self.seed()
        model = build(Config(), self.live_mesh, self.masks)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
        init = _weights(model, self.tp)
        app, train = AppState(model, optimizer), TrainState()
        loaded = self.load(app, train)
        if loaded and self.hwrng:
            self.verify("after the resume")
        self.record(
            event="start",
            mesh=args.mesh,
            hwrng=self.hwrng,
            init=init,
            resumed_from=str(loaded) if loaded else None,
            step=train.step,
        )
        if self.rank == 0:
            print(
                f"mesh dp{self.dp} x tp{self.tp}, hwrng {'on' if self.hwrng else 'off'}, "
                f"initial weights: {init['tp_shards_equal']} with equal tp shards"
                + (f"; resumed from {loaded}" if loaded else "")
            )
        per_epoch = DATASET // GLOBAL_BATCH
        batches: Iterator[dict[str, torch.Tensor]] | None = None
        model.train()
        while train.step < args.steps:
            if batches is None or train.step % per_epoch == 0:
                batches = self.loader(train.step // per_epoch, train.step % per_epoch)
            batch = next(batches)
            tick = time.perf_counter()
            drawn = self.step(model, optimizer, batch)
            train.step += 1
            self.record(event="step", step=train.step, seconds=time.perf_counter() - tick, **drawn)
            if self.rank == 0:
                print(
                    f"step {train.step:3d}  loss {drawn['loss']:.6f}  masks "
                    f"{drawn['masks'][0][:8]}..  {time.perf_counter() - tick:.2f} s",
                    flush=True,
                )
            if train.step % args.save_every == 0:
                self.save(app, train)
        final = _weights(model, self.tp)
        wall = time.perf_counter() - started
        self.record(event="end", step=train.step, final=final, seconds=wall)
        if self.rank == 0:
            print(f"done: step {train.step} in {wall:.1f} s")
            self.log.close()
        self.mesh = None  # free the mesh's groups before the default one (docs/checkpoint.md)


def main(argv: list[str] | None = None) -> None:
    """Run one launch of the job on this rank."""
    args = _arguments(argv)
    torch.set_num_threads(1)
    # full_tensor() of FSDP2's (_StridedShard, Shard) parameters, for their digests, logs a
    # note on every rank that it takes two all_gathers
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    dist.init_process_group("gloo")
    try:
        Job(args).run()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])

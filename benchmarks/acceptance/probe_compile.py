"""The compile step: torch.compile of hwrng's random ops gives eager's values, bit for bit.

On a 1-rank mesh of ``--device`` (nccl on CUDA, gloo on the CPU), with
torch.compile's ``--backend`` (inductor by default; ``fullgraph=False``), and
inductor's ``fallback_random`` on (without it inductor draws numbers of its own
for torch's random ops and hwrng's alike, never eager's):

- DTensor random ops through hwrng's adapter (``hwrng.dtensor.install()``):
  dropout and ``rand_like`` of a sharded DTensor, three calls compiled against
  three eager, from the same seeding -- equal values, a fresh draw each call,
  the generator at the same position afterwards;
- hwrng.invariant's ops on a local shard (``uniform_``, ``normal_``,
  ``dropout``): the same comparison;
- DTensor invariant mode (``install(invariant=True)``): equal values, or the
  refusal its documentation promises (a ``DTensorHookError`` naming
  torch.compile); other numbers, or another error, fail.

Each case is judged by what docs/cuda-graphs-compile.md documents for the
torch it runs on (:mod:`acceptance.documented`): on torch 2.10 and 2.11
inductor with ``fallback_random`` schedules a DTensor op's draw outside
hwrng's region, and hwrng refuses the graph when it runs (a
``DTensorHookError``: the region drew nothing) -- the documented refusal, a
pass there, a failure on any other torch.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from _timing import one_rank_group
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

import hwrng
import hwrng.invariant
from acceptance import documented
from acceptance._figures import run_probe

CALLS = 3
# inductor draws its own random numbers unless told to run eager's random ops (for torch's ops
# as for hwrng's): this switch is torch's documented way to compare compiled with eager values
torch._inductor.config.fallback_random = True


def _chain(error: BaseException) -> list[BaseException]:
    """The error and every error it was raised from or during."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _local(value: torch.Tensor) -> torch.Tensor:
    return (value.to_local() if isinstance(value, DTensor) else value).detach().cpu().clone()


def compare(
    step: Callable[[], torch.Tensor],
    reseed: Callable[[], None],
    platform: hwrng.Platform,
    backend: str,
) -> tuple[str, str]:
    """Run ``step`` eagerly and compiled from the same seeding: ``(outcome, detail)``."""
    generator = platform.generator()
    reseed()
    eager = [_local(step()) for _ in range(CALLS)]
    eager_end = platform.get_seed_offset(generator)
    compiled_step = torch.compile(step, backend=backend, fullgraph=False)
    reseed()
    started = time.perf_counter()
    compiled = [_local(compiled_step()) for _ in range(CALLS)]
    seconds = time.perf_counter() - started
    compiled_end = platform.get_seed_offset(generator)
    if not all(torch.equal(a, b) for a, b in zip(eager, compiled, strict=True)):
        return "differ", "compiled values differ from eager's"
    if compiled_end != eager_end:
        return "differ", f"generator at {compiled_end} compiled, {eager_end} eager"
    if torch.equal(eager[0], eager[1]):
        return "differ", "two calls drew the same values"
    return "equal", f"{CALLS} calls equal to eager's, each drawn anew ({seconds:.1f} s compiling)"


Case = tuple[Callable[[], None], Callable[[], torch.Tensor]]  # (set up, the step to compile)


def _cases(
    device: str, mesh: DeviceMesh, platform: hwrng.Platform
) -> tuple[Callable[[], None], dict[str, Case]]:
    """The seeding every case starts from, and each case by name."""

    def reseed() -> None:
        hwrng.manual_seed(7, mesh, sharded_dims=["tp"], platform=platform)

    x = distribute_tensor(torch.ones(8, 16, device=device), mesh, [Shard(0)])

    def dtensor_step() -> torch.Tensor:
        return torch.nn.functional.dropout(x, p=0.5) + torch.rand_like(x)

    spec = hwrng.ShardSpec((64, 32), (2,), (Shard(0),), (1,))
    local = torch.empty(32, 32, device=device)

    def invariant_step() -> torch.Tensor:
        hwrng.invariant.uniform_(local, spec, platform=platform)
        kept = hwrng.invariant.dropout(local, spec, 0.25, platform=platform)
        return kept + hwrng.invariant.normal_(torch.empty_like(local), spec, platform=platform)

    return reseed, {
        "DTensor ops, hwrng adapter": (lambda: hwrng.dtensor.install(platform), dtensor_step),
        "hwrng.invariant ops": (lambda: None, invariant_step),
        "DTensor ops, invariant mode": (
            lambda: hwrng.dtensor.install(platform, invariant=True),
            dtensor_step,
        ),
    }


def _run_case(
    name: str,
    *,
    setup: Callable[[], None],
    step: Callable[[], torch.Tensor],
    reseed: Callable[[], None],
    platform: hwrng.Platform,
    backend: str,
) -> tuple[str, str]:
    torch._dynamo.reset()
    try:
        setup()
        return compare(step, reseed, platform, backend)
    except Exception as error:
        refusals = [e for e in _chain(error) if isinstance(e, hwrng.DTensorHookError)]
        if refusals and documented.compile_refusal(name, str(refusals[0]), torch.__version__):
            return "refused", (
                f"refused as documented for torch {torch.__version__}: {str(refusals[0])[:200]}"
            )
        cause = _chain(error)[-1]
        raised = type(error).__name__
        if cause is not error:
            raised += f" from {type(cause).__name__}"
        return "error", f"{raised}: {str(cause)[:300]}"
    finally:
        hwrng.dtensor.uninstall()


def main() -> tuple[str, str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend")
    args = parser.parse_args()
    platform = hwrng.get_platform(args.device)
    results: dict[str, dict[str, str]] = {}
    with one_rank_group("nccl" if args.device == "cuda" else "gloo"):
        mesh = init_device_mesh(args.device, (1,), mesh_dim_names=("tp",))
        reseed, cases = _cases(args.device, mesh, platform)
        for name, (setup, step) in cases.items():
            outcome, detail = _run_case(
                name,
                setup=setup,
                step=step,
                reseed=reseed,
                platform=platform,
                backend=args.backend,
            )
            results[name] = {"outcome": outcome, "detail": detail}
            print(f"{name}: {outcome}: {detail}", flush=True)
    bad = [name for name, r in results.items() if r["outcome"] not in ("equal", "refused")]
    figures = {"backend": args.backend, "torch": torch.__version__, "cases": results}
    said = "; ".join(f"{name}: {r['outcome']}" for name, r in results.items())
    return ("failed" if bad else "passed"), f"torch.compile({args.backend}): {said}", figures


if __name__ == "__main__":
    raise SystemExit(run_probe(main))

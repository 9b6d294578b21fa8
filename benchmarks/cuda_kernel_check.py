"""The invariant ops' contract on a CUDA GPU: known answers, PTX and speed of the fused kernel.

Usage (on a machine with a CUDA GPU and Triton)::

    python3 benchmarks/cuda_kernel_check.py

It goes through ``hwrng._philox``, which holds no generator, so it runs on any
torch with CUDA -- also below hwrng's floor of torch 2.13, where the public ops
cannot (``torch.Generator`` cannot be weakly referenced there). It checks:

1. every known answer of the contract (``invariant_kat.json`` of
   hwrng-conformance) on the GPU, by the fused Triton kernel (a described shard)
   and by the generic path's torch ops (a flat index), with the kernel's element
   positions in int32 (the default) and in int64 (shards of 2**31 elements or
   more);
2. the GPU's values equal to the CPU's on a described shard, in four dtypes;
3. the kernel's PTX for sm_90: IEEE-rounded float operations only;

then times the fused kernel against torch's own CUDA op on 2**26 float32
elements (median of 20 launches by CUDA events, in the same run). Exits 1 when
a check fails. Its figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT), str(ROOT / "conformance" / "src")]

import known_answers  # noqa: E402
import test_philox_triton as checks  # noqa: E402

from hwrng import _philox as philox  # noqa: E402
from hwrng._philox import _triton as fused  # noqa: E402


def median_ms(launch: Callable[[], object], repeats: int = 20) -> float:
    """The median time of ``launch`` on the GPU, in milliseconds, after one warm-up call."""
    launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def check() -> bool:
    """The known answers, the CPU's numbers and the PTX; True when all hold."""
    import triton

    device = torch.cuda.get_device_name()
    print(f"torch {torch.__version__}, triton {triton.__version__}, {device}")
    print("fused kernel on cuda:", fused.why_unavailable("cuda") or "available")
    wrong = known_answers.mismatches("cuda")
    print(f"known answers, int32 positions: {len(wrong)} wrong {wrong}")
    fused._WIDE_FROM = 0
    try:
        wide = known_answers.mismatches("cuda")
    finally:
        fused._WIDE_FROM = 2**31
    print(f"known answers, int64 positions: {len(wide)} wrong {wide}")
    checks.test_cuda_draws_the_cpus_numbers()
    print("the GPU draws the CPU's numbers (four dtypes): ok")
    checks.test_the_ptx_check_flags_approximate_float_operations()
    for _, *variant in checks.KERNEL_VARIANTS:
        checks.test_every_kernel_variant_compiles_to_ieee_rounded_ptx(*variant)
    print(f"PTX for sm_90, {len(checks.KERNEL_VARIANTS)} kernel variants: IEEE-rounded only")
    checks.test_the_kernel_computes_each_philox_block_once()
    print("PTX: each Philox block computed once, an aligned run stored as 16-byte vectors")
    return not wrong and not wide


def speed() -> None:
    """The fused kernel against torch's CUDA ops on 2**26 float32 elements."""
    shape = (1 << 13, 1 << 13)
    dims = (torch.arange(shape[0], device="cuda"), torch.arange(shape[1], device="cuda"))
    shard = philox.ShardIndices(dims, shape)
    out = torch.empty(shape, device="cuda")
    cases: dict[str, tuple[Callable[[], torch.Tensor], Callable[[], object]]] = {
        "uniform float32": (
            lambda: philox.uniform(1, 0, shard, torch.float32, low=0.0, high=1.0),
            out.uniform_,
        ),
        "normal float32": (
            lambda: philox.normal(1, 0, shard, torch.float32, mean=0.0, std=1.0),
            out.normal_,
        ),
        "bernoulli mask p=0.9 (torch: rand < p)": (
            lambda: philox.bernoulli_mask(1, 0, shard, 0.9),
            lambda: torch.rand(shape, device="cuda") < 0.9,
        ),
        "trunc_normal float32 (torch: nn.init)": (
            lambda: philox.trunc_normal(1, 0, shard, torch.float32, a=-2.0, b=2.0),
            lambda: torch.nn.init.trunc_normal_(out),
        ),
        "dropout p=0.1, output and mask": (
            lambda: philox.dropout(1, 0, shard, out, 0.1)[0],
            lambda: torch.nn.functional.dropout(out, 0.1),
        ),
    }
    print("2**26 elements, median of 20 launches (CUDA events), same run:")
    for name, (ours, theirs) in cases.items():
        mine, torchs = median_ms(ours), median_ms(theirs)
        values = ours()
        written = values.numel() * values.element_size() / mine / 1e6
        print(
            f"  {name:40} hwrng {mine:7.3f} ms  torch {torchs:7.3f} ms  "
            f"{mine / torchs:5.2f}x  ({written:,.0f} GB/s written)"
        )


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device is visible")
        return 2
    ok = check()
    speed()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The invariant ops' contract on a CUDA GPU: known answers, PTX and speed of the fused kernel.

Usage (on a machine with a CUDA GPU and Triton)::

    python3 benchmarks/cuda_kernel_check.py                 # every part, then the speed
    python3 benchmarks/cuda_kernel_check.py --part ptx      # one part (see PARTS)

It goes through ``hwrng._philox``, which holds no generator. Its parts
(:data:`PARTS`), each of which the GPU acceptance's contract step runs in a
process of its own, all at once (most of their time is Triton compiling):

1. ``known-answers-int32`` and ``known-answers-int64``: every known answer of
   the contract (``invariant_kat.json`` of hwrng-conformance) on the GPU, by the
   fused Triton kernel (a described shard) and by the generic path's torch ops
   (a flat index), with the kernel's element positions in int32 (the default)
   and in int64 (shards of 2**31 elements or more);
2. ``gpu-equals-cpu``: the GPU's values equal to the CPU's on a described
   shard, in four dtypes;
3. ``ptx``: the kernel's PTX for sm_90 (compiled by Triton's NVIDIA backend, no
   GPU needed): IEEE-rounded float operations only, each Philox block computed
   once;

then times the fused kernel against torch's own CUDA op on 2**26 float32
elements (median of 20 launches by CUDA events, in the same run). Exits 1 when
a check fails. Its figures are in docs/benchmarks.md.

With ``--device cpu`` (the acceptance's rehearsal) the known answers run on
the CPU, by the fused kernel in Triton's interpreter where ``TRITON_INTERPRET=1``
is set, and ``gpu-equals-cpu`` is not run. A part ends with one line, ``part
NAME: STATUS: ...`` (``held``, ``FAILED``, ``partial``: it held for what could
run, ``not run``: why), and exits 0 (held), 1 (failed), 2 (partial) or 3 (not run).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT), str(ROOT / "conformance" / "src")]

import known_answers  # noqa: E402

from hwrng import _philox as philox  # noqa: E402
from hwrng._philox import _triton as fused  # noqa: E402

#: A part's status and its exit status.
EXIT = {"held": 0, "FAILED": 1, "partial": 2, "not run": 3}
Outcome = tuple[str, str]  # (status, what it found)


def _missing(*names: str) -> list[str]:
    return [name for name in names if importlib.util.find_spec(name) is None]


def _known_answers(device: str, wide: bool) -> Outcome:
    positions = "int64" if wide else "int32"
    why = fused.why_unavailable(device)
    if why is not None and wide:  # the positions' width is the fused kernel's alone
        return "not run", f"the fused kernel cannot serve {device}: {why}"
    if wide:
        fused._WIDE_FROM = 0
    wrong = known_answers.mismatches(device)
    said = f"known answers on {device}, {positions} positions: {len(wrong)} wrong {wrong}"
    if wrong:
        return "FAILED", said
    if why is not None:  # the described shards took the generic path too
        return "partial", f"{said}, by the generic path alone (fused kernel: {why})"
    return "held", said


def _gpu_equals_cpu(device: str) -> Outcome:
    if device != "cuda":
        return "not run", "needs a CUDA device"
    missing = _missing("pytest")
    if missing:
        return "not run", f"{', '.join(missing)} missing (tests/test_philox_triton.py needs it)"
    import test_philox_triton as checks

    checks.test_cuda_draws_the_cpus_numbers()
    said = "the GPU draws the CPU's numbers (uniform, normal, trunc_normal, bernoulli; 4 dtypes)"
    why = fused.why_unavailable(device)
    return ("held", said) if why is None else ("partial", f"{said}; fused kernel: {why}")


def _ptx(device: str) -> Outcome:
    missing = _missing("pytest", "triton")
    if missing:
        return "not run", f"{', '.join(missing)} missing"
    import test_philox_triton as checks
    from triton.backends import backends

    if "nvidia" not in backends:
        return "not run", "this Triton has no NVIDIA backend"
    checks.test_the_ptx_check_flags_approximate_float_operations()
    for _, *variant in checks.KERNEL_VARIANTS:
        checks.test_every_kernel_variant_compiles_to_ieee_rounded_ptx(*variant)
    checks.test_the_kernel_computes_each_philox_block_once()
    return "held", (
        f"PTX for sm_90, {len(checks.KERNEL_VARIANTS)} kernel variants: IEEE-rounded only; "
        "each Philox block computed once, an aligned run stored as 16-byte vectors"
    )


#: Every part, by name: what it checks, given the device.
PARTS: dict[str, Callable[[str], Outcome]] = {
    "known-answers-int32": lambda device: _known_answers(device, wide=False),
    "known-answers-int64": lambda device: _known_answers(device, wide=True),
    "gpu-equals-cpu": _gpu_equals_cpu,
    "ptx": _ptx,
}


def run_part(name: str, device: str) -> str:
    """Run part ``name`` and print its last line; its status (a failed check is ``FAILED``)."""
    try:
        status, said = PARTS[name](device)
    except AssertionError as error:  # a check of tests/test_philox_triton.py failed
        status, said = "FAILED", f"{type(error).__name__}: {error!r}"[:500]
    print(f"part {name}: {status}: {said}", flush=True)
    return status


def check(device: str = "cuda") -> bool:
    """Every part, one after the other; True when none failed."""
    where = torch.cuda.get_device_name() if device == "cuda" else device
    triton = fused.triton.__version__ if fused.triton is not None else "missing"
    print(f"torch {torch.__version__}, triton {triton}, {where}")
    print(f"fused kernel on {device}:", fused.why_unavailable(device) or "available")
    return all(run_part(name, device) != "FAILED" for name in PARTS)


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=sorted(PARTS), help="run this part alone")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args()
    if args.part is not None:
        return EXIT[run_part(args.part, args.device)]
    if not torch.cuda.is_available():
        print("no CUDA device is visible")
        return 2
    ok = check()
    speed()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

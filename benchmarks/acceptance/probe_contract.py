"""The contract step: the invariant ops' known answers on the device, and the device = the CPU.

Two parts:

1. ``benchmarks/cuda_kernel_check.py``'s checks (``check()``): every known
   answer of the contract on the GPU by the fused kernel and the generic path,
   the GPU's ``hwrng._philox`` values equal to the CPU's, and the kernel's PTX
   IEEE-rounded. It imports pytest and Triton (through
   ``tests/test_philox_triton.py``); without them the known answers alone run
   (``tests/known_answers.py``) and the step is partial.
2. hwrng.invariant's public ops -- ``uniform_``, ``normal_``, ``bernoulli_``,
   ``trunc_normal_`` and ``dropout`` -- on one shard of a 2-rank mesh, on the
   device and on the CPU from the same generator position: equal bit for bit,
   and both generators at the same position afterwards.

In a rehearsal (``--device cpu``) part 1 is the known answers on the CPU and
part 2 compares the CPU with itself: it proves the machinery, not the GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import sys
import traceback
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

# known_answers (tests/) reads the contract from conformance/src; cuda_kernel_check and this
# package live in benchmarks/
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "conformance" / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch.distributed.tensor import Replicate, Shard

import hwrng
import hwrng.invariant
from acceptance._figures import run_probe

SEED, OFFSET = 2024, 4096


def _dropout(tensor: torch.Tensor, spec: hwrng.ShardSpec, **options: Any) -> torch.Tensor:
    return hwrng.invariant.dropout(tensor.fill_(1.5), spec, **options)


#: (name, dtype, op, its parameters): each op fills or returns a tensor of one shard
OPS: list[tuple[str, torch.dtype, Callable[..., torch.Tensor], dict[str, float]]] = [
    ("uniform_", torch.float32, hwrng.invariant.uniform_, {"low": -1.0, "high": 3.0}),
    ("uniform_", torch.float64, hwrng.invariant.uniform_, {}),
    ("uniform_", torch.bfloat16, hwrng.invariant.uniform_, {}),
    ("normal_", torch.float32, hwrng.invariant.normal_, {"mean": 0.5, "std": 2.0}),
    ("normal_", torch.float16, hwrng.invariant.normal_, {}),
    ("bernoulli_", torch.float32, hwrng.invariant.bernoulli_, {"p": 0.3}),
    ("trunc_normal_", torch.float32, hwrng.invariant.trunc_normal_, {"a": -1.5, "b": 2.5}),
    ("dropout", torch.float32, _dropout, {"p": 0.25}),
]
#: one of two row shards of a (2 x 1000) x 24 tensor, and the same tensor replicated
SPECS = {
    "row shard 1 of 2": hwrng.ShardSpec((2000, 24), (2,), (Shard(0),), (1,)),
    "replicated": hwrng.ShardSpec((2000, 24), (2,), (Replicate(),), (0,)),
}


def _bits(values: torch.Tensor) -> torch.Tensor:
    """The values' bit patterns on the CPU (so -0.0 and 0.0, and NaNs, compare as bits)."""
    wide = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}
    return values.detach().cpu().contiguous().view(wide[values.element_size()])


def public_ops(device: str) -> list[str]:
    """The public ops' cases whose values or final positions differ between ``device`` and CPU."""
    platforms = {name: hwrng.get_platform(name) for name in {device, "cpu"}}
    wrong = []
    for spec_name, spec in SPECS.items():
        for name, dtype, op, parameters in OPS:
            values, positions = {}, {}
            for where, chosen in platforms.items():
                generator = torch.Generator(device=where)
                chosen.set_seed_offset(generator, SEED, OFFSET)
                tensor = torch.empty(spec.local_shape, dtype=dtype, device=where)
                drawn = op(tensor, spec, **parameters, generator=generator, platform=where)
                values[where] = _bits(drawn)
                positions[where] = chosen.get_seed_offset(generator)
            if not torch.equal(values[device], values["cpu"]):
                wrong.append(f"{name} {dtype} {parameters} {spec_name}: values differ")
            if positions[device] != positions["cpu"]:
                wrong.append(f"{name} {dtype} {parameters} {spec_name}: positions {positions}")
    return wrong


def kernel_check(device: str) -> tuple[bool | None, str, str]:
    """Part 1: (all held, or None when only part of it could run; what ran; its output)."""
    import known_answers

    if device != "cuda":
        wrong = known_answers.mismatches(device)
        return not wrong, f"known answers on {device}: {len(wrong)} wrong {wrong}", ""
    missing = [name for name in ("pytest", "triton") if importlib.util.find_spec(name) is None]
    if missing:
        wrong = known_answers.mismatches("cuda")
        said = f"known answers on cuda: {len(wrong)} wrong {wrong}"
        if wrong:
            return False, said, ""
        return None, f"{said}; {', '.join(missing)} missing: cuda_kernel_check.py not run", ""
    import cuda_kernel_check

    printed = io.StringIO()
    failure = ""
    with redirect_stdout(printed):
        try:
            held = cuda_kernel_check.check()
        except AssertionError as error:  # a check of tests/test_philox_triton.py failed
            held, failure = False, f": {error!r}"[:300]
    print(printed.getvalue(), end="")
    said = "held" if held else f"FAILED{failure}"
    return held, f"benchmarks/cuda_kernel_check.py check(): {said}", printed.getvalue()


def main() -> tuple[str, str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    device = parser.parse_args().device
    held, kernel_said, printed = kernel_check(device)
    print(kernel_said, flush=True)
    cases = len(SPECS) * len(OPS)
    try:
        wrong = public_ops(device)
        ops_said = (
            f"hwrng.invariant on {device} = on the CPU: {cases - len(wrong)} of {cases} cases"
        )
    except Exception as error:  # keep part 1's result in the report
        traceback.print_exc()
        wrong = [f"{type(error).__name__}: {error}"]
        ops_said = f"hwrng.invariant on {device}: stopped by {wrong[0]}"
    print(ops_said, *wrong, sep="\n  ")
    figures = {
        "kernel check": kernel_said,
        "kernel check output": printed,
        "public op cases": cases,
        "public op cases differing": wrong,
    }
    if device == "cpu":
        ops_said += " (a rehearsal: the CPU against itself)"
    summary = f"{kernel_said}; {ops_said}"
    if held is False or wrong:
        return "failed", summary, figures
    return ("partial" if held is None else "passed"), summary, figures


if __name__ == "__main__":
    raise SystemExit(run_probe(main))

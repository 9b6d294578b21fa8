"""The contract step: the invariant ops' known answers on the device, and the device = the CPU.

Two parts, run at once:

1. the parts of ``benchmarks/cuda_kernel_check.py`` (its ``PARTS``), each in
   a process of its own, all at the same time -- most of their time is Triton
   compiling the kernel's variants, one CPU core each: every known answer of
   the contract on the GPU by the fused kernel (int32 and int64 element
   positions) and the generic path, the GPU's ``hwrng._philox`` values equal to
   the CPU's, and the kernel's PTX IEEE-rounded. Their output is printed as it
   comes, each line behind its part's name, so a step stopped at its budget
   still shows how far each got;
2. hwrng.invariant's public ops -- ``uniform_``, ``normal_``, ``bernoulli_``,
   ``trunc_normal_`` and ``dropout`` -- on one shard of a 2-rank mesh, on the
   device and on the CPU from the same generator position: equal bit for bit,
   and both generators at the same position afterwards.

In a rehearsal (``--device cpu``) the known answers run on the CPU, by the
fused kernel in Triton's interpreter where Triton is installed; the GPU = CPU
part is not run (it needs a CUDA device, and the rehearsal passes without
it); the PTX is compiled as on the GPU machine; part 2 compares the CPU with
itself. It proves the machinery, not the GPU.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

# known_answers (tests/) reads the contract from conformance/src; this package lives in
# benchmarks/
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "conformance" / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch.distributed.tensor import Replicate, Shard

import hwrng
import hwrng.invariant
from acceptance._figures import run_probe

ROOT = Path(__file__).resolve().parents[2]
SEED, OFFSET = 2024, 4096
#: cuda_kernel_check.py's parts, as its --part takes them.
PARTS = ("known-answers-int32", "known-answers-int64", "gpu-equals-cpu", "ptx")
#: The parts a rehearsal runs in Triton's interpreter (the fused kernel serves CPU tensors
#: there only); the PTX is compiled by Triton's NVIDIA backend, as on the GPU machine.
INTERPRETED = ("known-answers-int32", "known-answers-int64")
#: Why a part does not run on the CPU: a rehearsal passes without it.
NEEDS_CUDA = "needs a CUDA device"
_LAST = re.compile(
    r"^part (?P<name>[\w-]+): (?P<status>held|FAILED|partial|not run): (?P<said>.*)$"
)
_PRINTING = threading.Lock()


def _say(prefix: str, line: str) -> None:
    with _PRINTING:
        print(f"[{prefix}] {line}", flush=True)


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


class Part:
    """One part of cuda_kernel_check.py, running in a process of its own."""

    def __init__(self, name: str, device: str) -> None:
        environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if device == "cpu" and name in INTERPRETED:
            environment["TRITON_INTERPRET"] = "1"
        self.name = name
        self.started = time.monotonic()
        self.seconds = 0.0
        self.last = ""
        self.process = subprocess.Popen(
            [sys.executable, "benchmarks/cuda_kernel_check.py", "--part", name, "--device", device],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=environment,
            text=True,
        )
        self.reader = threading.Thread(target=self._relay, args=(self.process.stdout,))
        self.reader.start()

    def _relay(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for read in stream:
            line = read.rstrip("\n")
            if line.strip():
                self.last = line
            _say(self.name, line)
        self.seconds = time.monotonic() - self.started

    def result(self) -> tuple[str, str]:
        """(status, what it found), once it has ended; a part that stopped unheard FAILED."""
        returncode = self.process.wait()
        self.reader.join()
        found = _LAST.match(self.last)
        if found is None or found["name"] != self.name:
            return "FAILED", f"stopped without a result (exit status {returncode}): {self.last}"
        return found["status"], found["said"]


def _public_ops(device: str) -> tuple[str, list[str]]:
    cases = len(SPECS) * len(OPS)
    try:
        wrong = public_ops(device)
    except Exception as error:  # keep the parts' results in the report
        traceback.print_exc()
        wrong = [f"{type(error).__name__}: {error}"]
        said = f"hwrng.invariant on {device}: stopped by {wrong[0]}"
    else:
        said = f"hwrng.invariant on {device} = on the CPU: {cases - len(wrong)} of {cases} cases"
    if device == "cpu":
        said += " (a rehearsal: the CPU against itself)"
    for line in [said, *wrong]:
        _say("public-ops", line)
    return said, wrong


def verdict(statuses: dict[str, tuple[str, str]], ops_wrong: list[str], rehearsal: bool) -> str:
    """The step's verdict from its parts' statuses and the public ops' differences.

    Failed where anything failed; partial where a part held only in part or did
    not run -- except, in a rehearsal, a part that needs a CUDA device.
    """
    if ops_wrong or any(status == "FAILED" for status, _ in statuses.values()):
        return "failed"
    for status, said in statuses.values():
        if status == "held" or (rehearsal and status == "not run" and said == NEEDS_CUDA):
            continue
        return "partial"
    return "passed"


def main() -> tuple[str, str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    device = parser.parse_args().device
    parts = [Part(name, device) for name in PARTS]
    ops_said, ops_wrong = _public_ops(device)
    statuses = {part.name: part.result() for part in parts}
    figures: dict[str, Any] = {
        "parts": {
            part.name: {"status": s, "found": said, "seconds": round(part.seconds, 1)}
            for part, (s, said) in zip(parts, statuses.values(), strict=True)
        },
        "public op cases": len(SPECS) * len(OPS),
        "public op cases differing": ops_wrong,
    }
    said = "; ".join(
        f"{name} {status}" + ("" if status == "held" else f" ({found})")
        for name, (status, found) in statuses.items()
    )
    return verdict(statuses, ops_wrong, device == "cpu"), f"{said}; {ops_said}", figures


if __name__ == "__main__":
    raise SystemExit(run_probe(main))

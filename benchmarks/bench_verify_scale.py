"""What ``hwrng.verify``'s judging sends per rank at 256 to 100,000 ranks, with real values.

torch's fake process group (``bench_scale.py``) runs the real code for one rank
but answers every collective with that rank's own words, so the exchanges that
run when streams differ between ranks never run there. Here every rank of the
world runs the judging algorithm in one process (``hwrng.verify._simulator``),
each with its own observations, and the simulator counts the collectives and
the words each rank hands to them (an exchange's counts included).

The job: a ``(world / 8) x 8`` mesh (dp x tp) seeded with
``manual_seed(seed, mesh, sharded_dims=["tp"])`` -- five streams that agree
along dp and differ along tp, a named state of Megatron's kind, and the DTensor
stream on the whole mesh -- and the same job with the commonest bug,
``seed = base + dp + tp``, which verify must fail.

Beside it, one rank of each world runs the real ``hwrng.verify()`` under torch's
fake process group (``tests/scale_probe.py``'s measurement, verify alone): the
Python allocations at their peak and the bytes handed to collectives.

Usage: ``python3 benchmarks/bench_verify_scale.py [--worlds 256,4096,16384,100000]``;
writes ``benchmarks/results/verify-scale-<date>.{json,md}``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

from _timing import machine

from hwrng._collectives import digest_of
from hwrng.verify._judging import judging
from hwrng.verify._routing import Place
from hwrng.verify._rule import Observation
from hwrng.verify._simulator import Traffic, grid, simulate

RESULTS = Path(__file__).resolve().parent / "results"
TP = 8


def observations(place: Place, bug: bool) -> list[list[Observation]]:
    """What one rank of the job observes: five plan streams, a named state, the DTensor stream."""
    dp, tp = place.coordinate if len(place.coordinate) == 2 else (0, place.coordinate[0])
    key = digest_of("tp", tp)
    seed = 1000 + dp + tp if bug else 1000 + tp
    streams = [
        [Observation(digest_of(name, seed), key, key)]
        for name in ("torch.cpu", "random", "numpy", "state", "cuda:0")
    ]
    streams.append([Observation(digest_of("model-parallel", seed + 2718), None, key)])
    streams.append([Observation(digest_of("dtensor", 7, 4), digest_of("whole mesh"), 0)])
    return streams


def measure(world: int, bug: bool) -> dict[str, object]:
    places = grid((world // TP, TP))
    traffic = Traffic()
    started = time.perf_counter()
    outcomes = simulate(places, lambda p: judging(observations(p, bug), p, str), traffic)
    seconds = time.perf_counter() - started
    failed = [i for i, judged in enumerate(outcomes[0].judged) if not judged.ok]
    words = sorted(traffic.words)
    return {
        "world": world,
        "job": "seed + dp + tp (bug)" if bug else "sound",
        "failed checks": failed,
        "collectives": traffic.collectives,
        "words per rank, median": words[len(words) // 2],
        "words per rank, max": words[-1],
        "bytes per rank, max": 8 * words[-1],
        "simulated in (s)": round(seconds, 1),
    }


FAKE_GROUP_PROBE = """
import json, sys, tracemalloc
sys.path.insert(0, sys.argv[2])
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore
from scale_probe import measure
import hwrng

world = int(sys.argv[1])
dist.init_process_group("fake", store=FakeStore(), rank=world // 2 + 3, world_size=world)
mesh = init_device_mesh("cpu", (world // 8, 8), mesh_dim_names=("dp", "tp"))
hwrng.manual_seed(1234, mesh, sharded_dims=["tp"], platform="cpu")
hwrng.verify()
tracemalloc.start()
report, cost = measure(hwrng.verify)
print(json.dumps({**cost, "ok": report.ok}))
"""


def fake_group(world: int) -> dict[str, object]:
    """One rank of ``world`` running the real verify under the fake process group."""
    tests = Path(__file__).resolve().parents[1] / "tests"
    done = subprocess.run(
        [sys.executable, "-c", FAKE_GROUP_PROBE, str(world), str(tests)],
        capture_output=True,
        text=True,
        check=True,
    )
    probe = json.loads(done.stdout)
    return {
        "world": world,
        "job": "sound, one real rank (fake process group)",
        "peak bytes": probe["peak_bytes"],
        "collective bytes": probe["collective_bytes"],
        "collectives": probe["collectives"],
        "ok": probe["ok"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worlds", default="256,4096,16384,100000")
    args = parser.parse_args()
    rows, probes = [], []
    for world in (int(w) for w in args.worlds.split(",")):
        probes.append(fake_group(world))
        print(json.dumps(probes[-1]), flush=True)
        for bug in (False, True):
            rows.append(measure(world, bug))
            print(json.dumps(rows[-1]), flush=True)
    header = machine()
    day = datetime.date.today().isoformat()
    RESULTS.mkdir(exist_ok=True)
    document = {**header, "simulated": rows, "fake process group": probes}
    (RESULTS / f"verify-scale-{day}.json").write_text(json.dumps(document, indent=2))
    lines = [f"# verify per rank from 256 to 100,000 ranks ({day})", ""]
    lines += [f"- {key}: {value}" for key, value in header.items()]
    for title, table in (
        ("Every rank simulated, real values", rows),
        ("Fake process group", probes),
    ):
        columns = list(table[0])
        lines += ["", f"## {title}", ""]
        lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in table]
    (RESULTS / f"verify-scale-{day}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""Rules for the invariant ops: on this backend's device, the committed known answers, bit for bit.

``hwrng.invariant``'s values are a pure function of (seed, position, global
index) under a versioned contract. The known answers
(``hwrng_conformance/invariant_kat.json``) were made by an independent
reference written from the contract alone (``invariant_reference``: Python
integers and NumPy float32 scalars). Each rule fills every shard of several
shapes and shardings on the backend's device, the generator positioned by the
backend's counter view, and compares every bit. Passing proves on this
device what hwrng promises everywhere: the same numbers as any other device,
at any sharding. float32, float16 and bfloat16 ops run with float64 refused,
under every profile.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from typing import Any

import numpy as np
import pytest
import torch
from torch.distributed.tensor import Replicate, Shard

import hwrng
from hwrng import invariant
from hwrng_conformance.helpers import refuse_float64
from hwrng_conformance.invariant_reference import KAT_PATH, narrow_bits
from hwrng_conformance.profiles import Profile

KNOWN: dict[str, Any] = json.loads(KAT_PATH.read_text(encoding="utf-8"))
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
_INTS = {torch.float32: torch.int32, torch.float64: torch.int64}
GROUPS = sorted({(case["op"], case["dtype"]) for case in KNOWN["cases"]})

#: (global shape, mesh, placements) of 96 elements: whole, uneven, 2-D meshes, tiny and empty
#: shards; each case takes three of them in turn
LAYOUTS: list[tuple[tuple[int, ...], tuple[int, ...], tuple[Any, ...]]] = [
    ((96,), (1,), (Replicate(),)),
    ((96,), (5,), (Shard(0),)),
    ((12, 8), (3,), (Shard(0),)),
    ((12, 8), (2, 2), (Shard(1), Shard(0))),
    ((4, 4, 6), (2, 3), (Shard(2), Shard(0))),
    ((12, 8), (7,), (Shard(1),)),
]


def _bits(values: torch.Tensor) -> list[int]:
    values = values.cpu()
    if values.dtype == torch.bool:
        return values.to(torch.int64).reshape(-1).tolist()
    width = values.element_size() * 8
    ints = values.view(_INTS.get(values.dtype, torch.int16)).to(torch.int64).reshape(-1).tolist()
    return [v & ((1 << width) - 1) for v in ints]


def _fill(case: dict[str, Any], local: torch.Tensor, spec: hwrng.ShardSpec, **where: Any) -> None:
    op = case["op"]
    if op == "uniform":
        invariant.uniform_(local, spec, case["low"], case["high"], **where)
    elif op == "normal":
        invariant.normal_(local, spec, case["mean"], case["std"], **where)
    elif op == "trunc_normal":
        invariant.trunc_normal_(
            local, spec, case["mean"], case["std"], case["a"], case["b"], **where
        )
    else:
        invariant.bernoulli_(local, spec, case["p"], **where)


def _specs(case_number: int) -> list[hwrng.ShardSpec]:
    """Every shard of the three layouts case ``case_number`` takes."""
    chosen = [LAYOUTS[(case_number + k) % len(LAYOUTS)] for k in range(3)]
    return [
        hwrng.ShardSpec(shape, mesh, placements, coordinate)
        for shape, mesh, placements in chosen
        for coordinate in itertools.product(*(range(size) for size in mesh))
    ]


def _check_case(platform: hwrng.Platform, case: dict[str, Any], number: int, refuse: bool) -> None:
    generator = platform.generator()
    seed, position = case["seed"], case["position"]
    dtype = torch.float32 if case["op"] == "bernoulli" else DTYPES[case["dtype"]]
    (_, values), *far = case["runs"]
    expected_all = [int(v, 16) for v in values]
    checks: list[tuple[hwrng.ShardSpec, list[int] | None]] = [
        (spec, None) for spec in _specs(number)
    ]
    # rows of a (2**58, 8) tensor: global indices past 2**32 blocks (the counter's high words)
    for start, run in far:
        spec = hwrng.ShardSpec((2**58, 8), (2**58,), (Shard(0),), (start // 8,))
        checks.append((spec, [int(v, 16) for v in run]))
    for spec, run in checks:
        local = torch.empty(spec.local_shape, dtype=dtype, device=platform.device())
        platform.set_seed_offset(generator, seed, position)
        guard = refuse_float64() if refuse else contextlib.nullcontext()
        with guard:
            _fill(case, local, spec, generator=generator, platform=platform)
        assert platform.get_seed_offset(generator) == (
            seed,
            position + invariant.advance(spec),
        ), f"{case['op']}: the generator did not end one advance past the op"
        if run is None:
            index = invariant.global_index(spec).reshape(-1).tolist()
            expected = [expected_all[i] for i in index]
        else:
            expected = run
        got = _bits(local.bool() if case["op"] == "bernoulli" else local)
        where = f"{case['op']} {case['dtype']} {spec.shape} {spec.placements} {spec.coordinate}"
        assert got == expected, f"{where}: differs from the known answers"


@pytest.mark.parametrize("group", GROUPS, ids=[f"{op}-{dtype}" for op, dtype in GROUPS])
def test_invariant_known_answers(
    platform: hwrng.Platform,
    profile: Profile,
    record_property: Any,
    group: tuple[str, str],
) -> None:
    record_property("hwrng_profile", profile.label)
    dtype = group[1]
    if dtype == "float64" and not profile.float64:
        pytest.skip(f"the {platform.name} platform lacks capability 'float64' ({profile.label})")
    for number, case in enumerate(KNOWN["cases"]):
        if (case["op"], case["dtype"]) == group:
            _check_case(platform, case, number, refuse=dtype != "float64")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_invariant_dropout_known_answers(
    platform: hwrng.Platform, profile: Profile, record_property: Any, dtype: str
) -> None:
    """Dropout(p = 0.1) keeps where Bernoulli(0.9) is true and scales by 1/0.9 in the dtype."""
    record_property("hwrng_profile", profile.label)
    case = next(c for c in KNOWN["cases"] if c["op"] == "bernoulli" and c["p"] == 0.9)
    seed, position = case["seed"], case["position"]
    kept = [int(v, 16) for v in case["runs"][0][1]]
    scale = narrow_bits(np.float32(1.0 / 0.9), dtype)
    generator = platform.generator()
    for shape, mesh, placements in LAYOUTS[:4]:
        for coordinate in itertools.product(*(range(size) for size in mesh)):
            spec = hwrng.ShardSpec(shape, mesh, placements, coordinate)
            ones = torch.ones(spec.local_shape, dtype=DTYPES[dtype], device=platform.device())
            platform.set_seed_offset(generator, seed, position)
            with refuse_float64():
                out = invariant.dropout(ones, spec, 0.1, generator=generator, platform=platform)
            index = invariant.global_index(spec).reshape(-1).tolist()
            assert _bits(out) == [scale if kept[i] else 0 for i in index], (shape, coordinate)

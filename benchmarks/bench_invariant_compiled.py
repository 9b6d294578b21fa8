"""An experiment, not shipped: the invariant ops' CPU path compiled by torch.compile (inductor).

The generic path is a few hundred tensor ops a batch of Philox blocks; each moves its operands
through the cache, so on the CPU it costs several times torch's own generators (see
``bench_invariant_load.py``). A compiler that fuses them keeps every value in registers. This
script measures what inductor would give, on one thread, against the eager path and torch's
``uniform_``/``normal_`` in the same run, and checks the compiled values bit for bit against the
eager ones (the contract's arithmetic must survive the C++ compiler's flags):

* the Philox rounds alone (integer operations: exact by construction);
* the float32 normal: the rounds, then hwrng's ``ln``, ``sqrt`` and ``sin``/``cos``.

Usage: ``python3 benchmarks/bench_invariant_compiled.py`` (needs a C++ compiler; the first call
of each function compiles, about a minute).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from unittest import mock

import torch
from _timing import machine

from hwrng import _philox
from hwrng._philox import _distributions as generic
from hwrng._philox import _math32 as m32
from hwrng._philox import _operands
from hwrng._philox._bits import MASK32, Rounds, layout_words

BATCH = 1 << 14  # blocks
_M0, _M1, _W0, _W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85


def philox_rounds(block: torch.Tensor, k0: int, k1: int, c2: int, c3: int) -> torch.Tensor:
    """Philox4x32-10 of the blocks in the counter layout, words in the rows ``w0, w2, w1, w3``."""
    x0, x1 = block & MASK32, block >> 32
    x2, x3 = torch.full_like(block, c2), torch.full_like(block, c3)
    for r in range(10):
        p0, p1 = x0 * _M0, x2 * _M1
        key0, key1 = (k0 + r * _W0) & MASK32, (k1 + r * _W1) & MASK32
        x0, x1, x2, x3 = (
            ((p1 >> 32) & MASK32) ^ x1 ^ key0,
            p1 & MASK32,
            ((p0 >> 32) & MASK32) ^ x3 ^ key1,
            p0 & MASK32,
        )
    return torch.stack([x0, x2, x1, x3])


def normal_values(words: torch.Tensor) -> torch.Tensor:
    """The float32 normal values of a batch's words (as the generic path's table), ``(n, 4)``."""
    u1 = words[:2].add(1).to(torch.float32).mul(2.0**-32)
    radius = m32.sqrt(m32.ln(u1).mul(-2.0))
    sin, cos = m32.sincos_turns(words[2:].bitwise_right_shift(8).bitwise_and(0xFFFFFF))
    z = torch.cat([radius * cos, radius * sin]).add(0.0)  # + mean 0, as the table; lanes 0, 2, 1, 3
    return torch.stack([z[0], z[2], z[1], z[3]], dim=1)


def median_ms(body: Callable[[], object], repeats: int = 5) -> float:
    body()
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        body()
        times.append(time.thread_time() - start)
    return statistics.median(times) * 1e3


def main() -> int:
    torch.set_num_threads(1)
    seed, position = 12345, 4096
    k0, k1 = seed & MASK32, seed >> 32
    c2, c3 = position & MASK32, (position >> 32) | 0x80000000
    blocks = 1 << 22  # 2**24 values
    starts = range(0, blocks, BATCH)
    rounds = Rounds(k0, k1, torch.device("cpu"))
    compiled_rounds = torch.compile(philox_rounds, dynamic=False)
    # the operands as Python numbers, which the compiler traces as constants
    with mock.patch.object(_operands, "_in_a_mode", return_value=True):
        compiled_normal = torch.compile(
            lambda block: normal_values(philox_rounds(block, k0, k1, c2, c3)), dynamic=False
        )

        def eager_words() -> None:
            for start in starts:
                layout_words(
                    seed, position, rounds.block_range(start, start + BATCH), rounds=rounds
                )

        def fused_words() -> None:
            for start in starts:
                compiled_rounds(rounds.block_range(start, start + BATCH), k0, k1, c2, c3)

        out = torch.empty(blocks * 4)
        index = _philox.ShardIndices((torch.arange(blocks * 4),), (blocks * 4,))

        def eager_normal() -> None:
            generic.normal(seed, position, index, torch.float32, out=out)

        def fused_normal() -> None:
            for start in starts:
                values = compiled_normal(rounds.block_range(start, start + BATCH))
                out[start * 4 : (start + BATCH) * 4].copy_(values.view(-1))

        began = time.perf_counter()
        probe = rounds.block_range(0, BATCH)
        words = compiled_rounds(probe, k0, k1, c2, c3)
        exact = layout_words(seed, position, probe, rounds=rounds).bitwise_and(MASK32)
        same_words = torch.equal(words, exact)
        values = compiled_normal(probe)
        eager = generic.normal(seed, position, torch.arange(BATCH * 4), torch.float32)
        same_values = torch.equal(values.view(-1).view(torch.int32), eager.view(torch.int32))
        compile_s = time.perf_counter() - began
        x = torch.empty(blocks * 4)
        results = {
            "torch uniform_": median_ms(x.uniform_),
            "torch normal_": median_ms(x.normal_),
            "eager Philox words": median_ms(eager_words),
            "compiled Philox words": median_ms(fused_words),
            "eager normal (hwrng generic path)": median_ms(eager_normal),
            "compiled normal": median_ms(fused_normal),
        }
    print(machine())
    print(f"compiling and checking took {compile_s:.0f} s (both functions)")
    print(
        f"compiled words equal the eager ones: {same_words}; compiled normal values: {same_values}"
    )
    for name, ms in results.items():
        print(f"  {name:36} {ms:8.1f} ms CPU time ({ms * 1e6 / (blocks * 4):5.2f} ns/value)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

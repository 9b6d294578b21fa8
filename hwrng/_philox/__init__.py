"""Counter-based random numbers: each value a pure function of (seed, position, element index).

The family's modules, each importing only those above it in this list:

* ``_contract``: the contract's version, and whether this process drew under it;
* ``_parameters``: argument checks (seeds, positions, index tensors, dtypes,
  distribution parameters);
* ``_operands``: the generic path's constants in the form each device takes
  fastest (kept 0-dim tensors on the CPU);
* ``_bits``: Philox4x32-10 and the counter layout;
* ``_index``: global flat indices and a shard's per-dim description of them;
* ``_math32``: float32 ``ln``, ``sin``/``cos`` of a turn and ``Phi^-1`` (the
  float32, float16 and bfloat16 results), the same bits on every device;
* ``_math``: their float64 versions (float64 results), and ``Phi`` on the host;
* ``_distributions``: the generic path (uniform, normal, Bernoulli, truncated
  normal, dropout) in plain torch ops;
* ``_triton``: the fused CUDA kernel of the same five ops;
* ``_numba_kernels`` and ``_compiled``: the same ops on the CPU, compiled by
  numba where it is installed (``_compiled`` is the typed face; numba is
  imported on the first op on the CPU, never at import);
* ``_choose``: the ops as hwrng calls them, the one place that picks the fused
  kernel, the compiled CPU kernels or the generic path.
"""

from __future__ import annotations

from hwrng._philox._bits import block_words, philox4x32_10
from hwrng._philox._choose import (
    Draw,
    bernoulli_mask,
    check_cpu_path,
    cpu_path,
    drawer,
    dropout,
    normal,
    trunc_normal,
    uniform,
)
from hwrng._philox._contract import CONTRACT, CONTRACT_VERSION
from hwrng._philox._index import (
    Indices,
    ShardIndices,
    check_dim_indices,
    flat_index,
    index_shape,
)
from hwrng._philox._parameters import check_parameters

__all__ = [
    "CONTRACT",
    "CONTRACT_VERSION",
    "Draw",
    "Indices",
    "ShardIndices",
    "bernoulli_mask",
    "block_words",
    "check_cpu_path",
    "check_dim_indices",
    "check_parameters",
    "cpu_path",
    "drawer",
    "dropout",
    "flat_index",
    "index_shape",
    "normal",
    "philox4x32_10",
    "trunc_normal",
    "uniform",
]

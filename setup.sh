#!/usr/bin/env bash
# Set up hwrng for development on this machine: torch first (the CPU build,
# pinned, only when no torch is installed -- an unpinned torch pulls several GB
# of CUDA packages), then every distribution of the repository in editable mode,
# in one pip command: hwrng (with its test and dev tools; the test extra brings
# numba, for the invariant ops' compiled CPU path), the conformance suite
# and the CUDA and NPU backends (never torch-npu: without Ascend CANN it breaks
# `import torch` itself).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    echo "setup: no torch found; installing torch==2.13.0"
    "$PYTHON" -m pip install --quiet --disable-pip-version-check torch==2.13.0
fi
"$PYTHON" -m pip install --quiet --disable-pip-version-check \
    -e ".[test,dev]" -e ./conformance -e ./backends/cuda -e ./backends/npu
echo "setup: hwrng $("$PYTHON" -c 'import hwrng; print(hwrng.__version__)') with torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"

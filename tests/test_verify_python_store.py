"""hwrng.verify over a rendezvous store written in Python (2 real gloo ranks).

torch's C++ side of a ``torch.distributed.Store`` subclass has no ``clone`` and no
``delete_key``. verify then meets its peers through the store itself, with the store's
own timeout (it failed every call: "could not meet the other ranks ... Tried to call
pure virtual function clone"), and, unable to remove its keys, says so once in a
warning and goes on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RANKS = Path(__file__).with_name("python_store_ranks.py")


def test_verify_passes_over_a_python_store_and_warns_once_of_its_keys(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(RANKS), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    for seen in ranks:
        assert all(seen["passed"]), seen
        (warning,) = seen["warnings"]  # once a process, not once a call
        assert warning.startswith(
            "hwrng.verify cannot remove its keys from the rendezvous store (PrefixStore: "
        ), warning
        assert warning.endswith("its calls leave 2 to 4 keys each behind"), warning
    keys = ranks[0]["keys"]
    assert keys[-1] >= keys[0] + len(keys) - 1, f"the keys it could not remove stay: {keys}"

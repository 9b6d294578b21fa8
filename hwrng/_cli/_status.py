"""The exit statuses of the ``hwrng`` command line, and the words ``--json`` gives them."""

from __future__ import annotations

import json

__all__ = [
    "EXIT_BAD_ARGUMENTS",
    "EXIT_BROKEN_PIPE",
    "EXIT_CRASHED",
    "EXIT_FAILED",
    "EXIT_PASSED",
    "STATUS_WORDS",
    "status_document",
]

#: ``hwrng check``'s exit statuses (``hwrng plan --preset`` uses the first three).
EXIT_PASSED, EXIT_FAILED, EXIT_BAD_ARGUMENTS, EXIT_CRASHED = 0, 1, 2, 3
#: The word ``--json`` gives each status.
STATUS_WORDS = {
    EXIT_PASSED: "passed",
    EXIT_FAILED: "failed",
    EXIT_BAD_ARGUMENTS: "bad arguments",
    EXIT_CRASHED: "crashed",
}
#: The exit status when the reader of stdout left early (``hwrng plan ... | head``):
#: 128 + SIGPIPE, what a shell reports for a command that SIGPIPE ended (``seq 1e6 | head``).
EXIT_BROKEN_PIPE = 141


def status_document(status: int, error: str) -> str:
    """The JSON document a command given ``--json`` prints when it cannot run."""
    return json.dumps(
        {"ok": False, "status": STATUS_WORDS[status], "exit_status": status, "error": error}
    )

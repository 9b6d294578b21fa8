"""Which commit a report's run is of, where the copy that runs it has no ``.git``.

A GPU machine gets a copy of the working tree -- tracked files and untracked
ones git does not ignore -- without ``.git``. ``--prepare`` therefore records,
beside the wheelhouse it builds, the commit, whether the tree had uncommitted
changes, and a digest of every file of the tree. On the machine the run reads
the record and hashes the same files again, so the report says the commit and
whether the tree that ran is the one recorded (else how many files differ, and
which).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

#: The record's file name, inside the wheelhouse (which travels with the tree).
RECORD = "hwrng-commit.json"
#: How many differing files the report names.
NAMED = 5


def _git(root: Path, *arguments: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *arguments], capture_output=True, text=True, check=True
    )
    return done.stdout


def tree_files(root: Path) -> list[str]:
    """The files that travel with the tree: tracked, and untracked but not ignored."""
    listed = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return sorted({name for name in listed.split("\0") if name and (root / name).is_file()})


def digest(path: Path) -> str:
    """A file's SHA-256, in hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record(root: Path) -> dict[str, Any]:
    """The checkout's commit, whether it has uncommitted changes, and each file's digest."""
    changed = _git(root, "status", "--porcelain", "--untracked-files=no").strip()
    return {
        "commit": _git(root, "rev-parse", "HEAD").strip(),
        "uncommitted changes": bool(changed),
        "recorded": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "files": {name: digest(root / name) for name in tree_files(root)},
    }


def write(root: Path, wheelhouse: Path) -> dict[str, Any]:
    """Record the checkout into ``wheelhouse``; return the record."""
    found = record(root)
    (wheelhouse / RECORD).write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    return found


def differing(root: Path, files: dict[str, str]) -> list[str]:
    """The recorded files that are missing from ``root`` or differ from their digests."""
    return [
        name
        for name, wanted in files.items()
        if not (root / name).is_file() or digest(root / name) != wanted
    ]


def named(saved: dict[str, Any]) -> str:
    """A record's commit, ``+ uncommitted changes`` where the tree had them."""
    return str(saved["commit"]) + (" + uncommitted changes" if saved["uncommitted changes"] else "")


def describe(saved: dict[str, Any], root: Path) -> str:
    """The commit as the report gives it, and whether the tree at ``root`` is the one recorded."""
    commit = named(saved)
    wrong = differing(root, dict(saved["files"]))
    said = f"{commit} (recorded by --prepare, {saved['recorded']}"
    if not wrong:
        return f"{said}; this tree is the one recorded)"
    names = ", ".join(wrong[:NAMED]) + (", ..." if len(wrong) > NAMED else "")
    return f"{said}; {len(wrong)} file(s) of this tree differ from it: {names})"


def commit(root: Path, wheelhouse: Path, environment: dict[str, str]) -> str:
    """The commit of the tree at ``root``, by the first of these that knows it.

    ``git`` where the tree has its ``.git``; ``HWRNG_COMMIT`` in ``environment``;
    the record ``--prepare`` left in ``wheelhouse``; else unknown, saying why.
    """
    if shutil.which("git") and (root / ".git").exists():
        try:
            head = _git(root, "rev-parse", "HEAD").strip()
            changed = _git(root, "status", "--porcelain", "--untracked-files=no").strip()
        except (OSError, subprocess.CalledProcessError):
            pass
        else:
            return head + (" + uncommitted changes" if changed else "")
    if environment.get("HWRNG_COMMIT"):
        return environment["HWRNG_COMMIT"] + " (from HWRNG_COMMIT)"
    saved = wheelhouse / RECORD
    if saved.is_file():
        try:
            return describe(json.loads(saved.read_text(encoding="utf-8")), root)
        except (ValueError, KeyError, TypeError, OSError) as error:
            return f"unknown ({saved} cannot be read: {type(error).__name__}: {error})"
    return (
        "unknown (no .git, no HWRNG_COMMIT, and no record of --prepare in "
        f"{wheelhouse.name}/{RECORD})"
    )

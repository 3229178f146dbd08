"""Which code is running: the git commit of the checkout, or the commit that a copied source
names (a GPU lease's working tree, whose ``.git``, if any, is not the copied one's:
scripts/gpu_lease.sh sets ``MULTILAB_SOURCE_COMMIT``). Records and MLflow tags both read it
here, so that a run and its record never name different commits."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

SOURCE_COMMIT_ENV = "MULTILAB_SOURCE_COMMIT"


def _git(cwd: Path, *args: str, strip: bool = True) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() if strip else done.stdout


def source_state(root: Path | None = None) -> dict[str, Any]:
    """The commit and whether ``src`` differs from it (None outside a git checkout); a
    named commit is marked ``commit_from: env`` and its cleanliness is unknown."""
    if os.environ.get(SOURCE_COMMIT_ENV):
        return {"commit": os.environ[SOURCE_COMMIT_ENV], "dirty": None, "commit_from": "env"}
    cwd = root or Path.cwd()
    commit = _git(cwd, "rev-parse", "HEAD")
    status = _git(cwd, "status", "--porcelain", "--untracked-files=no", "--", "src") if commit \
        else None
    return {"commit": commit, "dirty": bool(status) if commit else None}


def source_commit(root: Path | None = None) -> str | None:
    """The commit alone (no ``git status``: MLflow tags it on every run)."""
    if os.environ.get(SOURCE_COMMIT_ENV):
        return os.environ[SOURCE_COMMIT_ENV]
    return _git(root or Path.cwd(), "rev-parse", "HEAD")


def tracked_by_git(folder: Path) -> bool:
    """Whether git tracks any file under ``folder`` (False outside a checkout, or for a
    folder not there yet): the committed records folder, which a smoke run must not touch."""
    folder = Path(folder)
    if not folder.is_dir():
        return False
    return bool(_git(folder, "ls-files", "--", "."))


def uncommitted_files(folder: Path) -> list[str] | None:
    """Files under ``folder`` that git does not track or that differ from the commit (None
    outside a git checkout). The generated study documents are checked against the committed
    records on a fresh clone, so a document written from a record not yet committed fails
    there: ``study report`` names such records."""
    if not folder.is_dir() or _git(folder, "rev-parse", "HEAD") is None:
        return None
    # unstripped: a line's status columns may start with a space (" M path")
    listed = _git(folder, "status", "--porcelain", "--untracked-files=all", "--", ".",
                  strip=False)
    if listed is None:
        return None
    return sorted(line[3:] for line in listed.splitlines() if line.strip())

"""Atomic writes (multilab.files): a file or folder appears whole, or the old one stays."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from multilab.files import atomic_open, replace_dir, write_json, write_text


def test_write_text_creates_folders_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "table.md"
    assert write_text(path, "é\n") == path
    assert path.read_bytes() == "é\n".encode()
    assert [p.name for p in path.parent.iterdir()] == ["table.md"]


def test_json_has_one_format(tmp_path: Path) -> None:
    path = write_json(tmp_path / "x.json", {"b": 1, "a": {"d": 2, "c": 3}})
    assert path.read_text() == json.dumps({"a": {"c": 3, "d": 2}, "b": 1}, indent=2) + "\n"


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = write_text(tmp_path / "metrics.json", "old")
    with pytest.raises(RuntimeError), atomic_open(path) as handle:
        handle.write("half of the new")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_binary_files_too(tmp_path: Path) -> None:
    with atomic_open(tmp_path / "figure.png", "wb") as handle:
        handle.write(b"\x89PNG")
    assert (tmp_path / "figure.png").read_bytes() == b"\x89PNG"


def test_replace_dir_swaps_a_whole_folder(tmp_path: Path) -> None:
    target, staging = tmp_path / "spaces", tmp_path / ".spaces.tmp"
    for folder, content in ((target, "old"), (staging, "new")):
        folder.mkdir()
        (folder / "knn.pt").write_text(content)
    (target / "stale").write_text("only in the old folder")
    replace_dir(staging, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spaces"]
    assert sorted(p.name for p in target.iterdir()) == ["knn.pt"]
    assert (target / "knn.pt").read_text() == "new"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    replace_dir(fresh, tmp_path / "created")  # no target yet: a plain rename
    assert (tmp_path / "created").is_dir() and not fresh.exists()


def test_a_killed_writer_s_temporary_is_removed_by_the_next_write(tmp_path: Path) -> None:
    """SIGKILL runs no cleanup: its ``.<name>.<pid>.tmp`` stays until the same file is
    written again; a live writer's temporary (another process) is left alone."""
    import subprocess

    from multilab.files import copy_file

    ended = subprocess.Popen(["true"])
    ended.wait()
    path = tmp_path / "metrics.json"
    stale = tmp_path / f".metrics.json.{ended.pid}.tmp"
    live = tmp_path / f".metrics.json.{os.getppid()}.tmp"
    other = tmp_path / f".other.json.{ended.pid}.tmp"  # another file's: not this write's
    for leftover in (stale, live, other):
        leftover.write_text("half")
    write_json(path, {"a": 1})
    assert not stale.exists() and live.exists() and other.exists()
    assert copy_file(path, tmp_path / "copy.json").read_text() == path.read_text()

"""The GPU server's image, built here and checked from inside: scripts/build_image.sh builds the
Dockerfile from a fresh clone of HEAD (CPU torch, so no GPU is needed) and runs the default
study on the smoke profile in the image; its report must hold every study row with finite
scores. That test is slow (tens of minutes: the first run also makes the Debian base image)
and skipped where no engine can build the image (neither a Docker daemon nor buildah run as
root). The script's bad arguments are checked everywhere, in a second each."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

def _image_engine() -> str | None:
    """The engine scripts/build_image.sh would pick here, or None when it has none."""
    if shutil.which("docker"):
        info = subprocess.run(["docker", "info"], capture_output=True, check=False)
        if info.returncode == 0:
            return "docker"
    if shutil.which("buildah") and os.geteuid() == 0:  # the base needs debootstrap (root)
        return "buildah"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_image_engine() is None, reason="no Docker daemon, and no buildah as root")
def test_image_builds_and_runs_the_smoke_study(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/build_image.sh"), "--torch", "cpu", "--tag",
         "multilab-cpu-test", "--checks", "help,smoke", "--out", str(out)],
        capture_output=True, text=True, check=False, timeout=3 * 3600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"with {_image_engine()} in" in done.stdout  # the script says which engine built it
    study = yaml.safe_load((ROOT / "params.yaml").read_text())["study"]
    table = pd.read_csv(out / "table1.csv").set_index("modification")
    assert list(table.index) == study
    assert all(math.isfinite(table.loc[row, "mu_mean"]) for row in study)
    assert (table["n_seeds"] == 1).all()


NO_ENGINE = ["--engine", "not-an-engine"]


@pytest.mark.parametrize(("args", "named"), [
    (["--torch", "rocm"], "bad --torch 'rocm' (valid: cuda, cpu)"),
    (["--engine", "podman"], "bad --engine 'podman' (valid: docker, buildah)"),
    (["--checks", "help,lint"], "bad check 'lint' in --checks (valid: help, smoke, tests, none)"),
    (["--fast"], "unknown argument '--fast'"),
    # an empty value was the default (auto torch, no checks) and a flag taken as --tag's
    # value started a build tagged "--no-build"; the bad --engine after it keeps a regression
    # from starting a build here
    (["--torch", "", *NO_ENGINE], "--torch needs a value"),
    (["--checks", "", *NO_ENGINE], "--checks needs a value"),
    (["--tag", "--no-build", *NO_ENGINE], "--tag needs a value"),
    (["--torch"], "--torch needs a value"),
    # mkdir's own error, exit 1, after the work folder was made (and left)
    (["--out", "/proc/version/out", *NO_ENGINE],
     "--out '/proc/version/out': not a folder it can make ('/proc/version' is no writable "
     "folder)"),
])
def test_bad_arguments_stop_in_one_line(args: list[str], named: str) -> None:
    done = subprocess.run(["bash", str(ROOT / "scripts/build_image.sh"), *args],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"build_image.sh: {named} (--help lists the options)"]
    assert done.stdout == ""


@pytest.mark.skipif(_image_engine() is None, reason="no Docker daemon, and no buildah as root")
def test_checks_of_an_image_not_built_stop_in_one_line(tmp_path: Path) -> None:
    """``--no-build`` on a tag never built was the engine's own error, exit 125; then its
    empty work folder was left in TMPDIR."""
    done = subprocess.run(["bash", str(ROOT / "scripts/build_image.sh"), "--no-build", "--tag",
                           "multilab-never-built", "--checks", "help"],
                          capture_output=True, text=True, check=False, timeout=60,
                          env=os.environ | {"TMPDIR": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "build_image.sh: no image 'multilab-never-built' to check (build it first)"]
    assert list(tmp_path.iterdir()) == []


def _docker_daemon_answers() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(_docker_daemon_answers(), reason="a Docker daemon answers here")
def test_docker_named_without_its_daemon_stops_before_the_clone(tmp_path: Path) -> None:
    """``--engine docker`` where no daemon answers cloned the repository and started the
    build, whose log's last lines ("Cannot connect to the Docker daemon") came with exit 1."""
    done = subprocess.run(["bash", str(ROOT / "scripts/build_image.sh"), "--engine", "docker",
                           "--torch", "cuda", "--checks", "none", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, check=False, timeout=120,
                          env=os.environ | {"TMPDIR": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "build_image.sh: --engine docker: no Docker daemon answers here (docker info fails); "
        "start it, or --engine buildah (--help lists the options)"]
    assert done.stdout == "" and list(tmp_path.iterdir()) == []

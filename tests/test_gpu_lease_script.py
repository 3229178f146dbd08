"""scripts/gpu_lease.sh without a GPU: `run` starts one runner per `[STUDY:]ROWS@SEEDS` in a
session of its own, in a copy of the checkout, and returns at its deadline with what finished
packed; the runners outlive it, and `collect` (a next call on the same machine) waits for
them and packs every record. The runner is a stand-in `python3` that writes a record."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow

#: ``python3 -m multilab --set paths.mlruns=… study run STUDY --rows ROWS --seeds S --stack K``:
#: writes one record after FAKE_SECONDS_<ROWS> seconds, in the directory it was started in
FAKE_RUNNER = """#!/usr/bin/env bash
study=$7 rows=$9 seed=${11}
delay_var="FAKE_SECONDS_$rows"
sleep "${!delay_var:-0}"
mkdir -p "results/$study/$rows/seed$seed"
echo '{"kind": "train"}' > "results/$study/$rows/seed$seed/train.json"
echo "trained $study $rows $seed"
"""


def _project(tmp_path: Path) -> Path:
    """A checkout as the GPU machine gets it: the script, gpu_in.tar.xz, no .git."""
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    (project / "scripts" / "gpu_lease.sh").write_text((ROOT / "scripts/gpu_lease.sh").read_text())
    staged = tmp_path / "stage" / "gpu_in"
    (staged / "table-a" / "corpora").mkdir(parents=True)
    (staged / "table-a" / "corpora" / "train.txt").write_text("a verse\n")
    (staged / "bible").mkdir()
    (staged / "bible" / "3.tsv").write_text("1\t1\t1\tIn the beginning\n")
    (staged / "COMMIT").write_text("0123abc\n")
    subprocess.run(["tar", "-cJf", str(project / "gpu_in.tar.xz"), "-C", str(staged.parent),
                    "gpu_in"], check=True)
    return project


def _lease(project: Path, tmp_path: Path, *args: str, out: str, deadline: int
           ) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(FAKE_RUNNER)
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / out),
           "LEASE_DIR": str(tmp_path / "lease"), "BENCH": "0", "STACK": "1",
           "DEADLINE": str(deadline), "FAKE_SECONDS_slow": "8"}
    return subprocess.run(["bash", "scripts/gpu_lease.sh", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=60)


def _packed(out: Path) -> set[str]:
    with tarfile.open(out / "records.tgz") as packed:
        return {name for name in packed.getnames() if name.startswith("results/")}


def test_runners_outlive_the_call_and_a_collect_call_packs_them(tmp_path: Path) -> None:
    project = _project(tmp_path)
    started = _lease(project, tmp_path, "run", "table-a", "fast@42", "table-b:slow@43",
                     out="out1", deadline=2)
    assert started.returncode == 0, started.stderr
    assert "source commit: 0123abc" in (tmp_path / "out1" / "lease.txt").read_text()
    assert "runners still training" in started.stdout
    assert _packed(tmp_path / "out1") == {"results/table-a/fast/seed42/train.json"}
    slow = int((tmp_path / "lease" / "pids").read_text().split()[1])
    assert os.getsid(slow) == slow  # a session of its own: the call's end does not stop it
    work = tmp_path / "lease" / "work"
    assert (work / "artifacts/studies/table-a/corpora/train.txt").read_text() == "a verse\n"
    assert (work / "data/bible/3.tsv").is_file()

    collected = _lease(project, tmp_path, "collect", "table-a", out="out2", deadline=30)
    assert collected.returncode == 0, collected.stderr
    assert "still training" not in collected.stdout
    assert (tmp_path / "lease" / "runner-2.log").read_text().endswith("runner exit 0\n")
    assert _packed(tmp_path / "out2") == {"results/table-a/fast/seed42/train.json",
                                          "results/table-b/slow/seed43/train.json"}
    assert not (project / "results").exists()  # the runners wrote into the copy only


def test_collect_on_a_fresh_machine_is_one_line_and_exit_2(tmp_path: Path) -> None:
    project = _project(tmp_path)
    collected = _lease(project, tmp_path, "collect", "table-a", out="out", deadline=5)
    assert collected.returncode == 2
    assert collected.stdout.strip() == "no runners on this machine (a fresh one?)"

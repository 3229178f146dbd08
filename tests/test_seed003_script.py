"""scripts/seed003_similarity.sh (Conneau et al. 2020 §5's one command): monolingual models per
edition,
English twice (the Fake-English stand-in), and `multilab similarity` for each pair, in a clone
on the smoke profile. The script runs for real; its eleven ``multilab`` commands are real
processes that skip their imports (the fork server, tests/zygote.py): what is tested is the
script, not the CLI's start-up, which the pipeline and process tests cover."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from multilab import tracking
from tests.helpers import ROOT, multilab_program, subprocess_env

SCRIPT = ROOT / "scripts" / "seed003_similarity.sh"


@pytest.mark.slow  # a clone, three monolingual models trained and two pairs compared
def test_the_script_trains_monolingual_models_and_compares_them(
        tmp_path: Path, preloaded_multilab: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(project)], check=True)
    script = project / "scripts" / SCRIPT.name
    script.write_bytes(SCRIPT.read_bytes())  # the working tree's version
    monkeypatch.delenv(tracking.URI_VARIABLE, raising=False)  # the clone's own store

    env = subprocess_env(preloaded=preloaded_multilab)
    env["MULTILAB"] = multilab_program(env)  # the script's own way to name its multilab

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(script), *args], cwd=project, env=env,
                              capture_output=True, text=True, timeout=900)

    assert run("--bogus").returncode == 2
    done = run("-p", "smoke", "--verses", "40", "s")
    assert done.returncode == 0, done.stderr[-3000:]
    for edition, seed in (("3", 42), ("3", 43), ("s", 42)):
        model = project / "artifacts" / "mono" / edition / "models" / "original" / f"seed{seed}"
        assert (model / "config.json").exists()
    pairs = {path.parent.name: json.loads(path.read_text())
             for path in (project / "reports" / "similarity").glob("*/similarity.json")}
    assert set(pairs) == {"3-s", "3-3"}
    assert pairs["3-3"]["dictionary"]["kind"] == "identity"
    assert pairs["3-s"]["dictionary"]["kind"] == "silver" and pairs["3-s"]["verses"] == 40
    assert not (project / "artifacts" / "models").exists()  # the workspace's study untouched

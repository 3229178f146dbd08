"""params.yaml survives `dvc exp run -S`: the file is written as DVC's rewrite
writes it, so a `-S` changes the value's line and nothing else, and a refused value is taken
back out of the file by the pipeline's first stage before any stage deletes an output."""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from dvc.utils.hydra import apply_overrides

from multilab.cli import main
from multilab.params_guard import ACCEPTED_NAME, EXP_BASELINE_ENV, MARKER_TEXT
from multilab.resolve import load_config
from tests.helpers import BIN, DVC, ROOT, clone_working_tree

PARAMS = ROOT / "params.yaml"


def _dvc_set(path: Path, *overrides: str) -> None:
    """What `dvc exp run -S` does to params.yaml before any stage runs (DVC's own code)."""
    apply_overrides(path, list(overrides))


def test_dvc_rewrites_params_yaml_as_it_is(tmp_path: Path) -> None:
    copy = tmp_path / "params.yaml"
    shutil.copy(PARAMS, copy)
    _dvc_set(copy, f"modification={yaml.safe_load(PARAMS.read_text())['modification']}")
    assert copy.read_bytes() == PARAMS.read_bytes()


def test_a_set_value_changes_only_its_line(tmp_path: Path) -> None:
    copy = tmp_path / "params.yaml"
    shutil.copy(PARAMS, copy)
    _dvc_set(copy, "modification=lang-pos", "train.epochs=7")
    changed = [line for line in difflib.unified_diff(
        PARAMS.read_text().splitlines(), copy.read_text().splitlines(), n=0, lineterm="")
        if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert len(changed) == 4, changed
    assert {line[1:].split("#")[0].strip() for line in changed if line[0] == "+"} == {
        "modification: lang-pos", "epochs: 7"}
    assert len(copy.read_text().splitlines()) == len(PARAMS.read_text().splitlines())


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """params.yaml accepted once by the check stage, as after a `dvc repro`."""
    shutil.copy(PARAMS, tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(EXP_BASELINE_ENV, raising=False)
    assert main(["check", "--stage", "artifacts/params.ok"]) == 0
    assert (tmp_path / "artifacts/params.ok").read_text() == MARKER_TEXT
    assert (tmp_path / "artifacts" / ACCEPTED_NAME).read_bytes() == PARAMS.read_bytes()
    return tmp_path


@pytest.mark.parametrize(("override", "named"), [
    ("modification=lang-poss", "'lang-poss'"),
    ("train.mask_prob=1.5", "train.mask_prob"),  # a float
    ("train.compile=3", "train.compile"),  # an int where a bool belongs
    ("evaluate.layers=[-1,2]", "evaluate.layers"),  # a list
    ("languages=['3',\"o'x\"]", "o'x"),  # a string with a quote
    ("downstream.task=null", "downstream.task"),  # null
    ("++train.colour={hue:1}", "train.colour"),  # a key the file lacks, a mapping
])
def test_refused_value_is_taken_back_under_exp_run(workspace: Path, monkeypatch, capsys,
                                                   override: str, named: str) -> None:
    """Whatever YAML type DVC wrote (each is rewritten through DVC's own code to prove the
    file is exactly DVC's write before it is put back)."""
    _dvc_set(workspace / "params.yaml", override)
    monkeypatch.setenv(EXP_BASELINE_ENV, "0" * 40)
    assert main(["check", "--stage", "artifacts/params.ok"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and named in error and "put back" in error, error
    assert (workspace / "params.yaml").read_bytes() == PARAMS.read_bytes()
    assert not (workspace / "artifacts/params.ok").exists()  # no later stage can run


def test_a_value_the_profile_overrides_is_refused_and_taken_back(workspace: Path, monkeypatch,
                                                                  capsys) -> None:
    """`dvc exp run -S train.epochs=7` under the quick profile (25 epochs, which win) would
    train 25 epochs and record 7: refused, with the key that does change it."""
    _dvc_set(workspace / "params.yaml", "train.epochs=7")
    monkeypatch.setenv(EXP_BASELINE_ENV, "0" * 40)
    assert main(["check", "--stage", "artifacts/params.ok"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error
    assert ("train.epochs = 7 has no effect: profile 'quick' sets train.epochs = 25, which "
            "wins; set -S profiles.quick.train.epochs=7 instead") in error
    assert "put back" in error and (workspace / "params.yaml").read_bytes() == PARAMS.read_bytes()
    assert not (workspace / "artifacts/params.ok").exists()
    for accepted in (["profiles.quick.train.epochs=7"],
                     ["train.epochs=7", "profiles.quick.train.epochs=7"],  # as --queue writes
                     ["train.weight_decay=0.02"]):  # what the profile leaves to the file;
        # (and after the run before, params.yaml reset: both parts of train.epochs move back)
        shutil.copy(PARAMS, workspace / "params.yaml")
        _dvc_set(workspace / "params.yaml", *accepted)
        assert main(["check", "--stage", "artifacts/params.ok"]) == 0, accepted
    assert load_config(workspace / "params.yaml").train.weight_decay == 0.02


def test_a_hand_edit_is_never_undone(workspace: Path, monkeypatch, capsys) -> None:
    """A valid value changed by hand since the last check: the file is the user's, left as
    it is (with DVC's value in it) and the error says what to fix."""
    _dvc_set(workspace / "params.yaml", "train.epochs=30", "modification=lang-poss")
    edited = (workspace / "params.yaml").read_bytes()
    monkeypatch.setenv(EXP_BASELINE_ENV, "0" * 40)
    assert main(["check", "--stage", "artifacts/params.ok"]) == 2
    error = capsys.readouterr().err
    assert "'lang-poss'" in error and "put back" not in error, error
    assert (workspace / "params.yaml").read_bytes() == edited


def test_outside_exp_run_params_yaml_is_left_alone(workspace: Path, capsys) -> None:
    """`dvc repro` after an edit by hand: DVC wrote nothing, so nothing is taken back."""
    _dvc_set(workspace / "params.yaml", "modification=lang-poss")
    edited = (workspace / "params.yaml").read_bytes()
    assert main(["check", "--stage", "artifacts/params.ok"]) == 2
    assert "put back" not in capsys.readouterr().err
    assert (workspace / "params.yaml").read_bytes() == edited


def _overlaps(dep: str, out: str) -> bool:
    return dep == out or dep.startswith(f"{out}/") or out.startswith(f"{dep}/")


def test_the_check_stage_runs_before_every_other_stage() -> None:
    """DVC deletes a stage's outputs before its command: every stage must come after the
    check, so every stage that no other stage feeds depends on the check's marker; the check
    runs whenever params.yaml changes (`-S` writes it)."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    check = stages.pop("check")
    assert "params.yaml" in check["deps"]
    marker = next(iter(check["outs"][0]))
    produced = {name: [next(iter(o)) if isinstance(o, dict) else o
                       for o in [*stage.get("outs", []), *stage.get("metrics", [])]]
                for name, stage in stages.items()}
    roots = [name for name, stage in stages.items()
             if not any(_overlaps(str(dep), out) for other, outs in produced.items()
                        if other != name for out in outs for dep in stage["deps"])]
    assert set(roots) >= {"corpus"}
    assert all(marker in stages[name]["deps"] for name in roots), roots


@pytest.mark.slow
def test_dvc_exp_run_with_a_refused_value_changes_nothing(tmp_path: Path) -> None:
    """The issue's case, through DVC: `dvc exp run -S modification=bogus` in a fresh clone
    leaves params.yaml and metrics/ byte for byte as they were."""
    project = tmp_path / "multilab"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    env.pop(EXP_BASELINE_ENV, None)

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True,
                              timeout=600)
        assert not check or done.returncode == 0, done.stdout + done.stderr
        return done

    clone_working_tree(project)  # the working tree under test
    (project / "metrics").mkdir(exist_ok=True)
    (project / "metrics/variant.json").write_text('{"mu": 0.5}\n')  # a variant run before
    run("git", "rm", "-q", "--cached", "data.dvc")  # no data needed: nothing may run
    (project / "data.dvc").unlink()
    run("git", "add", "-A")
    run("git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "under test")
    before = {p.relative_to(project): p.read_bytes()
              for p in [project / "params.yaml", *(project / "metrics").rglob("*")]
              if p.is_file()}
    done = run(DVC, "exp", "run", "-S", "modification=bogus", check=False)
    assert done.returncode != 0
    assert "unknown modification 'bogus'" in done.stdout + done.stderr
    assert "Running stage 'corpus'" not in done.stdout
    after = {p.relative_to(project): p.read_bytes()
             for p in [project / "params.yaml", *(project / "metrics").rglob("*")]
             if p.is_file()}
    assert after == before


def test_every_stage_tracks_the_profiles_part_of_the_sections_it_tracks() -> None:
    """A profile wins over the top level (real-quick sets corpus.train_scope and vocab.mode):
    a stage that tracks a section but not the profile's part of it would not rerun when the
    profile, or a value in it, changes, and would keep an output of the other profile."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    profiles = yaml.safe_load(PARAMS.read_text())["profiles"]
    settable = {section for profile in profiles.values() for section in profile}
    for name, stage in stages.items():
        params = [p for p in stage.get("params", []) if isinstance(p, str)]
        for section in settable & set(params):
            assert "profile" in params and (
                f"profiles.${{profile}}.{section}" in params or "profiles.${profile}" in params
            ), f"stage {name} tracks {section} but not profiles.${{profile}}.{section}"
    for profile, sections in profiles.items():  # what the stages track, each profile names
        tracked = {p.split(".")[-1] for stage in stages.values() for p in stage.get("params", [])
                   if isinstance(p, str) and p.startswith("profiles.${profile}.")}
        assert tracked <= set(sections), (profile, tracked - set(sections))

"""Records (multilab.studies.records): every number-producing command leaves one in results/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from multilab.cli import main
from multilab.config import Config
from multilab.errors import UserError
from multilab.studies.records import (
    flatten,
    iter_records,
    parse_record,
    record_path,
    write_record,
)
from tests.helpers import cli_args, tracked_model_cli, tracked_smoke_model

MODEL = {"modification": "lang-pos;no-random", "seed": 43, "fingerprint": "0123456789abcdef",
         "profile": "quick"}


def test_write_then_read_a_record(tmp_path: Path) -> None:
    result = {"metrics": {"mu": 0.25, "retrieval_p1.l8": 0.5}, "layers": [0.1, 0.2],
              "ok": True, "name": "x"}
    path = write_record(tmp_path, "multilab-quick", "evaluate", result, model=MODEL,
                        config={"profile": "quick", "downstream.task_path": tmp_path})
    assert path == tmp_path / "multilab-quick" / "lang-pos+no-random" / \
        "seed43-0123456789abcdef" / "evaluate.json"
    record = parse_record(path)
    assert record.kind == "evaluate" and record.model == MODEL
    assert record.data["config"]["downstream.task_path"] == str(tmp_path)
    assert record.metrics == {"metrics.mu": 0.25, "metrics.retrieval_p1.l8": 0.5,
                              "layers.0": 0.1, "layers.1": 0.2}
    provenance = record.data["provenance"]
    assert {"commit", "dirty", "date", "machine", "command"} <= provenance.keys()
    assert provenance["machine"]["device"].startswith("cpu")
    assert [r.path for r in iter_records(tmp_path)] == [path]


def test_qualified_and_model_free_records_have_their_own_files(tmp_path: Path) -> None:
    a = record_path(tmp_path, "e", "mrr", MODEL, "3-fake")
    b = record_path(tmp_path, "e", "mrr", MODEL, "3-s")
    assert a != b and a.name == "mrr.3-fake.json"
    assert record_path(tmp_path, "e", "word-order", None) == tmp_path / "e" / "word-order" / \
        "word-order.json"


def test_flatten_leaves_out_booleans_and_text() -> None:
    assert flatten({"a": [1, {"b": 2.5}], "c": False, "d": "x"}) == {"a.0": 1.0, "a.1.b": 2.5}


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "not a readable results record"),
    ("[1, 2]", "a JSON object is needed"),
    ('{"schema": 1}', "no 'kind'"),
    ('{"schema": 9, "kind": "evaluate", "qualifier": "", "model": null, "config": {}, '
     '"provenance": {}, "result": {}}', "record schema 9"),
    ('{"schema": 1, "kind": "guess", "qualifier": "", "model": null, "config": {}, '
     '"provenance": {}, "result": {}}', "record kind 'guess'"),
    ('{"schema": 1, "kind": "evaluate", "qualifier": "", "model": {"seed": 1}, "config": {}, '
     '"provenance": {}, "result": {}}', "names no modification and seed"),
])
def test_a_file_that_is_not_a_record_is_one_line(tmp_path: Path, text: str, message: str
                                                 ) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UserError, match=message) as caught:
        parse_record(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


@pytest.fixture(scope="module")
def trained(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Config:
    return tracked_smoke_model(built_project, tmp_path_factory.mktemp("records"))


@pytest.mark.slow  # a smoke model trained, then `multilab train` and `evaluate`
def test_train_and_evaluate_leave_records(trained: Config, one_thread: None, capsys) -> None:
    model_dir = trained.paths.model_dir("original", 0)
    done = json.loads((model_dir / "multilab.json").read_text())
    assert tracked_model_cli(trained, "train", "--seed", "0") == 0  # done already: skipped
    assert tracked_model_cli(trained, "evaluate", str(model_dir)) == 0
    assert "record: " in capsys.readouterr().out
    records = {r.kind: r for r in iter_records(trained.paths.results)}
    assert set(records) == {"train", "evaluate"}
    evaluate = records["evaluate"]
    assert evaluate.model["fingerprint"] == done["fingerprint"]
    assert evaluate.model["seed"] == 0 and evaluate.model["modification"] == "original"
    assert evaluate.metrics["metrics.mu"] == pytest.approx(
        evaluate.data["result"]["metrics"]["mu"])
    assert evaluate.data["config"]["profile"] == "smoke"
    assert evaluate.data["provenance"]["machine"]["threads"] == 1
    assert records["train"].data["result"]["steps"] == done["steps"]
    assert records["train"].data["result"]["last_log"]["step"] == done["steps"]


def test_a_refused_command_leaves_no_record(tmp_path: Path, capsys) -> None:
    results = tmp_path / "results"
    args = cli_args([f"paths.results={results}", "profile=smoke"], "evaluate",
                    str(tmp_path / "nothing-here"))
    assert main(args) == 2
    assert not results.exists()


def test_a_copied_source_names_its_commit(tmp_path: Path, monkeypatch) -> None:
    """A GPU lease runs a copy of the working tree whose .git is missing or stale: the
    commit comes from MULTILAB_SOURCE_COMMIT (scripts/gpu_lease.sh), marked as such, even
    inside a git checkout; dirtiness unknown."""
    from multilab.source import SOURCE_COMMIT_ENV, source_state

    monkeypatch.delenv(SOURCE_COMMIT_ENV, raising=False)
    assert source_state(tmp_path)["commit"] is None
    monkeypatch.setenv(SOURCE_COMMIT_ENV, "abc1234")
    assert source_state(tmp_path) == {"commit": "abc1234", "dirty": None, "commit_from": "env"}
    assert source_state(Path.cwd())["commit"] == "abc1234"


def _git(root: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args],
                          cwd=root, capture_output=True, text=True, check=True).stdout


def test_a_smoke_record_leaves_the_committed_tree_and_its_documents_alone(
        tmp_path: Path, capsys) -> None:
    """A smoke run followed by ``study report --all`` leaves ``git status`` clean: the smoke
    profile's records go to the ignored results-scratch/ beside the committed results/
    (records_root, the one place writers and readers ask), the documents generated from the
    committed records stay byte for byte as they were, and a smoke study's report reads its
    records where its runs wrote them."""
    import shutil

    from multilab.cli.common import record_result
    from multilab.resolve import load_config, parse_overrides
    from multilab.studies.records import records_root
    from tests.helpers import PARAMS, ROOT
    from tests.test_studies import SPEC, STUDIES, _model_config, _toy_records

    project = tmp_path / "project"
    folder, results = project / "studies", project / "results"
    smoke_folder = tmp_path / "smoke-studies"  # a smoke study, as the tests have them
    for where, name, profile in ((folder, "toy-quick", "quick"),
                                 (smoke_folder, "toy-smoke", "smoke")):
        shutil.copytree(STUDIES / "claims", where / "claims")
        (where / f"{name}.yaml").write_text(json.dumps(SPEC | {"name": name,
                                                               "profile": profile}))
    for modification, mu in (("original", (0.24, 0.28, 0.21)), ("lang-pos", (0.01, .02, 0))):
        for seed in range(3):  # the committed study's records
            write_record(results, "multilab-quick", "evaluate", {"metrics": {
                "mu": mu[seed], "retrieval_p1.l0": 0.1, "retrieval_p1.l8": 0.5}},
                model={"modification": modification, "seed": seed,
                       "fingerprint": f"q{modification}{seed}"},
                config=_model_config("quick", "3,fake", modification))
    shutil.copy(ROOT / ".gitignore", project / ".gitignore")
    report = ["--params", str(PARAMS), "--set", f"paths.results={results}", "study",
              "report", "--all", "--studies", str(folder), "--out",
              str(project / "docs" / "studies")]
    assert main(report) == 0
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "committed records and their documents")
    pages = {p: p.read_bytes() for p in sorted((project / "docs").rglob("*.md"))}

    # a smoke run's record, through the command line's writer
    smoke = load_config(PARAMS, parse_overrides(["profile=smoke", f"paths.results={results}"]))
    scratch = project / "results-scratch"
    assert records_root(results, "smoke") == scratch
    assert records_root(results, "quick") == results
    assert records_root(tmp_path / "elsewhere", "smoke") == tmp_path / "elsewhere"  # untracked
    capsys.readouterr()
    record_result(smoke, "evaluate", {"metrics": {"mu": 0.99}})
    assert f"record: {scratch}" in capsys.readouterr().out
    _toy_records(scratch)  # a smoke study's records, where its runner writes them

    assert main(report) == 0
    assert {p: p.read_bytes() for p in sorted((project / "docs").rglob("*.md"))} == pages
    assert _git(project, "status", "--porcelain", "--untracked-files=all") == ""
    assert main(["--params", str(PARAMS), "--set", f"paths.results={results}", "study",
                 "list", "--studies", str(smoke_folder), "--wide"]) == 0
    listed = capsys.readouterr().out
    assert "toy-smoke" in listed and "6/6" in listed.split("toy-smoke")[1].split("\n")[0], \
        listed

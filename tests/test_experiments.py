"""DVC's views of the study: the metrics files at 3 decimals in the paper's column order (so
`dvc metrics show` reads like Table 1) and `multilab exp`, DVC's experiments one line each
within 120 columns."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from multilab.cli import main
from multilab.lab.metric_table import DVC_SEEDS, METRICS, dvc_metrics
from multilab.reporting.experiments import HEADLINE, experiments, table_lines
from tests.helpers import BIN, DVC, PARAMS

#: Dufter & Schütze 2020's Table 1 from left to right (μ, layer 0, layer 8, perplexities).
PAPER_COLUMNS = ("mu", "align_f1.l0", "retrieval_p1.l0", "translation_p1.l0", "align_f1.l8",
                 "retrieval_p1.l8", "translation_p1.l8", "ppl_train", "ppl_dev")


def test_dvc_metrics_are_rounded_and_in_the_paper_s_column_order() -> None:
    """Every value at 3 decimals (DVC prints what is stored: 0.24356712 read as 0.24357),
    the keys in the paper's order, and sorted by name (as `dvc metrics show` sorts its
    columns) still in that order."""
    stats = {key: (0.1234567 + i, 0.01) for i, key in enumerate(reversed(PAPER_COLUMNS))}
    written = dvc_metrics(stats, 3)
    keys = [METRICS[key].dvc for key in PAPER_COLUMNS]
    assert list(written) == [*keys, DVC_SEEDS]
    assert sorted(keys) == keys  # `dvc metrics show`'s order is the paper's
    assert written[METRICS["ppl_dev"].dvc] == 0.123 and written[METRICS["mu"].dvc] == 8.123
    assert all(round(value, 3) == value for value in written.values())
    assert written[DVC_SEEDS] == 3
    assert list(dvc_metrics({"ppl_dev": (5.0, 0), "mu": (0.5, 0)}, 1)) == \
        [METRICS["mu"].dvc, METRICS["ppl_dev"].dvc, DVC_SEEDS]


def _revision(name: str | None, rev: str, modification: str, seeds: list[int],
              values: dict[str, float]) -> dict:
    metrics = {METRICS[key].dvc: value for key, value in values.items()}
    study = {"metrics/variant.json": {"data": metrics | {"variant": modification}},
             "metrics/study/original.json": {"data": metrics}}
    return {"rev": rev, "name": name, "data": {
        "params": {"params.yaml": {"data": {"modification": modification, "seeds": seeds,
                                            "profile": "quick"}}},
        "metrics": study}, "error": None, "experiments": None}


def test_exp_lines_fit_120_columns_with_the_headline_columns() -> None:
    """`dvc exp show` heads the variant's columns with its file (25 characters each):
    `multilab exp` shows the experiment, modification, seeds, μ, τ₀, ρ₈ and dev perplexity
    within 120 columns, long names cut with "…", numbers at the paper's decimals."""
    values = {"mu": 0.24349, "translation_p1.l0": 0.1, "retrieval_p1.l8": 0.4612,
              "ppl_dev": 233.4}
    base = _revision("main", "a" * 40, "original", [42], values)
    long = "inv-order+lang-pos+shift-special+no-random+knn-replace+" * 3
    base["experiments"] = [{"name": "bushy-moss", "executor": None, "revs": [
        _revision("bushy-moss", "b" * 40, long, [42, 43, 44], values)]},
        {"name": "queued", "executor": "workspace", "revs": [
            {"rev": "c" * 40, "name": None, "data": {}, "error": None}]}]
    shown = [_revision(None, "workspace", "lang-pos", [42], values), base]
    found = experiments(shown, "metrics/variant.json")
    assert [e.name for e in found] == ["workspace", "main", "└ bushy-moss", "└ queued"]
    lines = table_lines(found, 120)
    assert max(map(len, lines)) <= 120
    assert lines[0].split() == ["experiment", "modification", "seeds", "μ", "τ₀", "ρ₈", "ppl",
                                "dev"]
    assert lines[2].split() == ["main", "original", "42", "0.243", "0.100", "0.461", "233"]
    assert "…" in lines[3] and lines[3].split()[-4:] == ["0.243", "0.100", "0.461", "233"]
    assert lines[4].split()[-4:] == ["-"] * 4  # queued: no metrics yet
    assert table_lines(found, None)[3].count(long) == 1  # --wide: the whole name
    markdown = table_lines(found, 120, markdown=True)
    assert markdown[0] == "| experiment | modification | seeds | μ | τ₀ | ρ₈ | ppl dev |"
    assert len(HEADLINE) == 4


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd,
                   check=True, capture_output=True)


@pytest.mark.slow  # starts DVC and `multilab exp`'s own DVC
def test_dvc_views_of_a_small_dvc_project(tmp_path: Path, monkeypatch, capsys) -> None:
    """Through DVC itself: a stage writes metrics files as the report and the variant
    stages do (:func:`dvc_metrics`); `dvc metrics show` reads in the paper's column order at
    3 decimals, and after `dvc exp run -S modification=…`, `multilab exp` (the documented
    way to compare experiments) lists the baseline and the experiment within 120 columns."""
    stats = {key: (0.24356712, 0.01) for key in PAPER_COLUMNS} | {"ppl_dev": (233.41234, 1.0)}
    metrics = dvc_metrics(stats, 1)
    (tmp_path / "params.yaml").write_text("modification: original\nseeds: [42]\n")
    (tmp_path / "write.py").write_text(
        "import json, os, re\n"
        "os.makedirs('metrics/study', exist_ok=True)\n"
        "params = open('params.yaml').read()\n"
        "name = re.search(r'modification: (\\S+)', params).group(1)\n"
        f"values = {metrics!r}\n"
        "json.dump(values | {'variant': name}, open('metrics/variant.json', 'w'))\n"
        "json.dump(values, open('metrics/study/original.json', 'w'))\n")
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  report:\n    cmd: python write.py\n    deps: [write.py]\n"
        "    params: [modification, seeds]\n    metrics:\n"
        "      - metrics/study: {cache: false}\n      - metrics/variant.json: {cache: false}\n")
    env = os.environ | {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}

    def dvc(*args: str) -> str:
        done = subprocess.run([DVC, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    _git(tmp_path, "init", "-q")
    dvc("init", "-q")
    dvc("repro")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "baseline")
    shown = dvc("metrics", "show").splitlines()
    assert shown[0].split() == ["Path", *(METRICS[key].dvc for key in PAPER_COLUMNS),
                                DVC_SEEDS, "variant"]
    assert shown[1].split()[1:3] == ["0.244", "0.244"] and "233.412" in shown[1]
    assert "0.24357" not in "\n".join(shown)  # stored at 3 decimals, shown so
    dvc("exp", "run", "-S", "modification=inv-order+lang-pos+knn-replace", "-n", "stacked")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("PATH", env["PATH"])
    assert main(["--params", str(PARAMS), "exp"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 120, lines
    rows = {line.split()[0].strip("└ "): line.split() for line in lines[1:]
            if line.split()[0] != "└"} | {line.split()[1]: line.split() for line in lines[1:]
                                          if line.split()[0] == "└"}
    assert rows["stacked"][2:] == ["inv-order+lang-pos+knn-replace", "42", "0.244", "0.244",
                                   "0.244", "233"], lines
    assert rows["workspace"][1] == "inv-order+lang-pos+knn-replace"
    assert any(line.split()[1] == "original" for line in lines[1:]), lines  # the baseline
    assert json.loads((tmp_path / "metrics" / "variant.json").read_text())["variant"] == \
        "inv-order+lang-pos+knn-replace"

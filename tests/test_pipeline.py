"""End to end through DVC, as a user meets multilab: `dvc repro` of a smoke study in a fresh
git project, the report equal to MLflow, nothing rerun the second time, `dvc exp run -S
modification=…` for a variant (one that stacks modifications and uses the knn table), and a
bad parameter stopped in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

from multilab import tracking
from multilab.resolve import load_config, resolve_run
from multilab.training.model_dir import model_fingerprint, read_done
from tests.helpers import BIN, DVC, ROOT, clone_working_tree, subprocess_env

pytestmark = pytest.mark.slow


#: docs/quickstart.md's `dvc exp show` of one metric beside the modification. DVC prefixes a
#: column with its file only where two files share the name: `1.mu` is in every metrics file
#: (`metrics/variant.json:1.mu`), `modification` only in params.yaml.
EXP_SHOW = ["--drop", ".*", "--keep", "Experiment|modification|metrics/variant.json:1.mu"]


#: What ``preloaded_multilab`` adds to the environment of DVC's processes (the stages'
#: ``multilab`` skips its imports: this module checks DVC's wiring, not the process boundary).
_PRELOADED: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def _stages_share_their_imports(preloaded_multilab: dict[str, str]) -> Iterator[None]:
    _PRELOADED.update(preloaded_multilab)
    yield
    _PRELOADED.clear()


def _run(args: list[str], cwd: Path, check: bool = True, columns: int | None = None
         ) -> subprocess.CompletedProcess:
    # the venv's dvc and multilab first; the fork server's stand-in before them when there is one
    env = subprocess_env(preloaded={"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **_PRELOADED})
    if columns:
        env["COLUMNS"] = str(columns)
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if check and done.returncode != 0:
        raise AssertionError(f"{args} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def shrink_for_the_pipeline(params: dict) -> None:
    """What these tests check is DVC's wiring, not the numbers: the stages that cost more than
    their start-up run on less text (a dev corpus from Genesis, not the Old Testament: Punkt
    learning from it was most of the corpus stage; 128 training sentences; 100 sentences
    evaluated; one fastText epoch for the spaces; 64 verses a language to fine-tune and score)."""
    params["corpus"] |= {"dev_books": [1, 1], "dev_sentences": 1000}
    smoke = params["profiles"]["smoke"]
    smoke["train"] |= {"max_train_sentences": 128}
    smoke["evaluate"] |= {"dev_sentences": 100, "curve_sentences": 50}
    smoke["spaces"] |= {"epochs": 1}
    smoke["downstream"] |= {"max_train_verses": 64, "max_test_verses": 64}


@pytest.fixture(scope="module")
def pipeline(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh git + DVC project (the tracked files of this repo) with a smoke study."""
    project = tmp_path_factory.mktemp("clone") / "multilab"
    clone_working_tree(project)  # the working tree under test
    params = yaml.safe_load((project / "params.yaml").read_text())
    params |= {"profile": "smoke", "seeds": [0], "study": ["original", "untrained"]}
    shrink_for_the_pipeline(params)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    shutil.copytree(built_project / "data", project / "data")  # what setup.sh exports
    _run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "smoke"], project)
    _run([DVC, "repro"], project)
    return project


def test_repro_builds_the_report_from_mlflow(pipeline: Path) -> None:
    cfg = load_config(pipeline / "params.yaml")
    cfg = cfg.__class__(**{**cfg.__dict__, "paths": cfg.paths.rebased(pipeline)})
    table = pd.read_csv(pipeline / "reports" / "table1.csv").set_index("modification")
    assert list(table.index) == ["original", "untrained"]
    runs = tracking.search_runs(cfg.paths, cfg.experiment)
    finished = runs[(runs["status"] == "FINISHED") & (runs["tags.evaluated"] == "true")]
    for mod in ("original", "untrained"):
        run = finished[finished["tags.modification"] == mod].iloc[0]
        for key in ("mu", "retrieval_p1.l8", "ppl_dev"):
            assert table.loc[mod, f"{key}_mean"] == pytest.approx(run[f"metrics.{key}"])
        assert table.loc[mod, "n_seeds"] == 1
    assert table.loc["original", "ppl_train_mean"] < table.loc["untrained", "ppl_train_mean"]
    assert (pipeline / "artifacts/models/original/seed0/model.safetensors").exists()
    assert json.loads((pipeline / "metrics/study/original.json").read_text())["seeds"] == 1
    loss = pd.read_csv(pipeline / "reports/plots/train_loss.csv")
    assert list(loss.columns) == ["step", "original", "untrained"]


def test_the_runs_and_the_committed_records_give_one_table(pipeline: Path) -> None:
    """One path for a number, on a smoke study `dvc repro` trained: the records the runs
    carry and the files `multilab evaluate` committed under results/ are one record, and the
    one table builder gives the report's Table 1 byte for byte from either."""
    from multilab.reporting.report import finished_runs, markdown_table, rows_frame, table_rows
    from multilab.studies.run_records import committed_records, records_of_runs

    cfg = load_config(pipeline / "params.yaml")
    cfg = cfg.__class__(**{**cfg.__dict__, "paths": cfg.paths.rebased(pipeline)})
    from_runs = [r for r in records_of_runs(cfg, finished_runs(cfg)) if r.kind == "evaluate"]
    from_files = [r for r in committed_records(cfg) if r.kind == "evaluate"]
    assert len(from_runs) == len(from_files) == 2
    assert sorted(r.data["result"]["metrics"]["mu"] for r in from_runs) == \
        sorted(r.data["result"]["metrics"]["mu"] for r in from_files)
    tables = [(markdown_table(rows, "Table 1"), rows_frame(rows).to_csv(index=False))
              for rows in (table_rows(cfg, records, list(cfg.study))
                           for records in (from_runs, from_files))]
    assert tables[0] == tables[1]
    assert tables[0][1] == (pipeline / "reports" / "table1.csv").read_text()


def test_dvc_views_compare_models_and_fit_a_terminal(pipeline: Path) -> None:
    """Issue 22: `dvc plots show` overlays every study model in one chart per quantity;
    `dvc metrics show` is a row per model in a terminal's width, one key per metric; corpus
    statistics and the spaces run stay out of the comparison views."""
    shown = json.loads(_run([DVC, "plots", "show", "--json"], pipeline).stdout)
    assert not shown.get("errors"), shown.get("errors")
    loss = shown["data"]["train_loss"][0]["content"]["data"]["values"]
    # overlaid, labelled, the variant (params.yaml's modification) beside the study's rows
    assert {row["field"] for row in loss} == {"original", "untrained", "variant original"}
    metrics = _run([DVC, "metrics", "show"], pipeline).stdout.splitlines()
    assert [line.split()[0] for line in metrics[1:]] == [
        "metrics/study/original.json", "metrics/study/untrained.json", "metrics/variant.json"]
    # 9 metrics and the seeds under their DVC keys (Table 1's columns, numbered): a
    # 160-column terminal, the variant's name in a column of its own
    assert "corpus" not in "\n".join(metrics) and max(map(len, metrics)) <= 160, metrics
    header = metrics[0].split()  # the paper's column order, each value at 3 decimals
    assert header == ["Path", "1.mu", "2.l0.f1", "3.l0.rho", "4.l0.tau", "5.l8.f1", "6.l8.rho",
                      "7.l8.tau", "8.ppl.train", "9.ppl.dev", "seeds", "variant"]
    assert all(len(value.rpartition(".")[2]) <= 3 for line in metrics[1:]
               for value in line.split()[1:-2] if value.replace(".", "").isdigit())
    assert metrics[-1].split()[-1] == "original"
    cfg = load_config(pipeline / "params.yaml")
    cfg = cfg.__class__(**{**cfg.__dict__, "paths": cfg.paths.rebased(pipeline)})
    runs = tracking.search_runs(cfg.paths, cfg.experiment)
    assert "metrics.iterations" not in runs  # the spaces run logs elsewhere
    assert len(tracking.search_runs(cfg.paths, tracking.spaces_experiment(cfg.experiment))) == 1


def test_a_smoke_run_leaves_the_committed_records_and_documents_alone(pipeline: Path) -> None:
    """The smoke `dvc repro` wrote its records to the ignored results-scratch/, none to the
    committed results/; `multilab study report --all` afterwards changes no tracked file
    (the committed studies read results/ alone)."""
    def status() -> list[str]:
        return _run(["git", "status", "--porcelain", "--untracked-files=all"],
                    pipeline).stdout.splitlines()

    before = status()
    assert not [line for line in before if "results" in line], before
    assert {p.name for p in (pipeline / "results-scratch").rglob("*.json")} >= {
        "train.json", "evaluate.json"}
    # the project's own params.yaml: the committed studies resolve under it, not under the
    # shrunk smoke one (its dev corpus is cut to 1,000 sentences)
    _run([str(BIN / "multilab"), "--params", str(ROOT / "params.yaml"), "study", "report",
          "--all"], pipeline)
    assert status() == before


def test_second_repro_runs_nothing(pipeline: Path) -> None:
    status = _run([DVC, "status"], pipeline).stdout
    assert "up to date" in status, status
    out = _run([DVC, "repro"], pipeline).stdout
    assert "Running stage" not in out, out


def test_forced_reevaluation_leaves_no_duplicate_metric_points(pipeline: Path) -> None:
    """Issue 22: `dvc repro` re-running evaluate (here forced) appends nothing to the
    histories: every metric of every model run has one point per step."""
    from mlflow.tracking import MlflowClient

    _run([DVC, "repro", "--force", "--single-item", "evaluate@original-0"], pipeline)
    cfg = load_config(pipeline / "params.yaml")
    cfg = cfg.__class__(**{**cfg.__dict__, "paths": cfg.paths.rebased(pipeline)})
    client = MlflowClient(tracking.tracking_uri(cfg.paths))
    for run_id in tracking.search_runs(cfg.paths, cfg.experiment, groups=True)["run_id"]:
        for key in client.get_run(run_id).data.metrics:
            steps = [m.step for m in client.get_metric_history(run_id, key)]
            assert len(steps) == len(set(steps)), (run_id, key, steps)


def test_report_stage_keeps_and_gathers_command_results(pipeline: Path) -> None:
    """The report stage's out persists: `multilab static`'s JSON under reports/ survives
    `dvc repro` of the report (DVC would delete an out before rerunning it) and is gathered
    into the table's seeds 001/004 section."""
    from tests.test_liu_sections import static_record

    kept = pipeline / "reports" / "static" / "3-fake.json"
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps(static_record()))
    _run([DVC, "repro", "--force", "--single-item", "report"], pipeline)
    assert kept.exists()
    table = (pipeline / "reports" / "table1.md").read_text()
    assert "word retrieval MRR (Liu et al. 2020a/b)" in table
    assert (pipeline / "reports" / "figures" / "mrr-by-train-rows-3-fake.png").exists()


def _check_variant(pipeline: Path, modification: str) -> None:
    """`dvc exp run -S modification=...` wrote the DVC metrics of one seed and the summary
    that names the modification (canonical form)."""
    variant = json.loads((pipeline / "metrics" / "variant.json").read_text())
    assert variant["seeds"] == 1 and 0 <= variant["1.mu"] <= 1
    summary = json.loads((pipeline / "artifacts" / "variant" / "summary.json").read_text())
    assert summary["modification"] == modification


#: One `dvc exp run` carries both variant checks (a model trained per variant is most of its
#: cost): a stack of two modifications, in the `+` spelling, for `dvc exp show`'s table, and
#: knn-replace, which trains from the pipeline's own VecMap table.
VARIANT = "inv-order+lang-pos+knn-replace"


@pytest.fixture(scope="module")
def variant_experiment(pipeline: Path) -> Path:
    """The pipeline after `dvc exp run -S modification=VARIANT`."""
    _run([DVC, "exp", "run", "-S", f"modification={VARIANT}"], pipeline)
    return pipeline


def test_exp_run_trains_a_variant_and_writes_metrics(variant_experiment: Path) -> None:
    pipeline = variant_experiment
    _check_variant(pipeline, "inv-order;lang-pos;knn-replace")
    shown = json.loads(_run([DVC, "exp", "show", "--json"], pipeline).stdout)
    assert VARIANT in json.dumps(shown)
    # the README's command: after the committed baseline, a table that fits a terminal
    table = _run([DVC, "exp", "show", "--no-pager", *EXP_SHOW], pipeline,
                 columns=120).stdout
    assert VARIANT in table and "metrics/variant.json:1.mu" in table, table
    assert "modification" in table.splitlines()[1], table
    assert "…" not in table and max(map(len, table.splitlines())) <= 120, table
    # `multilab exp`: the experiment, modification, seeds, μ, τ₀, ρ₈, ppl dev in 120 columns
    lines = _run([str(BIN / "multilab"), "exp"], pipeline, columns=120).stdout.splitlines()
    assert lines[0].split()[:3] == ["experiment", "modification", "seeds"], lines
    assert max(map(len, lines)) <= 120, lines
    variant = json.loads((pipeline / "metrics" / "variant.json").read_text())
    mine = next(line for line in lines if VARIANT in line and line.startswith("└")).split()
    assert mine[3] == "0" and mine[4:7] == [f"{variant[key]:.3f}" for key in (
        "1.mu", "4.l0.tau", "6.l8.rho")], lines


def test_exp_run_knn_replace_end_to_end(variant_experiment: Path) -> None:
    """Issue 10: the knn variant trains from the pipeline's own VecMap table and is reported."""
    pipeline = variant_experiment
    _check_variant(pipeline, "inv-order;lang-pos;knn-replace")
    cfg = load_config(pipeline / "params.yaml")
    cfg = cfg.__class__(**{**cfg.__dict__, "paths": cfg.paths.rebased(pipeline)})
    run = resolve_run(cfg, VARIANT, 0)
    assert run.recipe.needs_knn
    # the model's identity includes the knn table the pipeline's spaces stage wrote
    done = read_done(cfg.paths.variant_model_dir(VARIANT, 0))
    assert done is not None and done["fingerprint"] == model_fingerprint(run), done


def test_bad_parameter_is_one_clear_line(pipeline: Path) -> None:
    done = _run([DVC, "exp", "run", "-S", "modification=bogus"], pipeline, check=False)
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("multilab: error:")]
    assert lines and "unknown modification 'bogus'" in lines[0], done.stderr[-2000:]


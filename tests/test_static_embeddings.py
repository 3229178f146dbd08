"""`multilab static`: static wordpiece embeddings against BERT (seeds 001/004, smoke)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from multilab import tracking
from multilab.cli import main
from multilab.config import Config
from multilab.evaluation import static_embeddings as se
from multilab.evaluation.lab_word_retrieval import language_tokenizers, word_vectors
from multilab.evaluation.token_translation import dev_rows
from multilab.evaluation.word_retrieval import word_retrieval
from multilab.reporting.liu_sections import liu_sections
from multilab.resolve import resolve_run
from multilab.studies.records import iter_records
from multilab.training.model import build_model
from tests.helpers import cli_args, run_statuses

FAST = {"dim": 16, "epochs": 2}


def settings(model: str = "skipgram", rows: int = 64, window: int = 5, seed: int = 0
             ) -> se.StaticSettings:
    return se.StaticSettings(model, rows, window, FAST["dim"], FAST["epochs"], seed)


def project_cli(cfg: Config, *command: str) -> int:
    paths = [f"paths.{n}={getattr(cfg.paths, n)}"
             for n in ("data", "artifacts", "reports", "metrics", "mlruns", "results")]
    return main(cli_args(["profile=smoke", *paths], *command))


def test_corpus_keeps_languages_apart_and_training_is_deterministic(project: Config) -> None:
    train = se.train_sentences(project)
    assert len(train) == 2 and len(train[0]) == 256  # smoke: max_train_sentences
    assert train[0] == train[1]  # [3, fake]: the same pieces, told apart by the prefix
    lines = se.corpus_lines(train, 64, seed=0)
    assert len(lines) == 128 and lines != se.corpus_lines(train, 64, seed=1)
    tokens = {token for line in lines for token in line.split()}
    assert any(t.startswith("0:") for t in tokens) and any(t.startswith("1:") for t in tokens)
    assert all(t[:2] in ("0:", "1:") for t in tokens)
    first = se.train_static(lines, settings("cbow"))
    again = se.train_static(lines, settings("cbow"))
    assert first.keys() == again.keys() == tokens
    assert all(np.array_equal(first[w], again[w]) for w in first)
    other = se.train_static(lines, settings("cbow", seed=1))
    assert not all(np.array_equal(first[w], other[w]) for w in first)


def test_hand_checked_mrr_of_mean_piece_vectors() -> None:
    """bc = mean(b, ##c) = (.5, .6): cos .83 with y, .71 with x; a = (1, 0): .995 with x, .96
    with y. Gold a→x, bc→y: both first, MRR 1; gold swapped: both second, MRR 1/2, P@1 0."""
    vectors = {"0:a": np.array([1.0, 0.0]), "0:b": np.array([0.0, 1.0]),
               "0:##c": np.array([1.0, 0.2]),
               "1:x": np.array([1.0, 0.1]), "1:y": np.array([1.0, 0.3])}
    vector, found = se.mean_vector(["0:b", "0:##c"], vectors, 2)
    assert found and np.allclose(vector, [0.5, 0.6])
    assert se.mean_vector(["0:zz"], vectors, 2)[1] is False
    data = se.RetrievalData(se.WordSet(["a", "bc"], [["0:a"], ["0:b", "0:##c"]]),
                            se.WordSet(["x", "y"], [["1:x"], ["1:y"]]),
                            [("a", "x"), ("bc", "y")], "fake", 2)
    score = se.static_retrieval(data, vectors, 2)
    expected = word_retrieval(["a", "bc"], [[1, 0], [0.5, 0.6]], ["x", "y"],
                              [[1, 0.1], [1, 0.3]], [("a", "x"), ("bc", "y")])
    assert score["mrr"] == pytest.approx(expected.mrr) == pytest.approx(1.0)
    data_swapped = se.RetrievalData(data.source, data.target, [("a", "y"), ("bc", "x")],
                                    "fake", 2)
    swapped = se.static_retrieval(data_swapped, vectors, 2)
    assert swapped["mrr"] == pytest.approx(0.5) and swapped["p1"] == 0.0


def test_word_set_and_dictionary_are_the_contextual_mrrs(project: Config) -> None:
    """The static side reads the words `multilab mrr` builds vectors for (an untrained model
    runs the contextual code path on the same dev rows) and the same exact pairs."""
    data = se.retrieval_data(project, 0, 1, 40, seed=0)
    run = resolve_run(project, "original", 0)
    encoder, rows, _ = dev_rows(project, run, 40)
    from multilab.training.training_data import study_encoder

    encoder = study_encoder(run)
    model = build_model(run.model, encoder.total_size, 0, encoder.languages,
                        offsets=encoder.offsets).eval()
    tokenizers = language_tokenizers(project)
    keep = [i for i in range(len(rows[0])) if len(rows[0][i]) and len(rows[1][i])]
    for language, words in ((0, data.source), (1, data.target)):
        contextual, _ = word_vectors(model, encoder, [rows[language][i] for i in keep],
                                     language, tokenizers[language])
        assert words.words == contextual
    assert data.sentences == len(keep) == 40 and data.kind == "fake"
    assert data.pairs == [(w, w) for w in data.source.words]
    vectors = se.train_static(se.corpus_lines(se.train_sentences(project), 256, 0),
                              settings(rows=256))
    score = se.static_retrieval(data, vectors, FAST["dim"])
    assert score["queries"] == len(data.pairs) and score["skipped"] == 0
    assert 0 < score["mrr"] <= 1 and 0 <= score["p1"] <= score["mrr"]


def test_zero_shot_classifier_scores_every_language(project: Config) -> None:
    task = se.task_features(project)
    assert task.labels == ["en", "en-fake"] and len(task.train) == 256
    vectors = se.train_static(se.corpus_lines(se.train_sentences(project), 128, 0),
                              settings(rows=128))
    result = se.zero_shot(task, vectors, FAST["dim"], seed=0)
    assert set(result["test"]) == {"en", "en-fake"}
    for score in result["test"].values():
        assert 0 <= score["accuracy"] <= 1 and 0 <= score["macro_f1"] <= 1
    assert 0 < result["majority_accuracy"] <= 1


def test_cli_writes_one_json_and_a_finished_run(project: Config, capsys, tmp_path: Path
                                                ) -> None:
    out = tmp_path / "static.json"
    assert project_cli(project, "static", "--models", "skipgram,cbow", "--rows", "64,all",
                       "--windows", "2", "--source", "3", "--target", "fake",
                       "--sentences", "30", "--dim", "16", "--epochs", "1",
                       "--out", str(out)) == 0
    printed = capsys.readouterr().out
    assert "3 -> fake, fake dictionary" in printed and "JSON: " in printed
    record = json.loads(out.read_text())
    combos = [(r["model"], r["rows"], r["window"]) for r in record["results"]]
    assert combos == [("skipgram", 64, 2), ("skipgram", 256, 2), ("cbow", 64, 2),
                      ("cbow", 256, 2)]
    for row in record["results"]:
        assert 0 < row["mrr"] <= 1 and set(row["zero_shot"]["test"]) == {"en", "en-fake"}
        assert row["seconds"] >= row["seconds_train"] > 0
    assert run_statuses(project) == ["FINISHED"]
    # the report draws this JSON (from reports/static/) and logs its MRR figures to this run
    assert record["run_id"] == tracking.search_runs(project.paths, project.experiment)[
        "run_id"].tolist()[0]
    (project.paths.reports / "static").mkdir(parents=True, exist_ok=True)
    shutil.copy(out, project.paths.reports / "static" / "3-fake.json")
    liu_sections(project)
    logged = MlflowClient(tracking.tracking_uri(project.paths)).list_artifacts(
        record["run_id"], "word-retrieval")
    assert {Path(a.path).name for a in logged} == {"mrr-by-train-rows-3-fake.png",
                                                    "mrr-by-window-3-fake.png"}


def test_each_seed_leaves_its_own_record(project: Config, tmp_path: Path) -> None:
    """A second seed is a second measurement of the static row: it must not replace the
    first seed's record (both are what the study's mean over seeds reads)."""
    for seed in (1, 2):
        assert project_cli(project, "static", "--models", "skipgram", "--rows", "64",
                           "--windows", "2", "--source", "3", "--target", "fake",
                           "--sentences", "30", "--dim", "16", "--epochs", "1",
                           "--seed", str(seed), "--out", str(tmp_path / f"s{seed}.json")) == 0
    found = [record for record in iter_records(project.paths.results)
             if record.kind == "static"]
    assert sorted(record.data["result"]["seed"] for record in found) == [1, 2]
    assert len({record.path for record in found}) == 2


@pytest.mark.parametrize("option, value, named", [
    ("--models", "glove", "'glove'"), ("--windows", "0", "'0'"), ("--rows", "0", "'0'"),
    ("--rows", "257", "'257'"), ("--target", "xx", "'xx'"), ("--rows", "many", "'many'")])
def test_bad_values_exit_2_and_write_nothing(project: Config, capsys, tmp_path: Path,
                                            option: str, value: str, named: str) -> None:
    args = {"--models": "skipgram", "--rows": "all", "--windows": "5", "--source": "3",
            "--target": "fake"} | {option: value}
    out = tmp_path / "static.json"
    flat = [item for pair in args.items() for item in pair]
    assert project_cli(project, "static", *flat, "--out", str(out)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("multilab: error: ") and "\n" not in err and named in err
    assert "valid" in err
    assert not out.exists() and not project.paths.mlruns.exists()


def test_rows_accept_counts_fractions_and_all() -> None:
    assert se.parse_rows("2000, all,0.5,2000", 4000) == [2000, 4000]  # 0.5 → 2000 again
    assert se.parse_rows("0.25,1", 10) == [2, 1]  # round(2.5) = 2, at least one row
    assert se.parse_models("cbow,skipgram,cbow") == ["cbow", "skipgram"]
    assert se.parse_positive("5,20", "--windows") == [5, 20]

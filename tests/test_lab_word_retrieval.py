"""`multilab mrr`: Liu et al. 2020b's word retrieval wired to a trained lab model (smoke)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from multilab import tracking
from multilab.config import Config
from multilab.evaluation.lab_word_retrieval import exact_pairs, lab_word_retrieval, words_of
from multilab.resolve import resolve_run
from tests.helpers import run_statuses, tracked_model_cli, tracked_smoke_model

pytestmark = pytest.mark.slow  # every test reads a smoke model trained for the module


@pytest.fixture(scope="module")
def trained(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Config:
    """A smoke model of 128 sentences, tracked in the project's MLflow store."""
    return tracked_smoke_model(built_project, tmp_path_factory.mktemp("mrr"))


def test_wordpieces_merge_into_words() -> None:
    assert words_of(["je", "##sus", "wept", ".", "##x"]) == (["jesus", "wept", ".x"],
                                                             [0, 0, 1, 2, 2])
    assert words_of(["##a", "b"]) == (["##a", "b"], [0, 1])  # a stray continuation: a word
    assert exact_pairs("fake", ["god", "wept"], ["wept", "lord"]) == [("wept", "wept")]
    assert exact_pairs("enfake", ["a"], ["\U00017061"]) == [("a", "\U00017061")]


def test_english_to_fake_english_per_layer_beside_the_untrained_twin(
        trained: Config, one_thread: None) -> None:
    model = trained.paths.model_dir("original", 0)
    record = lab_word_retrieval(trained, model, "3", "fake", 60)
    assert record["dictionary"] == "fake" and record["sentences"] == 60
    # what the report's data-size and window axes read: the model's 128 train rows, whole
    assert record["train_rows"] == 128 and record["window"] == 0
    for name in ("trained", "untrained"):
        rows = record[name]
        assert [row["layer"] for row in rows] == list(range(13))
        assert all(0 < row["mrr"] <= 1 and 0 <= row["p1"] <= row["mrr"] for row in rows)
        assert all(row["queries"] == record["dictionary_pairs"] > 50 for row in rows)
    # layer 0 of the original setup: a word and its fake twin differ only in the (separate,
    # untied) word embedding, so the two models differ there too
    assert record["trained"] != record["untrained"]
    # English source words by part of speech (Liu et al. 2020a Table 1), trained model only
    groups = record["trained"][8]["pos"]
    assert set(groups) == {"noun", "verb", "adj", "adv", "closed", "open"}
    assert groups["open"]["queries"] >= groups["noun"]["queries"] > 0
    assert groups["closed"]["queries"] > 0 and 0 < groups["closed"]["mrr"] <= 1
    assert "pos" not in record["untrained"][8]


def test_train_rows_only_under_the_models_own_configuration(trained: Config,
                                                           one_thread: None) -> None:
    """The count is read from the configuration: under another one (here 64 train sentences
    instead of the model's 128) it would be wrong, so it is not recorded."""
    other = replace(trained, train=replace(trained.train, max_train_sentences=64))
    record = lab_word_retrieval(other, trained.paths.model_dir("original", 0), "3", "fake", 10)
    assert record["train_rows"] is None and record["window"] == 0


def test_cli_writes_json_and_logs_to_the_finished_run(trained: Config, one_thread: None,
                                                     capsys, tmp_path: Path) -> None:
    model = str(trained.paths.model_dir("original", 0))
    out = tmp_path / "m"
    assert tracked_model_cli(trained, "mrr", model, "--source", "3", "--target", "fake",
                "--sentences", "30", "--out", str(out)) == 0
    assert "3 -> fake, 30 sentences, fake dictionary" in capsys.readouterr().out
    record = json.loads((out / "word_retrieval.json").read_text())
    run = MlflowClient(tracking.tracking_uri(trained.paths)).get_run(record["run_id"])
    assert run.data.metrics["mrr.3-fake.l8"] == pytest.approx(record["trained"][8]["mrr"])
    assert run.info.status == "FINISHED" and "RUNNING" not in run_statuses(trained)
    assert tracked_model_cli(trained, "mrr", model, "--source", "3", "--target", "xx") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("multilab: error: ") and "\n" not in err and "'xx'" in err


def test_model_order_of_english_and_fake_english(trained: Config, one_thread: None,
                                                         capsys, tmp_path: Path) -> None:
    """The model as the alignment source: English vs Fake-English a mean tau in [0, 1] over
    the verses; the CLI writes it, logs it to the finished run, refuses a missing layer."""
    from multilab.evaluation.model_word_order import model_word_order

    model = trained.paths.model_dir("original", 0)
    record = model_word_order(trained, model, "3", "fake", 40, 8)
    assert record["verses"] == 40 and 0.0 <= record["tau"] <= 1.0
    out = tmp_path / "order.json"
    pair = ("--source", "3", "--target", "fake")
    assert tracked_model_cli(trained, "model-order", str(model), *pair, "--sentences", "20",
                             "--layer", "0", "--out", str(out)) == 0
    assert "3 -> fake, 20 verses, layer 0: tau" in capsys.readouterr().out
    saved = json.loads(out.read_text())
    run = MlflowClient(tracking.tracking_uri(trained.paths)).get_run(saved["run_id"])
    assert run.data.metrics["tau_model.3-fake.l0"] == pytest.approx(saved["tau"])
    assert tracked_model_cli(trained, "model-order", str(model), *pair, "--layer", "13") == 2
    assert "--layer 13: the model has layers 0 … 12" in capsys.readouterr().err


def test_an_inverted_language_is_read_in_the_order_the_model_saw(trained: Config) -> None:
    """inv-order: the target's words come in the order the model read them (reversed), each
    its layer's vector at the position it had in the input."""
    from multilab.evaluation.lab_word_retrieval import language_tokenizers
    from multilab.evaluation.model_word_order import verse_word_vectors
    from multilab.training.model import build_model
    from multilab.training.training_data import study_encoder

    run = resolve_run(trained, "inv-order", 0)
    encoder = study_encoder(run)
    model = build_model(run.model, encoder.total_size, 0).eval()
    tokenizer = language_tokenizers(trained)[0]
    vocab = tokenizer.get_vocab()
    words = [i for t, i in sorted(vocab.items(), key=lambda x: x[1])
             if t.isalpha() and len(t) > 2][:4]
    row = torch.tensor(words)
    fake = verse_word_vectors(model, encoder, [row], 1, tokenizer, 3)[0]
    batch = encoder.batch([row], [1]).model_inputs()
    with torch.no_grad():
        hidden = model.bert(**batch, output_hidden_states=True).hidden_states[3][0]
    assert torch.allclose(torch.as_tensor(fake), hidden[1:5], atol=1e-5)  # input order
    english = verse_word_vectors(model, encoder, [row], 0, tokenizer, 3)[0]
    plain = model.bert(**encoder.batch([row], [0]).model_inputs(),
                       output_hidden_states=True).hidden_states[3][0]
    assert torch.allclose(torch.as_tensor(english), plain[1:5].detach(), atol=1e-5)


def test_fake_to_english_has_its_exact_dictionary(tmp_path) -> None:
    """Issue 53, case 9: `mrr --source fake --target 3` read train.txt as a verse table and
    said "rebuild it"; the copy back to its language is the same exact dictionary."""
    from multilab.errors import UserError
    from multilab.evaluation.lab_word_retrieval import dictionary_of
    from tests.helpers import smoke_config

    cfg = smoke_config(tmp_path)  # languages [3, fake]: nothing built, nothing read
    assert dictionary_of(cfg, 1, 0, []) == ([], "fake")
    assert dictionary_of(cfg, 0, 1, []) == ([], "fake")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UserError, match="only a language and its copy"):
        dictionary_of(cfg, 0, 0, [])

"""Evaluation: the batched metrics equal a per-sentence evaluation of the same model; results
are deterministic, land in JSON and on the model's MLflow run; bad model dirs fail clearly."""

from __future__ import annotations

import json

import pytest
import torch

from multilab import tracking
from multilab.cli import main
from multilab.config import Config
from multilab.data.batches import tokenize_lines
from multilab.data.corpus import read_lines
from multilab.data.inputs import ENGLISH, FAKE, InputEncoder
from multilab.data.vocab import load_tokenizer
from multilab.errors import UserError
from multilab.evaluation import metrics, reference
from multilab.evaluation.evaluate import evaluate_and_record, evaluate_model, multilinguality
from multilab.resolve import resolve_run
from multilab.training.model import build_model, hidden_layers
from multilab.training.train import train_model
from tests.helpers import PARAMS


def _dev(cfg: Config, run, n: int):
    tokenizer = load_tokenizer(cfg.paths.vocab)
    encoder = InputEncoder(run.recipe, len(tokenizer), cfg.train.max_length)
    sentences, _ = tokenize_lines(read_lines(cfg.paths.corpora / "dev.txt")[:n], tokenizer,
                                  encoder)
    return encoder, sentences


@pytest.mark.parametrize("modification", ["original", "inv-order;lang-pos;shift-special"])
def test_batched_metrics_equal_one_sentence_at_a_time(project: Config, modification) -> None:
    run = resolve_run(project, modification, 0)
    model = build_model(run.model, 4096, 0).eval()
    encoder, sentences = _dev(project, run, 60)
    fast = multilinguality(model, encoder, sentences, (0, 8), batch_size=16)

    counts: dict[int, list] = {0: [[], [], []], 8: [[], [], []]}
    pooled: dict[int, list] = {0: [[], []], 8: [[], []]}
    with torch.no_grad():
        for words in sentences:
            n = len(words)
            for lang in (ENGLISH, FAKE):
                batch = encoder.batch([words], [lang])  # no padding at all
                for layer, h in zip((0, 8), hidden_layers(model, batch.model_inputs(), [0, 8]),
                                    strict=True):
                    vectors = h[0, 1 : 1 + n]
                    counts[layer][lang].append(vectors)
                    pooled[layer][lang].append(vectors.mean(dim=0))
            gold = reference.gold_alignment(run.recipe, n)
            counts[0][2].append(gold)
            counts[8][2].append(gold)
    for layer in (0, 8):
        slow = metrics.alignment_score(reference.reference_alignment_counts(*counts[layer]))
        assert fast[f"align_f1.l{layer}"] == pytest.approx(slow.f1, abs=0.01)
        rho = reference.reference_retrieval_p1(torch.stack(pooled[layer][0]),
                                             torch.stack(pooled[layer][1]))
        assert fast[f"retrieval_p1.l{layer}"] == pytest.approx(rho, abs=1 / 60)


def test_untrained_model_is_not_multilingual_and_evaluation_is_deterministic(
    project: Config,
) -> None:
    run = resolve_run(project, "untrained", 0)
    model = build_model(run.model, 4096, 0)
    first = evaluate_model(model, run, dev_sentences=100, train_sentences=100)
    second = evaluate_model(model, run, dev_sentences=100, train_sentences=100)
    first.pop("eval_seconds"), second.pop("eval_seconds")
    assert first == second
    assert first["translation_p1.l0"] < 0.05 and first["retrieval_p1.l0"] < 0.2
    assert first["ppl_dev"] > 1000  # random weights: near the uniform 4096
    assert first["mu"] == pytest.approx(
        (first["retrieval_p1.l0"] + first["retrieval_p1.l8"]
         + first["translation_p1.l0"] + first["translation_p1.l8"]) / 4
    )
    for key, value in first.items():
        if key.startswith(("align", "retrieval", "translation")):
            assert 0.0 <= value <= 1.0, key


def test_lang_pos_models_report_their_position_diagonal(project: Config) -> None:
    """A lang-pos model's evaluation reads its position embeddings (Figures 5 and 8 of Dufter
    & Schütze 2020) from the two halves the encoder uses; a model with shared positions
    has no second half and reports none."""
    from multilab.evaluation import metrics

    run = resolve_run(project, "lang-pos", 0)
    model = build_model(run.model, 4096, 0)
    found = evaluate_model(model, run, dev_sentences=20, train_sentences=20)
    weights = model.bert.embeddings.position_embeddings.weight
    assert {k: found[k] for k in found if k.startswith("position.")} == \
        metrics.position_diagonal(weights, project.train.max_length)
    shared = resolve_run(project, "original", 0)
    plain = evaluate_model(build_model(shared.model, 4096, 0), shared, dev_sentences=20,
                           train_sentences=20)
    assert not any(key.startswith("position.") for key in plain)


def test_all_layers_are_evaluated_and_agree_with_the_default_ones(project: Config) -> None:
    """evaluate.layers = "all" gives every layer 0..12, and layers 0 and 8 equal the default
    evaluation's (the layer choice changes what is reported, not how it is computed)."""
    from dataclasses import replace

    run = resolve_run(project, "original", 0)
    model = build_model(run.model, 4096, 0)
    default = evaluate_model(model, run, dev_sentences=50, train_sentences=50)
    every = replace(project, evaluate=replace(project.evaluate, layers="all"))
    everything = evaluate_model(model, resolve_run(every, "original", 0), dev_sentences=50,
                                train_sentences=50)
    assert {f"retrieval_p1.l{layer}" for layer in range(13)} <= set(everything)
    for key in ("align_f1.l0", "retrieval_p1.l8", "translation_p1.l8", "mu", "ppl_dev"):
        assert everything[key] == pytest.approx(default[key]), key


def test_a_standalone_evaluation_shows_its_parts_and_curve_points_show_none(
    project: Config, monkeypatch
) -> None:
    """`multilab evaluate` takes minutes on a real-language model at every layer: a bar counts
    its parts to the end; a curve point (no label) draws no second bar inside training's."""
    from multilab.evaluation import evaluate

    bars: list[dict] = []

    class Recorder:
        def __init__(self, total: int, desc: str, unit: str) -> None:
            self.seen = {"total": total, "desc": desc, "updates": 0, "parts": []}
            bars.append(self.seen)

        def set_postfix(self, refresh: bool, done: str) -> None:
            self.seen["parts"].append(done)

        def update(self) -> None:
            self.seen["updates"] += 1

        def close(self) -> None:
            self.seen["closed"] = True

    monkeypatch.setattr(evaluate, "progress_bar", Recorder)
    run = resolve_run(project, "original", 0)
    model = build_model(run.model, 4096, 0)
    evaluate_model(model, run, dev_sentences=20, train_sentences=20)
    assert bars == []
    evaluate_model(model, run, dev_sentences=20, train_sentences=20, progress="evaluate x")
    assert bars == [{"total": 4, "desc": "evaluate x", "updates": 4, "closed": True,
                     "parts": ["alignment, retrieval", "translation", "ppl_train", "ppl_dev"]}]
    assert evaluate.verse_parts(1) == 2 and evaluate.verse_parts(3) == 9
    assert not evaluate.has_retrieval(1) and evaluate.has_retrieval(2)  # the rule both read


@pytest.mark.parametrize("value", ["none", [-1, 8], [], "0,x"])
def test_bad_layers_are_one_clear_error(value) -> None:
    from multilab.resolve import parse_layers

    with pytest.raises(UserError, match=r"evaluate\.layers = .*'all'"):
        parse_layers(value)


@pytest.mark.slow  # trains and evaluates a smoke model
def test_evaluate_records_json_and_mlflow(project: Config) -> None:
    experiment = tracking.connect(project.paths, project.experiment)
    model_dir = train_model(resolve_run(project, "original", 0), experiment_id=experiment,
                            progress=False)
    record = evaluate_and_record(project, model_dir)
    saved = json.loads(project.paths.eval_file("original", 0).read_text())
    assert saved == json.loads(json.dumps(record))
    assert saved["metrics"]["ppl_train"] < 4096 and saved["metrics"]["eval_sentences"] == 200
    runs = tracking.search_runs(project.paths, project.experiment)
    row = runs.iloc[0]
    assert row["tags.evaluated"] == "true" and row["status"] == "FINISHED"
    assert row["metrics.mu"] == pytest.approx(saved["metrics"]["mu"])
    steps, value = tracking.metric_history(project.paths, row["run_id"], "align_f1.l8")[-1]
    assert steps == int(row["params.total_steps"])  # logged at the model's final step
    assert value == pytest.approx(saved["metrics"]["align_f1.l8"])


def test_not_a_model_directory_is_one_clear_error(project: Config, tmp_path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="not a finished multilab model"):
        evaluate_and_record(project, tmp_path / "empty")
    code = main(["--params", str(PARAMS), "--set", "profile=smoke", "evaluate",
                 str(tmp_path / "empty")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("multilab: error:")

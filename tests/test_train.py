"""Smoke training: loss goes down, resume gives identical weights, MLflow records it all."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForMaskedLM

from multilab import tracking
from multilab.config import Config
from multilab.data.batches import mask_tokens, seeded_generator, tokenize_lines, training_examples
from multilab.data.inputs import InputEncoder
from multilab.errors import StoppedEarly
from multilab.evaluation import reference
from multilab.lab.modifications import resolve_recipe
from multilab.resolve import resolve_run
from multilab.training.model import MaskedLMObjective, build_model
from multilab.training.model_dir import read_done, run_checkpoint_area
from multilab.training.train import train_model
from multilab.training.training_data import prepare_data


def _weights(model_dir) -> dict[str, torch.Tensor]:
    return AutoModelForMaskedLM.from_pretrained(str(model_dir)).state_dict()


def test_fast_loss_equals_the_full_head_loss(project: Config) -> None:
    run = resolve_run(project, "original", 0)
    data, encoder = prepare_data(run)
    model = build_model(run.model, 4096, 0).eval()
    batch = data.examples.batch(torch.arange(32))
    masked = mask_tokens(batch, encoder, 0.15, run.recipe.replacement, seeded_generator(0))
    fast = MaskedLMObjective(model)(masked.selected, masked.labels, **masked.inputs)
    fast = fast / len(masked.labels)  # the trainer's sum, as the mean the HF loss is
    full = reference.full_head_loss(model, masked.inputs, masked.selected, masked.labels)
    assert torch.allclose(fast, full, atol=1e-5)


def test_nsp_adds_the_batch_mean_of_the_next_sentence_loss(project: Config) -> None:
    """nsp's objective: the summed MLM loss plus weight × the summed NSP loss, where the
    trainer's weight (selected tokens / rows) makes it MLM mean + NSP mean once divided."""
    run = resolve_run(project, "nsp", 0)
    data, encoder = prepare_data(run)
    assert data.examples.next_sentence is not None
    model = build_model(run.model, 4096, 0, next_sentence=True).eval()
    batch = data.examples.batch(torch.arange(32))
    masked = mask_tokens(batch, encoder, 0.15, run.recipe.replacement, seeded_generator(0))
    objective = MaskedLMObjective(model)
    selected = len(masked.labels)
    mlm = objective(masked.selected, masked.labels, **masked.inputs)
    both = objective(masked.selected, masked.labels, next_sentence=masked.next_sentence,
                     nsp_weight=selected / 32, **masked.inputs)
    full = model(**masked.inputs, next_sentence_label=masked.next_sentence)  # HF's own head
    nsp_mean = torch.nn.functional.cross_entropy(full.seq_relationship_logits,
                                                 masked.next_sentence)
    assert torch.allclose(both / selected, mlm / selected + nsp_mean, atol=1e-5)


@pytest.mark.slow  # trains a smoke model
def test_smoke_training_learns_and_is_tracked(project: Config) -> None:
    cfg = project.__class__(**{**project.__dict__})
    run = resolve_run(cfg, "lang-pos;shift-special", 0)
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    model_dir = train_model(run, experiment_id=experiment, progress=False)
    done = read_done(model_dir)
    assert done["modification"] == "lang-pos;shift-special" and done["paper_id"] == "5"
    model = AutoModelForMaskedLM.from_pretrained(str(model_dir))  # save_pretrained format
    assert model.config.vocab_size == 4096 and model.config.max_position_embeddings == 256
    rows = (model_dir / "train_log.csv").read_text().splitlines()[1:]
    losses = [float(r.split(",")[2]) for r in rows]
    assert losses[-1] < losses[0] - 0.3

    runs = tracking.search_runs(cfg.paths, cfg.experiment)
    assert len(runs) == 1
    row = runs.iloc[0]
    assert row["status"] == "FINISHED"
    assert row["tags.paper_id"] == "5" and row["tags.seed"] == "0"
    assert row["tags.profile"] == "smoke" and len(row["tags.data_hash"]) == 16
    assert row["params.recipe.language_positions"] == "True"
    assert row["params.model.hidden_size"] == "64"
    history = tracking.metric_history(cfg.paths, row["run_id"], "train_loss")
    assert len(history) == done["steps"] and history[-1][1] == pytest.approx(losses[-1], 1e-4)

    # the same configuration is never trained twice
    again = train_model(run, experiment_id=experiment, progress=False)
    assert again == model_dir and len(tracking.search_runs(cfg.paths, cfg.experiment)) == 1


def _logging_every_third_step(project: Config) -> Config:
    """MLflow gets rows in batches of 3 steps: a stop between batches must lose none. 128
    sentences: 4 steps an epoch, 8 in all."""
    return replace(project, train=replace(project.train, log_every=3, max_train_sentences=128))


@pytest.fixture(scope="module")
def uninterrupted(built_project, tmp_path_factory) -> dict[str, torch.Tensor]:
    """The weights of the resume tests' run (original, seed 3) trained without a stop, once
    for the module (each test trains its own interrupted run in a project of its own)."""
    from tests.helpers import link_project, smoke_config

    project = smoke_config(link_project(built_project, tmp_path_factory.mktemp("reference")))
    run = resolve_run(_logging_every_third_step(project), "original", 3)
    return _weights(train_model(run, progress=False))


def test_curve_points_survive_a_checkpoint() -> None:
    """A resumed training keeps the curve points taken before the kill (the done file, so
    the train record, holds them all); a checkpoint from before curves were kept has none."""
    from multilab.training.checkpoints import TrainingState

    state = TrainingState("f", 4, "run", [{"step": 4.0, "loss": 1.0}],
                          [{"step": 2.0, "mu": 0.1, "ppl_dev": 90.0}])
    assert TrainingState.of_checkpoint(state.as_checkpoint()) == state
    older = {key: value for key, value in state.as_checkpoint().items() if key != "curve"}
    assert TrainingState.of_checkpoint(older).curve == []


@pytest.mark.slow  # trains a smoke model
@pytest.mark.parametrize("stop_at", [1, 5, 7])  # epoch 1; epoch 2 between and after flushes
def test_resume_gives_identical_weights(project: Config, uninterrupted, tmp_path,
                                        stop_at: int) -> None:
    run = resolve_run(_logging_every_third_step(project), "original", 3)
    experiment = tracking.connect(project.paths, project.experiment)
    interrupted = tmp_path / "interrupted"
    with pytest.raises(StoppedEarly):
        train_model(run, experiment_id=experiment, model_dir=interrupted,
                    stop_after_step=stop_at, progress=False)
    runs = tracking.search_runs(project.paths, project.experiment)
    assert runs.iloc[0]["status"] == "KILLED"  # never left RUNNING
    # every logged step so far is in MLflow (per step, even between log_every flushes)
    logged = tracking.metric_history(project.paths, runs.iloc[0]["run_id"], "train_loss")
    assert [step for step, _ in logged] == list(range(1, stop_at + 1))
    # the checkpoint is a model directory: loadable by transformers as it stands
    area = run_checkpoint_area(run, interrupted)  # outside the model directory (a DVC out)
    (checkpoint,) = area.glob("checkpoint-*")
    partial = AutoModelForMaskedLM.from_pretrained(str(checkpoint))
    state = torch.load(checkpoint / "state.pt", weights_only=False)["model"]
    assert all(torch.equal(state[k], v) for k, v in partial.state_dict().items() if k in state)
    train_model(run, experiment_id=experiment, model_dir=interrupted, progress=False)
    resumed = _weights(interrupted)
    assert all(torch.equal(uninterrupted[k], resumed[k]) for k in uninterrupted)
    runs = tracking.search_runs(project.paths, project.experiment)
    assert len(runs) == 1 and runs.iloc[0]["status"] == "FINISHED"  # the same run continued
    assert not list(area.glob("checkpoint-*")) and not list(interrupted.glob("checkpoint-*"))


@pytest.mark.slow  # trains a smoke model
def test_different_seeds_give_different_models(project: Config, uninterrupted) -> None:
    """Seed 1 against the resume tests' seed 3, everything else the same."""
    seed_1 = _weights(train_model(resolve_run(_logging_every_third_step(project), "original", 1),
                                  progress=False))
    assert not torch.equal(seed_1["bert.embeddings.word_embeddings.weight"],
                           uninterrupted["bert.embeddings.word_embeddings.weight"])


def test_untrained_model_is_saved_without_training(project: Config) -> None:
    model_dir = train_model(resolve_run(project, "untrained", 0), progress=False)
    done = read_done(model_dir)
    assert done["steps"] == 0
    fresh = build_model(resolve_run(project, "untrained", 0).model, 4096, 0).state_dict()
    saved = _weights(model_dir)
    assert all(torch.equal(fresh[k], saved[k]) for k in fresh)


def test_failed_run_ends_failed(project: Config, monkeypatch) -> None:
    import multilab.training.member as member_module

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(member_module, "mask_tokens", broken)
    experiment = tracking.connect(project.paths, project.experiment)
    with pytest.raises(RuntimeError, match="boom"):
        train_model(resolve_run(project, "original", 0), experiment_id=experiment, progress=False)
    runs = tracking.search_runs(project.paths, project.experiment)
    assert runs.iloc[0]["status"] == "FAILED"


def test_tokenize_counts_truncations(project: Config) -> None:
    run = resolve_run(project, "original", 0)
    from multilab.data.vocab import load_tokenizer

    tok = load_tokenizer(project.paths.vocab)
    enc = InputEncoder(resolve_recipe("original"), 2048, 8)
    sentences, truncated = tokenize_lines(["a b c d e f g h i j k", "a b"], tok, enc)
    assert truncated == 1 and len(sentences[0]) == 6 and len(sentences[1]) == 2
    assert len(training_examples(sentences, run.recipe, enc)) == 4


def _by_language(data) -> dict[int, list[list[int]]]:
    out: dict[int, list[list[int]]] = {0: [], 1: []}
    for encoded, language in zip(data.examples.encoded, data.examples.languages, strict=True):
        out[language].append(encoded[0].tolist())
    return out


@pytest.mark.slow  # trains a smoke model
def test_seed_002_rewrites_touch_the_pretraining_corpus_only(project: Config) -> None:
    """permute-1 swaps word-pieces inside each sentence of both languages; unigram-target
    redraws the second language only; the dev set (evaluate's perplexity) never changes."""
    original = _by_language(prepare_data(resolve_run(project, "original", 0))[0])
    permuted = _by_language(prepare_data(resolve_run(project, "permute-1", 0))[0])
    for language in (0, 1):
        pairs = list(zip(original[language], permuted[language], strict=True))
        assert all(sorted(a) == sorted(b) and a[0] == b[0] and a[-1] == b[-1] for a, b in pairs)
        changed = sum(a != b for a, b in pairs if len(a) > 4)
        assert changed > 0.9 * sum(len(a) > 4 for a, _ in pairs)
    assert permuted[0] != permuted[1] or original[0] == original[1]

    unigram = _by_language(prepare_data(resolve_run(project, "unigram-target", 0))[0])
    assert unigram[0] == original[0]
    assert sum(a != b for a, b in zip(original[1], unigram[1], strict=True)) > 0.9 * len(
        unigram[1])
    assert all(min(ids[1:-1]) >= 2048 for ids in unigram[1] if len(ids) > 2)  # Fake's block

    small = replace(project, train=replace(project.train, max_train_sentences=32))
    run = resolve_run(small, "permute-1;unigram-target;lang-id", 0)
    model_dir = train_model(run, progress=False)  # the three together train
    assert read_done(model_dir)["modification"] == "permute-1;unigram-target;lang-id"


@pytest.mark.slow  # trains a smoke model
def test_attend_padding_changes_only_padded_rows_and_trains(project: Config) -> None:
    """The model sees padding under attend-padding: a padded row's hidden states change, a row
    without padding does not; a smoke model trains with whole batches."""
    run = resolve_run(replace(project, train=replace(project.train, length_pieces=1,
                                         max_train_sentences=32)), "attend-padding", 0)
    model = build_model(run.model, 4096, 0).eval()
    encoder = InputEncoder(run.recipe, 2048, run.study.train.max_length)
    plain = InputEncoder(resolve_recipe("original"), 2048, run.study.train.max_length)
    rows = [torch.arange(5, 25), torch.arange(30, 36)]
    with torch.no_grad():
        seen = model(**encoder.batch(rows, [0, 1]).model_inputs()).logits
        masked = model(**plain.batch(rows, [0, 1]).model_inputs()).logits
    assert torch.allclose(seen[0], masked[0], atol=1e-5)  # the widest row has no padding
    assert not torch.allclose(seen[1, :8], masked[1, :8], atol=1e-3)
    model_dir = train_model(run, progress=False)
    assert read_done(model_dir)["modification"] == "attend-padding"


@pytest.mark.slow  # trains a smoke model
def test_an_nsp_model_trains_saves_its_head_and_loads_as_a_masked_lm(project: Config) -> None:
    """nsp trains ``BertForPreTraining`` (pooler + NSP head); its folder loads with
    ``AutoModelForMaskedLM`` (the head left out), so evaluation reads it as any other model,
    on single sentences. ``params-0.5`` (K et al. 2020 Table 6's smaller model) and ``window-8``
    (Liu et al. 2020b's short context: pairs of 8-piece windows) train with it."""
    import json

    from safetensors import safe_open

    from multilab.evaluation.evaluate import evaluate_and_record

    small = replace(project, train=replace(project.train, max_train_sentences=32))
    run = resolve_run(small, "nsp;params-0.5;window-8", 0)
    assert run.model.hidden_size < 64
    model_dir = train_model(run, progress=False)
    assert json.loads((model_dir / "config.json").read_text())["architectures"] == [
        "BertForPreTraining"]
    with safe_open(str(model_dir / "model.safetensors"), "pt") as saved:
        assert "cls.seq_relationship.weight" in set(saved.keys())
    model = AutoModelForMaskedLM.from_pretrained(str(model_dir))
    assert model.config.hidden_size == run.model.hidden_size
    rows = (model_dir / "train_log.csv").read_text().splitlines()[1:]
    assert all(float(r.split(",")[2]) > 0 for r in rows)
    assert int(prepare_data(run)[0].examples.lengths.max()) <= 2 * 8 + 3
    record = evaluate_and_record(small, model_dir)
    assert 0.0 <= record["metrics"]["align_f1.l0"] <= 1.0

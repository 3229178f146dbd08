"""The zero-shot downstream task: its data (by chapter, stratified, the same verses in every
language), the fine-tune (learns, deterministic, picks the best dev epoch), zero-shot scores
in every language, the command line (one-line bad inputs, MLflow run FINISHED with the
metrics), the strict config section and the report's table."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch
from mlflow.tracking import MlflowClient
from tqdm import tqdm

from multilab import tracking
from multilab.config import Config
from multilab.data.book_groups import (
    LABELS,
    SPLITS,
    chapter_of,
    classification_scores,
    split_chapters,
)
from multilab.data.inputs import InputEncoder
from multilab.data.vocab import load_tokenizer, to_fake
from multilab.errors import UserError
from multilab.evaluation.downstream import (
    TIMINGS,
    Encoded,
    downstream_and_record,
    encode_examples,
    fine_tune,
    language_inputs,
    language_label,
    load_classifier,
    predict,
    study_languages,
    task_data,
)
from multilab.lab.languages import parse_languages
from multilab.lab.modifications import resolve_recipe
from multilab.reporting.report import build_report
from multilab.resolve import resolve_run
from multilab.training.model_dir import read_done
from tests.helpers import (
    PARAMS,
    XNLI_EVAL_HEADER,
    fake_run,
    run_statuses,
    saved_weights,
    smoke_config,
    tracked_model_cli,
    tracked_smoke_model,
    write_xnli_fixture,
)

ENGLISH_FAKE = parse_languages(["3", "fake"])


@pytest.fixture(scope="module")
def trained(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Config:
    """A smoke model of 128 sentences (8 steps), tracked in the project's MLflow store."""
    return tracked_smoke_model(built_project, tmp_path_factory.mktemp("downstream"))


def _model(cfg: Config) -> Path:
    return cfg.paths.model_dir("original", 0)


# --------------------------------------------------------------------------- data


def test_task_data_is_split_by_chapter_capped_alike_in_every_language(project: Config) -> None:
    data = task_data(project, ENGLISH_FAKE)
    settings = project.downstream
    assert [len(data[s][ENGLISH_FAKE[0]]) for s in SPLITS] == [
        settings.max_train_verses, settings.max_test_verses, settings.max_test_verses]
    split = split_chapters(settings.split_seed)
    for name in SPLITS:
        english, fake = (data[name][lang] for lang in ENGLISH_FAKE)
        assert [(e.verse_id, e.label, e.text) for e in english] == [
            (e.verse_id, e.label, e.text) for e in fake]  # fake: the same text, ids shifted
        assert all(split[chapter_of(e.verse_id)] == name for e in english)
        assert [e.verse_id for e in english] == sorted(e.verse_id for e in english)
    # a seeded sample of a stratified split: every group in train, a spread in dev and test
    assert {e.label for e in data["train"][ENGLISH_FAKE[0]]} == set(range(len(LABELS)))
    assert len({e.label for e in data["test"][ENGLISH_FAKE[0]]}) >= 4
    again = task_data(project, ENGLISH_FAKE)
    assert [e.verse_id for e in again["test"][ENGLISH_FAKE[1]]] == [
        e.verse_id for e in data["test"][ENGLISH_FAKE[1]]]


def test_uncapped_splits_are_stratified_by_group(project: Config) -> None:
    """The documented 80/10/10 by chapter, per group: each group's share of the verses is
    about the same in train, dev and test (chapters differ in length, so not exactly)."""
    uncapped = replace(project, downstream=replace(project.downstream, max_train_verses=None,
                                                   max_test_verses=None))
    data = task_data(uncapped, ENGLISH_FAKE[:1])
    sizes = {s: len(data[s][ENGLISH_FAKE[0]]) for s in SPLITS}
    assert 0.75 < sizes["train"] / sum(sizes.values()) < 0.85
    shares = {s: Counter(e.label for e in data[s][ENGLISH_FAKE[0]]) for s in SPLITS}
    for label in range(len(LABELS)):
        train = shares["train"][label] / sizes["train"]
        for split in ("dev", "test"):
            assert abs(shares[split][label] / sizes[split] - train) < 0.06, (label, split)


def test_fake_inputs_are_the_id_shifted_english_inputs(project: Config) -> None:
    run = resolve_run(project, "original", 0)
    inputs = language_inputs(project, ENGLISH_FAKE)
    encoder = InputEncoder(run.recipe, len(inputs[0].tokenizer), project.train.max_length)
    examples = task_data(project, ENGLISH_FAKE)["test"]
    english, fake = (encode_examples(examples[how.language], how, encoder, 128)
                     for how in inputs)
    assert english.labels.tolist() == fake.labels.tolist()
    for (e_ids, e_pos, *_), (f_ids, f_pos, *_) in zip(english.encoded, fake.encoded,
                                                      strict=True):
        assert torch.equal(f_ids, to_fake(e_ids, encoder.vocab_size))
        assert torch.equal(e_pos, f_pos) and not torch.equal(e_ids, f_ids)


def test_languages_the_model_cannot_read_fail_in_one_line(project: Config) -> None:
    assert study_languages(project) == ENGLISH_FAKE
    assert language_label(ENGLISH_FAKE[1], ENGLISH_FAKE) == "en-fake"
    assert [language_label(x, parse_languages(["3", "k"])) for x in
            parse_languages(["3", "k"])] == ["en-3", "en-k"]
    for listed, bad in ((["3", "s"], "'s'"), (["k", "fake"], "'k'"),
                        (["3", "enfake"], "'enfake'")):
        with pytest.raises(UserError, match=bad) as err:
            language_inputs(project, parse_languages(listed))
        assert "\n" not in str(err.value) and "valid: [3] or [3, fake]" in str(err.value)


# --------------------------------------------------------------------------- fine-tuning


def _learnable(n: int, vocab: int, seed: int) -> Encoded:
    """Label k ↔ verses made of words 5k+10 … 5k+14: a task a classifier learns at once."""
    generator = torch.Generator().manual_seed(seed)
    encoder = InputEncoder(resolve_recipe("original"), vocab, 16)
    labels = torch.arange(n) % len(LABELS)
    encoded = []
    for label in labels.tolist():
        length = int(torch.randint(3, 9, (1,), generator=generator))
        words = 10 + 5 * label + torch.randint(0, 5, (length,), generator=generator)
        encoded.append(encoder.encode(words, 0))
    return Encoded(encoded, labels, [0] * n, 0)


@pytest.mark.slow  # the module's trained smoke model, fine-tuned
def test_fine_tune_learns_a_learnable_task_and_keeps_the_best_epoch(
    trained: Config, one_thread: None
) -> None:
    model = load_classifier(_model(trained), seed=0)
    saved = saved_weights(_model(trained))  # the classifier keeps the pretrained encoder
    for name, tensor in model.bert.state_dict().items():
        if not name.startswith("pooler."):
            assert torch.equal(tensor, saved[f"bert.{name}"]), name
    vocab = len(load_tokenizer(trained.paths.vocab))
    assert model.config.vocab_size == 2 * vocab
    train, dev = _learnable(320, vocab, 1), _learnable(100, vocab, 2)
    settings = replace(trained.downstream, epochs=4, lr=2e-3)
    with tqdm(disable=True) as bar:
        tuned = fine_tune(model, train, dev, settings, seed=0, bar=bar)
    assert max(tuned.dev_accuracy) > 0.6  # the majority baseline scores 0.2 here
    assert tuned.dev_accuracy[tuned.epoch - 1] == max(tuned.dev_accuracy)
    assert tuned.epoch == 1 + tuned.dev_accuracy.index(max(tuned.dev_accuracy))
    scores = classification_scores(predict(model, dev, 64), dev.labels.tolist())
    assert scores.accuracy == max(tuned.dev_accuracy)  # left at the selected epoch's weights
    other = load_classifier(_model(trained), seed=1)  # another seed: another head, order
    with tqdm(disable=True) as bar:
        again = fine_tune(other, train, dev, replace(settings, epochs=1), seed=1, bar=bar)
    assert again.train_loss[0] != tuned.train_loss[0]


@pytest.mark.slow  # the module's trained smoke model, fine-tuned
def test_same_seed_same_scores_in_every_language(trained: Config, one_thread: None,
                                                 tmp_path: Path) -> None:
    first = downstream_and_record(trained, _model(trained), out=tmp_path / "a.json",
                                  progress=False)
    second = downstream_and_record(trained, _model(trained), out=tmp_path / "b.json",
                                   progress=False)
    for record in (first, second):
        record["metrics"].pop("downstream/seconds")
    assert first["metrics"] == second["metrics"] and first["test"] == second["test"]
    assert first["labels"] == ["en", "en-fake"] and set(first["test"]) == {"en", "en-fake"}
    for label in ("en", "en-fake"):
        assert 0 <= first["metrics"][f"downstream/acc.{label}"] <= 1
        assert 0 <= first["metrics"][f"downstream/f1.{label}"] <= 1
    assert first["verses"] == {"train": 256, "dev": 128, "test": 128}
    assert first["settings"]["seed"] == 0 and len(first["epochs"]["dev_accuracy"]) == 2


@pytest.mark.slow  # the module's trained smoke model, fine-tuned
def test_mds_freezes_the_lower_half_and_reports_the_shift_beside_no_shift(
        trained: Config, one_thread: None, tmp_path: Path, monkeypatch) -> None:
    """Liu et al. 2020b §4.3: the embeddings and layers 1 … L/2 unchanged by fine-tuning (checked on
    the weights the fine-tune leaves), α chosen on the target's dev set from the grid, the
    shifted and the unshifted test accuracy of the same model; its own metric names."""
    from multilab.evaluation import downstream as module

    kept: dict[str, dict[str, torch.Tensor]] = {}
    real_fine_tune = module.fine_tune

    def watched(model, *args, **kwargs):
        kept["before"] = {k: v.clone() for k, v in model.state_dict().items()}
        result = real_fine_tune(model, *args, **kwargs)
        kept["after"] = {k: v.clone() for k, v in model.state_dict().items()}
        return result

    monkeypatch.setattr(module, "fine_tune", watched)
    cfg = replace(trained, downstream=replace(trained.downstream, mds_alphas=(0.0, 1.0, 3.0)))
    record = downstream_and_record(cfg, _model(trained), out=tmp_path / "mds.json",
                                   progress=False, mds=True)
    layers = json.loads((_model(trained) / "config.json").read_text())["num_hidden_layers"]
    assert record["mds"]["layer"] == layers // 2
    frozen = ("bert.embeddings.", *(f"bert.encoder.layer.{i}." for i in range(layers // 2)))
    for name, before in kept["before"].items():
        same = torch.equal(before, kept["after"][name])
        assert same == name.startswith(frozen), name
    shift = record["mds"]["languages"]["en-fake"]
    assert set(shift["dev_accuracy"]) == {"0", "1", "3"}
    best = max(shift["dev_accuracy"].values())
    assert shift["dev_accuracy"][f"{shift['alpha']:g}"] == best
    assert shift["test_unshifted"] == record["test"]["en-fake"]["accuracy"]
    assert 0 <= shift["test_shifted"] <= 1
    assert record["metrics"]["downstream_mds/alpha.en-fake"] == shift["alpha"]
    assert not any(key.startswith("downstream/") for key in record["metrics"])
    assert "en" not in record["mds"]["languages"]  # the fine-tuning language is not shifted


def test_mds_settings_are_strict(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"downstream.mds_alphas = \[\]: must be a list of "
                       "numbers with at least one value"):
        smoke_config(tmp_path, downstream={"mds_alphas": []})
    with pytest.raises(UserError, match=r"downstream\.mds_layer = 0: must be null or an integer"):
        smoke_config(tmp_path, downstream={"mds_layer": 0})


# --------------------------------------------------------------------------- command line


#: what the command line's tests fine-tune on: where the scores go is checked, not what they are
FEW_VERSES = ("downstream.max_train_verses=64", "downstream.max_test_verses=32")


@pytest.mark.slow  # the module's trained smoke model, fine-tuned
def test_cli_logs_to_the_model_run_which_stays_finished(trained: Config, one_thread: None,
                                                        capsys) -> None:
    assert tracked_model_cli(trained, "downstream", str(_model(trained)), extra=FEW_VERSES) == 0
    out = capsys.readouterr().out
    assert "accuracy en" in out and "en-fake" in out and "majority" in out
    record = json.loads(trained.paths.downstream_file("original", 0).read_text())
    run = MlflowClient(tracking.tracking_uri(trained.paths)).get_run(record["run_id"])
    assert run.info.status == "FINISHED"
    assert set(run_statuses(trained)) == {"FINISHED"}
    for key, value in record["metrics"].items():  # timings: tags, not metrics
        assert key in TIMINGS or run.data.metrics[key] == pytest.approx(value)
    assert not set(TIMINGS) & set(run.data.metrics)
    assert float(run.data.tags[tracking.SYS + "downstream/seconds"]) > 0
    assert run.data.tags["downstream.languages"] == "en,en-fake"
    assert run.data.tags["downstream.task"] == record["task"] == "bible-books"
    history = MlflowClient(tracking.tracking_uri(trained.paths)).get_metric_history(
        record["run_id"], "downstream/acc.en")
    # the same values again: no new point
    assert tracked_model_cli(trained, "downstream", str(_model(trained)), extra=FEW_VERSES) == 0
    again = MlflowClient(tracking.tracking_uri(trained.paths)).get_metric_history(
        record["run_id"], "downstream/acc.en")
    assert len(again) == len(history) and again[-1].value == record["metrics"][
        "downstream/acc.en"]
    assert tracked_model_cli(trained, "downstream", str(_model(trained)), "--mds",
                             extra=FEW_VERSES) == 0
    out = capsys.readouterr().out
    assert "shifted (alpha" in out and "frozen below layer" in out and "seed0-mds.json" in out
    mds = json.loads(trained.paths.downstream_file("original", 0).with_name("seed0-mds.json")
                     .read_text())
    run = MlflowClient(tracking.tracking_uri(trained.paths)).get_run(record["run_id"])
    assert run.data.metrics["downstream_mds/acc_shifted.en-fake"] == pytest.approx(
        mds["metrics"]["downstream_mds/acc_shifted.en-fake"])
    assert run.data.metrics["downstream/acc.en"] == pytest.approx(record["metrics"][
        "downstream/acc.en"])  # the plain task's scores stay


@pytest.mark.slow  # the module's trained smoke model, fine-tuned
@pytest.mark.parametrize("case", ["not a model", "unknown language", "no block", "twice"])
def test_cli_bad_inputs_are_one_line_exit_2_nothing_written(trained: Config, tmp_path: Path,
                                                            capsys, case: str) -> None:
    model, extra = str(_model(trained)), []
    if case == "not a model":
        model = str(tmp_path)
    else:
        extra = ["--languages", {"unknown language": "3,xx", "no block": "3,s",
                                 "twice": "3,3"}[case]]
    out = tmp_path / "out.json"
    assert tracked_model_cli(trained, "downstream", model, "--out", str(out), *extra) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("multilab: error: ") and "\n" not in err
    expected = {"not a model": "not a finished multilab model", "unknown language": "'xx'",
                "no block": "no vocabulary block", "twice": "listed twice"}[case]
    assert expected in err
    assert not out.exists() and "RUNNING" not in run_statuses(trained)


def _xnli_settings(root: Path) -> list[str]:
    return ["downstream.task=xnli", f"downstream.task_path={root}"]


@pytest.mark.slow  # the module's trained smoke model, fine-tuned
@pytest.mark.parametrize("case", ["unknown task", "no task_path", "no folder", "missing file",
                                  "malformed row", "no rows"])
def test_cli_bad_xnli_inputs_are_one_line_exit_2_nothing_written(
        trained: Config, tmp_path: Path, capsys, case: str) -> None:
    """Refused before any work: no JSON, nothing logged to the model's run (the task's data
    is read before the tracking store is touched)."""
    root = tmp_path / "xnli"
    if case == "no rows":  # the smoke study reads English; this release lacks it
        write_xnli_fixture(root, languages=("de", "hi"), train_languages=("en",))
    elif case != "no folder":
        write_xnli_fixture(root)
    if case == "missing file":
        (root / "XNLI-1.0/xnli.test.tsv").unlink()
    if case == "malformed row":
        dev = root / "XNLI-1.0/xnli.dev.tsv"
        lines = dev.read_text(encoding="utf-8").splitlines()
        lines[2] = lines[2].rsplit("\t", 1)[0]
        dev.write_text("\n".join(lines) + "\n", encoding="utf-8")
    extra = {"unknown task": ["downstream.task=nli"],
             "no task_path": ["downstream.task=xnli"]}.get(case, _xnli_settings(root))
    run_id = read_done(_model(trained))["run_id"]
    client = MlflowClient(tracking.tracking_uri(trained.paths))
    before = client.get_run(run_id).data
    out = tmp_path / "out.json"
    assert tracked_model_cli(trained, "downstream", str(_model(trained)), "--out", str(out),
                             extra=extra) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("multilab: error: ") and "\n" not in err
    expected = {
        "unknown task": "downstream.task = 'nli': unknown task; valid: bible-books, "
                        "bible-passages, xnli",
        "no task_path": "downstream.task = 'xnli' needs downstream.task_path",
        "no folder": f"downstream.task_path = {root} is not a folder",
        "missing file": f"{root / 'XNLI-1.0/xnli.test.tsv'} is missing",
        "malformed row": f"{root / 'XNLI-1.0/xnli.dev.tsv'}:3: 18 tab-separated columns, the "
                         f"header has {len(XNLI_EVAL_HEADER)}",
        "no rows": "xnli.dev.tsv has no rows of language 'en' (study language English, "
                   "Bible in Basic English 1949); the file has: de, hi",
    }[case]
    assert expected in err
    after = client.get_run(run_id).data
    assert not out.exists() and "RUNNING" not in run_statuses(trained)
    assert (after.metrics, after.tags) == (before.metrics, before.tags)


@pytest.mark.slow  # the module's trained smoke model, fine-tuned
def test_cli_xnli_fine_tunes_on_sentence_pairs_and_tags_the_task(
        trained: Config, one_thread: None, tmp_path: Path, capsys, monkeypatch) -> None:
    """``downstream.task=xnli`` on the smoke model: 3 outputs, premise and hypothesis encoded
    as one pair, the same metric names as the book groups, the task in the JSON and the run's
    tag (so the report names it)."""
    from multilab.evaluation import downstream as module

    root = write_xnli_fixture(tmp_path / "xnli", pairs=12, train_pairs=48)
    heads, pairs = [], []
    real_load, real_pair = module.load_classifier, InputEncoder.encode_pair

    def load(model_dir, seed, num_labels=5):
        heads.append(num_labels)
        return real_load(model_dir, seed, num_labels)

    def pair(self, *args, **kwargs):
        pairs.append(args[2])  # the language number
        return real_pair(self, *args, **kwargs)

    monkeypatch.setattr(module, "load_classifier", load)
    monkeypatch.setattr(InputEncoder, "encode_pair", pair)
    out = tmp_path / "xnli.json"
    assert tracked_model_cli(trained, "downstream", str(_model(trained)), "--out", str(out),
                             extra=_xnli_settings(root)) == 0
    assert "accuracy en" in capsys.readouterr().out
    record = json.loads(out.read_text())
    assert heads == [3] and record["task"] == "xnli"
    assert sorted(Counter(pairs).items()) == [(0, 48 + 12 + 12), (1, 12)]  # train, dev, tests
    assert record["labels"] == ["en", "en-fake"]
    assert record["verses"] == {"train": 48, "dev": 12, "test": 12}
    assert record["settings"]["task"] == "xnli" and record["settings"]["task_path"] == str(root)
    # labels cycle: 16 of each in train (tie: entailment), 4 of each in test; F1 over 3 labels
    assert record["majority"] == {"label": "entailment", "accuracy": pytest.approx(1 / 3),
                                  "macro_f1": pytest.approx(0.5 / 3)}
    for label in ("en", "en-fake"):
        assert 0 <= record["metrics"][f"downstream/acc.{label}"] <= 1
        assert 0 <= record["metrics"][f"downstream/f1.{label}"] <= 1
    run = MlflowClient(tracking.tracking_uri(trained.paths)).get_run(record["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.tags["downstream.task"] == "xnli"
    assert run.data.metrics["downstream/acc.en"] == pytest.approx(
        record["metrics"]["downstream/acc.en"])


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize("value,message", [
    ({"epoch": 3}, "unknown key downstream.epoch (did you mean 'epochs'?)"),
    ({"epochs": 1.5}, "downstream.epochs = 1.5: must be an integer >= 1"),
    ({"lr": 0}, "downstream.lr = 0: must be a number > 0"),
    ({"warmup": 1}, "downstream.warmup = 1: must be a number from 0"),
    ({"seed": -1}, "downstream.seed = -1: must be null or an integer from 0"),
    ({"max_train_verses": 0}, "downstream.max_train_verses = 0: must be null or an integer"),
    ({"max_length": 129}, "downstream.max_length = 129 is more than train.max_length = 128"),
])
def test_config_section_is_strict(tmp_path: Path, value: dict, message: str) -> None:
    with pytest.raises(UserError) as err:
        smoke_config(tmp_path, downstream=value)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_config_defaults_are_seed_000_and_smoke_shrinks(tmp_path: Path) -> None:
    from multilab.resolve import load_config

    quick = load_config(PARAMS).downstream
    assert (quick.epochs, quick.batch_size, quick.lr) == (3, 32, 2e-5)
    smoke = smoke_config(tmp_path).downstream
    assert (smoke.batch_size, smoke.lr) == (32, 2e-5) and smoke.max_train_verses == 256


# --------------------------------------------------------------------------- report


@pytest.mark.slow  # a report of three MLflow runs with its figures (≈ 10 CPU s)
def test_report_has_a_downstream_table_when_results_exist(tmp_path: Path) -> None:
    cfg = smoke_config(tmp_path, seeds=[0, 1], study=["original", "inv-order"])
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    for mod, seed in (("original", 0), ("original", 1), ("inv-order", 0)):
        fake_run(cfg, experiment, mod, seed, 0.5)
    build_report(cfg)
    assert not (cfg.paths.reports / "downstream.md").exists()
    runs = tracking.search_runs(cfg.paths, cfg.experiment)
    values = {("original", "0"): 0.6, ("original", "1"): 0.8}
    for _, run in runs.iterrows():
        key = (run["tags.modification"], run["tags.seed"])
        if key in values:
            tracking.log_final_metrics(cfg.paths, run["run_id"], {
                "downstream/acc.en": values[key], "downstream/f1.en": values[key] / 2,
                "downstream/acc.en-fake": values[key] - 0.4, "downstream/f1.en-fake": 0.1,
                "downstream/majority_acc": 0.29, "downstream/majority_f1": 0.09}, 0)
            tracking.set_tags(cfg.paths, run["run_id"], {"downstream.languages": "en,en-fake"})
    build_report(cfg)
    frame = pd.read_csv(cfg.paths.reports / "downstream.csv").set_index("modification")
    assert frame.loc["original", "acc.en_mean"] == pytest.approx(0.7)
    assert frame.loc["original", "acc.en-fake_mean"] == pytest.approx(0.3)
    assert frame.loc["original", "majority_acc_mean"] == pytest.approx(0.29)
    assert frame.loc["inv-order", "n_seeds"] == 0
    markdown = (cfg.paths.reports / "table1.md").read_text()
    assert "### Downstream" in markdown and "zero-shot: en-fake" in markdown
    assert "| 0 | original | 0.700 ± 0.141 |" in markdown
    assert "1 without a result" in markdown

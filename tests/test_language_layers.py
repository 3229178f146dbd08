"""Conneau et al. 2020's parameter sharing: ``sep-L1-<n>`` (language-specific bottom layers) and
``sep-emb`` (language-specific embeddings): routing, saving and loading, freezing while
fine-tuning, in-language random replacement, the refusals, and a smoke model of each."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForMaskedLM

from multilab.config import ModelConfig
from multilab.data.batches import mask_tokens
from multilab.data.inputs import InputEncoder, collate
from multilab.errors import UserError
from multilab.lab.modifications import ModificationError, resolve_recipe
from multilab.resolve import resolve_run
from multilab.training import language_layers
from multilab.training.language_layers import LanguageLayer, RowLanguages
from multilab.training.model import build_model, load_model
from tests.helpers import link_project, one_torch_thread, smoke_config

VOCAB = 40  # two blocks of 20 ids: 0-19 and 20-39 (five specials at the start of each)
TINY = ModelConfig(hidden_size=16, intermediate_size=32, num_attention_heads=2,
                   num_hidden_layers=4, max_position_embeddings=64)


def _model(layers: int = 2) -> torch.nn.Module:
    return build_model(TINY, VOCAB, seed=0, languages=2, separate_layers=layers,
                       offsets=(0, VOCAB // 2)).eval()


def _rows() -> dict[str, torch.Tensor]:
    ids = torch.tensor([[2, 6, 7, 8, 9, 3],          # language 0 (block 0)
                        [2, 26, 27, 28, 29, 3],      # language 1 (block 1)
                        [2, 6, 7, 30, 9, 3]])        # language 0 with one foreign id
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def test_rows_run_through_their_own_language_s_copies() -> None:
    model = _model()
    assert [type(layer) is LanguageLayer for layer in model.bert.encoder.layer] == [
        True, True, False, False]
    with torch.no_grad():
        before = model.bert(**_rows()).last_hidden_state
        for parameter in model.bert.encoder.layer[0].others.parameters():
            parameter.add_(0.5)  # only language 1's copy of layer 1
        after = model.bert(**_rows()).last_hidden_state
        alone = model.bert(**{k: v[1:2] for k, v in _rows().items()}).last_hidden_state
    assert torch.equal(before[0], after[0]) and torch.equal(before[2], after[2])
    assert not torch.allclose(before[1], after[1])
    assert torch.allclose(alone[0], after[1], atol=1e-5)  # the same alone as in a mixed batch
    with torch.no_grad():  # one record per layer of the whole batch (no copy adds its own)
        hidden = model.bert(**_rows(), output_hidden_states=True).hidden_states
    assert len(hidden) == 5 and all(h.shape == after.shape for h in hidden)
    assert torch.equal(hidden[-1], after)


def test_a_row_s_language_is_the_block_of_most_of_its_words() -> None:
    languages = RowLanguages([0, 20])
    languages.read(_rows()["input_ids"])
    assert languages.rows.tolist() == [0, 1, 0]
    languages.read(torch.tensor([[2, 3, 0, 0], [22, 23, 20, 20]]))  # specials only
    assert languages.rows.tolist() == [0, 0]


def test_saved_model_loads_with_every_copy_and_plain_loading_reads_the_first(
        tmp_path: Path) -> None:
    model = _model(3)
    with torch.no_grad():
        for parameter in model.bert.encoder.layer[1].others.parameters():
            parameter.add_(0.3)
        expected = model.bert(**_rows()).last_hidden_state
    model.save_pretrained(tmp_path)
    loaded = load_model(tmp_path).eval()
    assert loaded.config.multilab_separate_layers == 3
    plain = AutoModelForMaskedLM.from_pretrained(str(tmp_path)).eval()
    with torch.no_grad():
        assert torch.allclose(loaded.bert(**_rows()).last_hidden_state, expected, atol=1e-6)
        mixed = plain.bert(**_rows()).last_hidden_state
    assert torch.allclose(mixed[0], expected[0], atol=1e-6)  # the first language: the same
    assert not torch.allclose(mixed[1], expected[1], atol=1e-3)  # the second: English layers


def test_fine_tuning_leaves_the_language_specific_parts_as_pretrained(tmp_path: Path) -> None:
    from multilab.evaluation.downstream import load_classifier

    _model(2).save_pretrained(tmp_path)
    classifier = load_classifier(tmp_path, seed=0, num_labels=3)
    frozen = language_layers.freeze_language_specific(classifier, embeddings=True)
    specific = [*classifier.bert.encoder.layer[:2].parameters(),
                classifier.bert.embeddings.word_embeddings.weight,
                classifier.bert.embeddings.position_embeddings.weight]
    assert frozen == sum(p.numel() for p in
                         [*classifier.bert.encoder.layer[:2].parameters(),
                          *classifier.bert.embeddings.word_embeddings.parameters(),
                          *classifier.bert.embeddings.position_embeddings.parameters(),
                          *classifier.bert.embeddings.token_type_embeddings.parameters()])
    kept = [p.detach().clone() for p in specific]
    shared = classifier.bert.encoder.layer[3].output.dense.weight.detach().clone()
    optimizer = torch.optim.AdamW([p for p in classifier.parameters() if p.requires_grad],
                                  lr=0.1)
    loss = classifier(**_rows(), labels=torch.tensor([0, 1, 2])).loss
    loss.backward()
    optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(kept, specific, strict=True))
    assert not torch.equal(shared, classifier.bert.encoder.layer[3].output.dense.weight)


def test_sep_emb_draws_random_replacements_within_the_row_s_language() -> None:
    recipe = resolve_recipe("sep-emb")
    encoder = InputEncoder(recipe, 20, 16, (0, 20), 40)
    encoded = [encoder.encode(torch.arange(5, 15), language) for language in (0, 1)]
    batch = collate(encoded, [0, 1])
    masked = mask_tokens(batch, encoder, 1.0, (0.0, 0.0, 1.0), torch.Generator().manual_seed(0))
    ids = masked.inputs["input_ids"]
    words = batch.word_mask
    assert bool(((ids[0][words[0]] >= 0) & (ids[0][words[0]] < 20)).all())
    assert bool(((ids[1][words[1]] >= 20) & (ids[1][words[1]] < 40)).all())
    assert recipe.language_positions and recipe.shift_special


@pytest.mark.parametrize(("overrides", "modification", "says"), [
    ({}, "sep-L1-13", "the model has 12 layers; valid: sep-L1-<n> with n <= 12"),
    ({"evaluate": {"layers": "all"}}, "depth-4+sep-L1-6", "the model has 4 layers"),
    ({"languages": ["3", "s"], "vocab": {"mode": "joint"}}, "sep-L1-3",
     "tells languages apart by their blocks of ids"),
    ({"languages": ["s"]}, "sep-L1-3", "acts between languages; [s] has one"),
    ({}, "sep-L1-0", "n = 0 is outside [1, 48]"),
])
def test_sharing_modifications_are_refused_where_they_cannot_apply(
        tmp_path: Path, overrides: dict, modification: str, says: str) -> None:
    with pytest.raises((ModificationError, UserError)) as err:
        resolve_run(smoke_config(tmp_path, **overrides), modification, 0)
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow  # ≈ 30 s: two smoke models trained, each fine-tuned
def test_sharing_rows_train_and_transfer_on_the_smoke_profile(built_project: Path,
                                                              tmp_path: Path) -> None:
    from multilab.evaluation.downstream import downstream_model
    from multilab.evaluation.evaluate import evaluate_model
    from multilab.training.train import train_model

    cfg = smoke_config(link_project(built_project, tmp_path),
                       train={"max_train_sentences": 128, "eval_points": []},
                       evaluate={"dev_sentences": 100},
                       downstream={"epochs": 1, "max_train_verses": 64,
                                   "max_test_verses": 64})
    for modification in ("sep-L1-3", "sep-emb+sep-L1-6"):
        run = resolve_run(cfg, modification, 0)
        with one_torch_thread():
            model_dir = train_model(run, progress=False)
            model = load_model(model_dir)
            assert sum(type(layer) is LanguageLayer for layer in model.bert.encoder.layer) == (
                run.recipe.separate_layers)
            metrics = evaluate_model(model, run)
            record = downstream_model(cfg, model_dir, run, cfg.language_list, progress=False)
        assert all(0.0 <= value <= 1.0 for key, value in metrics.items()
                   if key.startswith(("f1_", "rho_", "tau_")))
        assert set(record["test"]) == {"en", "en-fake"}


# --------------------------------------------------------------------------- extra anchors


def test_code_switching_rates_and_cap() -> None:
    """30 % of the dictionary words switched, never more than 15 % of a sentence's words."""
    from multilab.data.transforms import code_switch

    sentences = [[f"w{i % 7}" for i in range(40)] for _ in range(300)]
    dictionary = {f"w{i}": f"x{i}" for i in range(7)}
    switched = code_switch(sentences, [dictionary], torch.Generator().manual_seed(0),
                           rate=0.3, cap=1.0)
    share = sum(w.startswith("x") for s in switched for w in s) / (300 * 40)
    assert 0.27 < share < 0.33  # the rate, uncapped
    capped = code_switch(sentences, [dictionary], torch.Generator().manual_seed(0))
    assert all(sum(w.startswith("x") for w in s) <= 6 for s in capped)  # 15 % of 40
    assert [w for s in capped for w in s if w.startswith("x")]
    assert code_switch([["a", "b"]], [dictionary], torch.Generator()) == [["a", "b"]]


@pytest.mark.slow  # code-switching two whole gospels (≈ 10 CPU s)
def test_extra_anchors_switch_english_and_german_with_a_silver_dictionary() -> None:
    from multilab.data import bible
    from multilab.data.batches import code_switched_lines

    english = [t for _, t in bible.read_verses("3", (41, 41))]
    german = [t for _, t in bible.read_verses("s", (41, 41))]
    lines, sizes = code_switched_lines([english, german], seed=0)
    assert sizes[0] == 0 and sizes[1] > 100
    again, _ = code_switched_lines([english, german], seed=0)
    assert again == lines and code_switched_lines([english, german], seed=1)[0] != lines
    german_words = {w for line in german for w in line.split()}
    switched = [w for line in lines[0] for w in line.split()
                if w in german_words and w not in {x for e in english for x in e.split()}]
    assert len(switched) > 100  # German words now in English verses


@pytest.mark.parametrize(("overrides", "says"), [
    ({}, "valid with: real languages of the Bible, vocab.mode = 'joint'"),
    ({"languages": ["3", "s"]}, "vocab.mode = 'joint'"),
])
def test_extra_anchors_are_refused_without_a_joint_vocabulary(tmp_path: Path, overrides: dict,
                                                              says: str) -> None:
    with pytest.raises(ModificationError, match="extra-anchors") as err:
        resolve_run(smoke_config(tmp_path, **overrides), "extra-anchors", 0)
    assert says in str(err.value)
    run = resolve_run(smoke_config(tmp_path, languages=["3", "s"], vocab={"mode": "joint"}),
        "extra-anchors", 0)
    assert run.recipe.code_switch

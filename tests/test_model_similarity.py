"""`multilab similarity` (Conneau et al. 2020 §5): two models on parallel verses, layer by layer,
beside the same measures on untrained models of their shapes. Tiny untrained BERTs suffice to check
the wiring: a twin edition (King James vs KJV2000) is more similar than German."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from multilab import tracking
from multilab.cli import main
from multilab.config import Paths
from multilab.data.parallel import read_edition
from multilab.data.vocab import save_tokenizer, train_wordpiece
from multilab.errors import UserError
from multilab.evaluation.model_similarity import (
    MEASURES,
    aligned_occurrences,
    compare_models,
    contextual_word_by_layer,
)
from multilab.reporting.similarity_section import similarity_section
from tests.helpers import cli_args, smoke_config

EDITIONS = ("k", "2", "s")


def _tiny(out: Path, texts: list[str], seed: int, layers: int = 2) -> Path:
    save_tokenizer(train_wordpiece(texts, 1200, exact=False), out)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=1200, hidden_size=32, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=130)
    BertForMaskedLM(config).save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    verses = {code: [text for _, text in read_edition(code)[:2000]] for code in EDITIONS}
    root = tmp_path_factory.mktemp("similarity")
    return {"english": _tiny(root / "en", verses["k"] + verses["2"], 1),
            "german": _tiny(root / "de", verses["s"], 2),
            "deep": _tiny(root / "deep", verses["s"], 3, layers=3)}


def _verses(code: str, count: int) -> list[str]:
    return [text for _, text in read_edition(code)[:count]]


def test_curves_per_layer_with_an_untrained_floor(models: dict[str, Path]) -> None:
    twin = compare_models(models["english"], models["english"], _verses("k", 80),
                          _verses("2", 80))
    other = compare_models(models["english"], models["german"], _verses("k", 80),
                           _verses("s", 80))
    for record in (twin, other):
        assert record["layers"] == [0, 1, 2] and record["verses"] == 80
        for kind in ("trained", "untrained"):
            for measure in ("sentence_retrieval", "cka", "word_translation", "contextual_word"):
                assert len(record[kind][measure]) == 3
                assert all(0.0 <= v <= 1.0 + 1e-9 for v in record[kind][measure])
    # one model reading two near-identical editions: near-identical verse vectors
    assert min(twin["trained"]["cka"]) > 0.9 and twin["trained"]["sentence_retrieval"][0] > 0.9
    assert other["trained"]["sentence_retrieval"][0] < twin["trained"]["sentence_retrieval"][0]
    # word level: a silver dictionary between two editions (mostly w -> w for the twins, whose
    # identical words have identical embeddings: layer 0 retrieves them)
    assert twin["dictionary"]["kind"] == other["dictionary"]["kind"] == "silver"
    assert twin["trained"]["word_translation"][0] > 0.8
    assert other["trained"]["word_translation"][0] < twin["trained"]["word_translation"][0]
    # contextual word level: aligned occurrences of the dictionary's words, retrieved among
    # each other; one model on near-identical verses finds most of its own occurrences (the
    # misses: the same word in another held-out verse), two unrelated models far fewer
    assert twin["aligned_occurrences"] > other["aligned_occurrences"] > 20
    assert twin["trained"]["contextual_word"][-1] > max(
        0.5, 3 * twin["untrained"]["contextual_word"][-1])
    assert other["trained"]["contextual_word"][-1] < twin["trained"]["contextual_word"][-1]


def test_aligned_occurrences_are_unique_and_one_to_one() -> None:
    pairs = [("god", "gott"), ("and", "und"), ("light", "licht"), ("was", "war"),
             ("was", "ward"), ("day", "licht")]
    verses_a = [["and", "god", "said", "light", "and"], ["was", "day", "light"]]
    verses_b = [["und", "gott", "sprach", "licht", "und"], ["war", "ward", "licht"]]
    # verse 0: "and" occurs twice (no link), god-gott and light-licht once each;
    # verse 1: "was" has two partners present (no link), "day" and "light" both claim "licht"
    assert aligned_occurrences(verses_a, verses_b, pairs).tolist() == [[0, 1, 1], [0, 3, 3]]


def test_contextual_retrieval_learns_the_map_on_the_training_verses_only() -> None:
    rng = np.random.default_rng(0)
    verses, per_verse, layers, d = 40, 5, 2, 8
    vectors_a = [rng.normal(size=(per_verse, layers, d)).astype(np.float32)
                 for _ in range(verses)]
    rotation = np.linalg.qr(rng.normal(size=(d, d)))[0]
    # B is A rotated at layer 0 (recoverable by Procrustes) and noise at layer 1
    vectors_b = [np.stack([v[:, 0] @ rotation, rng.normal(size=(per_verse, d))], 1)
                 for v in vectors_a]
    aligned = np.array([(v, k, k) for v in range(verses) for k in range(per_verse)])
    layer0, layer1 = contextual_word_by_layer(vectors_a, vectors_b, aligned, 0.5, 0)
    assert layer0 == pytest.approx(1.0) and layer1 < 0.2
    with pytest.raises(UserError, match="aligned word occurrences"):
        contextual_word_by_layer(vectors_a, vectors_b, aligned[:2], 0.5, 0)


def test_one_edition_read_by_both_models_uses_the_identity_dictionary(
        models: dict[str, Path]) -> None:
    same = compare_models(models["english"], models["german"], _verses("k", 60),
                          _verses("k", 60), same_edition=True)
    assert same["dictionary"]["kind"] == "identity" and same["dictionary"]["pairs"] > 50


def _settings(tmp_path: Path) -> list[str]:
    return ["profile=smoke", f"paths.reports={tmp_path / 'reports'}",
            f"paths.mlruns={tmp_path / 'mlruns'}", f"paths.results={tmp_path / 'results'}"]


@pytest.mark.slow  # models trained for the module
def test_command_writes_figures_json_and_an_mlflow_run(models: dict[str, Path], tmp_path: Path,
                                                       capsys) -> None:
    args = ["similarity", str(models["english"]), str(models["german"]), "--languages", "k,s",
            "--verses", "40"]
    assert main(cli_args(_settings(tmp_path), *args)) == 0, capsys.readouterr().err
    folder = tmp_path / "reports" / "similarity" / "k-s"
    record = json.loads((folder / "similarity.json").read_text())
    assert record["editions"] == ["k", "s"] and record["verses"] == 40
    for name in ("sentence_retrieval.png", "cka.png", "word_translation.png",
                 "contextual_word.png"):
        assert (folder / name).read_bytes()[:4] == b"\x89PNG"
    args[4] = "k,2"  # a second pair: Figure 2 draws a line for each
    assert main(cli_args(_settings(tmp_path), *args)) == 0, capsys.readouterr().err
    assert "Figure 2 over 2 pair(s)" in capsys.readouterr().out
    assert (folder.parent / "figure2-word_translation.png").read_bytes()[:4] == b"\x89PNG"
    # k-s again, its JSON elsewhere: its line replaces the earlier k-s, not a third line
    elsewhere = tmp_path / "elsewhere"
    assert main(cli_args(_settings(tmp_path), *args[:4], "k,s", "--verses", "40",
                         "--out", str(elsewhere))) == 0, capsys.readouterr().err
    assert "Figure 2 over 2 pair(s)" in capsys.readouterr().out
    assert (elsewhere / "similarity.json").is_file()
    runs = tracking.search_runs(Paths(mlruns=tmp_path / "mlruns"),
                                tracking.similarity_experiment("smoke"))
    assert runs["status"].tolist() == ["FINISHED"] * 3
    first = runs[runs["params.editions"] == "k,s"].iloc[-1]  # the first k-s run (newest first)
    assert first["metrics.cka"] == pytest.approx(record["trained"]["cka"][-1])
    assert first["params.dictionary"] == "silver"
    # the report gathers both pairs: a table row per pair and measure, Figure 2's panels
    cfg = smoke_config(tmp_path)
    section, figures = similarity_section(cfg)
    assert section.count("| k–s | 40 | silver") == 4 and section.count("| k–2 | 40 |") == 4
    assert "| contextual word retrieval P@1 |" in section
    assert sorted(p.name for p in figures) == [f"figure2-{m}.png" for m in sorted(MEASURES)]
    assert all(p.parent == cfg.paths.figures and p.read_bytes()[:4] == b"\x89PNG"
               for p in figures)


@pytest.mark.parametrize(("which", "extra", "says"), [
    ("german", ["--languages", "k"], "name two editions"),
    ("german", ["--languages", "k,x"], "unknown Bible edition 'x'"),
    ("german", ["--languages", "k,s", "--verses", "3"], "--verses 3: must be >= 4"),
    ("deep", ["--languages", "k,s"], "has 2 layers and"),
])
def test_bad_input_is_one_line_exit_2(models: dict[str, Path], tmp_path: Path, capsys,
                                      which: str, extra: list[str], says: str) -> None:
    verses = [] if "--verses" in extra else ["--verses", "40"]
    args = ["similarity", str(models["english"]), str(models[which]), *extra, *verses]
    assert main(cli_args(_settings(tmp_path), *args)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("multilab: error: ") and "\n" not in err and says in err, err
    assert not (tmp_path / "reports").exists()

"""K et al. 2020 Table 10: `vocab.unit: word | char` beside the WordPiece default, for the
sentence setup (English + Fake-English) and for real languages; train, evaluate and the
downstream task follow the tokenization because they all read the built vocabulary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from multilab.cli import main
from multilab.data.layout import read_verse_table
from multilab.data.tokenizers import SPECIAL_TOKENS, paper_word_vocab_size
from multilab.data.vocab import load_tokenizer, train_tokens
from multilab.lab.enfake import bert_word_counts
from tests.helpers import cli_args, config_of

LINES = ["In the beginning God made the heaven and the earth .",
         "And the earth was waste and without form ;", "God saw the light ."]


def test_word_and_char_units_on_a_tiny_corpus() -> None:
    words = train_tokens(LINES, 2048, "word")
    assert tuple(words[:5]) == SPECIAL_TOKENS and words[5] == "the"  # most frequent first
    assert len(words) == 5 + len(set(" ".join(LINES).split()))  # capped: every word, no more
    assert len(train_tokens(LINES, 6, "word")) == 10  # 5/3 x 6 = 10: the paper's ratio
    chars = train_tokens(LINES, 2048, "char")
    assert "G" in chars and "##o" in chars and not any(len(t.lstrip("#")) > 1
                                                       for t in chars[5:])
    assert train_tokens(LINES, 2048, "char") == chars  # deterministic


def _settings(root: Path, built: Path, languages: str, unit: str) -> list[str]:
    (root / "data").symlink_to(built / "data")
    values = {"profile": "smoke", "languages": languages, "study": "[original]",
              "seeds": "[0]", "vocab.unit": unit,
              **{f"paths.{n}": root / n for n in ("data", "artifacts", "reports", "metrics",
                                                  "mlruns", "results")},
              "corpus.dev_sentences": 200, "train.max_train_sentences": 64,
              "train.eval_points": "[]", "evaluate.dev_sentences": 100,
              "downstream.epochs": 1, "downstream.max_train_verses": 32,
              "downstream.max_test_verses": 32}
    return [f"{k}={v}" for k, v in values.items()]


@pytest.mark.slow  # corpus, vocab, a 2-step model and its evaluation, twice
@pytest.mark.parametrize(("languages", "unit"), [("[3,fake]", "char"), ("[3,s]", "word")])
def test_a_study_trains_and_evaluates_on_word_or_char_units(
        built_project: Path, tmp_path: Path, one_thread: None, capsys,
        languages: str, unit: str) -> None:
    settings = _settings(tmp_path, built_project, languages, unit)
    cfg = config_of(settings)
    model = str(cfg.paths.model_dir("original", 0))
    commands = [["corpus", "build"], ["vocab"], ["train", "--modification", "original",
                                                  "--seed", "0"], ["evaluate", model]]
    if languages != "[3,fake]":
        commands.append(["downstream", model])
    for command in commands:
        assert main(cli_args(settings, *command)) == 0, (command, capsys.readouterr().err)
    if unit == "char":
        tokenizer = load_tokenizer(cfg.paths.vocab)
        assert tokenizer.tokenize("Jesus") == ["J", "##e", "##s", "##u", "##s"]
        assert len(tokenizer) < 200
    else:
        tokenizer = load_tokenizer(cfg.paths.vocab, "language-0")
        assert tokenizer.tokenize("Jesus said") == ["Jesus", "said"]
        assert tokenizer.tokenize("Jesusx") == ["[UNK]"]  # an unseen word: one [UNK]
        assert len(tokenizer) > 1000
    metrics = json.loads(cfg.paths.eval_file("original", 0).read_text())["metrics"]
    assert metrics["eval_sentences"] == 100


@pytest.mark.slow  # corpora and a joint word vocabulary of two languages (≈ 6 CPU s)
def test_a_joint_word_vocabulary_scales_from_every_language(
        built_project: Path, tmp_path: Path, one_thread: None, capsys) -> None:
    """Joint word-pieces get `vocab.size` ids per language; joint words must stand to them as
    the paper's 100k to its 60k, so they scale from the same total, not from one language."""
    settings = [*_settings(tmp_path, built_project, "[3,s]", "word"), "vocab.mode=joint"]
    cfg = config_of(settings)
    for command in (["corpus", "build"], ["vocab"]):
        assert main(cli_args(settings, *command)) == 0, (command, capsys.readouterr().err)
    _, texts = read_verse_table(cfg.paths.corpora / "train.txt")
    words = len(bert_word_counts(t for column in ("3", "s") for t in texts[column]))
    expected = min(paper_word_vocab_size(2 * cfg.vocab.size), words + len(SPECIAL_TOKENS))
    assert expected > paper_word_vocab_size(cfg.vocab.size)  # the case the test is about
    assert len(load_tokenizer(cfg.paths.vocab, "language-0")) == expected


def test_an_unknown_unit_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    settings = [f"paths.{n}={tmp_path / n}" for n in ("artifacts", "mlruns", "results")]
    assert main(cli_args([*settings, "vocab.unit=bpe"], "check")) == 2
    err = capsys.readouterr().err.strip()
    assert err == "multilab: error: vocab.unit = 'bpe'; valid: wordpiece, word, char"

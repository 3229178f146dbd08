"""Character- and word-level tokenizers (K et al. 2020 Table 10): specials, vocabularies, loading
with AutoTokenizer, byte-identical files across processes, the scaled word vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from multilab.data.tokenizers import (
    SPECIAL_TOKENS,
    build_char_tokenizer,
    build_word_tokenizer,
    paper_word_vocab_size,
    token_coverage,
    words_for_coverage,
)
from multilab.data.vocab import save_tokenizer
from multilab.lab.enfake import bert_word_counts
from tests.helpers import files_of_fresh_processes

CORPUS = [
    "And Jesus said to them , Come after me .",
    "And Jesus went up into the mountain , and the people came to him .",
    "The son of David , the son of Abraham .",
    "Peter said to him , Lord , where are you going ?",
    "And he said , Go !",
    "zeta eta theta iota kappa",  # ties: every one of these words occurs once
]
PAD, UNK, CLS, SEP, MASK = range(5)


def one_line_error(excinfo: pytest.ExceptionInfo[ValueError]) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message
    return message


def test_word_counts_follow_the_bert_pre_tokenizer() -> None:
    counts = bert_word_counts(["Lord's house, 12"])
    assert counts == {"Lord": 1, "'": 1, "s": 1, "house": 1, ",": 1, "12": 1}


def test_word_tokenizer_keeps_the_most_frequent_words(tmp_path: Path) -> None:
    counts = bert_word_counts(CORPUS)
    size = 5 + 6
    tokenizer = build_word_tokenizer(CORPUS, size)
    vocab = tokenizer.get_vocab()
    assert len(vocab) == size
    assert [tokenizer.id_to_token(i) for i in range(5)] == list(SPECIAL_TOKENS)
    kept = [tokenizer.id_to_token(i) for i in range(5, size)]
    assert kept == [",", ".", "And", "said", "the", "to"]  # by count, then code point
    assert min(counts[w] for w in kept) >= max(c for w, c in counts.items() if w not in kept)
    save_tokenizer(tokenizer, tmp_path / "word")
    loaded = AutoTokenizer.from_pretrained(str(tmp_path / "word"))
    assert len(loaded) == size
    ids = loaded("And the mountain said")["input_ids"]
    assert ids == [CLS, vocab["And"], vocab["the"], UNK, vocab["said"], SEP]
    pair = loaded("said", "the", return_token_type_ids=True)
    assert pair["input_ids"] == [CLS, vocab["said"], SEP, vocab["the"], SEP]
    assert pair["token_type_ids"] == [0, 0, 0, 1, 1]
    assert loaded.mask_token_id == MASK and loaded.pad_token_id == PAD
    lines = (tmp_path / "word" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert lines == [*SPECIAL_TOKENS, *kept]


def test_char_tokenizer_spells_words_with_continuation_pieces(tmp_path: Path) -> None:
    tokenizer = build_char_tokenizer(CORPUS)
    save_tokenizer(tokenizer, tmp_path / "char")
    loaded = AutoTokenizer.from_pretrained(str(tmp_path / "char"))
    assert loaded.convert_ids_to_tokens(list(range(5))) == list(SPECIAL_TOKENS)
    jesus = ["J", "##e", "##s", "##u", "##s"]
    assert loaded.tokenize("Jesus said") == [*jesus, "s", "##a", "##i", "##d"]
    ids = loaded("Jesus said")["input_ids"]
    assert loaded.decode(ids, skip_special_tokens=True) == "Jesus said"
    characters = {ch for s in CORPUS for ch in s if not ch.isspace()}
    vocab = loaded.get_vocab()
    assert all(ch in vocab or "##" + ch in vocab for ch in characters)
    assert all(len(t.removeprefix("##")) == 1 for t in vocab if t not in SPECIAL_TOKENS)
    assert loaded.tokenize("Jesus X") == [*jesus, "[UNK]"]


@pytest.mark.parametrize("size", [5, 4, 5 + 200])
def test_impossible_word_vocabulary_size_fails_in_one_line(size: int) -> None:
    with pytest.raises(ValueError) as excinfo:
        build_word_tokenizer(CORPUS, size)
    assert f"size {size}" in one_line_error(excinfo)


@pytest.mark.slow  # two fresh processes
def test_tokenizer_files_are_byte_identical_across_fresh_processes(tmp_path: Path) -> None:
    """No hash-map order leaks into the files: two processes with different hash seeds."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS * 3), encoding="utf-8")
    script = (
        "import sys; from pathlib import Path; "
        "from multilab.data.tokenizers import build_char_tokenizer, build_word_tokenizer; "
        "from multilab.data.vocab import save_tokenizer; "
        "lines = Path(sys.argv[1]).read_text(encoding='utf-8').splitlines(); "
        "out = Path(sys.argv[2]); "
        "save_tokenizer(build_word_tokenizer(lines, 25), out / 'word'); "
        "save_tokenizer(build_char_tokenizer(lines), out / 'char')"
    )
    written = files_of_fresh_processes(script, [str(corpus)],
                                       [tmp_path / "seed1", tmp_path / "seed2"])
    assert written[0] == written[1]
    assert {str(f) for f in written[0]} >= {"word/tokenizer.json", "char/tokenizer.json"}


def test_paper_word_vocabulary_scaled_by_the_word_to_wordpiece_ratio() -> None:
    assert paper_word_vocab_size(60_000) == 100_000
    assert paper_word_vocab_size(2048) == 3413
    with pytest.raises(ValueError):
        paper_word_vocab_size(0)


def test_coverage_helpers_agree() -> None:
    counts = bert_word_counts(CORPUS)
    assert token_coverage(counts, len(counts)) == 1.0
    assert token_coverage(counts, 0) == 0.0
    for share in (0.2, 0.5, 0.9, 1.0):
        words = words_for_coverage(counts, share)
        assert token_coverage(counts, words) >= share > token_coverage(counts, words - 1)
    with pytest.raises(ValueError) as excinfo:
        words_for_coverage(counts, 1.5)
    assert "(0, 1]" in one_line_error(excinfo)

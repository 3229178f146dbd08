"""The spaces stage on a tiny synthetic corpus: outputs, knn table, atomicity, vocab checks."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from multilab.config import SpacesConfig
from multilab.data.tokenizers import SPECIAL_TOKENS
from multilab.errors import UserError
from multilab.spaces import fasttext_spaces, vecmap

SUBJECTS = ["the", "a"], ["man", "woman", "child", "king", "servant", "lamb"]
VERBS = ["saw", "took", "gave", "heard", "loved", "##ed"]
OBJECTS = ["bread", "water", "word", "house", "city", "gold"]
PLACES = ["in", "at", "near"], ["Jerusalem", "Galilee", "night", "morning"]
ABSENT = ["zebra", "##qx"]  # in the vocabulary, never in the corpus
VOCAB = [
    *SPECIAL_TOKENS, *SUBJECTS[0], *SUBJECTS[1], *VERBS, *OBJECTS, *PLACES[0], *PLACES[1],
    ".", ",", *ABSENT,
]
K = 2
CONFIG = SpacesConfig(dim=16, epochs=1, min_count=1, window=3, threads=1, knn_k=K,
                      fake_shuffle_seed=1, vecmap_seed=0, vecmap_max_iterations=20)


def grammar_sentences(count: int = 300, seed: int = 0) -> list[list[str]]:
    """Sentences of a tiny grammar: DET NOUN VERB DET NOUN [PREP PLACE] ."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(count):
        sentence = [rng.choice(SUBJECTS[0]), rng.choice(SUBJECTS[1]), rng.choice(VERBS),
                    rng.choice(SUBJECTS[0]), rng.choice(OBJECTS)]
        if rng.random() < 0.5:
            sentence += [rng.choice(PLACES[0]), rng.choice(PLACES[1])]
        if rng.random() < 0.3:
            sentence += [",", rng.choice(SUBJECTS[1]), rng.choice(VERBS)]
        sentences.append([*sentence, "."])
    return sentences


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out_dir = tmp_path_factory.mktemp("stage") / "spaces"
    metrics = fasttext_spaces.build_spaces(grammar_sentences(), VOCAB, out_dir, CONFIG)
    return out_dir, metrics


def test_outputs_and_metrics(built: tuple[Path, dict]) -> None:
    out_dir, metrics = built
    names = {"en.vec", "fake.vec", "en.mapped.vec", "fake.mapped.vec", "knn.pt", "metrics.json"}
    assert {p.name for p in out_dir.iterdir()} == names
    assert [p.name for p in out_dir.parent.iterdir()] == ["spaces"]  # no staging left over
    for key in ("precision_at_1_nn", "precision_at_1_csls",
                "precision_at_1_identity_before_mapping", "iterations", "objective",
                "seconds_fasttext", "seconds_vecmap", "vocab_size"):
        assert key in metrics
    assert metrics["vocab_size"] == len(VOCAB)
    assert metrics["words_mapped"] == len(VOCAB) - len(SPECIAL_TOKENS) - len(ABSENT)
    assert metrics["iterations"] == CONFIG.vecmap_max_iterations
    assert json.loads((out_dir / "metrics.json").read_text()) == pytest.approx(metrics)

    en_words, en_vectors = vecmap.read_vec(out_dir / "en.vec")
    fake_words, _ = vecmap.read_vec(out_dir / "fake.vec")
    assert en_words == VOCAB and en_vectors.shape == (len(VOCAB), CONFIG.dim)
    assert fake_words == ["::" + w for w in VOCAB]
    mapped_words, en_mapped = vecmap.read_vec(out_dir / "en.mapped.vec")
    fake_mapped_words, fake_mapped = vecmap.read_vec(out_dir / "fake.mapped.vec")
    assert mapped_words == VOCAB and fake_mapped_words == fake_words
    absent = [VOCAB.index(w) for w in ABSENT]
    assert en_mapped[absent].abs().sum() == 0 and fake_mapped[absent].abs().sum() == 0
    assert en_mapped[len(SPECIAL_TOKENS):].norm(dim=1).gt(0).sum() == metrics["words_mapped"]


def test_knn_table_points_into_the_other_language(built: tuple[Path, dict]) -> None:
    out_dir, _ = built
    size = len(VOCAB)
    table = fasttext_spaces.load_knn_table(out_dir, VOCAB)
    assert table.shape == (2 * size, K) and table.dtype == torch.long
    assert (table[:size] >= size).all() and (table[:size] < 2 * size).all()
    assert (table[size:] < size).all() and (table[size:] >= 0).all()
    twins = list(range(len(SPECIAL_TOKENS))) + [VOCAB.index(w) for w in ABSENT]
    for i in twins:
        assert table[i].tolist() == [i + size] * K
        assert table[i + size].tolist() == [i] * K
    # Neighbours of trained words are trained words, never specials or absent words.
    trained = [i for i in range(size) if i not in twins]
    assert not set(table[trained].flatten().tolist()) & {i + size for i in twins}
    assert not set(table[[i + size for i in trained]].flatten().tolist()) & set(twins)


def test_rebuild_is_byte_identical(built: tuple[Path, dict], tmp_path: Path) -> None:
    """Same corpus and settings → the same bytes in every versioned output (one fastText
    thread, our seeded initial vectors, a seeded CPU mapping); only timings differ."""
    out_dir, metrics = built
    again = fasttext_spaces.build_spaces(grammar_sentences(), VOCAB, tmp_path / "spaces", CONFIG)
    for name in ("en.vec", "fake.vec", "en.mapped.vec", "fake.mapped.vec", "knn.pt"):
        assert (out_dir / name).read_bytes() == (tmp_path / "spaces" / name).read_bytes(), name
    timings = {"seconds_fasttext", "seconds_vecmap"}
    assert {k: v for k, v in again.items() if k not in timings} == {
        k: v for k, v in metrics.items() if k not in timings
    }


def test_spaces_are_independent_before_mapping(built: tuple[Path, dict]) -> None:
    """The two languages start from different random vectors and see differently ordered
    text, so before mapping a word's nearest Fake word is rarely its twin."""
    out_dir, metrics = built
    _, en_vectors = vecmap.read_vec(out_dir / "en.vec")
    _, fake_vectors = vecmap.read_vec(out_dir / "fake.vec")
    assert not torch.allclose(en_vectors, fake_vectors)
    assert metrics["precision_at_1_identity_before_mapping"] < 0.2


def test_knn_table_is_csls_in_mapped_space() -> None:
    en = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])
    fake = torch.tensor([[0.0, 1.0], [1.0, 0.1], [0.6, 0.8]])
    en_rows, fake_rows = [5, 6, 7], [6, 5, 7]  # English ids of the trained words
    table = fasttext_spaces.knn_table(en, fake, en_rows, fake_rows, vocab_size=8, k=4)
    assert table.shape == (16, 4)
    expected = vecmap.csls_topk(vecmap.unit_length(en), vecmap.unit_length(fake), 1)[:, 0]
    assert table[5:8, 0].tolist() == [fake_rows[j] + 8 for j in expected.tolist()]
    assert table[0].tolist() == [8] * 4 and table[8].tolist() == [0] * 4
    assert set(table[5].tolist()) == {13, 14, 15}  # k > words: neighbours repeat


def test_fake_corpus_is_prefixed_and_shuffled() -> None:
    sentences = grammar_sentences(50)
    fake = fasttext_spaces.fake_corpus(sentences, shuffle_seed=1)
    assert fake == fasttext_spaces.fake_corpus(sentences, shuffle_seed=1)
    assert fake != [["::" + t for t in s] for s in sentences]
    assert sorted(fake) == sorted(["::" + t for t in s] for s in sentences)


def test_vocab_mismatch_is_one_clear_line(built: tuple[Path, dict]) -> None:
    out_dir, _ = built
    other = [*VOCAB[:10], "ox", *VOCAB[11:]]
    with pytest.raises(UserError) as err:
        fasttext_spaces.load_knn_table(out_dir, other)
    message = str(err.value)
    assert "\n" not in message and repr(VOCAB[10]) in message and "'ox'" in message
    with pytest.raises(UserError, match="has 3 words but the tokenizer has 4"):
        fasttext_spaces.check_space_vocab(["a", "b", "c"], ["a", "b", "c", "d"])
    with pytest.raises(UserError, match="not found"):
        fasttext_spaces.load_knn_table(out_dir.parent / "missing", VOCAB)


def test_failed_build_leaves_old_outputs_untouched(tmp_path: Path, monkeypatch) -> None:
    out_dir = tmp_path / "spaces"
    out_dir.mkdir()
    (out_dir / "knn.pt").write_text("old")

    def broken_mapping(*args, **kwargs):
        raise RuntimeError("killed")

    monkeypatch.setattr(fasttext_spaces.vecmap, "map_unsupervised", broken_mapping)
    with pytest.raises(RuntimeError, match="killed"):
        fasttext_spaces.build_spaces(grammar_sentences(40), VOCAB, out_dir, CONFIG)
    assert [p.name for p in tmp_path.iterdir()] == ["spaces"]
    assert [p.name for p in out_dir.iterdir()] == ["knn.pt"]
    assert (out_dir / "knn.pt").read_text() == "old"

    monkeypatch.undo()  # a successful rebuild swaps the whole folder in
    fasttext_spaces.build_spaces(grammar_sentences(40), VOCAB, out_dir, CONFIG)
    assert [p.name for p in tmp_path.iterdir()] == ["spaces"]
    assert fasttext_spaces.load_knn_table(out_dir, VOCAB).shape == (2 * len(VOCAB), K)

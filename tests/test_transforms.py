"""K et al. 2020's language transforms: unicode Fake-English, word-order swaps, unigram corpora,
next-sentence pairs."""

from __future__ import annotations

import importlib
import math
import unicodedata
from collections import Counter

import pytest
import torch
from tokenizers import normalizers, pre_tokenizers

from multilab.data.transforms import (
    next_sentence_pairs,
    permute_word_order,
    swap_pair_count,
    unigram_sentences,
)
from multilab.lab.enfake import (
    ENFAKE_SHIFT,
    ENFAKE_SOURCE,
    bert_words,
    shift_code_points,
    unicode_fake,
    unshift_code_points,
)

NORMALIZER = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
PRE_TOKENIZER = pre_tokenizers.BertPreTokenizer()
PRINTABLE_ASCII = "".join(chr(c) for c in range(0x21, 0x7F))
SENTENCES = [
    "And Jesus said to them, Come after me, and I will make you fishers of men.",
    "The Lord's house (in 12 cities) was full; \"Go!\" said he: 'now' - 3.5% of 100.",
    "Και λέγει αυτοίς· Ελάτε οπίσω μου",  # monotonic Greek (polytonic U+1Fxx is outside)
    "И говорит им: идите за Мною, и Я сделаю вас ловцами человеков.",
    "यीशु ने उनसे कहा, मेरे पीछे चले आओ",  # Devanagari with combining vowel signs
    "tab\tand  double  spaces\nnew line",
    PRINTABLE_ASCII,
]


def one_line_error(excinfo: pytest.ExceptionInfo[ValueError]) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message
    return message


def pre_tokenized(text: str) -> list[str]:
    return [w for w, _ in PRE_TOKENIZER.pre_tokenize_str(NORMALIZER.normalize_str(text))]


# --- unicode shift (enfake) -------------------------------------------------------------


@pytest.mark.parametrize("text", SENTENCES)
def test_shift_is_invertible_and_keeps_whitespace(text: str) -> None:
    shifted = shift_code_points(text)
    assert unshift_code_points(shifted) == text
    assert len(shifted) == len(text)
    for original, fake in zip(text, shifted, strict=True):
        if original.isspace():
            assert fake == original
        else:
            assert ord(fake) == ord(original) + ENFAKE_SHIFT


def test_shift_of_every_printable_ascii_character_is_a_tangut_letter() -> None:
    """Digits and punctuation are shifted too (K et al. 2020: "each character"), into one
    assigned letter block, far from surrogates and the Private Use Areas."""
    for ch in shift_code_points(PRINTABLE_ASCII):
        assert 0x17000 <= ord(ch) <= 0x187F7  # the Tangut ideograph block
        assert unicodedata.category(ch) == "Lo" and ch.isprintable()


def test_shifted_text_shares_no_character_with_the_originals() -> None:
    originals = {ch for text in SENTENCES for ch in text if not ch.isspace()}
    fakes = {ch for text in SENTENCES for ch in unicode_fake(text) if not ch.isspace()}
    assert fakes and not fakes & originals


@pytest.mark.parametrize("text", SENTENCES)
def test_unicode_fake_survives_the_bert_pipeline_word_for_word(text: str) -> None:
    """Same number of words as the original under the lab's normalizer + pre-tokenizer,
    each word the shift of the original word; the normalizer leaves the fake text alone."""
    fake = unicode_fake(text)
    assert NORMALIZER.normalize_str(fake) == fake
    fake_words = pre_tokenized(fake)
    assert len(fake_words) == len(pre_tokenized(text)) == len(bert_words(text))
    assert fake_words == [shift_code_points(w) for w in pre_tokenized(text)]
    assert unshift_code_points(fake) == " ".join(pre_tokenized(text))


def test_a_whole_shift_of_attached_punctuation_would_merge_words() -> None:
    """Why unicode_fake splits punctuation off first: a shifted apostrophe is a letter."""
    text = "the Lord's house"
    assert len(pre_tokenized(text)) == 5
    assert len(pre_tokenized(shift_code_points(text))) == 3
    assert len(pre_tokenized(unicode_fake(text))) == 5


def test_private_use_area_would_be_deleted_by_the_bert_normalizer() -> None:
    """The obvious target range does not work: BertNormalizer drops Private Use characters,
    and the shift refuses any target the pipeline would not keep."""
    assert NORMALIZER.normalize_str(chr(0xF0061) + chr(0x100061)) == ""
    with pytest.raises(ValueError) as excinfo:
        shift_code_points("a", shift=0xF0000)
    assert "U+0061" in one_line_error(excinfo)


@pytest.mark.parametrize("text", ["a—b", "中文", "Việt", "caf\U00017000", "\U0001f600"])
def test_characters_outside_the_shiftable_range_fail_in_one_line(text: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        shift_code_points(text)
    message = one_line_error(excinfo)
    assert f"U+{ENFAKE_SOURCE[0]:04X}–U+{ENFAKE_SOURCE[1]:04X}" in message


def test_unshift_rejects_a_text_that_was_not_shifted() -> None:
    with pytest.raises(ValueError) as excinfo:
        unshift_code_points("plain English")
    one_line_error(excinfo)


def _train_wordpiece():
    """The lab's deterministic WordPiece trainer (moving to data/ in the refactor)."""
    for name in ("multilab.data.vocab", "multilab.vocab"):
        try:
            return importlib.import_module(name).train_wordpiece
        except (ImportError, AttributeError):
            continue
    pytest.skip("no multilab WordPiece trainer found")


def test_enfake_wordpiece_is_the_english_wordpiece_shifted() -> None:
    """Because the shift keeps code-point order, a WordPiece trained on the fake corpus
    learns, id for id, the shifted English vocabulary: the unicode Fake-English gives the
    same id sequences as Dufter & Schütze 2020's id-shift Fake-English (with separate
    vocabularies)."""
    train_wordpiece = _train_wordpiece()
    english = [s for s in SENTENCES if s.isascii()] * 3
    fake = [unicode_fake(s) for s in english]
    size = 200
    en, fk = train_wordpiece(english, size), train_wordpiece(fake, size)
    for i in range(5, size):
        token = fk.id_to_token(i)
        prefix = "##" if token.startswith("##") else ""
        assert prefix + unshift_code_points(token.removeprefix("##")) == en.id_to_token(i)
    en_ids = [e.ids for e in en.encode_batch(english)]
    assert en_ids == [e.ids for e in fk.encode_batch(fake)]


# --- word-order permutation ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "p", "pairs"),
    [
        (0, 1.0, 0),
        (1, 1.0, 0),
        (3, 0.25, 0),  # 0.375 rounds down
        (4, 0.25, 1),  # 0.5 rounds half up
        (10, 0.25, 1),  # 1.25
        (10, 0.5, 3),  # 2.5 rounds half up
        (10, 1.0, 5),
        (7, 1.0, 3),  # 3.5 → 4, capped at 7 // 2 disjoint pairs
        (12, 0.0, 0),
    ],
)
def test_swap_pair_count_rounds_half_up_and_caps_at_disjoint_pairs(
    length: int, p: float, pairs: int
) -> None:
    assert swap_pair_count(length, p) == pairs


@pytest.mark.parametrize("p", [0.0, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("length", [1, 2, 7, 12, 31])
def test_permutation_swaps_exactly_the_counted_disjoint_pairs(length: int, p: float) -> None:
    ids = torch.arange(100, 100 + length)
    before = ids.clone()
    out = permute_word_order(ids, p, torch.Generator().manual_seed(length))
    assert torch.equal(ids, before)  # input untouched
    assert torch.equal(out.sort().values, ids)  # a permutation of the same word-pieces
    moved = int((out != ids).sum())
    assert moved == 2 * swap_pair_count(length, p)
    position = out - 100
    assert torch.equal(position[position], torch.arange(length))  # disjoint swaps: involution


def test_full_permutation_of_an_even_sentence_moves_every_word_piece() -> None:
    ids = torch.arange(20)
    assert bool((permute_word_order(ids, 1.0, torch.Generator().manual_seed(0)) != ids).all())


def test_permutation_is_seeded() -> None:
    ids = torch.arange(40)
    first = permute_word_order(ids, 0.5, torch.Generator().manual_seed(7))
    again = permute_word_order(ids, 0.5, torch.Generator().manual_seed(7))
    other = permute_word_order(ids, 0.5, torch.Generator().manual_seed(8))
    assert torch.equal(first, again) and not torch.equal(first, other)


@pytest.mark.parametrize("p", [-0.1, 1.5, math.nan])
def test_permutation_amount_outside_zero_one_fails_in_one_line(p: float) -> None:
    with pytest.raises(ValueError) as excinfo:
        permute_word_order(torch.arange(5), p, torch.Generator().manual_seed(0))
    assert "[0, 1]" in one_line_error(excinfo)


def test_permutation_takes_one_sentence() -> None:
    with pytest.raises(ValueError) as excinfo:
        permute_word_order(torch.zeros(2, 3, dtype=torch.long), 0.5, torch.Generator())
    one_line_error(excinfo)


# --- unigram-frequency corpus -----------------------------------------------------------


def test_unigram_sentences_keep_lengths_and_vocabulary() -> None:
    corpus = ["a b c", "", "d a a a", "e"]
    out = unigram_sentences(corpus, torch.Generator().manual_seed(0))
    assert [len(s.split()) for s in out] == [3, 0, 4, 1]
    assert {w for s in out for w in s.split()} <= {"a", "b", "c", "d", "e"}
    assert out == unigram_sentences(corpus, torch.Generator().manual_seed(0))


def test_unigram_sentences_follow_the_unigram_frequencies() -> None:
    corpus = ["a a a b"] * 2000  # P(a) = 3/4
    out = unigram_sentences(corpus, torch.Generator().manual_seed(1))
    counts = Counter(w for s in out for w in s.split())
    assert sum(counts.values()) == 8000
    assert abs(counts["a"] / 8000 - 0.75) < 0.02  # sd 0.005
    assert out != corpus  # i.i.d. draws, not the original order


def test_unigram_sentences_of_an_empty_corpus() -> None:
    assert unigram_sentences(["", " "], torch.Generator()) == ["", ""]


# --- next-sentence pairs ----------------------------------------------------------------


def test_next_sentence_pairs_are_half_true_half_random() -> None:
    n = 20_000
    pairs = next_sentence_pairs(n, torch.Generator().manual_seed(0))
    assert len(pairs) == n - 1
    assert torch.equal(pairs.first, torch.arange(n - 1))
    label = pairs.next_sentence_label
    assert abs(float(label.float().mean()) - 0.5) < 0.02  # sd 0.0035
    true, random = label == 0, label == 1
    assert torch.equal(pairs.second[true], pairs.first[true] + 1)
    rand_first, rand_second = pairs.first[random], pairs.second[random]
    assert not bool((rand_second == rand_first).any() | (rand_second == rand_first + 1).any())
    assert int(rand_second.min()) >= 0 and int(rand_second.max()) <= n - 1
    # uniform over the corpus: each tenth of the corpus gets about a tenth of the draws
    share = torch.bincount(rand_second * 10 // n, minlength=10).float() / len(rand_second)
    assert bool(((share - 0.1).abs() < 0.015).all())


def test_next_sentence_pairs_are_seeded() -> None:
    a = next_sentence_pairs(100, torch.Generator().manual_seed(3))
    b = next_sentence_pairs(100, torch.Generator().manual_seed(3))
    assert torch.equal(a.second, b.second)
    assert torch.equal(a.next_sentence_label, b.next_sentence_label)


def test_true_pairs_never_cross_a_document_boundary() -> None:
    documents = ["Mt"] * 50 + ["Mk"] * 50
    pairs = next_sentence_pairs(100, torch.Generator().manual_seed(0), documents)
    assert 49 not in pairs.first.tolist() and len(pairs) == 98


@pytest.mark.parametrize("count", [0, 1, 2])
def test_next_sentence_pairs_need_three_sentences(count: int) -> None:
    with pytest.raises(ValueError) as excinfo:
        next_sentence_pairs(count, torch.Generator())
    assert f"got {count}" in one_line_error(excinfo)


def test_next_sentence_pairs_need_a_document_of_two_sentences() -> None:
    with pytest.raises(ValueError) as excinfo:
        next_sentence_pairs(3, torch.Generator(), documents=["a", "b", "c"])
    one_line_error(excinfo)

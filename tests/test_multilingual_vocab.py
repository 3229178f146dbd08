"""Vocabularies of N languages: separate id blocks (today's layout for [3, fake]), joint, or
the union of per-language WordPieces (Conneau et al. 2020's default-anchors)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from multilab.data import bible
from multilab.data.multilingual_vocab import (
    JOINT,
    UNION,
    UNREACHABLE,
    build_blocks,
    minimum_size,
    to_block,
    tokenizer_tokens,
    union_tokens,
    vocabulary,
)
from multilab.data.tokenizers import SPECIAL_TOKENS
from multilab.data.vocab import (
    _save_bert_tokenizer,
    fake_tokens,
    load_tokenizer,
    to_fake,
    train_wordpiece,
)
from multilab.errors import UserError
from multilab.lab.enfake import bert_words
from multilab.lab.languages import parse_languages

SIZE = 400


@pytest.fixture(scope="module")
def texts() -> dict[str, list[str]]:
    return {code: [t for _, t in bible.read_verses(code, (43, 43))[:300]] for code in "3si"}


def test_english_and_fake_is_today_s_bilingual_vocabulary(texts: dict[str, list[str]]) -> None:
    langs = parse_languages(["3", "fake"])
    blocks = build_blocks(langs, {langs[0]: texts["3"]}, SIZE)
    tokenizer = train_wordpiece(texts["3"], SIZE)
    english = [tokenizer.id_to_token(i) for i in range(SIZE)]
    assert vocabulary(blocks) == english + fake_tokens(english)
    assert [b.offset for b in blocks] == [0, SIZE]
    assert blocks[1].tokenizer_of == langs[0]
    ids = torch.tensor([2, 17, 300, 3])
    for shift in (False, True):
        assert torch.equal(to_block(ids, SIZE, shift), to_fake(ids, SIZE, shift))


def test_separate_blocks_of_three_languages(texts: dict[str, list[str]]) -> None:
    langs = parse_languages(["3", "s", "i", "fake:s"])
    train = {lang: texts[lang.edition] for lang in langs[:3]}
    blocks = build_blocks(langs, train, SIZE)
    assert [b.offset for b in blocks] == [0, SIZE, 2 * SIZE, 3 * SIZE]
    vocab = vocabulary(blocks)
    assert len(vocab) == 4 * SIZE
    assert vocab[SIZE : SIZE + 5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert blocks[3].tokens == tuple("::" + t for t in blocks[1].tokens)
    hindi = set(blocks[2].tokens[5:])
    assert any("\u0900" <= ch <= "\u097f" for t in hindi for ch in t)
    assert build_blocks(langs, train, SIZE) == blocks  # deterministic


def test_joint_block_is_shared(texts: dict[str, list[str]]) -> None:
    langs = parse_languages(["3", "s", "fake"])
    blocks = build_blocks(langs, {lang: texts[lang.edition] for lang in langs[:2]}, SIZE, JOINT)
    assert [b.offset for b in blocks] == [0, 0, SIZE]
    assert blocks[0].tokens == blocks[1].tokens
    assert len(vocabulary(blocks)) == 2 * SIZE


def _own(text: list[str]) -> list[str]:
    tokenizer = train_wordpiece(text, SIZE)
    return [tokenizer.id_to_token(i) for i in range(SIZE)]


def test_union_block_shares_identical_strings_only(texts: dict[str, list[str]]) -> None:
    """``vocab.mode: union``: a WordPiece per language, their union at offset 0 (each string
    once, English's ids unchanged), fake a shifted copy of the union cut by its base."""
    langs = parse_languages(["3", "s", "fake"])
    blocks = build_blocks(langs, {lang: texts[lang.edition] for lang in langs[:2]}, SIZE, UNION)
    english, spanish = _own(texts["3"]), _own(texts["s"])
    union = blocks[0].tokens
    assert blocks[1].tokens == union and len(set(union)) == len(union)
    assert list(union[:SIZE]) == english  # the first language's ids are its own
    assert list(union[SIZE:]) == [t for t in spanish if t not in set(english)]  # in order
    assert set(union) == set(english) | set(spanish)
    shared = (set(english) & set(spanish)) - set(SPECIAL_TOKENS)
    assert len(shared) >= 20 and SIZE < len(union) < 2 * SIZE
    assert [b.offset for b in blocks] == [0, 0, len(union)]
    assert blocks[0].learned == tuple(english) and blocks[1].learned == tuple(spanish)
    assert blocks[2].tokens == tuple("::" + t for t in union) and not blocks[2].learned
    assert blocks[2].tokenizer_of == langs[0] and blocks[1].tokenizer_of == langs[1]
    assert vocabulary(blocks) == [*union, *("::" + t for t in union)]
    again = build_blocks(langs, {lang: texts[lang.edition] for lang in langs[:2]}, SIZE, UNION)
    assert again == blocks  # deterministic
    assert union_tokens([["a", "b"], ["c", "a", "d"], ["d", "e"]]) == ("a", "b", "c", "d", "e")


def test_union_tokenizers_cut_by_their_own_wordpiece(texts: dict[str, list[str]],
                                                     tmp_path: Path) -> None:
    """Each language's tokenizer yields exactly its own WordPiece's pieces, at their union ids:
    a string both learned has one id, a string only one learned is produced only by its
    tokenizer (the other's holds an unreachable placeholder there), even on the other's text,
    and on text spelling a placeholder."""
    langs = parse_languages(["3", "s"])
    blocks = build_blocks(langs, {lang: texts[lang.edition] for lang in langs}, SIZE, UNION)
    union = blocks[0].tokens
    index = {t: i for i, t in enumerate(union)}
    for block in blocks:
        _save_bert_tokenizer(tokenizer_tokens(block), tmp_path / block.language.edition)
    saved = {code: load_tokenizer(tmp_path, code) for code in "3s"}
    own = {code: train_wordpiece(texts[code], SIZE) for code in "3s"}
    trap = " ".join(UNREACHABLE.format(i) for i in (SIZE, SIZE + 1, 7))
    for code in "3s":
        vocab = tokenizer_tokens(blocks["3s".index(code)])
        assert len(vocab) == len(union) and vocab[:5] == list(SPECIAL_TOKENS)
        learned = {index[t] for t in own[code].get_vocab()}
        for line in [*texts["3"][:150], *texts["s"][:150], trap, "¿Dónde está Jesús?"]:
            ids = saved[code](line, add_special_tokens=False)["input_ids"]
            pieces = own[code].encode(line, add_special_tokens=False).tokens
            assert ids == [index[p] for p in pieces], (code, line)
            assert set(ids) <= learned
    spanish_only = next(t for t in union[SIZE:] if not t.startswith("##") and len(t) > 3)
    assert tokenizer_tokens(blocks[0])[index[spanish_only]] == UNREACHABLE.format(
        index[spanish_only])
    assert saved["s"](spanish_only, add_special_tokens=False)["input_ids"] == [
        index[spanish_only]]
    assert index[spanish_only] not in saved["3"](spanish_only, add_special_tokens=False)[
        "input_ids"]
    both = next(t for t in union[5:SIZE] if t in own["s"].get_vocab() and t.isalpha()
                and len(t) > 2)
    assert (saved["3"](both, add_special_tokens=False)["input_ids"]
            == saved["s"](both, add_special_tokens=False)["input_ids"] == [index[both]])
    for code in "3s":  # byte-identical when built again
        rebuilt = tmp_path / f"again-{code}"
        _save_bert_tokenizer(tokenizer_tokens(blocks["3s".index(code)]), rebuilt)
        for name in ("vocab.txt", "tokenizer.json"):
            assert (rebuilt / name).read_bytes() == (tmp_path / code / name).read_bytes()


def test_sizes(texts: dict[str, list[str]]) -> None:
    words = [w for t in texts["3"] for w in bert_words(t)]
    smallest = minimum_size(words)
    assert smallest == 5 + len({w[0] for w in words}) + len({c for w in words for c in w[1:]})
    with pytest.raises(UserError, match="too small"):
        build_blocks(parse_languages(["3"]), {parse_languages(["3"])[0]: texts["3"]}, 100_000)
    with pytest.raises(ValueError, match="unknown vocabulary mode"):
        build_blocks(parse_languages(["3"]), {}, SIZE, "shared")

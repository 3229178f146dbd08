"""Vocabularies of N languages: separate id blocks (today's layout for [3, fake]) or joint."""

from __future__ import annotations

import pytest
import torch

from multilab.data import bible
from multilab.data.languages import parse_languages
from multilab.data.multilingual_vocab import (
    JOINT,
    build_blocks,
    minimum_size,
    to_block,
    vocabulary,
)
from multilab.data.transforms import bert_words
from multilab.data.vocab import fake_tokens, to_fake, train_wordpiece
from multilab.errors import UserError

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


def test_sizes(texts: dict[str, list[str]]) -> None:
    words = [w for t in texts["3"] for w in bert_words(t)]
    smallest = minimum_size(words)
    assert smallest == 5 + len({w[0] for w in words}) + len({c for w in words for c in w[1:]})
    with pytest.raises(UserError, match="too small"):
        build_blocks(parse_languages(["3"]), {parse_languages(["3"])[0]: texts["3"]}, 100_000)
    with pytest.raises(ValueError, match="unknown vocabulary mode"):
        build_blocks(parse_languages(["3"]), {}, SIZE, "shared")

"""The real-language library pieces composed at smoke size (two real languages + fake, a few
hundred verses): languages → aligned corpora → id blocks → model ids; the downstream task."""

from __future__ import annotations

import torch

from multilab.data import bible
from multilab.data.book_groups import SPLITS, task_examples
from multilab.data.languages import parse_languages
from multilab.data.multilingual_vocab import build_blocks, to_block, vocabulary
from multilab.data.parallel import dev_corpora, train_corpora
from multilab.data.vocab import bert_pipeline
from multilab.evaluation.verse_retrieval import retrieval_matrix

SIZE = 300


def test_two_real_languages_and_fake_end_to_end() -> None:
    langs = parse_languages(["3", "s", "fake"])
    verses = {code: bible.read_verses(code, (1, 1)) + bible.read_verses(code, (41, 41))
              for code in ("3", "s")}  # fmt: skip
    train = train_corpora(langs, verses)
    dev = dev_corpora(langs, verses, size=200)
    assert len({len(v) for v in train.values()}) == 1 and len(train[langs[0]]) > 200
    blocks = build_blocks(langs, {lang: [t for _, t in train[lang]] for lang in langs[:2]}, SIZE)
    assert len(vocabulary(blocks)) == 3 * SIZE

    from tokenizers import Tokenizer, models

    vectors = {}
    for block in blocks:
        own = next(b for b in blocks if b.language == block.tokenizer_of)
        vocab = {t: i for i, t in enumerate(own.tokens)}
        tokenizer = bert_pipeline(Tokenizer(models.WordPiece(vocab, unk_token="[UNK]")))
        rows = []
        for _, text in dev[block.language]:
            ids = to_block(torch.tensor(tokenizer.encode(text).ids), block.offset)
            body = ids[ids >= 5]
            assert bool(((body >= block.offset) & (body < block.offset + SIZE)).all())
            rows.append(torch.bincount(body % SIZE, minlength=SIZE).float())
        vectors[block.language.iso] = torch.stack(rows)
    matrix = retrieval_matrix(vectors)
    # bag-of-pieces vectors: fake is English's exact copy, German is unrelated
    assert matrix["en", "en-fake"] == 1.0 and matrix["en", "de"] < 0.5

    task = task_examples(langs, verses, seed=0)
    for split in SPLITS:
        ids = {tuple(e.verse_id for e in task[split][lang]) for lang in langs}
        assert len(ids) == 1 and next(iter(ids))
        assert {e.label for e in task[split][langs[0]]} == {0}  # Genesis: law

"""Each modification's effect on model inputs and masking, checked exactly."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from multilab.data.batches import (
    BatchOrder,
    bucketed_batches,
    gradient_pieces,
    least_padding_cuts,
    mask_tokens,
    permuted_corpus,
    seeded_generator,
    training_examples,
    unigram_lines,
)
from multilab.data.inputs import CLS_ID, ENGLISH, FAKE, MASK_ID, PAD_ID, SEP_ID, InputEncoder
from multilab.lab.modifications import resolve_recipe

V, MAX_LEN = 2048, 128
WORDS = torch.tensor([195, 1291, 1750, 853, 76, 80, 8])  # Dufter & Schütze 2020 Fig. 3


def encoder(mod: str) -> InputEncoder:
    return InputEncoder(resolve_recipe(mod), V, MAX_LEN)


def test_original_fake_english_is_shifted_with_shared_specials() -> None:
    ids, pos, seg, words = encoder("original").encode(WORDS, FAKE)
    assert ids.tolist() == [CLS_ID, *(WORDS + V).tolist(), SEP_ID]
    assert pos.tolist() == list(range(9)) and seg.tolist() == [0] * 9
    assert words.tolist() == [False] + [True] * 7 + [False]
    eng, eng_pos, _, _ = encoder("original").encode(WORDS, ENGLISH)
    assert eng.tolist() == [CLS_ID, *WORDS.tolist(), SEP_ID]
    assert torch.equal(eng_pos, pos)


def test_lang_pos_matches_figure_3() -> None:
    enc = encoder("lang-pos")
    _, pos, seg, _ = enc.encode(WORDS, FAKE)
    assert pos.tolist() == list(range(128, 137)) and seg.tolist() == [1] * 9
    ids, pos_en, seg_en, _ = enc.encode(WORDS, ENGLISH)
    assert pos_en.tolist() == list(range(9)) and seg_en.tolist() == [0] * 9
    assert ids[1:-1].tolist() == WORDS.tolist()
    fake_ids = enc.encode(WORDS, FAKE)[0]
    assert fake_ids[1:-1].tolist() == [2243, 3339, 3798, 2901, 2124, 2128, 2056]


def test_shift_special_shifts_cls_sep_and_mask() -> None:
    enc = encoder("shift-special")
    ids = enc.encode(WORDS, FAKE)[0]
    assert ids[0] == CLS_ID + V and ids[-1] == SEP_ID + V
    assert enc.mask_id(FAKE) == MASK_ID + V and enc.mask_id(ENGLISH) == MASK_ID
    assert enc.encode(WORDS, ENGLISH)[0][0] == CLS_ID


def test_inv_order_reverses_words_but_not_specials() -> None:
    enc = encoder("inv-order")
    ids = enc.encode(WORDS, FAKE)[0]
    assert ids[0] == CLS_ID and ids[-1] == SEP_ID
    assert ids[1:-1].tolist() == (WORDS.flip(0) + V).tolist()
    # the gold alignment names, for each English word, where encode put its Fake twin
    gold = enc.gold_alignment(torch.tensor([len(WORDS)]), len(WORDS))[0]
    assert (ids[1:-1][gold] - V).tolist() == WORDS.tolist()
    lengths = torch.tensor([4, 2])
    assert enc.gold_alignment(lengths, 4).tolist() == [[3, 2, 1, 0], [1, 0, 0, 0]]
    assert encoder("original").gold_alignment(lengths, 4).tolist() == [[0, 1, 2, 3]] * 2
    assert enc.encode(WORDS, ENGLISH)[0][1:-1].tolist() == WORDS.tolist()


def test_combination_applies_every_part() -> None:
    ids, pos, seg, _ = encoder("9").encode(WORDS, FAKE)
    assert ids.tolist() == [CLS_ID + V, *(WORDS.flip(0) + V).tolist(), SEP_ID + V]
    assert pos[0] == 128 and seg.unique().tolist() == [1]


def test_no_parallel_uses_disjoint_halves() -> None:
    sentences = [torch.tensor([10 + i, 20 + i]) for i in range(10)]
    parallel = training_examples(sentences, resolve_recipe("original"), encoder("original"))
    assert len(parallel) == 20 and parallel.languages[:2] == [ENGLISH, FAKE]
    split = training_examples(sentences, resolve_recipe("no-parallel"), encoder("no-parallel"))
    assert len(split) == 10
    pairs = list(zip(split.encoded, split.languages, strict=True))
    english = [e[0][1].item() for e, lang in pairs if lang == 0]
    fake = [e[0][1].item() - V for e, lang in pairs if lang == 1]
    assert english == [10, 11, 12, 13, 14] and fake == [15, 16, 17, 18, 19]


def test_lang_id_gives_each_language_its_own_sep_only() -> None:
    enc = encoder("lang-id")
    fake = enc.encode(WORDS, FAKE)[0]
    assert fake.tolist() == [CLS_ID, *(WORDS + V).tolist(), SEP_ID + V]  # [SEP-B]
    assert enc.encode(WORDS, ENGLISH)[0].tolist() == [CLS_ID, *WORDS.tolist(), SEP_ID]
    assert enc.mask_id(FAKE) == MASK_ID  # [MASK] (and [CLS]) stay shared
    three = InputEncoder(resolve_recipe("lang-id"), 100, 16, (0, 100, 200), 300)
    assert [int(three.encode(torch.tensor([7]), k)[0][-1]) for k in range(3)] == [
        SEP_ID, SEP_ID + 100, SEP_ID + 200]
    # with shift-special every special is the language's own already: the same inputs
    both = encoder("lang-id;shift-special").encode(WORDS, FAKE)[0]
    assert both.tolist() == encoder("shift-special").encode(WORDS, FAKE)[0].tolist()


def test_no_parallel_halves_take_each_language_its_own_ids() -> None:
    """The sentence setup with rewritten languages (K et al. 2020's unigram corpus or a
    permutation): English's first half, the second language's own second half."""
    english = [torch.tensor([10 + i]) for i in range(10)]
    other = [torch.tensor([50 + i]) for i in range(10)]
    split = training_examples(english, resolve_recipe("no-parallel"), encoder("no-parallel"),
                              [english, other])
    firsts = [(e[0][1].item() % V, lang) for e, lang in zip(split.encoded, split.languages,
                                                             strict=True)]
    assert firsts == [(10 + i, 0) for i in range(5)] + [(55 + i, 1) for i in range(5)]


def test_permuted_corpus_keeps_each_sentence_a_permutation_and_is_seeded() -> None:
    rows = [[torch.arange(5, 5 + n) for n in (1, 4, 9, 20)] for _ in range(2)]
    once = permuted_corpus(rows, 1.0, seed=3)
    assert permuted_corpus(rows, 0.0, seed=3) is rows
    for original, permuted in zip(rows[0] + rows[1], once[0] + once[1], strict=True):
        assert sorted(permuted.tolist()) == original.tolist()
    assert once[0][3].tolist() != rows[0][3].tolist()  # 10 swapped pairs of 20
    assert once[0][3].tolist() != once[1][3].tolist()  # each language its own draw
    again = permuted_corpus(rows, 1.0, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(once[0] + once[1], again[0] + again[1],
                                                 strict=True))
    assert not torch.equal(permuted_corpus(rows, 1.0, seed=4)[0][3], once[0][3])


def test_unigram_lines_keep_lengths_and_the_word_inventory() -> None:
    lines = ["the lord said , go", "and he went", "the end"]
    drawn = unigram_lines(lines, seed=1, language=1)
    assert [len(line.split()) for line in drawn] == [5, 3, 2]
    assert set(" ".join(drawn).split()) <= set(" ".join(lines).split())
    assert drawn == unigram_lines(lines, seed=1, language=1)
    assert drawn != unigram_lines(lines, seed=2, language=1)
    # words are the BERT pipeline's: punctuation split off, CJK one character each
    assert [len(line.split()) for line in unigram_lines(["起初神创造", "go,now"], 0, 1)] == [5, 3]


def test_truncation_is_reported() -> None:
    words, cut = encoder("original").truncate(torch.arange(200))
    assert len(words) == MAX_LEN - 2 and cut
    assert not encoder("original").truncate(WORDS)[1]


def _many_masks(mod: str, knn: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    enc = encoder(mod)
    rows = [torch.randint(5, V, (40,), generator=seeded_generator(i)) for i in range(400)]
    batch = enc.batch(rows, [i % 2 for i in range(len(rows))])
    recipe = resolve_recipe(mod)
    masked = mask_tokens(batch, enc, 0.15, recipe.replacement, seeded_generator(7), knn)
    new = masked.inputs["input_ids"][masked.selected]
    return batch, masked, new


def test_selection_rate_and_specials_never_selected() -> None:
    batch, masked, _ = _many_masks("original")
    rate = masked.selected.sum() / batch.word_mask.sum()
    assert abs(rate - 0.15) < 0.01
    assert not masked.selected[~batch.word_mask].any()
    assert torch.equal(masked.labels, batch.input_ids[masked.selected])


def test_bert_replacement_proportions() -> None:
    _, masked, new = _many_masks("original")
    is_mask = new == MASK_ID
    kept = new == masked.labels
    n = len(new)
    assert abs(is_mask.sum() / n - 0.8) < 0.02
    # 'keep' plus random draws that hit the true token by chance
    assert abs(kept.sum() / n - 0.1) < 0.02
    other = ~is_mask & ~kept
    assert abs(other.sum() / n - 0.1) < 0.02
    # random tokens come from the whole bilingual vocabulary: both languages appear
    assert (new[other] < V).any() and (new[other] >= V).any()


def test_no_random_proportions() -> None:
    _, masked, new = _many_masks("no-random")
    n = len(new)
    assert abs((new == MASK_ID).sum() / n - 0.8) < 0.02
    assert ((new == MASK_ID) | (new == masked.labels)).all()


def test_shift_special_masks_fake_english_with_its_own_mask() -> None:
    batch, masked, _ = _many_masks("shift-special")
    rows = masked.selected.nonzero()[:, 0]
    new = masked.inputs["input_ids"][masked.selected]
    fake_rows = batch.languages[rows] == FAKE
    assert not (new[fake_rows] == MASK_ID).any() and (new[fake_rows] == MASK_ID + V).any()
    assert not (new[~fake_rows] == MASK_ID + V).any()


def test_knn_replacement_gathers_from_the_table() -> None:
    ids = torch.arange(2 * V)
    table = torch.where(ids < V, ids + V, ids - V)[:, None]  # the other-language twin
    _, masked, new = _many_masks("knn-replace", table)
    n = len(new)
    twin = new == table[masked.labels, 0]
    assert abs(twin.sum() / n - 0.3) < 0.02
    assert abs((new == MASK_ID).sum() / n - 0.5) < 0.02


def test_masking_is_deterministic_for_a_seed() -> None:
    a = _many_masks("original")[1].inputs["input_ids"]
    b = _many_masks("original")[1].inputs["input_ids"]
    assert torch.equal(a, b)


def _shuffled_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[torch.Tensor]:
    """Plain shuffled batches, as a random sampler draws them (the HF recipe)."""
    return list(torch.randperm(n, generator=seeded_generator(seed, epoch)).split(batch_size))


def test_chunks_of_one_batch_are_the_random_recipe_batches() -> None:
    """bucket_chunk = 1 (the paper profile): the same sets of examples as plain shuffled
    batches, only in another order, so the loss curve is the HF recipe's."""
    lengths = torch.randint(3, 60, (1000,), generator=seeded_generator(1))
    bucketed = bucketed_batches(lengths, 64, seed=0, epoch=0, chunk_batches=1)
    shuffled = _shuffled_batches(1000, 64, seed=0, epoch=0)
    as_sets = lambda groups: sorted(tuple(sorted(g.tolist())) for g in groups)  # noqa: E731
    assert as_sets(bucketed) == as_sets(shuffled)


def test_bucketed_batches_cover_every_example_once() -> None:
    lengths = torch.randint(3, 60, (1000,), generator=seeded_generator(1))
    batches = bucketed_batches(lengths, 64, seed=0, epoch=0, chunk_batches=4)
    flat = torch.cat(batches)
    assert sorted(flat.tolist()) == list(range(1000))
    def mean_spread(groups: list[torch.Tensor]) -> float:
        return sum(int(lengths[g].max() - lengths[g].min()) for g in groups) / len(groups)

    # chunks of 4 batches sorted by length: each batch spans about a quarter of the range
    assert mean_spread(batches) < 0.3 * mean_spread(_shuffled_batches(1000, 64, 0, 0))
    again = bucketed_batches(lengths, 64, seed=0, epoch=0, chunk_batches=4)
    assert all(torch.equal(x, y) for x, y in zip(batches, again, strict=True))
    other = bucketed_batches(lengths, 64, seed=0, epoch=1, chunk_batches=4)
    assert not all(torch.equal(x, y) for x, y in zip(batches, other, strict=False))


def _padded_area(lengths: list[int], sizes: list[int]) -> int:
    area, start = 0, 0
    for size in sizes:
        area += size * lengths[start + size - 1]  # sorted: the last row is the widest
        start += size
    return area


@pytest.mark.parametrize("pieces", [1, 2, 3, 4])
def test_least_padding_cuts_are_the_best_of_every_possible_cut(pieces: int) -> None:
    """The dynamic programme finds the minimum padded area that brute force finds."""
    generator = seeded_generator(3)
    for _ in range(20):
        lengths = sorted(torch.randint(3, 40, (9,), generator=generator).tolist())
        sizes = least_padding_cuts(torch.tensor(lengths), pieces)
        assert sum(sizes) == len(lengths) and len(sizes) == pieces and min(sizes) >= 1
        brute = min(
            _padded_area(lengths, [b - a for a, b in zip((0, *cut), (*cut, len(lengths)),
                                                         strict=True)])
            for cut in itertools.combinations(range(1, len(lengths)), pieces - 1)
        )
        assert _padded_area(lengths, sizes) == brute


def test_least_padding_cuts_edge_cases() -> None:
    assert least_padding_cuts(torch.tensor([2, 5]), 4) == [1, 1]  # fewer rows than pieces
    assert least_padding_cuts(torch.tensor([], dtype=torch.long), 3) == []
    assert least_padding_cuts(torch.tensor([1, 1, 1, 1, 10, 10]), 2) == [4, 2]
    with pytest.raises(ValueError, match="ascending"):
        least_padding_cuts(torch.tensor([5, 2]), 2)


def test_pieces_of_a_random_batch_cover_it_sorted_by_length() -> None:
    """length_pieces > 1 sorts a random batch (same examples, shortest first, ties in their
    random order) and cuts it at the least padding; one piece keeps the batch's order."""
    lengths = torch.randint(3, 60, (1000,), generator=seeded_generator(1))
    for batch in bucketed_batches(lengths, 64, seed=0, epoch=0, chunk_batches=1):
        ordered, pieces = gradient_pieces(batch, lengths, length_pieces=4, accum=2)
        assert sorted(ordered.tolist()) == sorted(batch.tolist())
        assert bool((lengths[ordered].diff() >= 0).all())
        assert len(pieces) == 8 and torch.equal(torch.cat(pieces), torch.arange(len(batch)))
        same, (whole,) = gradient_pieces(batch, lengths)
        assert torch.equal(same, batch) and torch.equal(whole, torch.arange(len(batch)))


def test_each_rank_gets_its_share_in_as_many_pieces() -> None:
    lengths = torch.tensor([5, 3, 9, 4, 7])
    shares = [gradient_pieces(torch.arange(5), lengths, 3, accum=1, world=2, rank=rank)
              for rank in (0, 1)]
    (order, first), (again, second) = shares
    assert torch.equal(order, again) and lengths[order].tolist() == [3, 4, 5, 7, 9]
    assert len(first) == len(second) == 3  # rank 1 has 2 rows: one empty piece
    assert torch.cat(first).tolist() == [0, 2, 4] and torch.cat(second).tolist() == [1, 3]


def test_batch_order_draws_each_epoch_from_the_seed() -> None:
    lengths = torch.randint(3, 60, (100,), generator=seeded_generator(1))
    order = BatchOrder(lengths, 32, seed=5, chunk_batches=1)
    assert order.steps_per_epoch == 4  # 32 + 32 + 32 + 4
    epoch_1 = bucketed_batches(lengths, 32, seed=5, epoch=1, chunk_batches=1)
    assert torch.equal(order(5), epoch_1[1]) and torch.equal(order(0), order(0))
    assert sorted(torch.cat([order(step) for step in range(4, 8)]).tolist()) == list(range(100))


# --------------------------------------------------------------------------- nsp (K et al. 2020)


def test_next_sentence_pairs_are_half_true_next_and_never_mislabelled() -> None:
    from multilab.data.transforms import next_sentence_pairs

    pairs = next_sentence_pairs(2000, seeded_generator(1, 2))
    first, second = pairs.first.tolist(), pairs.second.tolist()
    labels = pairs.next_sentence_label.tolist()
    assert first == list(range(1999))  # every sentence with a next one, once
    triples = list(zip(first, second, labels, strict=True))
    assert all(b == a + 1 for a, b, label in triples if label == 0)
    assert all(b not in (a, a + 1) for a, b, label in triples if label == 1)
    assert 0.45 < labels.count(0) / len(labels) < 0.55
    again = next_sentence_pairs(2000, seeded_generator(1, 2))
    assert torch.equal(again.second, pairs.second)
    assert not torch.equal(next_sentence_pairs(2000, seeded_generator(1, 3)).second,
                           pairs.second)
    books = next_sentence_pairs(6, seeded_generator(0), documents=[1, 1, 1, 2, 2, 2])
    assert books.first.tolist() == [0, 1, 3, 4]  # no true pair across a book


def test_encode_pair_is_cls_a_sep_b_sep_with_segments_and_fits_max_length() -> None:
    first, second = torch.tensor([11, 12, 13]), torch.tensor([21, 22])
    ids, positions, segments, words = encoder("nsp").encode_pair(first, second, FAKE)
    assert ids.tolist() == [CLS_ID, 11 + V, 12 + V, 13 + V, SEP_ID, 21 + V, 22 + V, SEP_ID]
    assert segments.tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    assert positions.tolist() == list(range(8))
    assert words.tolist() == [False, True, True, True, False, True, True, False]
    marked = encoder("nsp;lang-id").encode_pair(first, second, FAKE)[0]
    assert marked[4] == marked[-1] == SEP_ID + V  # both [SEP]s the language's own
    short = InputEncoder(resolve_recipe("nsp"), V, 10)
    long_a, long_b = torch.arange(100, 108), torch.arange(200, 203)
    cut_a, cut_b = short.truncate_pair(long_a, long_b)
    assert (len(cut_a), len(cut_b)) == (4, 3)  # the longer one cut first
    assert len(short.encode_pair(long_a, long_b, ENGLISH)[0]) == 10


def test_nsp_examples_pair_sentences_of_one_language_only_when_asked() -> None:
    """Pretraining passes ``pretraining_seed``; evaluation (single sentences) does not."""
    sentences = [torch.tensor([10 + i]) for i in range(8)] + [torch.tensor([], dtype=torch.long)]
    recipe = resolve_recipe("nsp")
    single = training_examples(sentences, recipe, encoder("nsp"))
    assert single.next_sentence is None and len(single) == 16
    pairs = training_examples(sentences, recipe, encoder("nsp"), pretraining_seed=0)
    assert len(pairs) == 14 and pairs.next_sentence is not None  # the empty one left out
    for (ids, _, segments, _), language, label in zip(
            pairs.encoded, pairs.languages, pairs.next_sentence.tolist(), strict=True):
        a, b = int(ids[1]) - language * V, int(ids[3]) - language * V
        assert segments.tolist() == [0, 0, 0, 1, 1]
        assert (b == a + 1) == (label == 0)
    batch = pairs.batch(torch.tensor([3, 0]))
    assert batch.next_sentence.tolist() == [pairs.next_sentence[3], pairs.next_sentence[0]]
    masked = mask_tokens(batch, encoder("nsp"), 0.15, (0.8, 0.1, 0.1), seeded_generator(0))
    assert torch.equal(masked.next_sentence, batch.next_sentence)


def test_nsp_with_a_one_sentence_corpus_fails_in_one_line() -> None:
    from multilab.errors import UserError

    with pytest.raises(UserError, match="language 0's 1 non-empty training sentences: next-"
                       "sentence prediction needs at least 3 sentences") as e:
        training_examples([torch.tensor([5])], resolve_recipe("nsp"), encoder("nsp"),
                          pretraining_seed=0)
    assert "\n" not in str(e.value)


def test_window_slices_pretraining_sentences_only_and_keeps_every_token() -> None:
    """Liu et al. 2020b's context window: the same word-pieces in inputs of at most w; evaluation
    (no ``pretraining_seed``) keeps whole sentences; with nsp the windows are paired."""
    sentences = [torch.arange(100, 112), torch.arange(200, 203)]
    recipe = resolve_recipe("window-5")
    sliced = training_examples(sentences, recipe, encoder("window-5"), pretraining_seed=0)
    english = [e[0][1:-1].tolist() for e, lang in zip(sliced.encoded, sliced.languages,
                                                      strict=True) if lang == ENGLISH]
    assert english == [list(range(100, 105)), list(range(105, 110)), [110, 111],
                       [200, 201, 202]]
    assert len(sliced) == 8 and int(sliced.lengths.max()) == 7  # [CLS] 5 pieces [SEP]
    whole = training_examples(sentences, recipe, encoder("window-5"))
    assert len(whole) == 4 and int(whole.lengths.max()) == 14
    paired = training_examples(sentences, resolve_recipe("window-5;nsp"),
                               encoder("window-5;nsp"), pretraining_seed=0)
    assert len(paired) == 6 and int(paired.lengths.max()) <= 13  # 4 windows, 3 pairs each


@pytest.mark.parametrize("mod", ["attend-padding", "attend-padding;shift-special",
                                 "attend-padding;lang-pos;shift-special"])
def test_attend_padding_shows_padding_as_the_authors_code(mod: str) -> None:
    """No attention mask; each pad continues its row's positions and segment and is the row's
    own [PAD]; the real tokens are the default batch's, bit for bit."""
    enc = encoder(mod)
    plain = InputEncoder(replace(enc.recipe, attend_padding=False), V, MAX_LEN)
    rows, languages = [WORDS, WORDS[:3], WORDS[:5]], [ENGLISH, FAKE, FAKE]
    batch, masked_batch = enc.batch(rows, languages), plain.batch(rows, languages)
    real = masked_batch.attention_mask.bool()
    assert batch.attention_mask.bool().all() and torch.equal(batch.real_tokens(),
                                                             masked_batch.attention_mask)
    for name in ("input_ids", "position_ids", "token_type_ids"):
        assert torch.equal(getattr(batch, name)[real], getattr(masked_batch, name)[real])
    assert torch.equal(batch.word_mask, masked_batch.word_mask)
    shifted = enc.recipe.shift_special
    offset = 128 if enc.recipe.language_positions else 0
    fake_pad = PAD_ID + V if shifted else PAD_ID
    assert batch.input_ids[1, 5:].tolist() == [fake_pad] * 4  # 3 words + 2 specials, width 9
    assert batch.position_ids[1].tolist() == list(range(offset, offset + 9))
    assert batch.token_type_ids[1].tolist() == [1 if offset else 0] * 9
    assert batch.position_ids[0].tolist() == list(range(9))  # English: no padding


def test_padding_stays_masked_and_zero_without_attend_padding() -> None:
    batch = encoder("lang-pos;shift-special").batch([WORDS, WORDS[:3]], [ENGLISH, FAKE])
    assert batch.token_mask is None and batch.attention_mask[1].tolist() == [1] * 5 + [0] * 4
    pads = ~batch.attention_mask[1].bool()
    for name in ("input_ids", "position_ids", "token_type_ids"):
        assert getattr(batch, name)[1][pads].tolist() == [0] * 4


def test_attend_padding_reaches_training_examples_and_masking() -> None:
    enc = encoder("attend-padding")
    rows = [WORDS, WORDS[:2]]
    examples = training_examples(rows, enc.recipe, enc)
    batch = examples.batch(torch.arange(len(examples)))
    assert examples.attend_padding and batch.attention_mask.bool().all()
    masked = mask_tokens(batch, enc, 0.5, enc.recipe.replacement, seeded_generator(3))
    assert torch.equal(masked.token_mask, batch.token_mask)
    assert not masked.selected[~batch.token_mask.bool()].any()  # padding is never a target

"""The one place where a modification turns a sentence into model inputs.

Training, evaluation and figures all call :class:`InputEncoder`, so lang-pos, shift-special
and inv-order are applied identically wherever a model is run.

A study has N languages, language ``i`` a block of ids starting at ``offsets[i]``
(``data/layout.py``); English + Fake-English is N = 2 with offsets (0, V). Language 0 is the
first listed, ``FAKE`` (1) the second, whatever it is: lang-pos gives language i positions
``i·max_length …`` and segment id i, shift-special its own specials (its block's), lang-id
its own [SEP] only (K et al. 2020's language-identity marker), inv-order inverts the second
language's word order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import pad_sequence

from multilab.data.multilingual_vocab import to_block
from multilab.data.tokenizers import SPECIAL_TOKENS
from multilab.lab.modifications import Recipe

ENGLISH, FAKE = 0, 1  # the first two languages (of English + Fake-English)
INVERTED = FAKE  # the language inv-order inverts: the second
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))


@dataclass
class Batch:
    """Padded model inputs. ``word_mask`` marks real wordpieces (not specials, not padding)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    token_type_ids: torch.Tensor
    word_mask: torch.Tensor
    languages: torch.Tensor
    #: nsp: 0 where the second sentence of the pair is the true next one, 1 where random
    #: (``BertForPreTraining``'s convention); None for single sentences
    next_sentence: torch.Tensor | None = None
    #: attend-padding: 1 at real tokens (``attention_mask`` is then all ones); None otherwise
    token_mask: torch.Tensor | None = None

    def real_tokens(self) -> torch.Tensor:
        """1 at real tokens, 0 at padding: the attention mask unless padding is attended."""
        return self.attention_mask if self.token_mask is None else self.token_mask

    def to(self, device: torch.device | str) -> Batch:
        return Batch(**{k: None if v is None else v.to(device) for k, v in vars(self).items()})

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "position_ids": self.position_ids,
            "token_type_ids": self.token_type_ids,
        }


class InputEncoder:
    """A language's own wordpiece ids (no specials) + language → ``[CLS] ... [SEP]`` model
    inputs, in the study's vocabulary.

    ``offsets`` (default ``(0, vocab_size)``: English + Fake-English) and ``total_size``
    (default ``2 × vocab_size``) place the languages' blocks; ``vocab_size`` is the first
    block's size (word translation and the knn table of the sentence setup read it).
    """

    def __init__(self, recipe: Recipe, vocab_size: int, max_length: int,
                 offsets: tuple[int, ...] | None = None, total_size: int | None = None) -> None:
        self.recipe = recipe
        self.vocab_size = vocab_size
        self.max_length = max_length
        self.offsets = offsets or (0, vocab_size)
        self.total_size = total_size or 2 * vocab_size

    @property
    def languages(self) -> int:
        return len(self.offsets)

    def mask_id(self, language: int) -> int:
        """The [MASK] id a sentence of ``language`` uses (own [MASK] under shift-special)."""
        if self.recipe.shift_special:
            return MASK_ID + self.offsets[language]
        return MASK_ID

    def encode(self, words: torch.Tensor, language: int) -> tuple[torch.Tensor, ...]:
        """(input_ids, position_ids, token_type_ids, word_mask) of one sentence.

        ``words`` must already fit ``max_length - 2`` (see :meth:`truncate`).
        """
        ids = torch.cat(
            [torch.tensor([CLS_ID]), words.to(torch.long), torch.tensor([SEP_ID])]
        )
        word_mask = torch.ones_like(ids, dtype=torch.bool)
        word_mask[0] = word_mask[-1] = False
        if language == INVERTED and self.recipe.invert_fake:
            ids[1:-1] = ids[1:-1].flip(0)
        if self.offsets[language]:
            ids = to_block(ids, self.offsets[language], self.recipe.shift_special)
            if self.recipe.language_sep:  # lang-id: this language's own [SEP] (its block's)
                ids[-1] = SEP_ID + self.offsets[language]
        positions = torch.arange(len(ids))
        segments = torch.zeros_like(ids)
        if language and self.recipe.language_positions:
            positions = positions + language * self.max_length
            segments = segments + language
        return ids, positions, segments, word_mask

    def encode_pair(self, first: torch.Tensor, second: torch.Tensor, language: int,
                    max_length: int | None = None) -> tuple[torch.Tensor, ...]:
        """A sentence pair ``[CLS] A [SEP] B [SEP]`` of one language (nsp's input, a
        downstream task's premise and hypothesis): segment id 0 for ``[CLS] A [SEP]``, 1 for
        ``B [SEP]`` (BERT's pairs), each sentence as :meth:`encode` makes it (block, own
        [SEP] under lang-id, inverted under inv-order), the longer one cut first until the
        pair fits ``max_length`` (default: the encoder's).

        Under lang-pos the pair is marked as the language the model was pretrained to see:
        positions shifted by ``language · max_length`` (the encoder's, as :meth:`encode`)
        and segment id ``language`` for both halves, so BERT's 0/1 segments (which lang-pos
        spends on languages) are not used. nsp is refused with lang-pos, so only the
        downstream task takes this path."""
        first, second = self.truncate_pair(first, second, max_length)
        ids_a, _, _, words_a = self.encode(first, language)
        ids_b, _, _, words_b = self.encode(second, language)
        ids = torch.cat([ids_a, ids_b[1:]])  # B without its [CLS]
        positions = torch.arange(len(ids))
        if self.recipe.language_positions:
            positions = positions + language * self.max_length
            segments = torch.full_like(ids, language)
        else:
            segments = torch.cat([torch.zeros(len(ids_a), dtype=torch.long),
                                  torch.ones(len(ids_b) - 1, dtype=torch.long)])
        return ids, positions, segments, torch.cat([words_a, words_b[1:]])

    def truncate_pair(self, first: torch.Tensor, second: torch.Tensor,
                      max_length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Both sentences cut, the longer one first (BERT's ``truncate_seq_pair``), until the
        pair and its three specials fit ``max_length`` (default: the encoder's)."""
        budget = max(2, (max_length or self.max_length) - 3)
        keep_a, keep_b = len(first), len(second)
        while keep_a + keep_b > budget:
            if keep_a >= keep_b:
                keep_a -= 1
            else:
                keep_b -= 1
        return first[:keep_a], second[:keep_b]

    def truncate(self, words: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """Cut to ``max_length - 2`` wordpieces; report whether anything was cut."""
        limit = self.max_length - 2
        return words[:limit], len(words) > limit

    def batch(self, sentences: list[torch.Tensor], languages: list[int]) -> Batch:
        """Encode and right-pad a list of sentences into one :class:`Batch`."""
        pairs = zip(sentences, languages, strict=True)
        encoded = [self.encode(words, lang) for words, lang in pairs]
        return collate(encoded, languages, attend_padding=self.recipe.attend_padding)

    def gold_alignment(self, lengths: torch.Tensor, width: int) -> torch.Tensor:
        """Index of the Fake-English word aligned to each English word, per sentence.

        ``lengths`` [B] are the sentences' word counts; the result is [B, ``width``], the
        identity, or the reverse under inv-order (:meth:`encode` flips the Fake-English
        words). Positions past a sentence's length are padding (0 under inv-order).
        """
        positions = torch.arange(width, device=lengths.device).expand(len(lengths), width)
        if self.recipe.invert_fake:
            return (lengths[:, None] - 1 - positions).clamp(min=0)
        return positions


def collate(encoded: list[tuple[torch.Tensor, ...]], languages: list[int],
            next_sentence: torch.Tensor | None = None, attend_padding: bool = False) -> Batch:
    """Right-pad pre-encoded sentences (``InputEncoder.encode`` or ``encode_pair`` outputs).

    With ``attend_padding`` (the attend-padding modification) the model sees the padding as
    the authors' code shows it: no attention mask, each pad at its row's continuing position
    and last segment, and the row's own [PAD] (its block's under shift-special, read off its
    [CLS]); ``token_mask`` keeps the real tokens. Otherwise padding is masked and its
    position, segment and id are 0 (never seen).
    """
    ids, positions, segments, words = zip(*encoded, strict=True)
    real = pad_sequence(
        [torch.ones(len(x), dtype=torch.long) for x in ids], batch_first=True, padding_value=0
    )
    word_mask = pad_sequence(list(words), batch_first=True, padding_value=False)
    language_ids = torch.tensor(languages, dtype=torch.long)
    if attend_padding:
        width = real.shape[1]
        return Batch(
            input_ids=_pad_rows(ids, width, lambda row: row[0] - CLS_ID + PAD_ID),
            attention_mask=torch.ones_like(real),
            position_ids=_pad_rows(positions, width, None),
            token_type_ids=_pad_rows(segments, width, lambda row: row[-1]),
            word_mask=word_mask,
            languages=language_ids,
            next_sentence=next_sentence,
            token_mask=real,
        )
    return Batch(
        input_ids=pad_sequence(list(ids), batch_first=True, padding_value=PAD_ID),
        attention_mask=real,
        position_ids=pad_sequence(list(positions), batch_first=True, padding_value=0),
        token_type_ids=pad_sequence(list(segments), batch_first=True, padding_value=0),
        word_mask=word_mask,
        languages=language_ids,
        next_sentence=next_sentence,
    )


def _pad_rows(rows: tuple[torch.Tensor, ...], width: int, fill) -> torch.Tensor:
    """Rows right-padded to ``width``: with ``fill(row)`` (a 0-d tensor), or, for ``None``,
    by continuing the row's positions (``row[0] + j`` at column j)."""
    padded = []
    for row in rows:
        missing = width - len(row)
        if fill is None:
            tail = row[0] + torch.arange(len(row), width, dtype=row.dtype)
        else:
            tail = fill(row).expand(missing)
        padded.append(torch.cat([row, tail]))
    return torch.stack(padded)

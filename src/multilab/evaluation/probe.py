"""Any Hugging Face masked LM on the Bible's parallel verses (`multilab probe`).

A model trained elsewhere (one tokenizer for all its languages, as mBERT or XLM-R) has none of
the lab's fingerprints, vocabulary blocks or gold word alignments, so `multilab evaluate` does
not apply to it. What needs none of them, measured here between chosen Bible editions on the
same dev verses (the first Old Testament verses with text in every edition):

* **verse retrieval** P@1 for every ordered pair at one layer (mean-pooled over the verse's
  tokens, special tokens left out): Dufter & Schütze 2020's ρ, as ``multilab evaluate`` computes it
  for the lab's real-language models (:mod:`multilab.evaluation.verse_retrieval`);
* **word alignment** of the first edition with each other one by SimAlign's Match on the
  model's contextual word vectors (wordpieces of a word averaged): the Kendall's tau its
  alignments imply, and their agreement with the IBM-1 alignments of the ``word_order``
  stage (share of the IBM-1 links the model finds): a model that aligns words across
  languages recovers the links statistical alignment finds in the parallel text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from multilab.data.dictionary import ibm1_word_scores
from multilab.data.parallel import NEW_TESTAMENT, OLD_TESTAMENT, Verse, aligned_ids
from multilab.errors import UserError
from multilab.evaluation import verse_retrieval
from multilab.evaluation.bible_word_order import content_words, ibm1_alignment
from multilab.evaluation.metrics import mean_pool
from multilab.evaluation.wordorder import kendall_tau, match_alignment
from multilab.lab.languages import EDITIONS


@dataclass(frozen=True)
class AlignmentProbe:
    """The model's word alignments of the first edition with one other edition."""

    edition: str
    tau: float  # mean Kendall's tau of the model's Match alignments
    ibm1_tau: float  # the same verses aligned by IBM-1 (the word_order stage's method)
    agreement: float  # share of the IBM-1 links the model's alignment also makes
    verses: int


def load_masked_lm(model_dir: Path) -> tuple[torch.nn.Module, object]:
    """The model and its tokenizer, from local files only (one line if either is missing)."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    if not (model_dir / "config.json").is_file():
        raise UserError(f"{model_dir} is not a Hugging Face model directory (no config.json); "
                        "valid: a folder written by save_pretrained, with its tokenizer")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except (OSError, ValueError) as err:
        raise UserError(f"{model_dir} has no tokenizer the probe can load ({err}); valid: a "
                        "folder with the tokenizer saved beside the model "
                        "(tokenizer.save_pretrained)") from None
    if not getattr(tokenizer, "is_fast", False):
        raise UserError(f"the tokenizer of {model_dir} is not a fast tokenizer; the probe needs "
                        "its word ids to merge wordpieces into words")
    from multilab.training.language_layers import attach_saved

    model = attach_saved(AutoModelForMaskedLM.from_pretrained(str(model_dir),
                                                              local_files_only=True), model_dir)
    return model.eval(), tokenizer


def probe_verses(verses_by_edition: dict[str, Sequence[Verse]], editions: Sequence[str],
                 count: int) -> list[str]:
    """The first ``count`` Old Testament verse ids with text in every edition."""
    ids = aligned_ids({code: verses_by_edition[code] for code in editions}, OLD_TESTAMENT)
    return ids[:count]


@torch.no_grad()
def encode_verses(model: torch.nn.Module, tokenizer, verses: Sequence[Sequence[str]],
                  layer: int, max_length: int = 128, batch_size: int = 64
                  ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Verse vectors (mean over the words' tokens) and each verse's word vectors (its
    wordpieces averaged), from hidden layer ``layer`` (0 = embeddings)."""
    pooled, words = [], []
    for start in range(0, len(verses), batch_size):
        batch = [list(words_) for words_ in verses[start:start + batch_size]]
        encoded = tokenizer(batch, is_split_into_words=True, truncation=True,
                            max_length=max_length, padding=True, return_tensors="pt")
        hidden = model(**encoded, output_hidden_states=True).hidden_states
        if not 0 <= layer < len(hidden):
            raise UserError(f"layer {layer}: the model has layers 0-{len(hidden) - 1}")
        states = hidden[layer].float()
        word_ids = [[-1 if w is None else w for w in encoded.word_ids(i)]
                    for i in range(len(batch))]
        ids = torch.tensor(word_ids)
        pooled.append(mean_pool(states, ids >= 0))
        for row, row_ids in enumerate(ids):
            kept = row_ids >= 0
            n_words = int(row_ids.max()) + 1 if kept.any() else 0
            sums = torch.zeros(n_words, states.shape[-1])
            sums.index_add_(0, row_ids[kept], states[row][kept])
            counts = torch.bincount(row_ids[kept], minlength=n_words).clamp(min=1)
            words.append(sums / counts[:, None])
    return torch.cat(pooled), words


def alignment_probe(first: list[torch.Tensor], other: list[torch.Tensor],
                    first_words: Sequence[Sequence[str]], other_words: Sequence[Sequence[str]],
                    ibm1_first: Sequence[Sequence[str]], ibm1_other: Sequence[Sequence[str]],
                    edition: str) -> AlignmentProbe:
    """Model alignments of the probe verses against IBM-1's, which is fitted on the probe
    verses plus ``ibm1_*`` (more parallel text: the New Testament)."""
    scores = ibm1_word_scores([*first_words, *ibm1_first], [*other_words, *ibm1_other])
    taus, ibm1_taus, found, links = [], [], 0, 0
    for row, (a, b) in enumerate(zip(first, other, strict=True)):
        if len(a) == 0 or len(b) == 0:
            continue
        model_links = match_alignment(a, b)
        silver = ibm1_alignment(scores, row)
        n = min(len(model_links), len(silver))  # truncation may cut a long verse's words
        silver_links = [(i, j) for i, j in enumerate(silver[:n]) if j >= 0 and j < len(b)]
        found += sum(int(model_links[i] == j) for i, j in silver_links)
        links += len(silver_links)
        taus.append(kendall_tau(model_links))
        if (silver >= 0).any():
            ibm1_taus.append(kendall_tau(silver))
    return AlignmentProbe(edition=edition, tau=float(np.mean(taus)),
                          ibm1_tau=float(np.mean(ibm1_taus)),
                          agreement=float(found / links) if links else float("nan"),
                          verses=len(taus))


def probe_model(model_dir: Path, verses_by_edition: dict[str, Sequence[Verse]],
                editions: Sequence[str], *, layer: int, count: int) -> dict:
    """Retrieval among ``editions`` and alignment of the first with each other, as JSON."""
    if len(editions) < 2:
        raise UserError(f"--languages {','.join(editions)}: the probe needs at least two "
                        f"editions; valid codes: {', '.join(EDITIONS)}")
    model, tokenizer = load_masked_lm(model_dir)
    ids = probe_verses(verses_by_edition, editions, count)
    texts = {code: dict(verses_by_edition[code]) for code in editions}
    words = {code: [content_words(texts[code][vid]) for vid in ids] for code in editions}
    pooled, word_vectors = {}, {}
    for code in editions:
        pooled[code], word_vectors[code] = encode_verses(model, tokenizer, words[code], layer)
    matrix = verse_retrieval.retrieval_matrix(pooled)
    first = editions[0]
    probes = []
    for code in editions[1:]:
        shared = aligned_ids({first: verses_by_edition[first], code: verses_by_edition[code]},
                             NEW_TESTAMENT)
        probes.append(alignment_probe(
            word_vectors[first], word_vectors[code], words[first], words[code],
            [content_words(texts[first][vid]) for vid in shared],
            [content_words(texts[code][vid]) for vid in shared], code))
    return {
        "model_dir": str(model_dir), "layer": layer, "verses": len(ids),
        "editions": list(editions),
        "retrieval_p1": {f"{a}-{b}": p for (a, b), p in matrix.items()},
        "retrieval_p1_mean": verse_retrieval.overall(matrix),
        "alignment": {p.edition: asdict(p) for p in probes},
    }

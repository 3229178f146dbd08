"""How similar are two independently trained models? Conneau et al. 2020 §5 (Figure 2) on Bible
verses.

``multilab similarity DIR_A DIR_B --languages 3,l`` reads the same Old Testament verses in two
editions, model A the first edition and model B the second (each with its own saved tokenizer:
a lab model trained on a one-language study, or any Hugging Face masked LM), pools each verse
per layer (mean over its wordpieces, [CLS]/[SEP] and padding left out) and measures, layer by
layer, what :mod:`.similarity` implements: verse retrieval P@1 after an orthogonal map learned
on a seeded half of the verses (held-out half retrieved), and linear CKA on all of them.

The floor is not zero (:mod:`.similarity`'s doc: parallel verses share lengths and positions,
which even untrained models carry), so every curve comes with the same measure on two
*untrained* models of the same shapes (seeded initialisation): read the gap, not the value.
Word level (Figure 2's "word"): each model's contextual word vectors averaged over the verses
(wordpieces merged by ``##``: a WordPiece tokenizer), a dictionary, an orthogonal map learned
on a seeded half of its pairs and P@1 of the held-out half among all of B's words
(:func:`multilab.evaluation.similarity.translation_precision_at_1`). PanLex is not here: the
dictionary is the identity when both models read one edition, else *silver* (mutual best IBM-1
matches over the same verses, words in >= 3 of them; never checked against gold here).
Contextual word level (Figure 2's "contextual word"): the paper aligns the words of parallel
sentences with fast_align; here an occurrence of a dictionary word in a verse is aligned with
its translation in the parallel verse where both words occur exactly once there, one-to-one
(:func:`aligned_occurrences`). Each aligned pair is two contextual vectors (a word's pieces
averaged); the orthogonal map is learned on the occurrences of the training half of the verses
(the sentence-level split) and each held-out occurrence retrieves its partner among the
held-out ones (at most :data:`MAX_CONTEXTUAL_TEST`, a seeded sample).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from multilab.errors import UserError
from multilab.evaluation.probe import load_masked_lm
from multilab.evaluation.similarity import mean_pool, sentence_similarity_by_layer
from multilab.files import save_figure

MEASURES = ("sentence_retrieval", "cka", "word_translation", "contextual_word")
MEASURE_LABELS = {"sentence_retrieval": "verse retrieval P@1", "cka": "linear CKA",
                  "word_translation": "word translation P@1",
                  "contextual_word": "contextual word retrieval P@1"}
#: Held-out aligned occurrences retrieved among each other, at most (a seeded sample): the
#: retrieval is a square matrix per layer, and 5,000 rows keep it at 200 MB.
MAX_CONTEXTUAL_TEST = 5000
#: Words in fewer verses than this take no part in the silver dictionary.
SILVER_MIN_COUNT = 3


@dataclass
class Reading:
    """What one model makes of a list of verses, from one forward pass: per layer
    (0 = embeddings) the mean-pooled vector of each verse (layers × (verses × d)), each
    verse's words, and per verse one vector per word occurrence at every layer
    ([words, layers + 1, d]: its pieces' mean). [CLS], [SEP] and padding are left out."""

    verses: list[np.ndarray]
    segments: list[list[str]]
    occurrences: list[np.ndarray]


@torch.no_grad()
def read_verses(model: torch.nn.Module, tokenizer, verses: Sequence[str],
                max_length: int = 128, batch_size: int = 64) -> Reading:
    """:class:`Reading` of ``verses`` by ``model`` with its ``tokenizer``."""
    from multilab.evaluation.lab_word_retrieval import words_of
    from multilab.evaluation.word_retrieval import occurrence_means

    by_layer: list[list[np.ndarray]] = []
    segments: list[list[str]] = []
    occurrences: list[np.ndarray] = []
    special = torch.tensor(tokenizer.all_special_ids)
    for start in range(0, len(verses), batch_size):
        encoded = tokenizer(list(verses[start:start + batch_size]), truncation=True,
                            max_length=max_length, padding=True, return_tensors="pt")
        states = model(**encoded, output_hidden_states=True).hidden_states
        keep = (encoded["attention_mask"].bool() & ~torch.isin(encoded["input_ids"], special))
        if not by_layer:
            by_layer = [[] for _ in states]
        for layer, layer_states in enumerate(states):
            by_layer[layer].append(mean_pool(layer_states.float().numpy(), keep.numpy()))
        hidden = torch.stack(states, 2).float()
        for row, ids in enumerate(encoded["input_ids"].tolist()):
            kept = keep[row].nonzero()[:, 0].tolist()
            words, word_ids = words_of(tokenizer.convert_ids_to_tokens([ids[k] for k in kept]))
            _, means = occurrence_means(hidden[row, kept].numpy(), word_ids, len(words))
            segments.append(words)
            occurrences.append(means.astype(np.float32))  # half the RAM of float64
    return Reading([np.concatenate(parts) for parts in by_layer], segments, occurrences)


def word_layers(reading: Reading) -> tuple[list[str], np.ndarray]:
    """Every word's mean contextual vector at every layer ([words, layers + 1, d]): the mean
    of its occurrences, each weighing the same."""
    from multilab.evaluation.word_retrieval import ContextualWordVectors

    accumulator = ContextualWordVectors()
    for words, occurrences in zip(reading.segments, reading.occurrences, strict=True):
        if words:
            accumulator.add(occurrences, range(len(words)), words)
    return accumulator.result()


def aligned_occurrences(segments_a: list[list[str]], segments_b: list[list[str]],
                        pairs: Sequence[tuple[str, str]]) -> np.ndarray:
    """(verse, position in A, position in B) of every aligned word occurrence: a dictionary
    pair whose two words occur exactly once in the verse of their edition, where neither
    occurrence is also claimed by another pair (one-to-one)."""
    translations: dict[str, set[str]] = defaultdict(set)
    for source, target in pairs:
        translations[source].add(target)
    found = []
    for verse, (words_a, words_b) in enumerate(zip(segments_a, segments_b, strict=True)):
        count_a, count_b = Counter(words_a), Counter(words_b)
        once_b = {word: k for k, word in enumerate(words_b) if count_b[word] == 1}
        links = []
        for k, word in enumerate(words_a):
            if count_a[word] == 1:
                partners = [once_b[t] for t in translations.get(word, ()) if t in once_b]
                if len(partners) == 1:
                    links.append((k, partners[0]))
        claimed = Counter(b for _, b in links)
        found += [(verse, a, b) for a, b in links if claimed[b] == 1]
    return np.array(found, dtype=np.int64).reshape(-1, 3)


def contextual_word_by_layer(vectors_a: list[np.ndarray], vectors_b: list[np.ndarray],
                             aligned: np.ndarray, train_fraction: float, seed: int
                             ) -> list[float]:
    """P@1 per layer of each held-out aligned occurrence of A retrieving its partner in B
    among the held-out occurrences, after Procrustes on the training verses' occurrences."""
    from multilab.evaluation.similarity import paired_retrieval_precision_at_1, split_rows

    train_verses, _ = split_rows(len(vectors_a), train_fraction, seed)
    in_train = np.isin(aligned[:, 0], train_verses)
    train, test = np.flatnonzero(in_train), np.flatnonzero(~in_train)
    if len(train) < 2 or len(test) < 2:
        raise UserError(f"{len(aligned)} aligned word occurrences ({len(train)} in the training "
                        f"verses, {len(test)} held out): need at least 2 of each (more verses: "
                        "--verses)")
    if len(test) > MAX_CONTEXTUAL_TEST:
        test = np.sort(np.random.default_rng(seed).choice(test, MAX_CONTEXTUAL_TEST,
                                                          replace=False))
    source = np.stack([vectors_a[v][a] for v, a, _ in aligned])
    target = np.stack([vectors_b[v][b] for v, _, b in aligned])
    return [paired_retrieval_precision_at_1(source[:, layer], target[:, layer], train, test)
            for layer in range(source.shape[1])]


def word_translation_by_layer(a: tuple[list[str], np.ndarray], b: tuple[list[str], np.ndarray],
                              pairs: Sequence[tuple[str, str]], train_fraction: float,
                              seed: int) -> list[float]:
    """P@1 per layer of B's word for A's held-out dictionary words after Procrustes."""
    from multilab.evaluation.similarity import split_rows, translation_precision_at_1

    rows_a = {w: i for i, w in enumerate(a[0])}
    rows_b = {w: i for i, w in enumerate(b[0])}
    indexed = np.array([(rows_a[x], rows_b[y]) for x, y in pairs
                        if x in rows_a and y in rows_b], dtype=np.int64).reshape(-1, 2)
    if len(indexed) < 4:
        raise UserError(f"{len(indexed)} dictionary pairs have vectors in both models: need at "
                        "least 4 (more verses: --verses)")
    train, test = split_rows(len(indexed), train_fraction, seed)
    return [translation_precision_at_1(a[1][:, layer], b[1][:, layer], indexed[train],
                                       indexed[test]) for layer in range(a[1].shape[1])]


def word_dictionary(segments_a: list[list[str]], segments_b: list[list[str]], same: bool
                    ) -> tuple[list[tuple[str, str]], str]:
    """Identity for one edition read by both models, else the silver IBM-1 matches."""
    from multilab.data.dictionary import induce_dictionary

    if same:
        words = sorted({w for segment in segments_a for w in segment})
        return [(w, w) for w in words], "identity"
    entries = induce_dictionary(segments_a, segments_b, min_count=SILVER_MIN_COUNT)
    return [(e.source, e.target) for e in entries], "silver"


def _untrained_copy(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A freshly initialised model of the same configuration (the floor of every measure)."""
    from transformers import AutoModelForMaskedLM

    torch.manual_seed(seed)
    return AutoModelForMaskedLM.from_config(model.config).eval()


def compare_models(dir_a: Path, dir_b: Path, verses_a: Sequence[str], verses_b: Sequence[str],
                   *, train_fraction: float = 0.5, seed: int = 0, same_edition: bool = False
                   ) -> dict[str, Any]:
    """Figure 2's sentence- and word-level curves for models A and B on parallel verses, and
    the same for untrained models of their shapes."""
    if len(verses_a) != len(verses_b):
        raise ValueError(f"{len(verses_a)} verses for A but {len(verses_b)} for B")
    if len(verses_a) < 4:
        raise UserError(f"{len(verses_a)} parallel verses: need at least 4 (half to learn the "
                        "map, half to test it)")
    (model_a, tok_a), (model_b, tok_b) = load_masked_lm(dir_a), load_masked_lm(dir_b)
    depth_a, depth_b = model_a.config.num_hidden_layers, model_b.config.num_hidden_layers
    if depth_a != depth_b:
        raise UserError(f"{dir_a} has {depth_a} layers and {dir_b} {depth_b}: the curves compare "
                        "layer l with layer l, so both models need the same depth")
    untrained_a, untrained_b = _untrained_copy(model_a, seed), _untrained_copy(model_b, seed + 1)
    a, b = read_verses(model_a, tok_a, verses_a), read_verses(model_b, tok_b, verses_b)
    floor_a, floor_b = (read_verses(untrained_a, tok_a, verses_a),
                        read_verses(untrained_b, tok_b, verses_b))
    pairs, kind = word_dictionary(a.segments, b.segments, same_edition)
    # the untrained models read the same words (same tokenizers): same dictionary, same links
    aligned = aligned_occurrences(a.segments, b.segments, pairs)
    curves, floor = {}, {}
    for result, one, other in ((curves, a, b), (floor, floor_a, floor_b)):
        result |= sentence_similarity_by_layer(one.verses, other.verses, train_fraction, seed)
        result["word_translation"] = word_translation_by_layer(
            word_layers(one), word_layers(other), pairs, train_fraction, seed)
        result["contextual_word"] = contextual_word_by_layer(
            one.occurrences, other.occurrences, aligned, train_fraction, seed)
    return {
        "model_a": str(dir_a), "model_b": str(dir_b), "verses": len(verses_a),
        "layers": list(range(depth_a + 1)), "train_fraction": train_fraction, "seed": seed,
        "dictionary": {"kind": kind, "pairs": len(pairs)},
        "aligned_occurrences": len(aligned),
        "trained": {m: list(map(float, curves[m])) for m in MEASURES},
        "untrained": {m: list(map(float, floor[m])) for m in MEASURES},
    }


def similarity_figure(record: dict[str, Any], measure: str, path: Path) -> Path:
    """One of Figure 2's panels: ``measure`` against the layer, trained and untrained."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(record["layers"], record["trained"][measure], marker="o", label="trained")
    ax.plot(record["layers"], record["untrained"][measure], marker="x", linestyle="--",
            label="untrained (same shapes)")
    title = (f"{record['editions'][0]} (A) vs {record['editions'][1]} (B), "
             f"{record['verses']} verses")
    return _finish(fig, ax, measure, title, path)


def pairs_figure(records: Sequence[dict[str, Any]], measure: str, path: Path) -> Path:
    """Figure 2's layout: ``measure`` against the layer, one line per pair of editions (the
    trained models; each pair's untrained floor dotted in the same colour)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for record in (r for r in records if measure in r["trained"]):  # older JSON: fewer
        label = f"{record['editions'][0]}–{record['editions'][1]}"
        line, = ax.plot(record["layers"], record["trained"][measure], marker="o", label=label)
        ax.plot(record["layers"], record["untrained"][measure], linestyle=":",
                color=line.get_color())
    return _finish(fig, ax, measure, "two models, one line per pair (dotted: untrained)", path)


def _finish(fig: Any, ax: Any, measure: str, title: str, path: Path) -> Path:
    """Axes, title and legend of a similarity panel; written as a PNG and closed."""
    import matplotlib.pyplot as plt

    ax.set_xlabel("layer (0 = embeddings)")
    ax.set_ylabel(MEASURE_LABELS[measure])
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=120)  # and a PDF beside it
    plt.close(fig)
    return path

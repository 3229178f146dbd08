"""What every downstream classification task shares: its example and its scores.

Kept apart from the tasks themselves (:mod:`multilab.data.book_groups`,
:mod:`multilab.data.xnli`) and from their registry (:mod:`multilab.data.tasks`) so that each
task imports it without importing the others. The scores take the task's label count:
macro-F1 averages over *every* label of the task, so a model that never predicts a class
pays for it, whatever the number of classes (5 book groups, 3 NLI labels).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: split name → language → examples: what a task gives for a study's languages
SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Example:
    """One labelled input of a task: a single text, or a pair (``text_pair``: the second
    sentence, e.g. XNLI's hypothesis) encoded as BERT's ``[CLS] A [SEP] B [SEP]``.

    ``id`` is the same in every language for the same example (a verse id ``BB.CCC.VVV``,
    XNLI's ``pairID``): what keeps the languages' samples aligned.
    """

    id: str
    text: str
    label: int
    text_pair: str | None = None

    @property
    def verse_id(self) -> str:
        """The Bible task's name for :attr:`id`."""
        return self.id


@dataclass(frozen=True)
class Scores:
    """Accuracy and macro-F1 over all the task's labels (a label never predicted nor gold
    counts as F1 0, so a model that ignores a class pays for it)."""

    accuracy: float
    macro_f1: float


def classification_scores(predicted: Sequence[int], gold: Sequence[int], num_labels: int
                          ) -> Scores:
    """The scores a task reports, for any predictions (a fine-tuned model, a baseline)."""
    if len(predicted) != len(gold) or not gold:
        raise ValueError(
            f"need as many predictions as gold labels (at least one), got {len(predicted)} "
            f"and {len(gold)}"
        )
    pairs = list(zip(predicted, gold, strict=True))
    f1s = []
    for label in range(num_labels):
        tp = sum(1 for p, g in pairs if p == label and g == label)
        fp = sum(1 for p, g in pairs if p == label and g != label)
        fn = sum(1 for p, g in pairs if p != label and g == label)
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    accuracy = sum(1 for p, g in pairs if p == g) / len(pairs)
    return Scores(accuracy=accuracy, macro_f1=sum(f1s) / len(f1s))


@dataclass(frozen=True)
class Baseline:
    """The majority-class baseline: always the most frequent train label."""

    label: int
    accuracy: float
    macro_f1: float


def majority_baseline(train_labels: Iterable[int], test_labels: Sequence[int],
                      num_labels: int) -> Baseline:
    """Accuracy and macro-F1 (over all ``num_labels`` labels) on ``test_labels`` of always
    predicting the most frequent train label (ties: the lower label)."""
    counts = Counter(train_labels)
    if not counts or not test_labels:
        raise ValueError("the majority baseline needs train and test labels")
    label = min(counts, key=lambda lab: (-counts[lab], lab))
    scores = classification_scores([label] * len(test_labels), test_labels, num_labels)
    return Baseline(label=label, accuracy=scores.accuracy, macro_f1=scores.macro_f1)

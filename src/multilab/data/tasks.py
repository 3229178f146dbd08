"""The downstream tasks (one downstream-task interface): a registry.

A task is data, not a code path: a name, its label names, whether an input is one sentence
or a sentence pair, and a function giving ``split → language → examples`` for a study's
languages (``train`` is only read for the first language, the one fine-tuned on; ``dev`` and
``test`` for every language, aligned: example i is the same in each). ``multilab downstream``
(:mod:`multilab.evaluation.downstream`) fine-tunes and scores any task the same way, under
the same metric names, so the report and MLflow treat every task alike; the task's name is
in the JSON record and the run's ``downstream.task`` tag.

Registered (``downstream.task`` in params.yaml):

- ``bible-books`` (the default): which group of Old Testament books a verse comes from, in
  every Bible edition (:mod:`multilab.data.book_groups`): the lab's XNLI stand-in.
- ``bible-passages``: the same book groups and chapter split, an example being a passage of
  consecutive verses (:func:`multilab.data.book_groups.passage_examples`): a task with
  headroom above one verse's ceiling; ``bible-books`` stays the default, so every
  study measured on it keeps its meaning;
- ``xnli``: XNLI itself, read from the official release in ``downstream.task_path``
  (:mod:`multilab.data.xnli`); premise and hypothesis encoded as a pair.

Adding a task is one entry of :data:`TASKS` and a reader returning
:class:`~multilab.data.classification.Example` lists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from multilab.data import book_groups, xnli
from multilab.data.classification import Example
from multilab.data.parallel import read_edition
from multilab.errors import UserError
from multilab.lab.languages import EDITIONS, Language, editions_of

if TYPE_CHECKING:
    from multilab.config import Config

Splits = dict[str, dict[Language, list[Example]]]


@dataclass(frozen=True)
class Task:
    """One downstream task: what the fine-tune and the scores need to know of it."""

    name: str
    labels: tuple[str, ...]
    pairs: bool  # True: inputs are sentence pairs ([CLS] A [SEP] B [SEP])
    title: str  # the report's words for it
    needs_path: bool  # True: reads its data from downstream.task_path
    load: Callable[[Config, Sequence[Language]], Splits]

    def examples(self, cfg: Config, languages: Sequence[Language]) -> Splits:
        """``split → language → examples`` for ``languages`` (uncapped); one-line
        :class:`UserError` for data the task cannot read, before any work."""
        return self.load(cfg, languages)


def _bible_verses(cfg: Config, languages: Sequence[Language]) -> dict[str, list]:
    """Every edition's verses, or one line if a language is not a Bible edition."""
    own = [lang for lang in languages if lang.edition not in EDITIONS]
    if own:
        raise UserError(f"downstream.task = {cfg.downstream.task!r} needs Bible editions; "
                        f"{own[0].edition!r} is not one (valid: downstream.task = 'xnli' "
                        "with downstream.task_path)")
    return {code: read_edition(code, cfg.paths.data) for code in editions_of(languages)}


def _bible_books(cfg: Config, languages: Sequence[Language]) -> Splits:
    return book_groups.task_examples(languages, _bible_verses(cfg, languages),
                                     seed=cfg.downstream.split_seed)


def _bible_passages(cfg: Config, languages: Sequence[Language]) -> Splits:
    return book_groups.passage_examples(languages, _bible_verses(cfg, languages),
                                        seed=cfg.downstream.split_seed)


def _xnli(cfg: Config, languages: Sequence[Language]) -> Splits:
    return xnli.task_examples(cfg.downstream.task_path, languages)


DEFAULT_TASK = "bible-books"
TASKS: dict[str, Task] = {
    task.name: task
    for task in [
        Task(DEFAULT_TASK, book_groups.LABELS, False,
             "book-group classification (the XNLI analogue)", False, _bible_books),
        Task("bible-passages", book_groups.LABELS, False,
             f"book-group classification of {book_groups.PASSAGE_VERSES}-verse passages",
             False, _bible_passages),
        Task("xnli", xnli.LABELS, True, "XNLI (natural language inference)", True, _xnli),
    ]
}


def get_task(name: str) -> Task:
    """The registered task ``name``, or one line naming the valid ones."""
    if name not in TASKS:
        raise UserError(f"downstream.task = {name!r}: unknown task; valid: {', '.join(TASKS)}")
    return TASKS[name]

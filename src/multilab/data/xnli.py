"""XNLI (Conneau et al. 2018), Dufter & Schütze 2020 §5's downstream task, read from the official
release.

Nothing is downloaded: ``downstream.task_path`` names a folder where the two official archives
are unpacked side by side::

    <task_path>/XNLI-1.0/xnli.dev.tsv                          dev: all 15 languages, one file
    <task_path>/XNLI-1.0/xnli.test.tsv                         test: likewise
    <task_path>/XNLI-MT-1.0/multinli/multinli.train.<iso>.tsv  MultiNLI train, per language

The layouts, as public readers of these files rely on them (checked with the lab's search
tool; the files themselves cannot be fetched here):

- ``xnli.{dev,test}.tsv``: tab-separated, unquoted, one header row ``language gold_label
  sentence1_binary_parse sentence2_binary_parse sentence1_parse sentence2_parse sentence1
  sentence2 promptID pairID genre label1 … label5 sentence1_tokenized sentence2_tokenized
  match`` (the two-row sample of the dev file in huggingface/datasets,
  ``datasets/xnli/XNLI-1.0/xnli.dev.tsv``). The Hugging Face loader
  (``datasets/xnli/xnli.py``) reads ``language``, ``gold_label``, ``sentence1``,
  ``sentence2`` and ``pairID`` by name with ``csv.DictReader(delimiter="\\t",
  quoting=csv.QUOTE_NONE)``; transformers' ``XnliProcessor``
  (``src/transformers/data/processors/xnli.py``) reads columns 0, 1, 6 and 7 after the
  header. A ``pairID`` is the same example in every language.
- ``multinli.train.<iso>.tsv``: header ``premise hypo label``; its label says
  ``contradictory`` where XNLI says ``contradiction`` (both readers above replace it; so does
  :func:`label_index`).

Labels, in this order: entailment, neutral, contradiction. Columns are found by their header
name (a release with more columns reads the same); every row must have the header's number
of columns, both texts and a known label, or the read stops with one line naming
``file:line`` (the lab refuses a damaged input rather than skipping rows). Blank lines are
skipped.

A study language reads the XNLI language of its edition's ISO code (``de`` for ``s``), with
its transform applied as everywhere else: a text transform (``enfake``) maps both sentences,
the ``fake`` id transform reads its base's text (the encoder shifts the ids). Train is only
read for the first language (Dufter & Schütze 2020 fine-tunes on English); dev and test keep the
pairIDs every study language has, in the file's order, so the languages stay aligned and a sample
takes the same examples in each.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from multilab.data.classification import SPLITS, Example
from multilab.errors import UserError
from multilab.lab.languages import Language

log = logging.getLogger(__name__)

LABELS: tuple[str, ...] = ("entailment", "neutral", "contradiction")
#: XNLI-MT's spelling → XNLI's
LABEL_ALIASES = {"contradictory": "contradiction"}
EVAL_FILES = {"dev": Path("XNLI-1.0/xnli.dev.tsv"), "test": Path("XNLI-1.0/xnli.test.tsv")}
TRAIN_FILE = "XNLI-MT-1.0/multinli/multinli.train.{iso}.tsv"
#: the columns read, by header name
EVAL_COLUMNS = ("language", "gold_label", "sentence1", "sentence2", "pairID")
TRAIN_COLUMNS = ("premise", "hypo", "label")
LAYOUT = ("XNLI-1.0/xnli.dev.tsv, XNLI-1.0/xnli.test.tsv and "
          "XNLI-MT-1.0/multinli/multinli.train.<iso>.tsv (the official XNLI-1.0 and "
          "XNLI-MT-1.0 archives unpacked there)")

Row = tuple[int, str, str, int]  # (line, first sentence, second sentence, label)


def xnli_language(language: Language) -> str:
    """The XNLI language a study language reads: its edition's ISO code, transform aside."""
    return replace(language, transform=None).iso


def label_index(value: str, path: Path, line: int) -> int:
    """A label's index in :data:`LABELS` (``contradictory`` read as ``contradiction``)."""
    label = LABEL_ALIASES.get(value, value)
    if label not in LABELS:
        raise UserError(f"{path}:{line}: label {value!r} is not one of {', '.join(LABELS)} "
                        "(or contradictory, XNLI-MT's contradiction)")
    return LABELS.index(label)


def _existing(root: Path, relative: Path) -> Path:
    path = Path(root) / relative
    if not path.is_file():
        raise UserError(f"{path} is missing; downstream.task = 'xnli' reads the official "
                        f"layout under downstream.task_path = {root}: {LAYOUT}")
    return path


def _rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, the named columns) of every row of a header-led TSV; one line naming
    ``file:line`` for a row whose column count is not the header's."""
    try:
        with path.open(encoding="utf-8", newline="\n") as handle:
            header = handle.readline().rstrip("\n").removesuffix("\r").removeprefix("\ufeff")
            names = header.split("\t")
            missing = [name for name in columns if name not in names]
            if missing:
                raise UserError(f"{path}:1: the header lacks {', '.join(missing)}; expected "
                                f"a header row with {', '.join(columns)} (the official layout)")
            where = {name: names.index(name) for name in columns}
            for number, line in enumerate(handle, start=2):
                line = line.rstrip("\n").removesuffix("\r")
                if not line.strip():
                    continue
                cells = line.split("\t")
                if len(cells) != len(names):
                    raise UserError(f"{path}:{number}: {len(cells)} tab-separated columns, the "
                                    f"header has {len(names)}")
                yield number, {name: cells[i] for name, i in where.items()}
    except UnicodeDecodeError as err:
        raise UserError(f"{path} is not UTF-8 text: {err}") from None


def _text(row: dict[str, str], column: str, path: Path, line: int) -> str:
    text = row[column].strip()
    if not text:
        raise UserError(f"{path}:{line}: empty {column}; every row needs both sentences")
    return text


def read_eval_file(path: Path, languages: set[str]
                   ) -> tuple[dict[str, dict[str, Row]], set[str]]:
    """``language → pairID → row`` of the wanted languages, and every language the file has.

    Every row is checked (columns, texts, label), the wanted languages' pairIDs once each."""
    by_language: dict[str, dict[str, Row]] = {iso: {} for iso in languages}
    present: set[str] = set()
    for line, row in _rows(path, EVAL_COLUMNS):
        iso = row["language"].strip()
        present.add(iso)
        first = _text(row, "sentence1", path, line)
        second = _text(row, "sentence2", path, line)
        label = label_index(row["gold_label"].strip(), path, line)
        if iso not in by_language:
            continue
        pair = row["pairID"].strip()
        if pair in by_language[iso]:
            raise UserError(f"{path}:{line}: pairID {pair!r} of language {iso!r} is already "
                            f"at line {by_language[iso][pair][0]}")
        by_language[iso][pair] = (line, first, second, label)
    return by_language, present


def read_train_file(path: Path) -> list[Row]:
    """Every row of an XNLI-MT train file, labels normalised."""
    rows = [(line, _text(row, "premise", path, line), _text(row, "hypo", path, line),
             label_index(row["label"].strip(), path, line))
            for line, row in _rows(path, TRAIN_COLUMNS)]
    if not rows:
        raise UserError(f"{path} has no rows below its header")
    return rows


def _aligned(path: Path, rows: dict[str, dict[str, Row]], isos: Sequence[str],
             present: set[str], languages: Sequence[Language]) -> list[str]:
    """The pairIDs every language has, in the first one's file order; one line for a
    language without rows or a pairID whose label differs between languages."""
    for lang, iso in zip(languages, isos, strict=True):
        if not rows[iso]:
            raise UserError(f"{path} has no rows of language {iso!r} (study language "
                            f"{lang.name}); the file has: {', '.join(sorted(present))}")
    pairs = [pair for pair in rows[isos[0]] if all(pair in rows[iso] for iso in isos)]
    if not pairs:
        raise UserError(f"{path}: languages {', '.join(dict.fromkeys(isos))} share no pairID")
    for pair in pairs:
        line, *_, label = rows[isos[0]][pair]
        for iso in isos[1:]:
            other_line, *_, other = rows[iso][pair]
            if other != label:
                raise UserError(
                    f"{path}: pairID {pair!r} is {LABELS[label]!r} in {isos[0]} (line {line}) "
                    f"but {LABELS[other]!r} in {iso} (line {other_line}); the languages of "
                    "XNLI share their gold labels")
    return pairs


def task_examples(root: Path | None, languages: Sequence[Language]
                  ) -> dict[str, dict[Language, list[Example]]]:
    """``split → language → examples`` of XNLI for a study's languages: train for the first
    language only (its XNLI-MT file), dev and test for every language, aligned by pairID.

    Every file is read and checked before anything is returned (one-line
    :class:`UserError`: missing folder or file, malformed row, language without rows,
    labels that differ between languages)."""
    if root is None:
        raise UserError("downstream.task = 'xnli' needs downstream.task_path: the folder "
                        f"holding {LAYOUT}")
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"downstream.task_path = {root} is not a folder; it must hold {LAYOUT}")
    isos = [xnli_language(lang) for lang in languages]
    files = {split: _existing(root, relative) for split, relative in EVAL_FILES.items()}
    out: dict[str, dict[Language, list[Example]]] = {split: {} for split in SPLITS}
    for split, path in files.items():
        rows, present = read_eval_file(path, set(isos))
        pairs = _aligned(path, rows, isos, present, languages)
        most = max(len(rows[iso]) for iso in isos)
        if len(pairs) < most:  # the release has every pair in every language: say so
            log.warning("%s: %d of %d pairIDs are in every language of %s; the others are "
                        "left out", path, len(pairs), most, ", ".join(dict.fromkeys(isos)))
        for pair in pairs:
            for lang, iso in zip(languages, isos, strict=True):
                _, first, second, label = rows[iso][pair]
                out[split].setdefault(lang, []).append(
                    Example(pair, lang.text(first), label, lang.text(second)))
    train = read_train_file(_existing(root, Path(TRAIN_FILE.format(iso=isos[0]))))
    out["train"][languages[0]] = [
        Example(str(line), languages[0].text(first), label, languages[0].text(second))
        for line, first, second, label in train]
    return out

"""Languages of the user's own text: the papers' Wikipedia samples, on the GPU server.

A user corpus (``corpora:`` in params.yaml, :class:`multilab.config.UserCorpusConfig`) is

- **train**: a text file, or a folder read recursively (files in sorted path order, hidden
  ones skipped), one sentence or document a line. WikiExtractor's ``<doc …>`` / ``</doc>``
  lines and lines without a letter or digit are dropped; whitespace (tabs included) is
  squeezed. A seeded sample of ``sentences`` lines, or of about ``bytes`` bytes of UTF-8
  (Dufter & Schütze 2020 §5: 1 GB a language), is kept in file order; neither: every line.
- **dev**: parallel text, line i the same sentence in every corpus of the study (XNLI's dev
  sentences are such a text: docs/own-corpora.md). The evaluation stage's alignment,
  retrieval and translation measures need it; the first ``corpus.dev_sentences`` rows in
  which every language has text are kept, so the rows stay aligned.

The corpora become the same verse tables as the Bible's (``data/layout.py``), with one
difference the rest of the lab must respect: the train rows of two languages are unrelated
lines (the train columns even differ in length; the shorter ones end in empty cells). So
``no-parallel`` changes nothing (the text is already not parallel, as Wikipedia is for seed
000's row 8), and what needs verse-aligned train text (a silver dictionary, IBM-1) is refused.

Sampling reads each source twice (count, then keep), holding only the kept lines: a 20 GB
English dump is sampled to 1 GB without holding 20 GB. Deterministic: the same files, sizes
and seed give the same bytes on any machine.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from multilab.config import Config, UserCorpusConfig
from multilab.data.bible import squeeze_spaces
from multilab.data.parallel import Verse, has_text
from multilab.errors import UserError
from multilab.lab.languages import Language

_EXTRACTOR_MARKUP = re.compile(r"^</?doc(\s[^>]*)?>$")


def source_files(root: Path, where: str, data: Path | None = None) -> list[Path]:
    """The files of a corpus source: the file itself, or a folder's files (recursive,
    sorted by path, hidden ones skipped); one line naming the path when there are none.
    With ``data`` (``paths.data``), a file that is a link to somewhere outside it is refused:
    ``data.dvc`` would not version the text the models are trained on."""
    if root.is_file():
        files = [root]
    elif not root.exists():
        raise UserError(f"{where} = {root}: no such file or folder (copy the text under "
                        "paths.data and `dvc add data`; multilab never downloads it)")
    else:
        files = sorted(p for p in root.rglob("*") if p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(root).parts))
    if not files:
        raise UserError(f"{where} = {root}: the folder holds no files")
    if data is not None:
        home = data.resolve()
        outside = [p for p in files if not p.resolve().is_relative_to(home)]
        if outside:
            raise UserError(f"{where}: {outside[0]} links to {outside[0].resolve()}, outside "
                            f"paths.data ({home}); copy the text under paths.data (data.dvc "
                            "versions only what is there) or remove the link")
    return files


def _lines(files: Sequence[Path], where: str) -> Iterator[str]:
    """The kept lines of the files, cleaned (module docstring), in order."""
    for path in files:
        with path.open("rb") as handle:  # bytes: the error names the file's line and byte
            offset = 0
            for number, data in enumerate(handle, 1):
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise UserError(f"{where}: {path} is not UTF-8 text (line {number}, byte "
                                    f"{offset + err.start}: {err.reason})") from None
                offset += len(data)
                # the line ends of text mode (universal newlines): \n, \r\n and a lone \r
                for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
                    line = squeeze_spaces(raw)
                    if line and not _EXTRACTOR_MARKUP.match(line) and has_text(line):
                        yield line


def sample_lines(files: Sequence[Path], corpus: UserCorpusConfig, where: str) -> list[str]:
    """The train lines of a corpus: all, or a seeded sample (``sentences`` lines exactly,
    or the count of lines whose mean size makes ``bytes``), in file order."""
    sizes = [len(line.encode("utf-8")) + 1 for line in _lines(files, where)]
    if not sizes:
        raise UserError(f"{where}: {', '.join(map(str, files[:3]))} holds no line of text "
                        "(a language with no text cannot be trained on)")
    wanted = len(sizes)
    if corpus.sentences is not None:
        wanted = min(wanted, corpus.sentences)
    elif corpus.bytes is not None:
        wanted = min(wanted, max(1, round(len(sizes) * corpus.bytes / sum(sizes))))
    keep = (range(len(sizes)) if wanted == len(sizes)
            else set(random.Random(corpus.seed).sample(range(len(sizes)), wanted)))
    return [line for index, line in enumerate(_lines(files, where)) if index in keep]


def dev_lines(path: Path, where: str) -> list[str]:
    """Every line of a parallel dev file (empty ones kept: they hold a row's place)."""
    if not path.is_file():
        raise UserError(f"{where} = {path}: no such file (parallel text, one sentence a line, "
                        "line i the same sentence in every corpus)")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise UserError(f"{where}: {path} is not UTF-8 text (line {line}, byte {err.start}: "
                        f"{err.reason})") from None
    return [squeeze_spaces(line) for line in text.splitlines()]


def _numbered(lines: Sequence[str]) -> list[Verse]:
    """Lines as the verse tables' rows: the id is the line number (``L000000001``)."""
    return [(f"L{i:09d}", line) for i, line in enumerate(lines, 1)]


def user_corpora(cfg: Config, languages: Sequence[Language], text: Sequence[Language]
                 ) -> tuple[dict[Language, list[Verse]], dict[Language, list[Verse]]]:
    """(train, dev) rows of every language of ``text`` (the languages with a text of their
    own, ``layout.text_columns``), read from ``cfg.corpora`` under ``cfg.paths.data``.

    Every check happens before anything is written (the caller writes): a missing or empty
    source, non-UTF-8 text, dev files of different lengths, too few aligned dev rows.
    """
    train: dict[Language, list[Verse]] = {}
    dev_text: dict[Language, list[str]] = {}
    sampled: dict[str, list[str]] = {}
    for lang in text:
        corpus = cfg.corpora[lang.edition]
        where = f"corpora.{lang.edition}"
        if lang.edition not in sampled:
            files = source_files(cfg.paths.data / corpus.train, f"{where}.train",
                                 cfg.paths.data)
            sampled[lang.edition] = sample_lines(files, corpus, f"{where}.train")
        train[lang] = _numbered([lang.text(line) for line in sampled[lang.edition]])
        dev_text[lang] = [lang.text(line) if line else ""
                          for line in dev_lines(cfg.paths.data / corpus.dev, f"{where}.dev")]
    lengths = {lang.edition: len(lines) for lang, lines in dev_text.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{name} {count}" for name, count in lengths.items())
        raise UserError(f"the dev files of [{', '.join(lengths)}] are not line-aligned: "
                        f"{listed} lines (valid: the same number, line i the same sentence)")
    rows = [i for i in range(next(iter(lengths.values())))
            if all(has_text(lines[i]) for lines in dev_text.values())]
    size = cfg.corpus.dev_sentences
    if len(rows) < size:
        raise UserError(f"the dev files of [{', '.join(lengths)}] have {len(rows)} rows with "
                        f"text in every language, fewer than corpus.dev_sentences = {size}; "
                        f"valid: corpus.dev_sentences <= {len(rows)}")
    dev = {lang: [(f"L{i + 1:09d}", lines[i]) for i in rows[:size]]
           for lang, lines in dev_text.items()}
    return train, dev


def xnli_dev_text(cfg: Config, force: bool = False) -> dict[Path, int]:
    """Write each user corpus's ``dev`` file from XNLI's dev split (``downstream.task_path``):
    XNLI's dev sentences are translations of each other in all 15 languages, the parallel
    text the evaluation stage needs. Lines: each pair's premise (once: a premise has three
    hypotheses) then its hypothesis, over the pairIDs every corpus's language has, in the
    file's order (2,490 pairs of 830 premises: ≈ 3,300 lines a language). Returns path →
    lines written.

    Everything is read and checked before the first file is written (one line: no user
    corpus in ``languages``, no XNLI folder, a language XNLI lacks, a dev path holding other
    text: a user's file is overwritten only with ``force``; one that already holds these
    lines is left as it is)."""
    from multilab.data import xnli
    from multilab.files import write_text

    languages = [lang for lang in cfg.language_list if lang.is_edition]
    if not cfg.user_corpora:
        raise UserError(f"languages [{', '.join(cfg.languages)}] has no user corpus; list the "
                        "`corpora:` names in languages (docs/GPU.md)")
    if cfg.downstream.task_path is None:
        raise UserError("downstream.task_path is null; set downstream.task=xnli and "
                        f"downstream.task_path to the folder holding {xnli.LAYOUT}")
    root = Path(cfg.downstream.task_path)
    path = root / xnli.EVAL_FILES["dev"]
    if not path.is_file():
        raise UserError(f"{path} not found; downstream.task_path must hold {xnli.LAYOUT}")
    isos = [lang.base_iso for lang in languages]
    rows, present = xnli.read_eval_file(path, set(isos))
    missing = [iso for iso in isos if not rows[iso]]
    if missing:
        raise UserError(f"{path} has no rows of language {missing[0]!r}; it has "
                        f"{', '.join(sorted(present))}")
    pairs = [pair for pair in rows[isos[0]] if all(pair in rows[iso] for iso in isos)]
    lines: dict[str, list[str]] = {iso: [] for iso in isos}
    seen: set[str] = set()
    for pair in pairs:
        premise = rows[isos[0]][pair][1]
        columns = (1, 2) if premise not in seen else (2,)
        seen.add(premise)
        for column in columns:
            for iso in isos:
                lines[iso].append(squeeze_spaces(rows[iso][pair][column]))
    texts = {cfg.paths.data / cfg.corpora[lang.edition].dev: (iso, "".join(
        line + "\n" for line in lines[iso])) for lang, iso in zip(languages, isos, strict=True)}
    for target, (_, text) in texts.items():
        if target.is_dir() or (target.exists() and not force
                               and target.read_bytes() != text.encode("utf-8")):
            raise UserError(f"{target} exists and holds other text; it is a corpus's dev path "
                            "(corpora.<name>.dev), so `corpus xnli-dev` would replace it: move "
                            "it away, point dev elsewhere, or run `multilab corpus xnli-dev "
                            "--force` to overwrite it (nothing was written)")
    written = {}
    for target, (iso, text) in texts.items():
        write_text(target, text)
        written[target] = len(lines[iso])
    return written

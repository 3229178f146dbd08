"""One downstream-task interface: the registry, the XNLI reader on a tiny fixture in
the official layout (alignment by pairID, XNLI-MT's label spelling, transforms, one-line
refusals of bad input), scores over any label count, sentence-pair encoding (lang-pos
included), the config keys and the report's title. No model is trained here: the end-to-end
run is in test_downstream.py, on its smoke model."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from multilab.data import xnli
from multilab.data.classification import Example, classification_scores, majority_baseline
from multilab.data.inputs import CLS_ID, SEP_ID, InputEncoder
from multilab.data.tasks import DEFAULT_TASK, TASKS, get_task
from multilab.errors import UserError
from multilab.evaluation.downstream import LanguageInput, encode_examples
from multilab.lab.languages import parse_languages
from multilab.lab.modifications import resolve_recipe
from multilab.reporting.downstream_table import downstream_frame, downstream_markdown
from tests.helpers import XNLI_EVAL_HEADER, smoke_config, write_xnli_fixture

ENGLISH_GERMAN_HINDI = parse_languages(["3", "s", "i"])
V, MAX_LEN = 100, 16


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- registry


def test_registry_names_each_task_its_labels_and_input_kind() -> None:
    assert list(TASKS) == ["bible-books", "bible-passages", "xnli"]
    assert DEFAULT_TASK == "bible-books"
    assert get_task("bible-passages").labels == get_task("bible-books").labels
    books, nli = get_task("bible-books"), get_task("xnli")
    assert len(books.labels) == 5 and books.labels[1] == "history" and not books.pairs
    assert nli.labels == ("entailment", "neutral", "contradiction") and nli.pairs
    assert nli.needs_path and not books.needs_path
    with pytest.raises(UserError) as err:
        get_task("nli")
    assert "valid: bible-books, bible-passages, xnli" in _one_line(err)


def test_scores_and_baseline_count_every_label_of_the_task() -> None:
    gold = [0, 1, 2, 2]
    three = classification_scores([0, 1, 2, 2], gold, 3)
    assert three.accuracy == 1 and three.macro_f1 == pytest.approx(1.0)
    assert classification_scores([0, 1, 2, 2], gold, 5).macro_f1 == pytest.approx(0.6)
    base = majority_baseline([2, 2, 1], gold, 3)
    assert base.label == 2 and base.accuracy == 0.5
    assert base.macro_f1 == pytest.approx((2 * 2 / (2 * 2 + 2)) / 3)


# --------------------------------------------------------------------------- XNLI reader


def test_xnli_reads_train_for_the_first_language_and_aligned_dev_test(tmp_path: Path) -> None:
    root = write_xnli_fixture(tmp_path, pairs=12, train_pairs=24)
    data = xnli.task_examples(root, ENGLISH_GERMAN_HINDI)
    english, german, hindi = ENGLISH_GERMAN_HINDI
    assert set(data["train"]) == {english} and len(data["train"][english]) == 24
    for split, first_id in (("dev", 1), ("test", 1001)):
        rows = [data[split][lang] for lang in ENGLISH_GERMAN_HINDI]
        assert [len(r) for r in rows] == [12, 12, 12]
        ids = [e.id for e in rows[0]]
        assert ids == [str(first_id + i) for i in range(12)]  # the file's order
        for other in rows[1:]:
            assert [(e.id, e.label) for e in other] == [(e.id, e.label) for e in rows[0]]
        assert [e.label for e in rows[0]] == [i % 3 for i in range(12)]
        assert all(e.text and e.text_pair for r in rows for e in r)
    first = data["dev"]
    assert first[german][0].text.startswith(("der", "herr", "sprach", "zu", "mose", "volk",
                                             "ging", "in", "land", "könig", "haus", "stadt"))
    assert first[hindi][0].text != first[english][0].text
    assert data["dev"][english][2].text_pair.split()[1] == "not"  # contradiction: negated


def test_xnli_mt_contradictory_is_read_as_contradiction(tmp_path: Path) -> None:
    root = write_xnli_fixture(tmp_path, train_pairs=9)
    raw = (root / "XNLI-MT-1.0/multinli/multinli.train.en.tsv").read_text(encoding="utf-8")
    assert raw.splitlines()[0] == "premise\thypo\tlabel" and "\tcontradictory\n" in raw
    assert "\tcontradiction\n" not in raw
    train = xnli.task_examples(root, ENGLISH_GERMAN_HINDI)["train"][ENGLISH_GERMAN_HINDI[0]]
    assert [e.label for e in train] == [0, 1, 2] * 3
    assert xnli.LABELS[train[2].label] == "contradiction"
    assert xnli.label_index("contradictory", Path("f"), 2) == xnli.label_index(
        "contradiction", Path("f"), 2) == 2


def test_xnli_transforms_read_their_base_language(tmp_path: Path) -> None:
    """``fake`` reads English as it is (the encoder shifts the ids); ``enfake`` maps both
    sentences of the English pair; German-first studies train on German's XNLI-MT file."""
    root = write_xnli_fixture(tmp_path)
    languages = parse_languages(["3", "fake", "enfake"])
    data = xnli.task_examples(root, languages)
    english, fake, enfake = (data["test"][lang] for lang in languages)
    assert [(e.text, e.text_pair) for e in fake] == [(e.text, e.text_pair) for e in english]
    shifted = languages[2].text
    assert [(e.text, e.text_pair) for e in enfake] == [
        (shifted(e.text), shifted(e.text_pair)) for e in english]
    assert enfake[0].text != english[0].text
    german_first = parse_languages(["s", "3"])
    train = xnli.task_examples(root, german_first)["train"][german_first[0]]
    assert any(word in train[0].text.split() for word in ("der", "herr", "volk", "land"))


def _rewrite(path: Path, line: int, change) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[line - 1] = change(lines[line - 1])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _cells(line: str, column: str, value: str) -> str:
    cells = line.split("\t")
    cells[XNLI_EVAL_HEADER.index(column)] = value
    return "\t".join(cells)


@pytest.mark.parametrize("case", ["no folder", "no dev", "no test", "no train"])
def test_xnli_missing_files_name_the_path_and_the_layout(tmp_path: Path, case: str) -> None:
    root = write_xnli_fixture(tmp_path / "xnli")
    gone = {"no folder": None, "no dev": root / "XNLI-1.0/xnli.dev.tsv",
            "no test": root / "XNLI-1.0/xnli.test.tsv",
            "no train": root / "XNLI-MT-1.0/multinli/multinli.train.en.tsv"}[case]
    if gone is None:
        root = tmp_path / "elsewhere"
    else:
        gone.unlink()
    with pytest.raises(UserError) as err:
        xnli.task_examples(root, ENGLISH_GERMAN_HINDI)
    message = _one_line(err)
    assert str(gone or root) in message
    assert "XNLI-1.0/xnli.dev.tsv" in message and "multinli.train.<iso>.tsv" in message
    with pytest.raises(UserError, match=r"needs downstream\.task_path"):
        xnli.task_examples(None, ENGLISH_GERMAN_HINDI)


@pytest.mark.parametrize("case,expected", [
    ("columns", ":5: 18 tab-separated columns, the header has 19"),
    ("empty text", ":5: empty sentence2"),
    ("label", ":5: label 'entails' is not one of entailment, neutral, contradiction"),
    ("train columns", "multinli.train.en.tsv:3: 2 tab-separated columns, the header has 3"),
    ("train label", "multinli.train.en.tsv:3: label 'maybe' is not one of"),
    ("header", "xnli.test.tsv:1: the header lacks pairID"),
])
def test_xnli_malformed_rows_name_file_line_and_what_is_wrong(tmp_path: Path, case: str,
                                                               expected: str) -> None:
    root = write_xnli_fixture(tmp_path)
    dev, test = root / "XNLI-1.0/xnli.dev.tsv", root / "XNLI-1.0/xnli.test.tsv"
    train = root / "XNLI-MT-1.0/multinli/multinli.train.en.tsv"
    if case == "columns":
        _rewrite(dev, 5, lambda line: line.rsplit("\t", 1)[0])
    elif case == "empty text":
        _rewrite(dev, 5, lambda line: _cells(line, "sentence2", " "))
    elif case == "label":
        _rewrite(dev, 5, lambda line: _cells(line, "gold_label", "entails"))
    elif case == "train columns":
        _rewrite(train, 3, lambda line: line.rsplit("\t", 1)[0])
    elif case == "train label":
        _rewrite(train, 3, lambda line: line.rsplit("\t", 1)[0] + "\tmaybe")
    else:
        _rewrite(test, 1, lambda line: line.replace("pairID", "pair_id"))
    with pytest.raises(UserError) as err:
        xnli.task_examples(root, ENGLISH_GERMAN_HINDI)
    assert expected in _one_line(err)


def test_xnli_language_without_rows_names_it_and_the_file_s_languages(tmp_path: Path) -> None:
    root = write_xnli_fixture(tmp_path)
    with pytest.raises(UserError) as err:
        xnli.task_examples(root, parse_languages(["3", "1"]))  # Italian: not in the fixture
    message = _one_line(err)
    assert "xnli.dev.tsv has no rows of language 'it'" in message
    assert "Italian" in message and "the file has: de, en, hi" in message


def test_xnli_labels_that_differ_between_languages_are_refused(tmp_path: Path) -> None:
    root = write_xnli_fixture(tmp_path, pairs=6)
    test = root / "XNLI-1.0/xnli.test.tsv"
    german_row = 1 + 6 + 5  # header, six English rows, then German pairID 1005 (neutral)
    _rewrite(test, german_row, lambda line: _cells(line, "gold_label", "entailment"))
    with pytest.raises(UserError) as err:
        xnli.task_examples(root, ENGLISH_GERMAN_HINDI)
    assert ("xnli.test.tsv: pairID '1005' is 'neutral' in en (line 6) but 'entailment' in de "
            "(line 12)") in _one_line(err)
    xnli.task_examples(root, parse_languages(["3", "i"]))  # German not studied: no conflict


# --------------------------------------------------------------------------- pair encoding


def test_encode_pair_under_lang_pos_marks_both_halves_with_the_language() -> None:
    first, second = torch.tensor([11, 12, 13]), torch.tensor([21, 22])
    plain = InputEncoder(resolve_recipe("original"), V, MAX_LEN)
    ids, positions, segments, words = plain.encode_pair(first, second, 1)
    assert ids.tolist() == [CLS_ID, 111, 112, 113, SEP_ID, 121, 122, SEP_ID]
    assert positions.tolist() == list(range(8))
    assert segments.tolist() == [0, 0, 0, 0, 0, 1, 1, 1]  # BERT's pair segments
    assert words.tolist() == [False, True, True, True, False, True, True, False]
    lang_pos = InputEncoder(resolve_recipe("lang-pos"), V, MAX_LEN)
    ids_l, positions_l, segments_l, words_l = lang_pos.encode_pair(first, second, 1)
    assert torch.equal(ids_l, ids) and torch.equal(words_l, words)
    assert positions_l.tolist() == [MAX_LEN + i for i in range(8)]  # language 1's block
    assert segments_l.tolist() == [1] * 8  # the segment lang-pos pretrained language 1 with
    _, positions_0, segments_0, _ = lang_pos.encode_pair(first, second, 0)
    assert positions_0.tolist() == list(range(8)) and segments_0.tolist() == [0] * 8
    three = InputEncoder(resolve_recipe("lang-pos"), V, MAX_LEN, (0, V, 2 * V), 3 * V)
    _, positions_2, segments_2, _ = three.encode_pair(first, second, 2)
    assert positions_2[0] == 2 * MAX_LEN and set(segments_2.tolist()) == {2}
    # the single-sentence encoding agrees: same block, same segment
    _, single_positions, single_segments, _ = lang_pos.encode(first, 1)
    assert single_positions[0] == positions_l[0] and single_segments[0] == segments_l[0]


def test_encode_pair_fits_a_shorter_downstream_max_length() -> None:
    encoder = InputEncoder(resolve_recipe("lang-pos"), V, MAX_LEN)
    long_a, long_b = torch.arange(10, 20), torch.arange(30, 33)
    ids, positions, _, _ = encoder.encode_pair(long_a, long_b, 1, max_length=8)
    assert len(ids) == 8 and ids.tolist().count(SEP_ID) == 2  # 5 words: A cut to 2, B to 3
    assert ids[1:3].tolist() == [110, 111] and positions.tolist() == list(range(16, 24))
    assert len(encoder.encode_pair(long_a, long_b, 1)[0]) == 16  # default: the encoder's


class _Words:
    """A tokenizer stand-in: each word is its length + 10."""

    def __call__(self, texts: list[str], add_special_tokens: bool = False) -> dict:
        return {"input_ids": [[10 + len(w) for w in text.split()] for text in texts]}


def test_encode_examples_encodes_pairs_as_pairs_and_counts_the_cut_ones() -> None:
    encoder = InputEncoder(resolve_recipe("lang-pos"), V, MAX_LEN)
    how = LanguageInput(ENGLISH_GERMAN_HINDI[1], _Words(), 1)  # type: ignore[arg-type]
    examples = [Example("1", "a bb", 0, "ccc"), Example("2", "a " * 9, 2, "bb " * 9),
                Example("3", "dddd", 1)]
    data = encode_examples(examples, how, encoder, max_length=10)
    assert data.labels.tolist() == [0, 2, 1] and data.truncated == 1
    ids, positions, segments, _ = data.encoded[0]
    assert ids.tolist() == [CLS_ID, 111, 112, SEP_ID, 113, SEP_ID]
    assert positions[0] == MAX_LEN and set(segments.tolist()) == {1}
    assert len(data.encoded[1][0]) == 10  # the pair cut to downstream.max_length
    single = data.encoded[2][0]
    assert single.tolist() == [CLS_ID, 114, SEP_ID]  # a single text: [CLS] A [SEP]


# --------------------------------------------------------------------------- config, report


def test_config_task_keys(tmp_path: Path) -> None:
    assert smoke_config(tmp_path).downstream.task == "bible-books"
    cfg = smoke_config(tmp_path, downstream={"task": "xnli", "task_path": str(tmp_path)})
    assert cfg.downstream.task == "xnli" and cfg.downstream.task_path == tmp_path
    with pytest.raises(UserError) as err:
        smoke_config(tmp_path, downstream={"task": "mnli"})
    assert ("downstream.task = 'mnli': unknown task; valid: bible-books, bible-passages, xnli"
            in _one_line(err))
    with pytest.raises(UserError) as err:
        smoke_config(tmp_path, downstream={"task": "xnli"})
    assert "downstream.task = 'xnli' needs downstream.task_path" in _one_line(err)
    with pytest.raises(UserError) as err:  # a folder the book-group task would not read
        smoke_config(tmp_path, downstream={"task_path": str(tmp_path)})
    assert (f"downstream.task_path = {tmp_path}: downstream.task = 'bible-books' reads no "
            "folder (only xnli does)") in _one_line(err)
    with pytest.raises(UserError, match=r"downstream\.task_path = 3: must be null or a path"):
        smoke_config(tmp_path, downstream={"task": "xnli", "task_path": 3})


def _runs(task: str | None) -> pd.DataFrame:
    runs = pd.DataFrame({
        "run_id": ["a", "b"], "metrics.downstream/acc.en": [0.5, 0.7],
        "metrics.downstream/f1.en": [0.4, 0.6], "metrics.downstream/acc.de": [0.4, 0.4],
        "metrics.downstream/f1.de": [0.3, 0.3], "metrics.downstream/majority_acc": [0.34] * 2,
        "metrics.downstream/majority_f1": [0.17] * 2, "tags.downstream.languages": ["en,de"] * 2,
    })
    if task is not None:
        runs["tags.downstream.task"] = [task] * 2
    return runs


def test_report_table_names_the_task_of_the_runs() -> None:
    frame = downstream_frame(_runs("xnli"), {"original": ["a", "b"]}, {"original": "0"})
    markdown = downstream_markdown(frame)
    assert markdown.startswith("### Downstream: XNLI (natural language inference)")
    assert "the 3 labels of xnli (entailment, neutral, contradiction)" in markdown
    assert "book" not in markdown and frame.loc[0, "task"] == "xnli"
    assert "| 0 | original | 0.600 ± 0.141 |" in markdown
    assert frame.loc[0, "delta_zero_shot"] == 0.0  # the default against itself
    older = downstream_markdown(downstream_frame(_runs(None), {"original": ["a", "b"]},
                                                 {"original": "0"}))
    assert older.startswith("### Downstream: book-group classification (the XNLI analogue)")
    assert "the 5 labels of bible-books (law, history," in older


def test_delta_column_is_the_mean_zero_shot_change_against_the_default() -> None:
    """Conneau et al. 2020 Table 1's Δ: per row, the zero-shot accuracy minus original's, averaged
    over the zero-shot languages; "–" without an original row."""
    runs = pd.DataFrame({
        "run_id": ["a", "b", "c"], "metrics.downstream/acc.en": [0.8, 0.8, 0.7],
        "metrics.downstream/f1.en": [0.5] * 3, "metrics.downstream/acc.de": [0.5, 0.3, 0.2],
        "metrics.downstream/f1.de": [0.3] * 3, "metrics.downstream/acc.hi": [0.4, 0.4, 0.1],
        "metrics.downstream/f1.hi": [0.3] * 3, "metrics.downstream/majority_acc": [0.3] * 3,
        "metrics.downstream/majority_f1": [0.1] * 3,
        "tags.downstream.languages": ["en,de,hi"] * 3,
    })
    groups = {"original": ["a"], "sep-emb": ["b"], "lang-pos": ["c"]}
    frame = downstream_frame(runs, groups, dict.fromkeys(groups))
    assert frame["delta_zero_shot"].tolist() == pytest.approx([0.0, -0.1, -0.3])
    assert "| lang-pos |" in downstream_markdown(frame) and "| -0.300 | 1 |" in (
        downstream_markdown(frame))
    without = downstream_frame(runs, {"sep-emb": ["b"]}, {"sep-emb": None})
    assert without["delta_zero_shot"].isna().all()

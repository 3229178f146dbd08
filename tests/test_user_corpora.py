"""User corpora: languages of the user's own text files, sampled, versioned under
``data/``, and the lab run on them as on Bible editions; bad input refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from multilab.cli import main
from multilab.config import UserCorpusConfig
from multilab.data.layout import read_verse_table
from multilab.data.user_corpora import dev_lines, sample_lines, source_files
from multilab.errors import UserError
from multilab.resolve import resolve_run
from multilab.training.training_data import document_pieces
from tests.helpers import cli_args, config_of, write_text_corpora, write_xnli_fixture

LANGUAGES = "[wiki-en,wiki-de,wiki-hi]"


def _settings(root: Path, corpora: dict, languages: str = LANGUAGES, **extra: object
              ) -> list[str]:
    """A smoke study on the fixture corpora: 100 aligned dev lines, 64 train rows."""
    values: dict[str, object] = {
        "profile": "smoke", "languages": languages, "study": "[original]", "seeds": "[0]",
        **{f"paths.{name}": root / name
           for name in ("data", "artifacts", "reports", "metrics", "mlruns", "results")},
        "corpus.dev_sentences": 100, "evaluate.dev_sentences": 100,
        "evaluate.curve_sentences": 50, "train.max_train_sentences": 64,
        "train.eval_points": "[]", **extra,
    }
    corpus_values = {f"corpora.{name}.{key}": value for name, fields in corpora.items()
                     for key, value in fields.items()}
    return [f"{key}={value}" for key, value in (values | corpus_values).items()]


def _lines(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_sampling_is_seeded_sized_and_in_file_order(tmp_path: Path) -> None:
    lines = [f"line {i} with words" for i in range(1000)]
    source = _lines(tmp_path / "a.txt", '<doc id="1" title="x">\n' + "\n".join(lines)
                    + "\n\n  ---  \n</doc>\n")
    every = sample_lines([source], UserCorpusConfig("en", "a.txt", "d"), "t")
    assert every == lines  # extractor markup, blank and letterless lines dropped

    some = sample_lines([source], UserCorpusConfig("en", "a", "d", sentences=100, seed=3), "t")
    again = sample_lines([source], UserCorpusConfig("en", "a", "d", sentences=100, seed=3), "t")
    other = sample_lines([source], UserCorpusConfig("en", "a", "d", sentences=100, seed=4), "t")
    assert some == again != other and len(some) == 100
    assert sorted(some, key=lines.index) == some  # file order kept

    size = sum(len(line.encode()) + 1 for line in lines)
    half = sample_lines([source], UserCorpusConfig("en", "a", "d", bytes=size // 2), "t")
    assert abs(sum(len(line.encode()) + 1 for line in half) - size / 2) < size * 0.02


def test_a_folder_is_read_recursively_in_path_order(tmp_path: Path) -> None:
    _lines(tmp_path / "wiki" / "AB" / "wiki_00", "third\n")
    _lines(tmp_path / "wiki" / "AA" / "wiki_01", "second\n")
    _lines(tmp_path / "wiki" / "AA" / "wiki_00", "first\n")
    _lines(tmp_path / "wiki" / ".hidden", "never\n")
    files = source_files(tmp_path / "wiki", "t")
    assert [p.relative_to(tmp_path / "wiki").as_posix() for p in files] == [
        "AA/wiki_00", "AA/wiki_01", "AB/wiki_00"]
    assert sample_lines(files, UserCorpusConfig("en", "wiki", "d"), "t") == [
        "first", "second", "third"]


def test_documents_are_cut_into_inputs_not_truncated() -> None:
    rows = [[torch.arange(300), torch.arange(5)], [torch.arange(10)]]
    pieces = document_pieces(rows, max_length=128)
    assert [[len(p) for p in language] for language in pieces] == [[126, 126, 48, 5],
                                                                    [10, 0, 0, 0]]
    assert torch.equal(torch.cat(pieces[0][:3]), torch.arange(300))  # every piece kept


def test_the_sentence_cap_counts_inputs_not_lines() -> None:
    """Issue 53, case 9: train.max_train_sentences cut the lines; one 10 MB line then made
    19,915 inputs (3.7 GB) on the smoke profile. It now cuts the inputs."""
    rows = [[torch.arange(100_000)], [torch.arange(10), torch.arange(300)]]
    pieces = document_pieces(rows, max_length=128, limit=3)
    assert [[len(p) for p in language] for language in pieces] == [[126, 126, 126],
                                                                    [10, 126, 126]]


def test_corpora_become_verse_tables_with_aligned_dev(tmp_path: Path, capsys) -> None:
    corpora = write_text_corpora(tmp_path / "data")
    settings = _settings(tmp_path, corpora)
    cfg = config_of(settings)
    assert cfg.user_corpora and cfg.verses and cfg.languages == ("wiki-en", "wiki-de", "wiki-hi")
    assert [lang.iso for lang in cfg.language_list] == ["en", "de", "hi"]
    assert main(cli_args(settings, "corpus", "build")) == 0, capsys.readouterr().err
    ids, train = read_verse_table(cfg.paths.corpora / "train.txt")
    lengths = {name: sum(1 for text in texts if text) for name, texts in train.items()}
    assert len(set(lengths.values())) == 3 and len(ids) == max(lengths.values())
    assert train["wiki-en"][0] == "Doc 0" and train["wiki-en"][1].startswith("The first words")
    ids, dev = read_verse_table(cfg.paths.corpora / "dev.txt")
    assert len(ids) == 100 and dev["wiki-de"][0] == "Im Anfang schuf Gott den Himmel und die Erde."
    assert dev["wiki-en"][0] == "At the first God made the heaven and the earth."


@pytest.mark.parametrize(("change", "says"), [
    ({"corpora.wiki-de.train": "corpora/nowhere.txt"},
     "corpora.wiki-de.train = "),
    ({"corpora.wiki-de.train": "corpora/empty.txt"}, "holds no line of text"),
    ({"corpora.wiki-hi.dev": "corpora/short-dev.txt"}, "are not line-aligned: "),
    ({"corpus.dev_sentences": 500, "evaluate.dev_sentences": 100},
     "fewer than corpus.dev_sentences = 500"),
    ({"languages": "[wiki-en,s]"}, "mixes Bible editions and user corpora"),
    ({"languages": "[wiki-en,wiki-xx]"}, "unknown language 'wiki-xx'"),
    ({"corpora.wiki-de.train": "/abs/de.txt"}, "must be a path inside paths.data"),
    ({"corpora.wiki-de.bytes": 10, "corpora.wiki-de.sentences": 10}, "give one of them"),
    ({"corpora.wiki-de.iso": "German"}, "must be an ISO 639 code"),
    ({"corpora.wiki-de.size": 10}, "unknown key corpora.wiki-de.size"),
    ({"spaces.seed_dictionary": "silver"}, "are not parallel"),
])
def test_bad_corpora_are_one_line_exit_2_nothing_written(tmp_path: Path, capsys,
                                                          change: dict, says: str) -> None:
    corpora = write_text_corpora(tmp_path / "data")
    _lines(tmp_path / "data" / "corpora" / "empty.txt", '<doc id="1">\n\n</doc>\n')
    _lines(tmp_path / "data" / "corpora" / "short-dev.txt", "one line\n")
    settings = _settings(tmp_path, corpora, **{k: v for k, v in change.items()
                                                if not k.startswith("corpora.")})
    settings += [f"{k}={v}" for k, v in change.items() if k.startswith("corpora.")]
    assert main(cli_args(settings, "corpus", "build")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("multilab: error: ") and "\n" not in err and says in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_silver_dictionary_measures_are_refused(tmp_path: Path) -> None:
    from multilab.evaluation.lab_word_retrieval import dictionary_of

    cfg = config_of(_settings(tmp_path, write_text_corpora(tmp_path / "data")))
    with pytest.raises(UserError, match="are not parallel"):
        dictionary_of(cfg, 0, 1, [])


def test_xnli_dev_writes_each_corpus_s_parallel_dev_file(tmp_path: Path, capsys) -> None:
    corpora = write_text_corpora(tmp_path / "data")
    xnli = write_xnli_fixture(tmp_path / "data" / "xnli", pairs=9)
    for fields in corpora.values():
        fields["dev"] = f"corpora/xnli-dev.{fields['iso']}.txt"
    settings = _settings(tmp_path, corpora, **{"downstream.task": "xnli",
                                               "downstream.task_path": xnli})
    assert main(cli_args(settings, "corpus", "xnli-dev")) == 0, capsys.readouterr().err
    files = {iso: (tmp_path / "data" / "corpora" / f"xnli-dev.{iso}.txt").read_text(
        encoding="utf-8").splitlines() for iso in ("en", "de", "hi")}
    rows = {iso: [line.split("\t") for line in (xnli / "XNLI-1.0" / "xnli.dev.tsv").read_text(
        encoding="utf-8").splitlines()[1:] if line.startswith(iso + "\t")] for iso in files}
    header = (xnli / "XNLI-1.0" / "xnli.dev.tsv").read_text().splitlines()[0].split("\t")
    first, second = header.index("sentence1"), header.index("sentence2")
    for iso, lines in files.items():  # premises once each, then hypotheses, in file order
        expected: list[str] = []
        for row in rows[iso]:
            if row[first] not in expected:
                expected.append(row[first])
            expected.append(row[second])
        assert lines == expected
    assert len({len(lines) for lines in files.values()}) == 1


@pytest.mark.slow  # ≈ 2 min on a loaded 2-core machine: spaces + four models, each tuned
def test_seed_000_table_3_from_text_files_on_the_smoke_profile(tmp_path: Path, capsys,
                                                               one_thread: None) -> None:
    """docs/GPU.md "Dufter & Schütze 2020 Table 3 at scale", every multilab command its stages run,
    on fixture files: WikiExtractor-shaped text → parallel dev text from XNLI → corpora →
    vocab → spaces → the four rows of Table 3 → evaluate → XNLI zero-shot → the report."""
    corpora = write_text_corpora(tmp_path / "data")
    xnli = write_xnli_fixture(tmp_path / "data" / "xnli", pairs=60, train_pairs=96)
    for fields in corpora.values():
        fields["dev"] = f"corpora/xnli-dev.{fields['iso']}.txt"
    rows = ["original", "inv-order", "lang-pos+shift-special+no-random", "knn-replace"]
    settings = _settings(tmp_path, corpora, **{
        "downstream.task": "xnli", "downstream.task_path": xnli, "downstream.epochs": 1,
        "train.epochs": 1,  # what runs is checked, not what is learned: 3 steps, not 6
        "study": f"[{','.join(rows)}]"})
    cfg = config_of(settings)
    commands = [["corpus", "xnli-dev"], ["corpus", "build"], ["vocab"], ["spaces"]]
    for row in rows:
        model = str(cfg.paths.model_dir(row, 0))
        commands += [["train", "--modification", row, "--seed", "0"], ["evaluate", model],
                     ["downstream", model]]
    for command in [*commands, ["report"]]:
        assert main(cli_args(settings, *command)) == 0, (command, capsys.readouterr().err)

    blocks = json.loads((cfg.paths.vocab / "blocks.json").read_text())["blocks"]
    assert [b["language"] for b in blocks] == ["wiki-en", "wiki-de", "wiki-hi"]
    spaces = json.loads((cfg.paths.metrics / "spaces.json").read_text())
    assert set(spaces["languages"]) == {"wiki-de", "wiki-hi"} and spaces["knn_k"] == 5
    assert not any("silver" in key for values in spaces["languages"].values()
                   for key in values)  # no aligned train text, no silver dictionary
    for row in rows:
        record = json.loads(cfg.paths.downstream_file(row, 0).read_text())
        assert record["task"] == "xnli" and record["labels"] == ["en", "de", "hi"]
        assert record["verses"] == {"train": 96, "dev": 60, "test": 60}
        assert all(0.0 <= record["test"][iso]["accuracy"] <= 1.0 for iso in ("en", "de", "hi"))
        metrics = json.loads(cfg.paths.eval_file(row, 0).read_text())["metrics"]
        assert 0.0 <= metrics["retrieval_p1.l8"] <= 1.0 and metrics["eval_sentences"] == 100
    report = (cfg.paths.reports / "table1.md").read_text()
    assert "### Downstream: XNLI" in report and "| 0 | original |" in report
    assert "| 30 | knn-replace | 0.740 ± 0.010 | 0.610 ± 0.010 | 0.540 ± 0.000 |" in report


def test_real_profile_holds_seed_000_section_5_settings() -> None:
    """Dufter & Schütze 2020 §5: BERT-base for every row, 20k WordPiece per language, 2 epochs,
    batch 256, lr 1e-4; XNLI fine-tuning 3 epochs, batch 32, lr 2e-5."""
    from multilab.resolve import load_config
    from tests.helpers import PARAMS

    cfg = load_config(PARAMS, {"profile": "real"})
    for row in ("original", "inv-order", "lang-pos+shift-special+no-random", "knn-replace"):
        run = resolve_run(cfg, row, 0)
        model = run.model
        assert (model.hidden_size, model.num_hidden_layers, model.num_attention_heads,
                model.intermediate_size) == (768, 12, 12, 3072)
        assert model.batch_size * model.grad_accum == 256 and model.lr == 1e-4
        assert run.epochs == 2
    assert cfg.vocab.size == 20000 and cfg.train.max_length == 128
    settings = cfg.downstream
    assert (settings.task, settings.epochs, settings.batch_size, settings.lr) == (
        "xnli", 3, 32, 2e-5)


def test_xnli_dev_never_overwrites_a_users_file_unless_forced(tmp_path: Path, capsys) -> None:
    """Issue 53, case 3: `corpus xnli-dev` wrote over whatever was at a dev path (the user's
    2,000-line training file became 600 XNLI lines, exit 0). A dev file holding other text
    is now refused, all of them before any is written; `--force` overwrites; a file that
    already holds XNLI's lines is left as it is (the command can be run again)."""
    corpora = write_text_corpora(tmp_path / "data")  # dev files of the user's own already
    xnli = write_xnli_fixture(tmp_path / "data" / "xnli", pairs=9)
    settings = _settings(tmp_path, corpora, **{"downstream.task": "xnli",
                                               "downstream.task_path": xnli})
    devs = [tmp_path / "data" / fields["dev"] for fields in corpora.values()]
    (tmp_path / "data" / corpora["wiki-hi"]["dev"]).unlink()  # one of them not there yet
    before = {path: path.read_bytes() for path in devs if path.exists()}
    capsys.readouterr()
    assert main(cli_args(settings, "corpus", "xnli-dev")) == 2
    err = capsys.readouterr().err
    assert err.startswith("multilab: error: ") and err.count("\n") == 1 and "--force" in err
    assert {path: path.read_bytes() for path in devs if path.exists()} == before  # untouched
    assert not devs[2].exists()

    assert main(cli_args(settings, "corpus", "xnli-dev", "--force")) == 0
    written = {path: path.read_bytes() for path in devs}
    assert all(written[path] != text for path, text in before.items())
    assert main(cli_args(settings, "corpus", "xnli-dev")) == 0  # the same lines: no refusal
    assert {path: path.read_bytes() for path in devs} == written


@pytest.mark.parametrize(("change", "says"), [
    ({"wiki-de": {"dev": "corpora/dev.en.txt"}}, "is also corpora.wiki-en.dev"),
    ({"wiki-de": {"dev": "corpora/wiki-de/wiki.txt"}}, "is corpora.wiki-de.train"),
    ({"wiki-hi": {"dev": "corpora/wiki-en/AA/dev.txt"}}, "is corpora.wiki-en.train (inside it)"),
])
def test_corpora_sharing_a_dev_file_are_refused_by_check(tmp_path: Path, capsys, change: dict,
                                                         says: str) -> None:
    """Issue 53, case 3: two corpora with one dev path (or a dev path that is a training
    text) passed `check` and `corpus build`, and one overwrote the other."""
    corpora = write_text_corpora(tmp_path / "data")
    for name, fields in change.items():
        corpora[name] |= fields
    files = {p: p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file()}
    capsys.readouterr()
    for command in (["check"], ["corpus", "build"]):
        assert main(cli_args(_settings(tmp_path, corpora), *command)) == 2
        err = capsys.readouterr().err
        assert err.startswith("multilab: error: ") and err.count("\n") == 1 and says in err, err
    assert {p: p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file()} == files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_non_utf8_text_names_the_files_line_and_byte(tmp_path: Path) -> None:
    """Issue 53, case 9: the error gave the byte inside the reader's chunk (wrong past the
    first 8 KiB) and no line number."""
    first = "a first line of text " * 600 + "\n"  # past the text reader's chunk
    source = tmp_path / "wiki.txt"
    source.write_bytes(first.encode() + b"second line\r\nthird \xff line\n")
    with pytest.raises(UserError) as err:
        sample_lines([source], UserCorpusConfig("en", "wiki.txt", "d"), "corpora.x.train")
    where = len(first.encode()) + len(b"second line\r\nthird ")
    assert f"(line 3, byte {where}: invalid start byte)" in str(err.value)
    dev = tmp_path / "dev.txt"
    dev.write_bytes(b"one\ntwo \xfe\n")
    with pytest.raises(UserError, match=r"\(line 2, byte 8: invalid start byte\)"):
        dev_lines(dev, "corpora.x.dev")
    source.write_bytes(b"one line\rtwo lines\r\nthree\n")  # text mode's line ends, as before
    assert sample_lines([source], UserCorpusConfig("en", "wiki.txt", "d"), "t") == [
        "one line", "two lines", "three"]


def test_a_link_out_of_the_data_folder_is_not_read_as_training_text(tmp_path: Path) -> None:
    """Issue 53, case 9: a symlink inside data/ pointing outside the project was read as
    training text (a file data.dvc does not version); the data folder itself may be a link."""
    outside = _lines(tmp_path / "elsewhere" / "secret.txt", "private text\n")
    real = tmp_path / "real-data"
    _lines(real / "corpora" / "wiki" / "a.txt", "some text\n")
    data = tmp_path / "data"
    data.symlink_to(real)  # as a worktree links the main checkout's data/
    assert source_files(data / "corpora" / "wiki", "t", data) == [
        data / "corpora" / "wiki" / "a.txt"]
    (real / "corpora" / "wiki" / "b.txt").symlink_to(outside)
    with pytest.raises(UserError, match=r"b.txt links to .*secret.txt, outside paths.data"):
        source_files(data / "corpora" / "wiki", "corpora.wiki.train", data)

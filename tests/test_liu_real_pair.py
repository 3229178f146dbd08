"""Liu et al. 2020a/b's static-against-BERT claims on English–German under a joint vocabulary
(studies/liu2020{a,b}-real-pair.yaml): the study files, their rows, the static row run by
``study run``, and the static corpus sharing a piece exactly where BERT shares its id."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from multilab.cli import main
from multilab.data.layout import Layout
from multilab.evaluation import static_embeddings as se
from multilab.resolve import load_config, parse_overrides
from multilab.studies.claims import load_claims
from multilab.studies.records import iter_records
from multilab.studies.runner import missing_runs, run_study, static_command
from multilab.studies.settings import study_settings
from multilab.studies.spec import (
    bind_claim,
    claim_row_names,
    group_rows,
    load_studies,
    load_study,
)
from multilab.studies.tables import speakers, study_result
from multilab.studies.verdict import Verdict
from tests.helpers import PARAMS, cli_args

ROOT = Path(__file__).resolve().parent.parent
STUDIES = ROOT / "studies"
CLAIMS = load_claims(STUDIES / "claims")
REAL_PAIR = ("liu2020a-real-pair", "liu2020b-real-pair")
#: the static-against-BERT claims each study binds (the Fake-English studies: not testable)
STATIC_CLAIMS = {
    "liu2020a-real-pair": {"liu2020a-s1-static-cannot-match",
                           "liu2020a-s2-3-1-small-data-static-beats-bert-mrr",
                           "liu2020a-s2-3-1-small-data-xnli-not-better",
                           "liu2020a-s2-3-2-big-data-bert-beats-static-mrr",
                           "liu2020a-s2-3-2-big-data-bert-beats-static-xnli",
                           "liu2020a-s2-3-2-data-not-static",
                           "liu2020a-s2-4-word2vec-window-not-beneficial"},
    "liu2020b-real-pair": {"liu2020b-s3-2-1-small-data-static-beats-bert-mrr",
                           "liu2020b-s3-2-1-small-data-xnli-not-better",
                           "liu2020b-s3-2-2-big-data-bert-beats-static-mrr",
                           "liu2020b-s3-2-2-big-data-bert-beats-static-xnli",
                           "liu2020b-s3-2-2-data-not-static"},
}


@pytest.fixture(scope="module")
def studies() -> dict:
    return load_studies(STUDIES, CLAIMS)


@pytest.mark.parametrize("name", REAL_PAIR)
def test_the_real_pair_binds_every_static_claim_with_a_criterion(studies: dict, name: str
                                                                 ) -> None:
    """Each static-against-BERT claim is bound (no pending, no not-testable), reads rows of
    the study, and states its criterion in the claim list; the Fake-English study keeps
    them not testable."""
    study = studies[name]
    assert study.languages == ("3", "s") and study.settings["vocab.mode"] == "joint"
    assert study.seeds == (42, 43, 44) and study.profile == "quick"
    bound = {entry.id: entry for entry in study.claims}
    assert set(bound) == STATIC_CLAIMS[name]
    for claim_id, entry in bound.items():
        assert not entry.pending and not entry.not_testable and entry.compare, claim_id
        assert CLAIMS[claim_id].criterion is not None, claim_id
        for row_name in claim_row_names(study, bind_claim(CLAIMS[claim_id], entry)):
            group_rows(study, row_name)  # KeyError: a row the study lacks
    fake = studies[name.replace("real-pair", "data-window")]
    assert all(entry.not_testable for entry in fake.claims if entry.id in bound)


@pytest.mark.parametrize("name", REAL_PAIR)
def test_the_rows_resolve_to_joint_english_german_models(studies: dict, name: str) -> None:
    """BERT at 2,000 and at all train rows, English and German verses in one WordPiece; the
    two studies are one configuration, so one set of runs serves both."""
    study = studies[name]
    sizes = {}
    for row in study.rows:
        if row.static:
            continue
        cfg = load_config(PARAMS, parse_overrides(study_settings(study, Path(), row)))
        assert cfg.languages == ("3", "s") and cfg.vocab.mode == "joint" and cfg.verses
        sizes[row.label] = cfg.train.max_train_sentences
    assert sizes == {"BERT, 2,000 train rows": 2000, "BERT, all train rows": None}
    twin = studies["liu2020a-real-pair"]
    assert [(r.label, dict(r.settings)) for r in twin.rows] == \
        [(r.label, dict(r.settings)) for r in study.rows]
    assert twin.metrics == study.metrics


def test_the_static_row_is_one_multilab_static_per_seed(studies: dict) -> None:
    """``study run`` plans the static row's seeds beside the BERT rows' and runs it as
    ``multilab static`` over the grid the study's metrics name, in the study's settings."""
    study = studies["liu2020a-real-pair"]
    static = study.row("static")
    assert static_command(study, static, 43) == [
        "static", "--source", "3", "--target", "s", "--models", "skipgram,cbow",
        "--rows", "2000,all", "--windows", "5,20", "--seed", "43"]
    steps = missing_runs(study, [])
    assert [(s.row.label, s.seed) for s in steps] == [
        (row.label, seed) for row in study.rows for seed in (42, 43, 44)]
    assert {s.needs for s in steps if s.row.static} == {(("static", ""),)}
    assert {s.needs for s in steps if not s.row.static} == {
        (("mrr", "3-s"), ("downstream", ""))}


def test_study_run_runs_the_static_row_on_the_study_data(studies: dict, tmp_path: Path
                                                         ) -> None:
    """The static row's data is the study's (corpora and vocabulary built first), its
    command carries the study's settings (profile, languages, vocab.mode joint)."""
    study = studies["liu2020a-real-pair"]
    steps = [s for s in missing_runs(study, []) if s.row.static and s.seed == 42]
    calls: list[list[str]] = []
    run_study(study, steps, lambda argv: calls.append(argv) or 0, tmp_path, lambda _: None)
    commands = [[a for a in argv if not a.startswith("--set")] for argv in calls]
    assert commands == [["corpus", "build"], ["vocab"],
                        static_command(study, study.row("static"), 42)]
    assert {"--set=vocab.mode=joint", "--set=languages=[3, s]", "--set=profile=quick",
            "--set=experiment=liu2020a-real-pair"} <= set(calls[-1])


@pytest.mark.parametrize(("offsets", "blocks"), [
    ((0, 0), [0, 0]),  # vocab.mode joint or union: one block, shared ids
    ((0, 2048), [0, 1]),  # separate blocks, [3, fake] or vocab.mode separate
    ((0, 0, 4096), [0, 0, 2]),  # [3, s, fake] joint: fake keeps a block of its own
])
def test_static_pieces_are_shared_exactly_where_bert_ids_are(monkeypatch: pytest.MonkeyPatch,
                                                             offsets: tuple[int, ...],
                                                             blocks: list[int]) -> None:
    """The static corpus prefixes a piece with its vocabulary block: under a joint
    vocabulary English's and German's ``##en`` are one fastText word (an anchor), with
    separate blocks two."""
    count = len(offsets)
    fake_layout = Layout(tuple(map(str, range(count))), offsets, (2048,) * count,
                         ("language-0",) * count, ("",) * count, "multilingual")
    monkeypatch.setattr(se, "layout", lambda cfg: fake_layout)
    assert se.piece_blocks(object()) == blocks  # type: ignore[arg-type]
    sentences = [[["jesus", "##en"]] for _ in offsets]
    words = {w for line in se.corpus_lines(sentences, 1, 0, blocks) for w in line.split()}
    assert len(words) == 2 * len(set(blocks))
    assert se.corpus_lines(sentences, 1, 0) == se.corpus_lines(sentences, 1, 0,
                                                               list(range(count)))


def test_the_real_pair_speaks_for_the_static_claims_once_it_has_a_reading(
        studies: dict) -> None:
    """Before any record the Fake-English study's *not testable* is the outcome of record;
    the real pair's *not measured* never displaces it (studies/README.md, which study
    speaks)."""
    results = [study_result(studies[name], [], CLAIMS)
               for name in ("liu2020a-data-window", "liu2020a-real-pair")]
    chosen = speakers(results)
    speaker = chosen["liu2020a-s2-3-2-data-not-static"]
    assert speaker.result.study.name == "liu2020a-data-window"
    assert speaker.outcome.verdict is Verdict.NOT_TESTABLE


@pytest.mark.slow  # corpora, a joint vocabulary, two tiny BERTs and the static grid: ≈ 1-2 min
def test_every_row_runs_end_to_end_at_smoke_size(built_project: Path, tmp_path: Path,
                                                 one_thread: None) -> None:
    """The study at smoke size (64 and 256 train verses, one fine-tune epoch): ``study run``
    trains and measures both BERT rows and runs the static row, and every cell of seed 42
    has its number."""
    raw = yaml.safe_load((STUDIES / "liu2020a-real-pair.yaml").read_text(encoding="utf-8"))
    text = yaml.safe_dump(raw).replace("r2000", "r64")
    spec = yaml.safe_load(text)
    spec |= {"profile": "smoke", "seeds": [42], "settings": {
        "vocab.mode": "joint", "corpus.dev_sentences": 200, "train.eval_points": "[]",
        "evaluate.dev_sentences": 100, "downstream.epochs": 1,
        "downstream.max_train_verses": 64, "downstream.max_test_verses": 64}}
    spec["rows"][0]["settings"] = {"train.max_train_sentences": 64}
    spec["rows"][1]["settings"] = {"train.max_train_sentences": 256}
    folder = tmp_path / "studies"
    folder.mkdir()
    path = folder / "liu2020a-real-pair.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    study = load_study(path, CLAIMS)
    results = tmp_path / "results"
    base = [f"paths.data={built_project / 'data'}", f"paths.results={results}",
            f"paths.mlruns={tmp_path / 'mlruns'}"]
    steps = missing_runs(study, [])
    run_study(study, steps, lambda argv: main(cli_args(base, *argv)), tmp_path,
              lambda _: None)
    cells = study_result(study, iter_records(results), CLAIMS).cells
    empty = sorted(f"{label}: {metric}" for (label, metric), cell in cells.items()
                   if cell.values == () and (study.row(label).static
                                             == metric.startswith("static.")))
    assert not empty, empty
    assert missing_runs(study, iter_records(results)) == []

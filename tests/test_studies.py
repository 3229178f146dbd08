"""Study specs (studies/*.yaml), their tables from records, and `multilab study`."""

from __future__ import annotations

import functools
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from multilab.cli import main
from multilab.config import Config
from multilab.errors import Terminated, UserError
from multilab.files import PRINT_VARIABLE
from multilab.resolve import load_config, parse_overrides, resolve_run
from multilab.studies.claims import load_claims
from multilab.studies.records import iter_records, write_record
from multilab.studies.spec import load_studies, load_study
from multilab.studies.tables import study_result
from multilab.studies.verdict import Verdict
from tests.helpers import PARAMS

ROOT = Path(__file__).resolve().parent.parent
STUDIES = ROOT / "studies"
CLAIMS = load_claims(STUDIES / "claims")


@functools.cache
def _resolved(profile: str, languages: str, modification: str,
              settings: tuple[tuple[str, object], ...]) -> str:
    overrides = parse_overrides([f"profile={profile}", f"languages=[{languages}]",
                                 *(f"{key}={value}" for key, value in settings)])
    run = resolve_run(load_config(PARAMS, overrides), modification, 0)
    return json.dumps(run.as_params(), default=str)


def _model_config(profile: str, languages: str, modification: str = "original",
                  **settings: object) -> dict:
    """A record's ``config`` block as ``multilab`` writes it for a model of ``settings``
    (``RunConfig.as_params``): the record belongs to the study row of that configuration."""
    return json.loads(_resolved(profile, languages, modification, tuple(sorted(settings.items()))))


def test_the_committed_studies_validate() -> None:
    studies = load_studies(STUDIES, CLAIMS)
    assert "dufter2020-table1" in studies
    table1 = studies["dufter2020-table1"]
    assert table1.row("original").paper["translation_p1.l8"].std == pytest.approx(0.03)
    assert table1.row("original").paper["translation_p1.l8"].n == 5


def test_generated_tables_match_the_committed_records(
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/studies/, docs/findings.md and the generated blocks of docs/REPRODUCTION.md and
    README.md (the tally box, the results preview) are a lockfile of studies/ + results/:
    regenerate (the documents' prose kept) in a copy of the repository's layout and compare
    bytes."""
    monkeypatch.setenv(PRINT_VARIABLE, "yes")  # the committed figures have their PDFs
    out = tmp_path / "docs" / "studies"
    out.parent.mkdir()
    copies = {ROOT / "docs" / "REPRODUCTION.md": tmp_path / "docs" / "REPRODUCTION.md",
              ROOT / "README.md": tmp_path / "README.md"}
    for committed_document, copy in copies.items():
        shutil.copy(committed_document, copy)
    for block in ("tally", "preview"):
        assert f"<!-- generated:{block} -->" in (ROOT / "README.md").read_text(), \
            f"README.md lost its {block} block: it would silently stop being regenerated"
    assert main(["--set", f"paths.results={ROOT / 'results'}", "study", "report", "--all",
                 "--out", str(out), "--studies", str(STUDIES)]) == 0
    committed = ROOT / "docs" / "studies"
    made = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    for name in made:  # the markdown and the figures (PNG, PDF) it links
        assert (out / name).read_bytes() == (committed / name).read_bytes(), \
            f"docs/studies/{name} is stale: run `multilab study report --all`"
    assert made == sorted(p.relative_to(committed) for p in committed.rglob("*") if p.is_file())
    for committed_document, copy in {**copies, ROOT / "docs" / "findings.md":
                                     tmp_path / "docs" / "findings.md"}.items():
        assert copy.read_text() == committed_document.read_text(), \
            f"{committed_document.relative_to(ROOT)} is stale: run `multilab study report --all`"


def test_the_reproduction_document_keeps_its_prose_and_needs_its_blocks(tmp_path: Path,
                                                                          capsys) -> None:
    """Prose outside the generated blocks survives a report; a document without a block is
    refused in one line and nothing is written."""
    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder)
    _toy_records(tmp_path / "results")
    document = tmp_path / "docs" / "REPRODUCTION.md"
    document.parent.mkdir()
    prose = "# Mine\n\nHand-written words.\n\n"
    document.write_text(prose + "".join(f"<!-- generated:{name} -->\nold\n"
                                        f"<!-- /generated:{name} -->\n"
                                        for name in ("summary", "studies", "findings")))
    args = ["--set", f"paths.results={tmp_path / 'results'}", "study", "report", "--all",
            "--out", str(tmp_path / "docs" / "studies"), "--studies", str(folder)]
    assert main(args) == 0
    text = document.read_text()
    assert text.startswith(prose) and "\nold\n" not in text
    # 3 claims tested, 3 held or not (1 held), all 3 surviving Holm over 3 distinct tests
    for line in ("| **with a verdict** (≥ 3 seeds every arm) | 3 | 0 | 0 | 0 | 0 | 3 |",
                 "| held | 1 | 0 | 0 | 0 | 0 | 1 |", "| held or did not hold | 3 |",
                 "| … of which survive Holm (α .05) | 3 |", "| distinct tests (Holm's m) | 3 |"):
        assert line in text, line
    assert "[toy-study](studies/toy-study.md)" in text and "**held**" in text
    document.write_text(prose)
    (tmp_path / "docs" / "studies" / "toy-study.md").unlink()
    assert main(args) == 2
    assert "no generated block 'summary'" in capsys.readouterr().err
    assert document.read_text() == prose
    assert not (tmp_path / "docs" / "studies" / "toy-study.md").exists()


def test_a_report_names_the_records_git_does_not_hold(tmp_path: Path, capsys) -> None:
    """The documents test regenerates them from the committed records on a fresh clone: a
    report written while a record lies uncommitted says so (the CI failure of 2026-12-04)."""
    import subprocess

    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder, profile="quick")  # a study's profile: smoke reads the scratch folder
    results = tmp_path / "results"
    _toy_records(results)

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("add", "results")
    git("commit", "-q", "-m", "records")
    args = ["--set", f"paths.results={results}", "study", "report", "toy-study",
            "--out", str(tmp_path / "out"), "--studies", str(folder)]
    assert main(args) == 0
    assert "not committed" not in capsys.readouterr().err
    late = next(results.rglob("*.json"))
    late.rename(late.with_name("late.json"))
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "warning: 2 file(s) under" in err and "late.json" in err
    # each path whole: git lists the deleted file as " D path", whose space a stripped
    # listing lost along with the path's first letter ("esults/…")
    assert f"({late.relative_to(tmp_path)}, " in err


SPEC = {"name": "toy-study", "paper": "dufter2020", "table": "Table 1", "title": "toy",
        "languages": ["3", "fake"], "profile": "smoke", "seeds": [0, 1, 2], "paper_seeds": 5,
        "metrics": ["mu", "retrieval_p1.l0", "retrieval_p1.l8"],
        "rows": [{"id": "0", "modification": "original", "paper": {"mu": 0.70}},
                 {"id": "1", "modification": "lang-pos", "paper": {"mu": [0.30, 0.05]}}],
        "claims": ["dufter2020-t1-r1-lang-pos", "dufter2020-t1-r0-retrieval-layer8",
                   "dufter2020-t1-r1-paper"]}


#: a ``_spec`` change that leaves the key out
DROP = object()


def _spec(tmp_path: Path, **change: object) -> Path:
    path = tmp_path / f"{change.get('name', 'toy-study')}.yaml"
    spec = {key: value for key, value in (SPEC | change).items() if value is not DROP}
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    return path


ORIGINAL = {"modification": "original"}
FIGURE = {"name": "mu-vs-rho", "x": "mu", "y": "retrieval_p1.l0"}
LANG_POS = "dufter2020-t1-r1-lang-pos"


@pytest.mark.parametrize(("change", "message"), [
    ({"colour": 1}, "unknown key 'colour'; valid: name, paper"),
    ({"rows": [{"modification": "lang-poss"}]}, "row 1: "),
    ({"rows": [{"modification": "original", "paper": {"rho": 1}}]},
     "row original: paper: unknown key 'rho'; valid: mu"),
    ({"metrics": ["mu", "mrr.3-fake.bogus"]}, "metric 'mrr.3-fake.bogus': not a form"),
    ({"claims": ["dufter2020-t1-r3-inv-order"]},
     "row 'inv-order' is not a row of the study; rows: original, lang-pos"),
    ({"claims": ["dufter2020-t1-r3-inv-order-perplexity"]}, "row 'inv-order'"),
    ({"claims": ["no-such-claim"]}, "claim 'no-such-claim' is not in studies/claims/"),
    ({"claims": ["k2020-t1-wordpiece-overlap-es"]}, "the study is dufter2020's"),
    ({"metrics": ["mu"]}, "metric 'retrieval_p1.l0' is not among the study's metrics: mu"),
    ({"profile": "huge"}, "profile 'huge'; valid: smoke, quick, paper, real"),
    ({"seeds": [1, -2]}, "seeds [1, -2]: a list of integers >= 0"),
    # one record counted as three seeds would give a verdict
    ({"seeds": [0, 0, 0]}, "seeds [0, 0, 0]: seed 0 is listed twice; each seed once, e.g. [0]"),
    # a metric no record holds was an empty column
    ({"metrics": ["mu2", "retrieval_p1.l0", "retrieval_p1.l8"], "claims": []},
     "metric 'mu2' is no metric of the metric table (did you mean 'mu'?); valid: mu, "),
    ({"metrics": ["mu", "retrieval_p1.l0 minus retrieval_p1.lx"], "claims": []},
     "metric 'retrieval_p1.lx' is no metric of the metric table"),
    # two labels of one folder name: the second row trained on the first's vocabulary
    ({"rows": [ORIGINAL | {"label": "v 512", "settings": {"vocab.size": 512}},
               ORIGINAL | {"label": "v-512", "settings": {"vocab.size": 256}}], "claims": []},
     "rows 'v 512' and 'v-512' share the folder name 'v-512'"),
    ({"title": DROP, "table": DROP}, "missing table, title"),
    ({"name": "Toy Study"}, "name 'Toy Study': lowercase words joined by '-', the file's name"),
    ({"paper": "x2020"}, "paper 'x2020'; valid: dufter2020, liu2020a, k2020"),
    ({"paper": "lab"}, "paper 'lab' (the lab's own study) tests no paper's claims"),
    ({"languages": []}, "languages []: a list of edition codes"),
    ({"metrics": "mu"}, "metrics 'mu': a list of metric keys"),
    ({"paper_seeds": 0}, "paper_seeds 0: the paper's seed count or null"),
    ({"paper_decimals": 9}, "paper_decimals 9: the decimals the paper reports, 0-6"),
    ({"paper_comparable": "maybe"}, "paper_comparable 'maybe': true, or 'no: <why>'"),
    ({"settings": ["train.epochs=1"]}, "settings must map --set keys to values"),
    ({"rows": []}, "rows must be a non-empty list"),
    ({"rows": [ORIGINAL, ORIGINAL]}, "two rows share a label or alias"),
    ({"fine_tune": 3}, "fine_tune 3: an edition code, or null"),
    ({"records_from": 3}, "records_from 3: a path the records were imported from"),
    ({"rows": ["original"]}, "row 1: a mapping of"),
    ({"rows": [ORIGINAL | {"static": "yes"}]}, "row 1: static 'yes': true or false"),
    ({"rows": [{"id": "0"}]}, "row 1: modification (a name of `multilab ids`) needed"),
    ({"rows": [ORIGINAL | {"paper": [0.7]}]}, "row original: paper must map metrics to values"),
    ({"rows": [ORIGINAL | {"paper": {"mu": "high"}}]},
     "row original: mu: 'high'; a paper value is a number or [mean, std]"),
    ({"rows": [ORIGINAL | {"settings": ["x"]}]}, "row original: settings must map --set keys"),
    ({"rows": [ORIGINAL | {"paper_comparable": "no"}]},
     "row original: paper_comparable 'no': true or false"),
    ({"rows": [ORIGINAL | {"aliases": "base"}]}, "row original: aliases must be a list of names"),
    ({"rows": [ORIGINAL | {"fine_tune": 3}]}, "row original: fine_tune 3: an edition code"),
    ({"rows": [ORIGINAL | {"pair": "3s"}]}, "row original: pair '3s': <source>-<target>"),
    ({"rows": [ORIGINAL | {"seeds": [7]}]},
     "row original: seeds [7]: some of the study's seeds (0, 1, 2), each once"),
    ({"rows": [ORIGINAL | {"seeds": [1, 1]}]}, "row original: seeds [1, 1]: some of the"),
    ({"rows": [ORIGINAL | {"seeds": []}]}, "row original: seeds []: some of the"),
    ({"claims": [{"pending": "later"}]}, "an entry is a claim id or {id: …, pending: why}"),
    ({"claims": [{"id": LANG_POS, "compare": ["mu"]}]},
     f"claim {LANG_POS}: compare must map the claim's compare fields"),
    ({"claims": [{"id": LANG_POS, "compare": {"direction": "greater"}}]},
     f"claim {LANG_POS}: compare: 'direction': the claim's direction is the paper's"),
    ({"claims": [{"id": LANG_POS, "compare": {"a": "mean of original, shift-special"}}]},
     "row 'shift-special' is not a row of the study"),
    ({"claims": [{"id": LANG_POS, "compare": {"a": "each of IDs 0-3"}}]},
     "row 'ID 2' is not a row of the study"),
    ({"claims": [{"id": "dufter2020-t1-r0-retrieval-layer8", "compare": {"rows": ["inv"]}}]},
     "claim dufter2020-t1-r0-retrieval-layer8: row 'inv' is not a row of the study"),
    ({"figures": FIGURE}, "figures must be a list of {name, x, y, title, axis_titles}"),
    ({"figures": ["mu"]}, "figure 1: a mapping of name, title, x, y, axis_titles"),
    ({"figures": [FIGURE, FIGURE]}, "figure mu-vs-rho: two figures share this name"),
    ({"figures": [FIGURE | {"y": ["mu", "mu"]}]}, "y ['mu', 'mu'] names a metric twice"),
    ({"figures": [FIGURE | {"title": " "}]}, "title ' ': words, or leave it out"),
    ({"figures": [FIGURE | {"axis_titles": ["μ"]}]}, "axis_titles must map the figure's metrics"),
    ({"figures": [FIGURE | {"axis_titles": {"mu": ""}}]}, "axis_titles: mu: '': words"),
])
def test_a_bad_spec_is_one_line(tmp_path: Path, change: dict, message: str) -> None:
    if change.get("claims") == ["k2020-t1-wordpiece-overlap-es"] and \
            "k2020-t1-wordpiece-overlap-es" not in CLAIMS:
        change = {"claims": [next(c for c in CLAIMS if c.startswith("k2020-"))]}
    path = _spec(tmp_path, **change)
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        load_study(path, CLAIMS)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


@pytest.mark.parametrize(("text", "message"), [
    ("name: [unclosed", "not readable YAML"),
    ("- toy-study\n", "a study is a mapping of name, paper"),
])
def test_a_spec_that_is_no_mapping_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "toy-study.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        load_study(path, CLAIMS)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def _toy_records(results: Path) -> None:
    """Three seeds a row of made-up evaluations (the verdicts are the rule's, not ours)."""
    values = {"original": ([0.24, 0.28, 0.21], [0.01, 0.02, 0.01], [0.5, 0.6, 0.55]),
              "lang-pos": ([0.01, 0.02, 0.015], [0.0, 0.01, 0.0], [0.01, 0.02, 0.01])}
    for modification, (mu, rho0, rho8) in values.items():
        for seed in range(3):
            config = _model_config("smoke", "3,fake", modification)
            model = {"modification": modification, "seed": seed,
                     "fingerprint": f"{modification}{seed}"}
            write_record(results, "multilab-smoke", "evaluate",
                         {"metrics": {"mu": mu[seed], "retrieval_p1.l0": rho0[seed],
                                      "retrieval_p1.l8": rho8[seed]}},
                         model=model, config=config)
    # a record of another profile never enters the table
    write_record(results, "multilab-quick", "evaluate", {"metrics": {"mu": 9.0}},
                 model={"modification": "original", "seed": 0, "fingerprint": "q"},
                 config=_model_config("quick", "3,fake"))


def toy_study(tmp_path: Path) -> tuple[Path, Path]:
    """A toy study's specs folder and its records (three seeds a row), for the bad-input and
    fault tests of ``study`` commands."""
    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder)
    _toy_records(tmp_path / "results")
    return folder, tmp_path / "results"


def test_verdicts_come_from_records_only(tmp_path: Path) -> None:
    study = load_study(_spec(tmp_path), CLAIMS)
    _toy_records(tmp_path / "results")
    result = study_result(study, iter_records(tmp_path / "results"), CLAIMS)
    assert result.cells[("original", "mu")].values == (0.24, 0.28, 0.21)
    # lang-pos's "medium" decrease (−31 % to −70 %) against a toy drop of 94 %
    lang_pos = result.outcomes["dufter2020-t1-r1-lang-pos"]
    assert lang_pos.verdict is Verdict.NOT_HELD and "relative change -94 %" in lang_pos.reason
    assert result.outcomes["dufter2020-t1-r0-retrieval-layer8"].verdict is Verdict.HELD
    paper = result.outcomes["dufter2020-t1-r1-paper"]
    assert paper.verdict is Verdict.NOT_HELD and "Welch" in paper.reason  # .015 vs .30 ± .05


def test_a_record_goes_to_the_row_of_its_configuration(tmp_path: Path) -> None:
    """A sweep: a base row naming no setting and rows that each vary the model's shape. A
    record belongs to the row whose resolved configuration it has: the 8-layer hidden-32
    model's record is that row's alone, not also the base point's nor the row that pins only
    the layers (found when the first real-regime point landed); a model that differs from
    every row in one setting (the masking rate) is no row's."""
    shape = {"models.small.hidden_size": 32, "models.small.num_hidden_layers": 8}
    rows = [{"label": "base", "modification": "original"},
            {"label": "l8", "modification": "original",
             "settings": {"models.small.num_hidden_layers": 8}},
            {"label": "h32-l8", "modification": "original", "settings": shape}]
    study = load_study(_spec(tmp_path, seeds=[0], rows=rows, claims=[], paper_seeds=None),
                       CLAIMS)
    results = tmp_path / "results"
    for name, settings, mu in (("h32l8", shape, 0.1),
                               ("l8", {"models.small.num_hidden_layers": 8}, 0.2),
                               ("base", {}, 0.3), ("masked", {"train.mask_prob": 0.2}, 0.9)):
        write_record(results, "multilab-smoke", "evaluate", {"metrics": {"mu": mu}},
                     model={"modification": "original", "seed": 0, "fingerprint": name},
                     config=_model_config("smoke", "3,fake", **settings))
    result = study_result(study, iter_records(results), CLAIMS)
    assert {label: result.cells[(label, "mu")].values for label in ("base", "l8", "h32-l8")
            } == {"base": (0.3,), "l8": (0.2,), "h32-l8": (0.1,)}
    assert not any("masked" in str(path) for path in result.sources)
    shallow = [*rows, {"label": "l4", "modification": "original",  # smoke evaluates layer 8
                       "settings": {"models.small.num_hidden_layers": 4}}]
    study = load_study(_spec(tmp_path, seeds=[0], rows=shallow, claims=[], paper_seeds=None),
                       CLAIMS)
    with pytest.raises(UserError, match=r"^study toy-study, row l4: evaluate.layers") as caught:
        study_result(study, iter_records(results), CLAIMS)
    assert "\n" not in str(caught.value)


def test_a_record_matches_on_what_decides_the_model(tmp_path: Path) -> None:
    """What never changes a model's weights (the fingerprint's list: curve points, checkpoint
    cadence), the stack it was trained in and its seed are not matched; a key a record lacks
    because it was written before the key existed has the key's default; a record without
    another key of the configuration (here the learning rate) is not the row's."""
    study = load_study(_spec(tmp_path, rows=[{"id": "0", "modification": "original"}],
                             claims=[]), CLAIMS)
    results = tmp_path / "results"
    cadence = _model_config("smoke", "3,fake", **{"train.eval_points": "[]",
                                                  "train.checkpoint_every": 7})
    older = _model_config("smoke", "3,fake")
    del older["corpus.split_clauses"]  # a parameter added later, at its default
    unknown = _model_config("smoke", "3,fake")
    del unknown["model.lr"]
    for seed, config in enumerate((cadence | {"train.stack": 3}, older, unknown)):
        write_record(results, "multilab-smoke", "evaluate", {"metrics": {"mu": 0.1 * seed}},
                     model={"modification": "original", "seed": seed, "fingerprint": "f"},
                     config=config)
    cells = study_result(study, iter_records(results), CLAIMS).cells
    assert cells[("original", "mu")].seeds == (0, 1)


def test_a_diagnostic_record_enters_no_table(tmp_path: Path) -> None:
    """A script's diagnostic (scripts/untrained_ppl_masking.py) lives in results/ beside the
    records the tables read: it parses, and changes no cell and no count of records read."""
    study = load_study(_spec(tmp_path), CLAIMS)
    results = tmp_path / "results"
    _toy_records(results)
    before = study_result(study, iter_records(results), CLAIMS)
    path = write_record(results, "multilab-smoke", "diagnostic", {"metrics": {"mu": 9.0}},
                        model=None, qualifier="check",
                        config={"profile": "smoke", "languages": "3,fake",
                                "modification": "original"})
    after = study_result(study, iter_records(results), CLAIMS)
    assert path == results / "multilab-smoke" / "diagnostic" / "check.json"
    assert after.sources == before.sources and after.cells == before.cells


def test_study_cli_lists_and_reports_a_toy_study(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder)
    _toy_records(tmp_path / "results")
    common = ["--studies", str(folder)]
    where = ["--set", f"paths.results={tmp_path / 'results'}"]
    assert main([*where, "study", "list", *common]) == 0
    listed = capsys.readouterr().out
    assert "toy-study" in listed and "runs 6/6" in listed and "claims 3/3" in listed
    out = tmp_path / "docs"
    assert main([*where, "study", "report", "toy-study", "--out", str(out), *common]) == 0
    table = (out / "toy-study.md").read_text()
    assert "| 1 | lang-pos | .015\u00a0±\u00a0.005\u00a0/\u00a0.30\u00a0±\u00a0.05 |" in table
    assert "**held**" in table
    assert main([*where, "study", "report", "no-such-study", *common]) == 2
    assert "study 'no-such-study'; name one of multilab-quick, toy-study or --all" in \
        capsys.readouterr().err  # the default study (params.yaml's) first


def test_study_run_plan_takes_seeds_and_rows_from_the_command_line(tmp_path: Path,
                                                                   capsys) -> None:
    """``--seeds 44`` is text on the command line: the plan reads it as the integer seed, and
    a seed that is not a number is named in one line; ``--rows`` takes labels or IDs."""
    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder)
    where = ["--set", f"paths.results={tmp_path / 'results'}"]
    common = ["study", "run", "toy-study", "--studies", str(folder), "--plan"]
    assert main([*where, *common, "--seeds", "1", "--rows", "lang-pos"]) == 0
    planned = capsys.readouterr().out
    assert "1 run(s) missing" in planned and "lang-pos seed 1" in planned
    assert main([*where, *common, "--seeds", "forty"]) == 2
    assert "--seeds 'forty': must be an integer" in capsys.readouterr().err
    # a seed the study does not have would plan nothing: named, with the study's seeds
    assert main([*where, *common, "--seeds", "1,41"]) == 2
    assert "--seeds 41: not a seed of toy-study; valid: 0, 1, 2" in capsys.readouterr().err
    # a row by the table's ID, as the paper numbers it; an unknown one names labels and IDs
    assert main([*where, *common, "--seeds", "1", "--rows", "1"]) == 0
    assert "lang-pos seed 1" in capsys.readouterr().out
    assert main([*where, *common, "--rows", "7"]) == 2
    assert "rows of toy-study are original, lang-pos (or their IDs 0, 1)" in \
        capsys.readouterr().err


def test_study_run_again_plans_rows_whose_records_exist(tmp_path: Path, capsys) -> None:
    """A record written before a metric existed (curve points, position embeddings) keeps
    its (row, seed) found; ``--again`` plans it anew with every record, and only for the
    rows named (never a whole study by accident: one line, exit 2)."""
    from multilab.studies.runner import missing_runs

    results = tmp_path / "results"
    _analysis_records(results)
    spec = {"name": "liu2020b-again", "paper": "liu2020b", "table": "Table 2", "title": "toy",
            "languages": ["3", "fake"], "profile": "quick", "seeds": [42], "paper_seeds": None,
            "claims": [], "metrics": ["mrr.3-fake.best"],
            "rows": [{"modification": "original"}]}
    study = load_study(_spec(tmp_path, **spec), CLAIMS)
    assert missing_runs(study, iter_records(results)) == []
    again = missing_runs(study, iter_records(results), again=True)
    assert [(s.row.label, s.seed, s.needs) for s in again] == [
        ("original", 42, (("mrr", "3-fake"),))]
    assert again[0].fingerprints  # a model still on disk is measured, not trained again
    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder)
    where = ["--set", f"paths.results={results}"]
    common = ["study", "run", "toy-study", "--studies", str(folder), "--plan", "--again"]
    assert main([*where, *common]) == 2
    assert main([*where, *common, "--rows", "lang-pos", "--seeds", "1"]) == 0
    assert "1 run(s) to measure again (--again)" in capsys.readouterr().out


def test_study_run_prepare_builds_only_the_data(tmp_path: Path) -> None:
    """``study run --prepare`` (a GPU lease's first step, here): each artifacts folder's
    corpora and vocabulary built once, nothing trained or measured, nothing booked; an
    unknown row is one line."""
    from multilab.studies.runner import pick_rows, prepare_study

    study = load_study(_spec(tmp_path), CLAIMS)  # original and lang-pos share one folder
    calls: list[list[str]] = []

    def command(argv: list[str]) -> int:
        calls.append([a for a in argv if not a.startswith("--set")])
        return 0

    folders = prepare_study(study, pick_rows(study, None), command, tmp_path, lambda _: None)
    assert calls == [["corpus", "build"], ["vocab"]]
    assert folders == [tmp_path / "artifacts" / "studies" / study.name]
    assert not (tmp_path / "results").exists()
    assert [row.label for row in pick_rows(study, ["1"])] == ["lang-pos"]
    with pytest.raises(UserError, match="rows of toy-study are original, lang-pos"):
        pick_rows(study, ["inv-order"])


def test_a_superseding_study_gives_the_claims_both_test_their_verdict(tmp_path: Path) -> None:
    """Table 3 in a regime where transfer is readable supersedes its first runs: for a claim
    both studies test, the successor's outcome is the claim's (in the summary's verdicts,
    the findings and ``study next``) once it is a verdict, whatever it says, or where the
    first study has no verdict either; a one-seed reading does not displace a three-seed
    verdict, and for a claim the successor has not measured the first's stands. No run is
    planned for a claim that has a verdict, and the successor's runs are planned where the
    first's outcome is replaced. A bad or unknown successor name is one line."""
    from dataclasses import replace

    from multilab.studies.document import findings_block
    from multilab.studies.planning import claim_plans
    from multilab.studies.tables import claim_verdicts, render_study
    from multilab.studies.verdict import Outcome

    layer8 = "dufter2020-t1-r0-retrieval-layer8"
    first = load_study(_spec(tmp_path, name="toy-first", claims=[LANG_POS, layer8]), CLAIMS)
    second = replace(load_study(_spec(tmp_path, name="toy-second", claims=[LANG_POS, layer8]),
                                CLAIMS),
                     supersedes="toy-first")
    held = Outcome(Verdict.HELD, "3 seeds", p=0.01)
    results = [replace(study_result(first, iter(()), CLAIMS),
                       outcomes={LANG_POS: held, layer8: held}),
               replace(study_result(second, iter(()), CLAIMS),
                       outcomes={LANG_POS: Outcome(Verdict.NOT_MEASURED, "none")})]
    assert claim_verdicts(results, CLAIMS)[LANG_POS] is Verdict.HELD  # no successor records
    one_seed = Outcome(Verdict.INDICATIVE, "1 seed")
    results[1] = replace(results[1], outcomes={LANG_POS: one_seed,
                                               layer8: Outcome(Verdict.NOT_MEASURED, "none")})
    verdicts = claim_verdicts(results, CLAIMS)  # one seed does not displace three
    assert verdicts[LANG_POS] is Verdict.HELD and verdicts[layer8] is Verdict.HELD
    assert "**indicative**" not in "\n".join(findings_block(results, CLAIMS))
    assert not claim_plans(results, CLAIMS)  # both claims have a verdict
    # where the first study has no verdict either, the successor's reading is the claim's
    results[0] = replace(results[0], outcomes={LANG_POS: one_seed, layer8: held})
    assert claim_verdicts(results, CLAIMS)[LANG_POS] is Verdict.INDICATIVE
    # the successor's verdict is the claim's, whatever it says
    results[0] = replace(results[0], outcomes={LANG_POS: held, layer8: held})
    results[1] = replace(results[1], outcomes={
        LANG_POS: Outcome(Verdict.NOT_SEPARABLE, "3 seeds", p=0.4),
        layer8: Outcome(Verdict.NOT_MEASURED, "none")})
    verdicts = claim_verdicts(results, CLAIMS)
    assert verdicts[LANG_POS] is Verdict.NOT_SEPARABLE and verdicts[layer8] is Verdict.HELD
    findings = "\n".join(findings_block(results, CLAIMS))
    assert findings.count("**held**") == 1 and "**not separable from seed noise**" in findings
    # runs are planned for the successor's open claim, not the replaced or decided ones
    results[1] = replace(results[1], outcomes={LANG_POS: one_seed,
                                               layer8: Outcome(Verdict.NOT_MEASURED, "none")})
    results[0] = replace(results[0], outcomes={LANG_POS: one_seed, layer8: held})
    assert {(plan.study, plan.claim) for plan in claim_plans(results, CLAIMS)} == {
        ("toy-second", LANG_POS)}
    assert "Superseded by [toy-second](toy-second.md)" in render_study(
        results[0], CLAIMS, superseded_by="toy-second")
    assert "Supersedes [toy-first](toy-first.md)" in render_study(results[1], CLAIMS)
    for bad in ("toy-second", "Toy", 3):
        with pytest.raises(UserError, match=re.escape(f"supersedes {bad!r}: the name of "
                                                      "another study")):
            load_study(_spec(tmp_path, name="toy-second", supersedes=bad), CLAIMS)
    folder = tmp_path / "studies"
    folder.mkdir()
    _spec(folder, name="toy-second", supersedes="toy-gone")
    with pytest.raises(UserError, match="supersedes 'toy-gone': no such study; studies: "
                                        "toy-second"):
        load_studies(folder, CLAIMS)


def test_study_next_lists_the_claims_nearest_to_a_verdict(tmp_path: Path, capsys) -> None:
    """Seed 0 of both rows recorded (one seed: indicative): the comparison of the two rows
    needs seeds 1 and 2 of both (four models), original's layer curve seeds 1 and 2 of
    original (two, shared with it), cheapest first; a paper claim the study cannot compare is
    left out; a record that lacks a number the claim reads is a run --again."""
    from multilab.studies.planning import cheapest_verdicts, claim_plans, plan_lines

    study = load_study(_spec(tmp_path, claims=[LANG_POS, "dufter2020-t1-r1-paper",
                                               "dufter2020-t1-r0-retrieval-layer8"],
                             paper_comparable="no: toy"), CLAIMS)
    results = tmp_path / "results"
    for modification, metrics in (("original", {"mu": 0.3}), ("lang-pos", {"mu": 0.1})):
        write_record(results, "multilab-smoke", "evaluate",
                     {"metrics": metrics | {"retrieval_p1.l0": 0.1, "retrieval_p1.l8": 0.2}},
                     model={"modification": modification, "seed": 0, "fingerprint": "f"},
                     config=_model_config("smoke", "3,fake", modification))
    write_record(results, "multilab-smoke", "evaluate", {"metrics": {"retrieval_p1.l0": 0.1}},
                 model={"modification": "lang-pos", "seed": 1, "fingerprint": "g"},
                 config=_model_config("smoke", "3,fake", "lang-pos"))  # no mu: older
    result = study_result(study, iter_records(results), CLAIMS)
    plans = claim_plans([result], CLAIMS)
    assert [plan.claim for plan in plans] == ["dufter2020-t1-r0-retrieval-layer8", LANG_POS]
    plan = next(p for p in plans if p.claim == LANG_POS)
    assert sorted(plan.runs) == [("lang-pos", 1), ("lang-pos", 2), ("original", 1),
                                 ("original", 2)]
    assert len(plan.models) == 4 and plan.again == (("lang-pos", 1),)
    assert plan.commands() == [  # exactly the runs: lang-pos seed 1 only --again
        "multilab study run toy-study --rows lang-pos --seeds 2",
        "multilab study run toy-study --rows original --seeds 1,2",
        "multilab study run toy-study --rows lang-pos --seeds 1 --again"]
    lines = plan_lines(plans, {("toy-study", "original"): 1800.0,
                               ("toy-study", "lang-pos"): 1800.0}, limit=5)
    assert lines[1].startswith("     2    1.0  dufter2020-t1-r0-retrieval-layer8 (toy-study: "
                               "original s1, original s2)")
    # original s1, s2 are trained by the line above: lang-pos adds its own two
    assert lines[3].startswith("     2    1.0  dufter2020-t1-r1-lang-pos (toy-study: ")
    assert lines[-1].startswith("These 2 claims need 4 models")  # original's two shared
    prices = {("toy-study", "original"): 1800.0, ("toy-study", "lang-pos"): None}
    assert cheapest_verdicts(plans, prices, 1) == (1, 2, 3600.0, 0, 0)
    assert cheapest_verdicts(plans, prices, 5) == (2, 4, 3600.0, 2, 0)  # lang-pos's unpriced
    # a price that is a lower bound only (a cheaper step's training): counted, and marked
    bounded = {("toy-study", "lang-pos")}
    both = {("toy-study", "original"): 1800.0, ("toy-study", "lang-pos"): 1800.0}
    assert cheapest_verdicts(plans, both, 5, bounded) == (2, 4, 7200.0, 0, 2)
    lines = plan_lines(plans, both, limit=5, lower_bounds=bounded)
    assert lines[1].startswith("     2    1.0  dufter2020-t1-r0-retrieval-layer8")
    assert lines[3].startswith("     2  ≥ 1.0  dufter2020-t1-r1-lang-pos")
    assert lines[-1].startswith("≥: a lower bound")
    assert main(["study", "next", "--limit", "0"]) == 2
    assert "--limit 0: must be >= 1" in capsys.readouterr().err
    # --cpu: the committed studies' plans a CPU can price; the paper's budget is listed
    # once a CPU training of it is on record (its price), left out before
    assert main(["study", "next", "--cpu", "--limit", "50"]) == 0
    listed = capsys.readouterr().out
    paper = ROOT / "results" / "dufter2020-table1-paper"
    priced = any("untrained" not in p.parent.parent.name for p in paper.glob("*/*/train.json"))
    assert "study run" in listed
    assert ("dufter2020-table1-paper" in listed) == priced


def test_the_goal_line_says_what_the_cheapest_verdicts_cost(tmp_path: Path) -> None:
    """The claims summary's last line: the claims with a verdict, the goal, and the models
    the cheapest claims to it need with their CPU hours — "≥" while a price is only the
    profile's fastest (a smaller row's), "≈" once the row's own training prices it."""
    from multilab.studies.document import goal_line

    study = load_study(_spec(tmp_path, claims=[LANG_POS], paper_comparable="no: toy"), CLAIMS)
    results = tmp_path / "results"
    for modification in ("original", "lang-pos"):
        write_record(results, "multilab-smoke", "evaluate", {"metrics": {"mu": 0.2}},
                     model={"modification": modification, "seed": 0, "fingerprint": "f"},
                     config=_model_config("smoke", "3,fake", modification))
    result = study_result(study, iter_records(results), CLAIMS)
    line = goal_line([result], CLAIMS, {"other-claim": Verdict.HELD}, {"smoke": 900.0}, goal=2)
    assert line == ("**1 claims have a verdict**; the goal is 2. The cheapest 1 more need 4 "
                    "models trained (≥ 1 CPU-h of training, 4 of them priced by a lower bound "
                    "only); `multilab study next` lists them, cheapest first.")
    write_record(results, "multilab-smoke", "train", {"step_seconds": 1800.0},
                 model={"modification": "original", "seed": 0, "fingerprint": "f"},
                 config=_model_config("smoke", "3,fake"),
                 origin={"commit": "abc", "date": "2026-12-06", "machine": {"device": "cpu"}})
    result = study_result(study, iter_records(results), CLAIMS)
    line = goal_line([result], CLAIMS, {"other-claim": Verdict.HELD}, {"smoke": 900.0}, goal=2)
    assert "need 4 models trained (≈ 2 CPU-h of training);" in line, line
    assert goal_line([result], CLAIMS, {"a": Verdict.HELD}, {}, goal=1) == \
        "**1 claims have a verdict**, the goal of 1 reached."


def test_the_schedule_takes_most_claims_per_cpu_hour_first() -> None:
    """Issue 52's order: a run set of two cheap models before one of a single slow model
    (more models, fewer CPU seconds per claim); one a CPU cannot price last; a claim two
    studies could test decided once; a model trained above is free below."""
    from multilab.studies.planning import ClaimPlan, cheapest_verdicts, schedule

    def plan(claim: str, study: str, *runs: tuple[str, int]) -> ClaimPlan:
        return ClaimPlan(claim, study, runs, tuple((f"{study}/{r}", s) for r, s in runs))

    slow = plan("slow", "a", ("big", 1))
    cheap = plan("cheap", "a", ("small", 1), ("small", 2))
    shared = plan("shared", "a", ("small", 1), ("other", 1))
    gpu = plan("gpu", "b", ("paper", 1))
    twice = plan("cheap", "b", ("tiny", 1))  # the same claim in a second study, dearer
    prices = {("a", "big"): 3600.0, ("a", "small"): 600.0, ("a", "other"): 1200.0,
              ("b", "paper"): None, ("b", "tiny"): 1800.0}
    steps = schedule([slow, gpu, twice, shared, cheap], prices)
    assert [[p.claim for p in step.plans] for step in steps] == [
        ["cheap"], ["shared"], ["slow"], ["gpu"]]
    assert [len(step.models) for step in steps] == [2, 1, 1, 1]
    assert [step.seconds for step in steps] == [1200.0, 1200.0, 3600.0, None]
    assert cheapest_verdicts([slow, gpu, twice, shared, cheap], prices, 4) == (4, 5, 6000.0, 1, 0)


def test_a_claim_of_two_parts_holds_only_when_both_hold(tmp_path: Path) -> None:
    """Figure 6's "multilinguality rises very late at a stage where model fit improvements
    are flat" read as two two-arm parts in the claim's direction (``all``): μ's later gain
    above its earlier one, and the training perplexity's earlier drop above its later one;
    held when both hold, did not hold when one fails; a part without its metric is one
    line."""
    from dataclasses import replace

    from multilab.studies.spec import ClaimEntry, _check_claim, claim_row_names
    from multilab.studies.tables import Cell, claim_outcome, comparison_text

    late, early = "curve.mu.at80 minus curve.mu.at60", "curve.mu.at40 minus curve.mu.at20"
    fit_early = "curve.ppl_train.at20 minus curve.ppl_train.at40"
    fit_late = "curve.ppl_train.at60 minus curve.ppl_train.at80"
    study = _lab_toy(tmp_path, paper="dufter2020", seeds=[0, 1, 2],
                     metrics=[late, early, fit_early, fit_late],
                     rows=[{"label": "original", "modification": "original"}])
    claim = CLAIMS["dufter2020-f6-rises-late"]
    parts = [{"a": "original", "b": "original", "metric": late, "metric_b": early},
             {"a": "original", "b": "original", "metric": fit_early, "metric_b": fit_late}]
    bound = replace(claim, compare={**claim.compare, "all": parts})
    cpu = ("cpu",) * 3
    cells = {("original", late): Cell((0.11, 0.10, 0.12), cpu),
             ("original", early): Cell((0.08, 0.075, 0.09), cpu),  # paired: one row's
             ("original", fit_early): Cell((60.0, 58.0, 61.0), cpu),
             ("original", fit_late): Cell((24.0, 25.0, 23.0), cpu)}
    assert claim_outcome(study, bound, cells).verdict is Verdict.HELD
    assert comparison_text(bound).startswith(f"original on {late} > original on {early} and ")
    cells[("original", fit_late)] = Cell((90.0, 95.0, 92.0), cpu)  # the fit still improving
    outcome = claim_outcome(study, bound, cells)
    assert outcome.verdict is Verdict.NOT_HELD and "of the 2 parts" in outcome.reason
    with pytest.raises(UserError, match="read as two arms, it needs a, b, metric"):
        _check_claim(study, ClaimEntry("dufter2020-f6-rises-late", compare={
            "all": [{"a": "original", "b": "original"}]}), CLAIMS)
    with pytest.raises(UserError, match="row 'inv-order' is not a row of the study"):
        _check_claim(study, ClaimEntry("dufter2020-f6-rises-late", compare={
            "all": [parts[0], {**parts[1], "b": "inv-order"}]}), CLAIMS)
    assert claim_row_names(study, bound) == ["original"] * 4  # the parts', not the claim's words
    # a rows claim of the paper's, aggregated over parts in its own direction (K et al.'s
    # "lexical overlap plays a negligible role", each language on its own column)
    aggregate = CLAIMS["k2020-s1-no-overlap-crosslingual"]
    both = replace(aggregate, compare={**aggregate.compare, "all": [
        {"a": "original", "b": "original", "metric": late, "metric_b": early},
        {"a": "original", "b": "original", "metric": fit_early, "metric_b": fit_late}]})
    assert comparison_text(both).endswith("(greater)")
    outcome = claim_outcome(study, both, cells)
    assert outcome.verdict is Verdict.NOT_HELD and "of the 2 parts" in outcome.reason


def test_a_curve_or_correlation_read_as_two_arms(tmp_path: Path) -> None:
    """Dufter & Schütze 2020's "with knn-replace multilinguality rises earlier" (shape
    "above the original curve at early steps") read at one curve point: knn-replace against
    original, greater; a positive correlation read at two points of one row: the arm of
    higher x greater. A two-arm binding without its metric is refused in one line."""
    from dataclasses import replace

    from multilab.studies.spec import ClaimEntry, _check_claim
    from multilab.studies.tables import Cell, claim_outcome, comparison_text

    study = _lab_toy(tmp_path, paper="dufter2020", seeds=[0, 1, 2],
                     metrics=["curve.mu.at20", "mu"],
                     rows=[{"label": "knn-replace", "modification": "knn-replace"},
                           {"label": "original", "modification": "original"}])
    claim = CLAIMS["dufter2020-f7-knn-replace-earlier"]
    bound = replace(claim, compare={**claim.compare, "a": "knn-replace", "b": "original",
                                    "metric": "curve.mu.at20"})
    cells = {("knn-replace", "curve.mu.at20"): Cell((0.30, 0.32, 0.31), ("cpu",) * 3),
             ("original", "curve.mu.at20"): Cell((0.10, 0.12, 0.11), ("cpu",) * 3)}
    outcome = claim_outcome(study, bound, cells)
    assert outcome.verdict is Verdict.HELD
    assert comparison_text(bound) == ("knn-replace > original on curve.mu.at20 (above the "
                                      "original curve at early steps)")
    cells[("original", "curve.mu.at20")] = Cell((0.40, 0.42, 0.41), ("cpu",) * 3)
    assert claim_outcome(study, bound, cells).verdict is Verdict.NOT_HELD
    rare = CLAIMS["dufter2020-f5-rare-positions"]
    pair = replace(rare, compare={**rare.compare, "a": "original", "b": "original",
                                  "metric": "curve.mu.at20", "metric_b": "mu"})
    cells[("original", "mu")] = Cell((0.10, 0.12, 0.11), ("cpu",) * 3)
    assert claim_outcome(study, pair, cells).verdict is Verdict.HELD  # positive: a > b
    with pytest.raises(UserError, match="read as two arms, it needs a, b, metric"):
        _check_claim(study, ClaimEntry("dufter2020-f7-knn-replace-earlier", compare={
            "a": "knn-replace", "b": "original"}), CLAIMS)


def test_a_flat_curve_is_no_step_differing_and_never_held_without_a_margin() -> None:
    """K et al. 2020 Table 5's "heads have no significant effect" (``shape: flat``) on the
    lab's study: each step between rows is the rule's ``equal``, so Δs that move within seed
    noise read *not separable* (no margin: equality is not shown), a step that differs
    significantly *did not hold*."""
    from multilab.studies.spec import bind_claim
    from multilab.studies.tables import Cell, claim_outcome

    study = load_study(STUDIES / "k2020-table5.yaml", CLAIMS)
    entry = next(e for e in study.claims if e.id == "k2020-t5-heads-no-effect")
    delta = "downstream.zero_shot.en-enfake minus downstream.zero_shot.r"
    noisy = (0.10, 0.14, 0.12)
    cells = {(row.label, delta): Cell(noisy, ("cpu",) * 3, (42, 43, 44)) for row in study.rows}
    claim = bind_claim(CLAIMS[entry.id], entry)
    assert claim_outcome(study, claim, cells).verdict is Verdict.NOT_SEPARABLE
    cells[("16 heads", delta)] = Cell((0.30, 0.31, 0.32), ("cpu",) * 3, (42, 43, 44))
    outcome = claim_outcome(study, claim, cells)
    assert outcome.verdict is Verdict.NOT_HELD and "3 heads → 16 heads" in outcome.reason


def test_a_curve_of_one_step_is_that_steps_test_named() -> None:
    """Liu et al.'s data-size curves have two rows, so one step: its verdict, p, seeds and
    test are the claim's, the step named; two steps still give the worst, named."""
    from dataclasses import replace

    from multilab.studies.tables import _worst
    from multilab.studies.verdict import Outcome

    held = Outcome(Verdict.HELD, "Welch's t over seeds: p 0.001 < 0.05", p=0.001, n=(3, 3))
    assert _worst({"2,000 rows → all rows": held}, "steps") == replace(
        held, reason="2,000 rows → all rows: Welch's t over seeds: p 0.001 < 0.05")
    failed = Outcome(Verdict.NOT_HELD, "Welch's t over seeds: against", p=0.01, n=(3, 3))
    two = _worst({"a → b": held, "b → c": failed}, "steps")
    assert two.verdict is Verdict.NOT_HELD and two.reason.startswith("did not hold for b → c "
                                                                      "of the 2 steps")


def test_models_two_studies_share_are_counted_once_in_the_runs_needed(tmp_path: Path
                                                                     ) -> None:
    """The studies block's last line: a row of another study with the same configuration
    at the same seed is the same model (trained once); a row that changes a setting of the
    model is another; a fine-tuning setting does not make another model."""
    from multilab.studies.document import models_to_train

    toy = load_study(_spec(tmp_path), CLAIMS)  # original and lang-pos, seeds 0-2
    twin = load_study(_spec(tmp_path, name="toy-twin", claims=[],
                            settings={"downstream.lr": 1.0e-4}), CLAIMS)
    wider = load_study(_spec(tmp_path, name="toy-wider", claims=[], rows=[
        {"modification": "original", "settings": {"models.small.hidden_size": 128}}]), CLAIMS)
    results = [study_result(study, [], CLAIMS) for study in (toy, twin, wider)]
    assert results[0].model_keys == results[1].model_keys
    assert results[2].model_keys["original"] != results[0].model_keys["original"]
    line = models_to_train(results, {"smoke": 1800.0})
    assert line.startswith("In all: 15 runs missing; they need 9 models trained (≥ 4.5 CPU-h")
    assert "9 of them priced by a lower bound only" in line  # the profile's fastest
    assert models_to_train(results, {}, claims=len(CLAIMS)).endswith(
        f"{len(CLAIMS) - 3} of the {len(CLAIMS)} claims are in no study yet: their runs are "
        "not counted here.")  # the toy binds 3 claims, its twin and the wider one none
    assert models_to_train(results, {}, claims=3).endswith(" Every one of the 3 claims is in a "
                                                           "study.")


def test_rows_on_the_command_line_keep_a_label_that_has_commas() -> None:
    """``--rows 'row 8 model, [3, s, i]'`` names one row of Liu et al. 2020b Table 4, not
    three; other names still split at commas, and an unknown one is kept for the error."""
    from multilab.studies.spec import split_row_names

    study = load_study(STUDIES / "liu2020b-table4.yaml", CLAIMS)
    assert split_row_names("row 8 model, [3, s, i]", [study]) == ["row 8 model, [3, s, i]"]
    assert split_row_names("original, [3, fake],row 8 model, [3, s, i]", [study]) == [
        "original, [3, fake]", "row 8 model, [3, s, i]"]
    assert split_row_names("all layers fine-tuned, nope,", [study]) == [
        "all layers fine-tuned", "nope"]


def test_a_damaged_record_stops_the_report_before_writing(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder)
    bad = tmp_path / "results" / "x" / "evaluate.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{truncated")
    out = tmp_path / "docs"
    assert main(["--set", f"paths.results={tmp_path / 'results'}", "study", "report", "--all",
                 "--out", str(out), "--studies", str(folder)]) == 2
    assert "not a readable results record" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_a_toy_study_runs_end_to_end_and_resumes(built_project: Path, tmp_path: Path,
                                                 monkeypatch, capsys, one_thread: None) -> None:
    """Adding an experiment is one file: a spec runs on the smoke profile, leaves records and
    a table with verdicts; a second run trains nothing."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").symlink_to(built_project / "data")
    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    spec = SPEC | {"rows": [{"id": "0", "modification": "original"},
                            {"id": "18", "modification": "untrained"}],
                   "metrics": ["mu", "align_f1.l0"],
                   # 4 steps a model, 50 sentences evaluated: the runs only have to finish
                   "settings": {"train.max_train_sentences": 64, "train.eval_points": "[]",
                                "evaluate.dev_sentences": 50},
                   "claims": ["dufter2020-t1-r0-original-multilingual",
                              "dufter2020-t1-r18-paper"]}
    (folder / "toy-study.yaml").write_text(yaml.safe_dump(spec))
    args = ["--params", str(PARAMS), "study", "run", "toy-study", "--studies", str(folder),
            "--out", str(tmp_path / "docs")]
    assert main(args) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "original seed 0 (1/6)" in out and "runs 6/6" in out, captured.out + captured.err
    records = list(iter_records(tmp_path / "results"))
    assert sorted((r.kind, r.model["modification"], r.model["seed"]) for r in records
                  if r.kind == "evaluate") == [("evaluate", m, s) for m in ("original",
                                                                             "untrained")
                                               for s in (0, 1, 2)]
    assert main([*args[:3], "report", "toy-study", *args[5:]]) == 0
    table = (tmp_path / "docs" / "toy-study.md").read_text()
    assert "| 0 | original |" in table and "| 3/3 |" in table
    assert "dufter2020-t1-r0-original-multilingual" in table
    _assert_one_parent_per_row(load_config(PARAMS), records)
    assert main(args) == 0  # everything recorded: nothing runs again
    assert "(1/" not in capsys.readouterr().out


def _assert_one_parent_per_row(cfg: Config, records: list) -> None:
    """The study's runs are in its own experiment, one parent run per row with the row's
    three seeds nested and their mean ± std (the records' numbers, rounded as parents are)."""
    from multilab import tracking
    from multilab.lab.metric_table import mean_std
    from multilab.tracking.rows import rounded

    runs = tracking.search_runs(cfg.paths, "toy-study", groups=True)
    parents = runs[runs[f"tags.{tracking.ROLE_TAG}"] == tracking.GROUP]
    assert sorted(parents[f"tags.{tracking.ROW_TAG}"]) == ["original", "untrained"]
    seeds = runs[runs[f"tags.{tracking.ROLE_TAG}"] != tracking.GROUP]
    for _, parent in parents.iterrows():
        row = parent[f"tags.{tracking.ROW_TAG}"]
        mine = seeds[seeds[f"tags.{tracking.PARENT_TAG}"] == parent["run_id"]]
        assert sorted(mine["tags.seed"].astype(int)) == [0, 1, 2], row
        assert set(mine[f"tags.{tracking.ROW_TAG}"]) == {row}
        mus = [r.data["result"]["metrics"]["mu"] for r in records
               if r.kind == "evaluate" and r.model["modification"] == row]
        mean, std = mean_std(mus)
        assert parent["tags.n_seeds"] == "3" and std > 0
        assert parent["metrics.mu"] == pytest.approx(rounded(mean))
        assert parent["metrics.mu_std"] == pytest.approx(rounded(std))


def test_the_papers_rounding_is_the_margin_of_an_equality(tmp_path: Path) -> None:
    """Untrained rows do not depend on the budget; the paper's μ .00 (two decimals) is matched
    by our .002 ± .001 — equal within the paper's rounding — but not by .02."""
    spec = SPEC | {"paper_decimals": 2, "paper_comparable": "no: quick budget",
                   "rows": [{"id": "18", "modification": "untrained", "paper": {"mu": 0.0},
                             "paper_comparable": True},
                            {"id": "1", "modification": "lang-pos", "paper": {"mu": 0.30}}],
                   "claims": ["dufter2020-t1-r18-paper", "dufter2020-t1-r1-paper"]}
    study = load_study(_spec(tmp_path, **spec), CLAIMS)
    results = tmp_path / "results"
    for modification, values in (("untrained", [0.002, 0.001, 0.003]),
                                 ("lang-pos", [0.02, 0.03, 0.025])):
        for seed, value in enumerate(values):
            write_record(results, "multilab-smoke", "evaluate", {"metrics": {"mu": value}},
                         model={"modification": modification, "seed": seed, "fingerprint": "f"},
                         config=_model_config("smoke", "3,fake", modification))
    outcomes = study_result(study, iter_records(results), CLAIMS).outcomes
    assert outcomes["dufter2020-t1-r18-paper"].verdict is Verdict.HELD
    assert outcomes["dufter2020-t1-r1-paper"].verdict is Verdict.NOT_COMPARABLE
    assert outcomes["dufter2020-t1-r1-paper"].reason == "quick budget"


def test_downstream_metrics_name_editions_and_records_key_iso_codes() -> None:
    from multilab.studies.metrics import metric_source
    from multilab.studies.records import Record

    def read(metric: str, kind: str, result: dict) -> tuple[str, str, float | None]:
        source = metric_source(metric)
        return source.kind, source.variant, source.read(Record(Path("x"), {
            "kind": kind, "result": result}))

    test = {"test": {"de": {"accuracy": 0.4}, "es": {"accuracy": 0.3}}}
    assert read("downstream.zero_shot.s", "downstream", test) == ("downstream", "", 0.4)
    assert read("downstream.zero_shot.v", "downstream", test) == ("downstream", "", 0.3)
    assert read("downstream.zero_shot.de", "downstream", test) == ("downstream", "", 0.4)
    assert read("mu", "evaluate", {"metrics": {"mu": 0.2}}) == ("evaluate", "", 0.2)
    mds = {"mds": {"languages": {"de": {"test_shifted": 0.36, "test_unshifted": 0.32}}}}
    assert read("downstream.mds.s", "downstream", mds) == ("downstream", "mds", 0.36)
    assert read("downstream.mds_unshifted.s", "downstream", mds)[2] == 0.32
    with pytest.raises(ValueError):
        metric_source("downstream.delta.r")


@pytest.mark.parametrize(("metric", "kind", "result", "expected"), [
    ("mrr.3-s.p1.l1", "mrr", {"trained": [{"layer": 0, "p1": 0.1}, {"layer": 1, "p1": 0.2}]},
     ("mrr", "3-s", 0.2)),
    ("mrr.3-s.untrained.best", "mrr", {"untrained": [{"layer": 0, "mrr": 0.3},
                                                     {"layer": 4, "mrr": 0.5}]}, 0.5),
    ("mrr.3-s.best_layer", "mrr", {"trained": [{"layer": 3, "mrr": 0.3},
                                               {"layer": 8, "mrr": 0.6}]}, 8.0),
    ("mrr.3-s.best", "mrr", {"trained": [{"layer": 3, "mrr": None}]}, None),
    ("mrr.3-s.l5", "mrr", {"trained": [{"layer": 3, "mrr": 0.3}]}, None),
    ("mrr.3-fake.pos.adj", "mrr",  # a part of speech at the best layer overall (layer 8)
     {"trained": [{"layer": 0, "mrr": 0.2, "pos": {"adj": {"mrr": 0.9, "queries": 4}}},
                  {"layer": 8, "mrr": 0.6, "pos": {"adj": {"mrr": 0.7, "queries": 4}}}]}, 0.7),
    ("mrr.3-s.pos.closed", "mrr", {"trained": [{"layer": 3, "mrr": 0.3}]}, None),  # no groups
    ("translate.3-s.bleu1.l2.a1", "translate",
     {"alphas": [0, 1], "layers": [2, 4], "bleu1": [[0.1, 0.2], [0.3, 0.4]]},
     ("translate", "3-s", 0.3)),
    ("translate.3-s.bleu1.l6.a1", "translate",
     {"alphas": [1], "layers": [2], "bleu1": [[0.3]]}, None),
    ("translate.3-s.convert_rate.best_alpha", "translate",
     {"alphas": [0, 1], "layers": [2], "convert_rate": [[0.1], [0.7]]}, 1.0),
    ("translate.3-s.convert_rate.best", "translate", {}, None),
    ("translate.3-s.bleu1.best.l1-2.a3", "translate",
     {"alphas": [1, 3], "layers": [1, 2, 3], "bleu1": [[0.1, 0.5, 0.2], [0.3, 0.2, 0.6]]},
     0.3),
    ("translate.3-s.bleu1.best.l3-4.a3", "translate",  # layer 4 missing: no value
     {"alphas": [3], "layers": [1, 2, 3], "bleu1": [[0.3, 0.2, 0.6]]}, None),
    ("translate.3-s.unshifted.bleu1", "translate", {"unshifted": {"bleu1": 0.25}}, 0.25),
    ("similarity.cka.floor_gap", "similarity",
     {"trained": {"cka": [0.9, 0.6]}, "untrained": {"cka": [0.5, 0.4]}}, pytest.approx(0.2)),
    ("similarity.cka.floor_gap", "similarity", {}, None),
    ("similarity.cka.untrained.best", "similarity", {"untrained": {"cka": [0.2, 0.5]}}, 0.5),
    ("similarity.cka.l4", "similarity", {"layers": [0, 4], "trained": {"cka": [0.9, 0.7]}},
     0.7),
    ("similarity.cka.l8", "similarity", {"layers": [0, 4], "trained": {"cka": [0.9, 0.7]}},
     None),
    ("static.skipgram.w5.rall.zero_shot.de", "static",
     {"train_rows": 100, "results": [{"model": "skipgram", "window": 5, "rows": 100,
                                      "zero_shot": {"test": {"de": {"accuracy": 0.4}}}}]},
     0.4),
    ("static.cbow.w5.r10.mrr", "static", {"results": [{"model": "skipgram", "window": 5,
                                                       "rows": 10, "mrr": 0.4}]}, None),
    ("downstream.ratio.s", "downstream", {"labels": ["en"], "test": {"de": {"accuracy": 0.4}}},
     None),
    ("downstream.zero_shot.avg_wo_first", "downstream", {"languages": ["3"], "test": {}},
     None),
    ("curve.mu.at20", "train", {"steps": 100, "curve": [{"step": 20, "mu": 0.3},
                                                       {"step": 40, "mu": 0.5}]}, 0.3),
    ("curve.retrieval_p1.l8.at40", "train",
     {"steps": 10, "curve": [{"step": 4, "retrieval_p1.l8": 0.7}]}, 0.7),
    ("curve.mu.at60", "train", {"steps": 100, "curve": [{"step": 20, "mu": 0.3}]}, None),
    ("curve.mu.at20", "train", {"steps": 100}, None),  # trained before curves were kept
    ("train.minutes", "train", {"step_seconds": None}, None),
    ("train.minutes", "train", {"step_seconds": 90}, 1.5),
])
def test_a_metric_reads_its_number_or_none_from_a_record(metric: str, kind: str, result: dict,
                                                         expected: object) -> None:
    """Every reader of :func:`metric_source` on a record that has the number and on one that
    lacks it (None: the cell stays empty instead of failing the study's report)."""
    from multilab.studies.metrics import metric_source, record_variant
    from multilab.studies.records import Record

    source = metric_source(metric)
    record = Record(Path("x"), {"kind": kind, "result": result})
    if isinstance(expected, tuple):
        expected_kind, expected_variant, expected = expected
        assert (source.kind, source.variant) == (expected_kind, expected_variant)
        assert record_variant(Record(Path("x"), {"kind": kind, "result": {
            "source": "3", "target": "s"}})) == expected_variant
    assert source.read(record) == expected


@pytest.mark.parametrize("metric", [
    "mrr.3-s", "mrr.3-s.pos.pronoun", "downstream.s", "downstream.delta.s",
    "translate.3-s.bleu2.l1.a1",
    "translate.3-s.bleu1.l1.x1", "static.skipgram.5.rall.mrr", "similarity.cka.layer4",
])
def test_a_metric_of_no_known_form_is_a_value_error(metric: str) -> None:
    from multilab.studies.metrics import metric_source

    with pytest.raises(ValueError, match=re.escape(metric)):
        metric_source(metric)


def _downstream_record(root: Path, languages: str, accuracy: float, mode: str = "joint"
                       ) -> None:
    model = {"modification": "original", "seed": 42,
             "fingerprint": f"{languages.replace(',', '-').replace(':', '-')}-{mode}"}
    write_record(root, "x", "downstream", {"test": {"es": {"accuracy": accuracy}}},
                 model=model, qualifier=languages,
                 config=_model_config("quick", languages, **{"vocab.mode": mode}))


def test_a_row_with_its_own_languages_and_aliases(tmp_path: Path) -> None:
    """A row's `languages` setting wins over the study's (in the matching and in the
    runner's settings and artifacts); a claim may name a row by an alias."""
    from multilab.studies.runner import study_artifacts, study_settings

    spec = {"name": "k2020-toy", "paper": "k2020", "table": "Table 1", "title": "toy",
            "languages": ["v", "3"], "profile": "quick", "seeds": [42],
            "settings": {"vocab.mode": "joint"}, "paper_seeds": None,
            "paper_comparable": "no: toy", "metrics": ["downstream.zero_shot.v"],
            "rows": [{"label": "[v, 3] joint", "aliases": ["en-es"],
                      "modification": "original", "paper": {"downstream.zero_shot.v": 0.723}},
                     {"label": "[v, enfake:3] joint", "aliases": ["enfake-es"],
                      "modification": "original",
                      "settings": {"languages": "[v, enfake:3]"}}],
            "claims": ["k2020-t1-wordpiece-overlap-es", "k2020-t1-row-en-es"]}
    path = tmp_path / "k2020-toy.yaml"
    path.write_text(yaml.safe_dump(spec))
    study = load_study(path, CLAIMS)
    assert study.row("en-es") is study.row("[v, 3] joint")
    results = tmp_path / "results"
    _downstream_record(results, "v,3", 0.41)
    _downstream_record(results, "v,enfake:3", 0.38)
    _downstream_record(results, "v,enfake:3", 0.99, mode="separate")  # another study's
    result = study_result(study, iter_records(results), CLAIMS)
    assert result.cells[("[v, 3] joint", "downstream.zero_shot.v")].values == (0.41,)
    assert result.cells[("[v, enfake:3] joint", "downstream.zero_shot.v")].values == (0.38,)
    assert result.seeds_found == {"[v, 3] joint": (42,), "[v, enfake:3] joint": (42,)}
    assert result.outcomes["k2020-t1-wordpiece-overlap-es"].verdict is Verdict.INDICATIVE
    assert result.outcomes["k2020-t1-row-en-es"].verdict is Verdict.NOT_COMPARABLE
    enfake = study.row("enfake-es")
    assert "languages=[v, enfake:3]" in study_settings(study, tmp_path, enfake)
    assert "languages=[v, 3]" in study_settings(study, tmp_path, study.row("en-es"))
    assert study_artifacts(study, tmp_path, enfake) != study_artifacts(study, tmp_path)
    assert study_artifacts(study, tmp_path, study.row("en-es")) == study_artifacts(study,
                                                                                   tmp_path)
    path.write_text(yaml.safe_dump(spec | {"rows": [spec["rows"][0],
                                                    {**spec["rows"][1], "aliases": ["en-es"]}]}))
    with pytest.raises(UserError, match="share a label or alias"):
        load_study(path, CLAIMS)


def test_a_claim_metric_placeholder_is_the_studys_one_metric(tmp_path: Path) -> None:
    from multilab.studies.spec import resolve_metric

    study = load_studies(STUDIES, CLAIMS)["conneau2020-table1"]
    assert resolve_metric("downstream.zero_shot.<lang>", study) == "downstream.zero_shot.l"
    assert resolve_metric("downstream.delta.<lang>", study) == "downstream.delta.<lang>"
    assert resolve_metric("mu", study) == "mu"


def test_claims_over_several_rows_use_group_means_and_each_row(tmp_path: Path) -> None:
    """"mean of A, B" is one arm of per-seed means; "each of IDs 1–2" tests every row and
    reads *did not hold* when one row fails, naming it."""
    rows = [("0", "original", [0.50, 0.52, 0.48], [200, 210, 205]),
            ("1", "lang-pos", [0.10, 0.12, 0.11], [204, 207, 203]),
            ("2", "shift-special", [0.40, 0.42, 0.44], [300, 310, 305]),
            ("4", "no-random", [0.45, 0.47, 0.46], [206, 204, 208]),
            ("5", "lang-pos+shift-special", [0.05, 0.06, 0.04], [205, 206, 207]),
            ("6", "lang-pos+no-random", [0.08, 0.07, 0.09], [205, 206, 207]),
            ("7", "shift-special+no-random", [0.30, 0.31, 0.29], [205, 206, 207]),
            ("8", "lang-pos+shift-special+no-random", [0.02, 0.03, 0.02], [205, 206, 207])]
    spec = SPEC | {"metrics": ["mu", "ppl_dev"],
                   "rows": [{"id": i, "modification": m} for i, m, _, _ in rows]
                   + [{"id": "3", "modification": "inv-order"}],
                   "claims": ["dufter2020-t1-r5-7-two-modifications",
                              "dufter2020-t1-r1-8-perplexity-stable"]}
    study = load_study(_spec(tmp_path, **spec), CLAIMS)
    results = tmp_path / "results"
    for _, modification, mus, ppls in [*rows, ("3", "inv-order", [0.01] * 3, [204, 205, 206])]:
        for seed, (mu, ppl) in enumerate(zip(mus, ppls, strict=True)):
            write_record(results, "multilab-smoke", "evaluate",
                         {"metrics": {"mu": mu, "ppl_dev": ppl}},
                         model={"modification": modification, "seed": seed,
                                "fingerprint": f"{modification}{seed}"},
                         config=_model_config("smoke", "3,fake", modification))
    result = study_result(study, iter_records(results), CLAIMS)
    groups = result.outcomes["dufter2020-t1-r5-7-two-modifications"]
    assert groups.verdict is Verdict.HELD and groups.n == (3, 3)
    each = result.outcomes["dufter2020-t1-r1-8-perplexity-stable"]
    assert each.verdict is Verdict.NOT_HELD and "shift-special" in each.reason


def test_a_downstream_claim_against_the_majority_class(tmp_path: Path) -> None:
    """"majority baseline" is no row: it is the majority-class accuracy of the other arm's own
    downstream records, seed by seed (a constant arm, so Welch's test is a one-sample t)."""
    spec = SPEC | {"languages": ["3", "s", "i"], "profile": "quick", "seeds": [42, 43, 44],
                   "metrics": ["downstream.zero_shot.s"], "paper_seeds": None,
                   "rows": [{"id": "0", "modification": "original"}],
                   "claims": ["dufter2020-t3-r0-zero-shot"]}
    study = load_study(_spec(tmp_path, **spec), CLAIMS)
    results = tmp_path / "results"
    for seed, accuracy in zip((42, 43, 44), (0.40, 0.43, 0.41), strict=True):
        write_record(results, "x", "downstream",
                     {"test": {"de": {"accuracy": accuracy}}, "majority": {"accuracy": 0.288}},
                     model={"modification": "original", "seed": seed, "fingerprint": f"f{seed}"},
                     qualifier="3-s", config=_model_config("quick", "3,s,i"))
    outcome = study_result(study, iter_records(results), CLAIMS).outcomes[
        "dufter2020-t3-r0-zero-shot"]
    assert outcome.verdict is Verdict.HELD and outcome.n == (3, 3)
    assert outcome.difference == pytest.approx(0.41333 - 0.288, abs=1e-4)


def test_a_study_of_one_import_reads_only_its_records(tmp_path: Path) -> None:
    """Two GPU calls measured the same model (same fingerprint, not bit-identical): a study
    with ``records_from`` reads its own call's record, not the newer rerun's."""
    results = tmp_path / "results"
    for call, mu, date in (("calls/e4/", 0.241, "2026-11-27T14:00"),
                           ("calls/e3/", 0.247, "2026-11-27T18:00")):
        for modification in ("original", "lang-pos"):
            for seed in range(3):
                write_record(results, "multilab-smoke", "evaluate",
                             {"metrics": {"mu": mu + seed / 100}},
                             model={"modification": modification, "seed": seed,
                                    "fingerprint": "same"},
                             config=_model_config("smoke", "3,fake", modification),
                             qualifier=call.split("/")[1],
                             origin={"date": date, "imported_from": f"{call}x.json"})
    mine = load_study(_spec(tmp_path, records_from="calls/e4/"), CLAIMS)
    assert study_result(mine, iter_records(results), CLAIMS).cells[
        ("original", "mu")].values == (0.241, 0.251, 0.261)
    every = load_study(_spec(tmp_path), CLAIMS)  # without it: the newest record of the model
    assert study_result(every, iter_records(results), CLAIMS).cells[
        ("original", "mu")].values == (0.247, 0.257, 0.267)
    with pytest.raises(UserError, match="records_from 3: a path"):
        load_study(_spec(tmp_path, records_from=3), CLAIMS)


def test_a_model_setting_matches_the_records_resolved_model(tmp_path: Path) -> None:
    """``models.small.lr`` (as ``--set`` names it) is a record's ``model.lr`` for a small
    model: two trainings that differ only in the learning rate are two rows. A setting of a
    model size the row does not train (``models.base.lr`` for BERT-small) changes nothing:
    that row's configuration is the default's, and so are its records."""
    results = tmp_path / "results"
    for lr, mu in ((0.002, 0.24), (0.0005, 0.30)):
        for seed in range(3):
            write_record(results, "multilab-smoke", "evaluate", {"metrics": {"mu": mu}},
                         model={"modification": "original", "seed": seed,
                                "fingerprint": f"lr{lr}"},
                         config=_model_config("smoke", "3,fake", **{"models.small.lr": lr}))
    rows = [{"modification": "original", "settings": {"models.small.lr": 0.002}},
            {"label": "slow", "modification": "original",
             "settings": {"models.small.lr": 5.0e-4}},
            {"label": "base", "modification": "original",
             "settings": {"models.base.lr": 5.0e-4}}]
    study = load_study(_spec(tmp_path, rows=rows, claims=[]), CLAIMS)
    cells = study_result(study, iter_records(results), CLAIMS).cells
    assert cells[("original", "mu")].values == (0.24,) * 3
    assert cells[("slow", "mu")].values == (0.30,) * 3
    assert cells[("base", "mu")].values == (0.24,) * 3


def _analysis_records(root: Path) -> None:
    """Three seeds of word retrieval, token translation, a downstream run fine-tuned both
    ways with its MDS run, static embeddings and a similarity of two models."""
    for seed in (42, 43, 44):
        for modification, best in (("original", 0.90), ("window-20", 0.80)):
            model = {"modification": modification, "seed": seed, "fingerprint": f"f{seed}"}
            config = _model_config("quick", "3,fake", modification)
            trained = [{"layer": k, "mrr": best - 0.1 * abs(5 - k) + seed / 1000, "p1": 0.5}
                       for k in range(13)]
            write_record(root, "x", "mrr", {"source": "3", "target": "fake",
                                            "trained": trained, "untrained": trained[:1]},
                         model=model, config=config, qualifier="3-fake")
            write_record(root, "x", "translate", {
                "source": "3", "target": "fake", "alphas": [1.0, 2.0, 3.0], "layers": [1, 2],
                "convert_rate": [[0.1, 0.2], [0.5, 0.6], [0.9, 0.95]],
                "bleu1": [[0.3, 0.1], [0.2, 0.2], [0.1, 0.4]],
                "unshifted": {"convert_rate": 0.0}}, model=model, config=config,
                qualifier="3-fake")
            for first, accuracy in (("3", 0.44 + seed / 1000), ("fake", 0.99)):
                write_record(root, "x", "downstream", {
                    "languages": [first, "3" if first == "fake" else "fake"],
                    "test": {"en-fake": {"accuracy": accuracy}}}, model=model,
                    config=config, qualifier=f"{first}-first")
            write_record(root, "x", "downstream", {
                "languages": ["3", "fake"], "test": {"en-fake": {"accuracy": 0.40}},
                "mds": {"languages": {"en-fake": {"test_shifted": 0.47 + seed / 1000,
                                                  "test_unshifted": 0.41}}}},
                model=model, config=config, qualifier="mds")
        write_record(root, "x", "static", {"seed": seed, "train_rows": 100, "results": [
            {"model": "skipgram", "window": 5, "rows": 100, "mrr": 0.003}]},
            model=None, config={"profile": "quick", "languages": "3,fake"},
            qualifier=f"s{seed}")
        write_record(root, "x", "similarity", {
            "editions": ["3", "fake"], "layers": [0, 1],
            "trained": {"cka": [0.7, 0.6]}, "untrained": {"cka": [0.4, 0.5]}}, model=None,
            config={"profile": "quick", "languages": "3,fake",
                    "model_a": {"modification": "original", "seed": seed}},
            qualifier=f"s{seed}")


def test_analysis_records_feed_study_metrics_and_bound_claims(tmp_path: Path) -> None:
    """mrr / translate / similarity / static records are study metrics chosen by language
    pair, layer, α or model; downstream records are told apart by their fine-tuning side and
    MDS; a claim entry binds rows and metrics (``metric_b``, ``difference of``, curves)."""
    results = tmp_path / "results"
    _analysis_records(results)
    spec = {"name": "liu2020b-toy", "paper": "liu2020b", "table": "Table 2", "title": "toy",
            "languages": ["3", "fake"], "profile": "quick", "seeds": [42, 43, 44],
            "paper_seeds": None, "fine_tune": "3",
            "metrics": ["mrr.3-fake.best", "mrr.3-fake.best_layer",
                        "translate.<pair>.convert_rate.l2.a1",
                        "translate.<pair>.convert_rate.l2.a3", "translate.<pair>.bleu1.best",
                        "translate.<pair>.bleu1.best_alpha",
                        "translate.<pair>.bleu1.best.l1-1.a3",
                        "translate.<pair>.bleu1.best.l2-2.a3", "downstream.zero_shot.en-fake",
                        "downstream.mds.en-fake", "downstream.mds.en-fake minus "
                        "downstream.mds_unshifted.en-fake", "similarity.cka.floor_gap",
                        "static.skipgram.w5.rall.mrr"],
            "rows": [{"label": "original", "aliases": ["bert-all"], "modification": "original",
                      "pair": "3-fake"},
                     {"label": "window-20", "aliases": ["w20-all"],
                      "modification": "window-20", "pair": "3-fake"},
                     {"label": "static", "static": True}],
            "claims": [
                {"id": "liu2020b-s3-2-3-short-window-hurts-big-data",
                 "compare": {"a": "window-20", "b": "original", "metric": "mrr.3-fake.best"}},
                {"id": "liu2020b-s4-3-mds-beats-no-shift",
                 "compare": {"a": "original", "b": "original",
                             "metric": "downstream.mds.en-fake",
                             "metric_b": "downstream.zero_shot.en-fake"}},
                {"id": "liu2020b-s4-2-convert-rate-rises-with-alpha",
                 "compare": {"rows": ["original"],
                             "metric": ["translate.<pair>.convert_rate.l2.a1",
                                        "translate.<pair>.convert_rate.l2.a3"]}},
                {"id": "liu2020b-s4-2-last-layers-best-bleu",  # layer 2 above layer 1
                 "compare": {"rows": ["original"],
                             "metric": ["translate.<pair>.bleu1.best.l1-1.a3",
                                        "translate.<pair>.bleu1.best.l2-2.a3"]}},
                {"id": "liu2020b-abs-data-size-necessary",
                 "compare": {"rows": ["window-20", "original"],
                             "metric": "mrr.3-fake.best"}},
                {"id": "liu2020b-s3-2-3-window-drop-larger-big-data",
                 "compare": {"a": "original", "b": "difference of bert-all, w20-all",
                             "metric": "downstream.zero_shot.en-fake"}}]}
    study = load_study(_spec(tmp_path, **spec), CLAIMS)
    result = study_result(study, iter_records(results), CLAIMS)
    cells = result.cells
    assert cells[("original", "mrr.3-fake.best")].values == pytest.approx((0.942, 0.943, 0.944))
    assert cells[("original", "mrr.3-fake.best_layer")].values == (5.0,) * 3
    assert cells[("original", "translate.<pair>.convert_rate.l2.a3")].values == (0.95,) * 3
    assert cells[("original", "translate.<pair>.bleu1.best")].values == (0.4,) * 3
    assert cells[("original", "translate.<pair>.bleu1.best_alpha")].values == (3.0,) * 3
    # fine_tune "3": not the record fine-tuned on Fake-English (0.99), not the MDS run's 0.40
    assert cells[("original", "downstream.zero_shot.en-fake")].values == pytest.approx(
        (0.482, 0.483, 0.484))
    assert cells[("original", "downstream.mds.en-fake minus downstream.mds_unshifted."
                               "en-fake")].values == pytest.approx((0.102, 0.103, 0.104))
    assert cells[("original", "similarity.cka.floor_gap")].values == pytest.approx((0.1,) * 3)
    assert cells[("window-20", "similarity.cka.floor_gap")].values == ()  # the first model's
    assert cells[("static", "static.skipgram.w5.rall.mrr")].values == (0.003,) * 3
    assert cells[("original", "static.skipgram.w5.rall.mrr")].values == ()
    assert result.seeds_found["static"] == (42, 43, 44)
    outcomes = result.outcomes
    # −11 % is a drop, but not the "drastically hurt" of the claim's criterion (≤ −70 %)
    short = outcomes["liu2020b-s3-2-3-short-window-hurts-big-data"]
    assert short.verdict is Verdict.NOT_HELD and "above the upper bound" in short.reason
    assert outcomes["liu2020b-s4-3-mds-beats-no-shift"].verdict is Verdict.HELD
    assert outcomes["liu2020b-s4-2-convert-rate-rises-with-alpha"].verdict is Verdict.HELD
    assert cells[("original", "translate.<pair>.bleu1.best.l2-2.a3")].values == (0.4,) * 3
    rising = outcomes["liu2020b-s4-2-last-layers-best-bleu"]  # .4 at layer 2 against .1
    assert rising.verdict is Verdict.HELD and rising.difference == pytest.approx(0.3)
    assert outcomes["liu2020b-abs-data-size-necessary"].verdict is Verdict.HELD
    drop = outcomes["liu2020b-s3-2-3-window-drop-larger-big-data"]  # .48 against 0: not less
    assert drop.verdict is Verdict.NOT_HELD and drop.difference == pytest.approx(0.483)
    from multilab.studies.metrics import metric_source
    from multilab.studies.tables import curve_direction

    for bad in ("translate.3-fake.bleu2.l1.a1", "translate.3-fake.bleu1.best.l9-2.a3",
                "translate.3-fake.bleu1.best.l1-2.3", "curve.mu", "curve.mu.at100",
                "curve.mu.20"):
        with pytest.raises(ValueError):
            metric_source(bad)
    assert [curve_direction(shape) for shape in ("increasing (l8 > l0)", "decreasing",
                                                 "rising into the last few layers",
                                                 "a peak in the middle")] == [
        "greater", "less", "greater", None]
    spec["claims"] = [{"id": "liu2020b-s3-2-3-short-window-hurts-big-data",
                       "compare": {"direction": "greater"}}]
    with pytest.raises(UserError, match="direction is the paper's"):
        load_study(_spec(tmp_path, **spec), CLAIMS)


def test_a_correlation_over_rows_is_tested_over_seeds(tmp_path: Path) -> None:
    """Per seed, Pearson's r of x and y over the rows; the seeds' r against zero (three seeds
    of r near +1: held for a positive claim); fewer than 3 rows: not measured."""
    results = tmp_path / "results"
    rows = ("original", "lang-pos", "inv-order")
    for i, modification in enumerate(rows):
        for seed in range(3):
            write_record(results, "multilab-smoke", "evaluate",
                         {"metrics": {"mu": 0.2 * i + seed / 100,
                                      "ppl_dev": 100 + 10 * i + seed * (i % 2)}},
                         model={"modification": modification, "seed": seed,
                                "fingerprint": f"{modification}{seed}"},
                         config=_model_config("smoke", "3,fake", modification))
    claim = {"id": "dufter2020-s3-4-generalization-tradeoff",
             "compare": {"x": "ppl_dev", "y": "mu"}}
    study = load_study(_spec(tmp_path, metrics=["mu", "ppl_dev"], claims=[claim],
                             rows=[{"modification": m} for m in rows]), CLAIMS)
    outcome = study_result(study, iter_records(results), CLAIMS).outcomes[claim["id"]]
    assert outcome.verdict is Verdict.HELD and "Pearson's r over 3 rows" in outcome.reason
    two = load_study(_spec(tmp_path, metrics=["mu", "ppl_dev"], claims=[
        {**claim, "compare": {**claim["compare"], "rows": ["original", "lang-pos"]}}],
        rows=[{"modification": m} for m in rows]), CLAIMS)
    assert study_result(two, iter_records(results), CLAIMS).outcomes[
        claim["id"]].verdict is Verdict.NOT_MEASURED


def test_study_run_plans_and_runs_the_measuring_commands_a_row_lacks(tmp_path: Path) -> None:
    """A (row, seed) lacks the records its metrics read: the plan names them and the
    runner runs `downstream` (fine-tuned on `fine_tune`, `--mds` for the shifted variant),
    `mrr` and `translate` per pair; a static row lacks its `multilab static` record of the
    seed, similarity records are not run."""
    from multilab.data.layout import BLOCKS_FILE
    from multilab.studies.runner import missing_runs, run_study

    results = tmp_path / "results"
    _analysis_records(results)
    spec = {"name": "liu2020b-plan", "paper": "liu2020b", "table": "Table 2", "title": "toy",
            "languages": ["3", "fake"], "profile": "quick", "seeds": [42, 45],
            "paper_seeds": None, "fine_tune": "fake", "claims": [],
            "metrics": ["mrr.3-fake.best", "translate.fake-3.bleu1.best",
                        "downstream.zero_shot.en-fake", "downstream.mds.en-fake",
                        "similarity.cka.best", "static.skipgram.w5.rall.mrr"],
            "rows": [{"modification": "original"}, {"label": "static", "static": True}]}
    study = load_study(_spec(tmp_path, **spec), CLAIMS)
    steps = missing_runs(study, iter_records(results))
    assert [(s.row.label, s.seed, s.needs) for s in steps] == [
        ("original", 42, (("translate", "fake-3"), ("downstream", "mds"))),  # MDS on 3 only
        ("original", 45, (("mrr", "3-fake"), ("translate", "fake-3"), ("downstream", ""),
                          ("downstream", "mds"))),
        ("static", 45, (("static", ""),))]
    calls: list[list[str]] = []

    def command(argv: list[str]) -> int:
        calls.append([a for a in argv if not a.startswith("--set")])
        return 0

    folder = tmp_path / "artifacts" / "studies" / study.name
    (folder / "corpora").mkdir(parents=True)
    (folder / "corpora" / "train.txt").touch()
    (folder / "vocab").mkdir()
    (folder / "vocab" / BLOCKS_FILE).touch()  # a finished build: not built again
    run_study(study, steps[1:2], command, tmp_path, lambda _: None)
    model = str(folder / "models" / "original" / "seed45")
    assert calls == [["train", "--modification", "original", "--seed", "45"],
                     ["mrr", model, "--source", "3", "--target", "fake"],
                     ["translate", model, "--source", "fake", "--target", "3"],
                     ["downstream", model, "--languages", "fake,3"],
                     ["downstream", model, "--languages", "fake,3", "--mds"]]


def test_study_run_measures_a_model_another_study_trained(tmp_path: Path) -> None:
    """A (row, seed) whose model lies finished in another study's folder (the fingerprint
    its records name and ``train`` would give it here, the weights its done file hashed) is
    measured there, not trained again; a folder of another fingerprint, or with damaged
    weights, is passed over."""
    import hashlib

    from multilab.data.layout import BLOCKS_FILE
    from multilab.studies.runner import missing_runs, run_study
    from multilab.training.model_dir import write_done

    results = tmp_path / "results"
    _analysis_records(results)  # seed 42 of `original` measured as fingerprint f42
    spec = {"name": "liu2020b-reuse", "paper": "liu2020b", "table": "Table 2", "title": "toy",
            "languages": ["3", "fake"], "profile": "quick", "seeds": [42], "claims": [],
            "paper_seeds": None, "metrics": ["translate.fake-3.bleu1.best"],
            "rows": [{"modification": "original"}]}
    study = load_study(_spec(tmp_path, **spec), CLAIMS)
    steps = missing_runs(study, iter_records(results))
    assert [(s.seed, s.needs, s.fingerprints) for s in steps] == [
        (42, (("translate", "fake-3"),), ("f42",))]
    artifacts = tmp_path / "artifacts"
    weights = b"weights"
    for folder, fingerprint, sha in (
            (artifacts / "models", "f-other", hashlib.sha256(weights).hexdigest()),
            (artifacts / "studies" / "a-damaged" / "models", "f42", "0" * 64),
            (artifacts / "studies" / "trainer" / "models", "f42",
             hashlib.sha256(weights).hexdigest())):
        model = folder / "original" / "seed42"
        model.mkdir(parents=True)
        (model / "model.safetensors").write_bytes(weights)
        write_done(model, {"fingerprint": fingerprint, "modification": "original", "seed": 42,
                           "weights_sha256": sha})
    own = artifacts / "studies" / study.name
    (own / "corpora").mkdir(parents=True)
    (own / "corpora" / "train.txt").touch()
    (own / "vocab").mkdir()
    (own / "vocab" / BLOCKS_FILE).touch()
    calls: list[list[str]] = []

    def command(argv: list[str]) -> int:
        calls.append([a for a in argv if not a.startswith("--set")])
        return 0

    run_study(study, steps, command, tmp_path, lambda _: None,
              fingerprint_of=lambda settings, modification, seed: "f42")
    trained = str(artifacts / "studies" / "trainer" / "models" / "original" / "seed42")
    assert calls == [["translate", trained, "--source", "fake", "--target", "3"]]
    # trained on other data than the study's today (another fingerprint here), or no way
    # to tell (no fingerprint_of): trained again, in the study's own folder
    for fingerprint_of in (lambda settings, modification, seed: "f-new", None):
        calls.clear()
        run_study(study, steps, command, tmp_path, lambda _: None,
                  fingerprint_of=fingerprint_of)
        assert calls[0] == ["train", "--modification", "original", "--seed", "42"]


def test_study_run_stacks_what_the_registry_allows(tmp_path: Path, capsys) -> None:
    """``--stack k``: rows of one architecture and one data folder share a stack, cut into
    cross products of rows and seeds (one ``train`` command each); an architecture of its
    own stacks apart, a row the stacked trainer cannot train runs alone; a stack larger than
    the study's rows x seeds (or 0) is one line, nothing run."""
    from multilab.studies.runner import Step, missing_runs, products, run_study, stacks

    rows = [{"id": "0", "modification": "original"}, {"id": "1", "modification": "lang-pos"},
            {"id": "4", "modification": "overparam"}, {"id": "9", "modification": "nsp"},
            {"id": "2", "modification": "no-random",
             "settings": {"languages": "[3, s]"}}]
    study = load_study(_spec(tmp_path, rows=rows, claims=[]), CLAIMS)
    steps = missing_runs(study, [])
    groups = stacks(study, steps, tmp_path)
    labels = [sorted({step.row.label for step in group}) for group in groups]
    assert labels == [["lang-pos", "original"], ["overparam"], ["no-random"], ["nsp"],
                      ["nsp"], ["nsp"]]
    first = products(groups[0])
    assert [([r.label for r in rows], seeds) for rows, seeds in first] == [
        (["original", "lang-pos"], [0, 1, 2])]
    calls: list[list[str]] = []
    run_study(study, groups[0], lambda argv: calls.append(argv) or 0, tmp_path,
              lambda _: None, stack=6)
    trains = [argv for argv in calls if "train" in argv]
    assert len(trains) == 1  # one stack; each member under its own row's MLflow parent
    assert "--set=rows={original: original, lang-pos: lang-pos}" in trains[0]
    assert "--set=experiment=toy-study" in trains[0]
    row_0, row_1 = study.rows[:2]
    ragged = products([Step(row_0, 0), Step(row_0, 1), Step(row_1, 1)])
    assert [([r.label for r in rows], seeds) for rows, seeds in ragged] == [
        (["original"], [0, 1]), (["lang-pos"], [1])]
    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder)
    where = ["--set", f"paths.results={tmp_path / 'results'}"]
    run = [*where, "study", "run", "toy-study", "--studies", str(folder)]
    for stack, offered in (("7", "6 run(s) (2 row(s) x 3 seed(s))"), ("0", "6 run(s)")):
        assert main([*run, "--stack", stack]) == 2
        err = capsys.readouterr().err
        assert f"--stack {stack}: study toy-study offers {offered}" in err and "valid: 1 to 6" \
            in err and err.count("\n") == 1, err
    assert main([*run, "--stack", "3", "--seeds", "0", "--plan"]) == 2
    assert "offers 2 run(s)" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


#: the real-language sweep in small: ``paper: lab``, one row that changes the model's width
LAB_TOY = {"name": "lab-toy", "paper": "lab", "table": "sweep", "title": "toy",
           "languages": ["3", "s"], "profile": "quick", "seeds": [0],
           "metrics": ["retrieval_p1.l8", "downstream.ratio.s", "train.minutes", "mrr.3-s.l2"],
           "rows": [{"label": "h128", "modification": "original",
                     "settings": {"models.small.hidden_size": 128}}]}
#: one record of each kind the lab toy's metrics read: ratio .75, 30 minutes, MRR .25, ρ .3
LAB_TOY_RECORDS = (("evaluate", {"metrics": {"retrieval_p1.l8": 0.3}}),
                   ("downstream", {"labels": ["en", "de"], "test": {
                       "en": {"accuracy": 0.8}, "de": {"accuracy": 0.6}}}),
                   ("train", {"step_seconds": 1800.0}),
                   ("mrr", {"source": "3", "target": "s",
                            "trained": [{"layer": 0, "mrr": 0.1}, {"layer": 2, "mrr": 0.25}]}))


def _lab_toy(tmp_path: Path, **change: object):
    """The lab toy (with ``change``) written as ``lab-toy.yaml`` and loaded."""
    path = tmp_path / "lab-toy.yaml"
    path.write_text(yaml.safe_dump(LAB_TOY | change))
    return load_study(path, CLAIMS)


def test_a_lab_study_reads_ratio_minutes_and_mrr_from_their_records(tmp_path: Path) -> None:
    """Issue 55's sweep: ``paper: lab`` (no claims), and the metrics computed from a record:
    zero-shot over in-language accuracy, training minutes, MRR at one layer."""
    study = _lab_toy(tmp_path)
    results = tmp_path / "results"
    model = {"modification": "original", "seed": 0, "fingerprint": "f"}
    config = _model_config("quick", "3,s", **{"models.small.hidden_size": 128})
    for kind, result in LAB_TOY_RECORDS:
        write_record(results, "x", kind, result, model=model, config=config)
    cells = study_result(study, iter_records(results), CLAIMS).cells
    assert cells[("h128", "downstream.ratio.s")].values == pytest.approx((0.75,))
    assert cells[("h128", "train.minutes")].values == (30.0,)
    assert cells[("h128", "mrr.3-s.l2")].values == (0.25,)
    assert cells[("h128", "retrieval_p1.l8")].values == (0.3,)
    with pytest.raises(UserError, match="tests no paper's claims"):
        _lab_toy(tmp_path, claims=["dufter2020-t1-r1-lang-pos"])


def test_a_pinned_measurement_setting_concerns_only_the_records_that_measure_with_it(
        tmp_path: Path) -> None:
    """A sweep that pins the fine-tuning learning rate (``downstream.lr``) after its first
    point was measured at another: the point's training, evaluation and word retrieval are
    still its own (the model is the same), its old fine-tune is not, so the table leaves the
    ratio empty and ``study run`` plans only the fine-tune again."""
    from multilab.studies.runner import missing_runs

    # pinned as k2020-table4 pins evaluate.layers
    study = _lab_toy(tmp_path, settings={"downstream.lr": 2.0e-4, "evaluate.layers": "all"})
    results = tmp_path / "results"
    model = {"modification": "original", "seed": 0, "fingerprint": "f"}
    config = _model_config("quick", "3,s", **{"models.small.hidden_size": 128})
    before = config | {"downstream.lr": 2.0e-5, "evaluate.layers": "all"}  # the first point
    for kind, result in LAB_TOY_RECORDS:
        write_record(results, "x", kind, result, model=model, config=before)
    cells = study_result(study, iter_records(results), CLAIMS).cells
    assert cells[("h128", "train.minutes")].values == (30.0,)
    assert cells[("h128", "retrieval_p1.l8")].values == (0.3,)
    assert cells[("h128", "mrr.3-s.l2")].values == (0.25,)
    assert cells[("h128", "downstream.ratio.s")].values == ()  # fine-tuned at 2e-5
    plan = missing_runs(study, iter_records(results), params=PARAMS)
    assert [(step.row.label, step.needs) for step in plan] == [("h128", (("downstream", ""),))]
    write_record(results, "x", *LAB_TOY_RECORDS[1], model=model,
                 config=before | {"downstream.lr": 2.0e-4})  # the fine-tune again, at 2e-4
    cells = study_result(study, iter_records(results), CLAIMS).cells
    assert cells[("h128", "downstream.ratio.s")].values == pytest.approx((0.75,))


def test_the_sweep_fine_tunes_each_width_at_a_fifth_of_its_pretraining_rate() -> None:
    """Issue 55's sweep: every row fine-tunes at the paper's ratio of fine-tuning to
    pretraining rate (2e-5 / 1e-4) applied to its own model's rate, as the real-quick profile
    does; a row that changes the width changes both."""
    from multilab.studies.settings import study_settings

    study = load_studies(STUDIES, CLAIMS)["real-regime"]
    for row in study.rows:
        cfg = load_config(PARAMS, parse_overrides(study_settings(study, Path(), row)))
        assert cfg.downstream.lr == pytest.approx(cfg.models["small"].lr * 2e-5 / 1e-4), row.label


def test_study_run_queue_refuses_what_dvc_yaml_cannot_run(tmp_path: Path, monkeypatch,
                                                          capsys) -> None:
    """``--queue``: a row whose records need a command dvc.yaml has no stage for (``mrr``),
    ``--stack``, a folder that is no DVC project: one line each, exit 2, nothing queued."""
    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder, metrics=["mu", "mrr.3-fake.best"], claims=[])
    shutil.copy(PARAMS, tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    run = ["--set", f"paths.results={tmp_path / 'results'}", "study", "run", "toy-study",
           "--studies", str(folder), "--queue"]
    assert main(run) == 2
    assert "--queue needs the DVC project's root" in capsys.readouterr().err
    (tmp_path / ".dvc").mkdir()
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    assert main(run) == 2
    err = capsys.readouterr().err
    assert "row 'original' of toy-study (seed 0): its `multilab mrr 3-fake` record has no " \
        "stage in dvc.yaml; run it without --queue" in err and err.count("\n") == 1, err
    assert main([*run, "--stack", "2"]) == 2
    assert "--stack 2 with --queue" in capsys.readouterr().err


@pytest.mark.slow  # git, dvc init and five dvc commands: ≈ 30 s
def test_study_run_queue_enqueues_dvc_experiments(tmp_path: Path, monkeypatch,
                                                  capsys) -> None:
    """On a GPU server a study runs as a DVC queue: one queued experiment per missing (row,
    seed), its params the study's settings (the row's modification as the one ``study``
    entry, the seed, the row's MLflow parent, the study's experiment and artifacts folder,
    the project's results/); queued twice, nothing is queued again. Nothing runs here
    (``dvc queue start`` is the pipeline's cost)."""
    import json
    import subprocess

    from tests.helpers import BIN

    project = tmp_path / "project"
    project.mkdir()
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, project / name)
    folder = project / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder, rows=[SPEC["rows"][0], {**SPEC["rows"][1], "settings": {"vocab.size": 512}}],
          settings={"train.max_train_sentences": 64, "train.eval_points": "[]"})

    def shell(*argv: str) -> str:
        return subprocess.run(argv, cwd=project, check=True, capture_output=True,
                              text=True).stdout

    shell("git", "init", "-q")
    shell(str(BIN / "dvc"), "init", "-q")
    shell("git", "add", "-A")
    shell("git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "project")
    monkeypatch.chdir(project)
    run = ["--params", "params.yaml", "study", "run", "toy-study", "--studies", "studies",
           "--seeds", "0", "--queue"]
    assert main(run) == 0
    out = capsys.readouterr().out
    assert "queued toy-study-original-s0: original seed 0 (evaluate)" in out
    assert "2 experiment(s) queued" in out and "dvc queue start -j N" in out
    assert main(run) == 0
    assert "in the queue already (toy-study-lang-pos-s0)" in capsys.readouterr().out
    assert shell(str(BIN / "dvc"), "queue", "status").count("Queued") == 2
    shown = json.loads(shell(str(BIN / "dvc"), "exp", "show", "--json"))
    params = {rev["name"]: rev["data"]["params"]["params.yaml"]["data"]
              for baseline in shown for exp in baseline.get("experiments") or ()
              for rev in exp["revs"]}
    assert sorted(params) == ["toy-study-lang-pos-s0", "toy-study-original-s0"]
    lang_pos = params["toy-study-lang-pos-s0"]
    assert lang_pos["study"] == ["lang-pos"] and lang_pos["seeds"] == [0]
    assert lang_pos["rows"] == {"lang-pos": "lang-pos"}
    assert lang_pos["profile"] == "smoke" and lang_pos["experiment"] == "toy-study"
    assert lang_pos["languages"] == [3, "fake"] and lang_pos["vocab"]["size"] == 512
    assert lang_pos["paths"]["artifacts"] == "artifacts/studies/toy-study/row-lang-pos"
    assert lang_pos["paths"]["results"] == str(project / "results")
    assert params["toy-study-original-s0"]["paths"]["artifacts"] == \
        "artifacts/studies/toy-study"
    queued = project / "queued.yaml"  # what `multilab check`, the first stage, will read
    queued.write_text(yaml.safe_dump(lang_pos))
    cfg = load_config(queued)
    assert cfg.rows == {"lang-pos": "lang-pos"} and cfg.row_of("lang-pos") == "lang-pos"
    # the smoke profile's own max_train_sentences (256) does not win over the study's
    assert cfg.train.max_train_sentences == 64 and cfg.train.eval_points == ()
    assert cfg.vocab.size == 512


FIGURE_SPEC = {"name": "lab-figure", "paper": "lab", "table": "sweep", "title": "toy",
               "languages": ["3", "s"], "profile": "quick", "seeds": [0, 1],
               "metrics": ["retrieval_p1.l4", "downstream.ratio.s", "train.minutes"],
               "rows": [{"label": "h64", "modification": "original",
                         "settings": {"models.small.hidden_size": 64}},
                        {"label": "h128", "modification": "original",
                         "settings": {"models.small.hidden_size": 128}},
                        {"label": "h256", "modification": "original",
                         "settings": {"models.small.hidden_size": 256}}],
               "figures": [{"name": "transfer-vs-minutes", "x": "train.minutes",
                            "y": ["retrieval_p1.l4", "downstream.ratio.s"],
                            "axis_titles": {"train.minutes": "training minutes"}}]}


def _figure_records(results: Path) -> None:
    """h64 at two seeds, h128 at one, h256 with no record: two points, one with error bars."""
    runs = {(64, 0): (0.10, 0.50, 600.0), (64, 1): (0.14, 0.60, 660.0),
            (128, 0): (0.30, 0.70, 1800.0)}
    for (hidden, seed), (rho, german, seconds) in runs.items():
        model = {"modification": "original", "seed": seed, "fingerprint": f"h{hidden}-{seed}"}
        config = _model_config("quick", "3,s", **{"models.small.hidden_size": hidden})
        for kind, result in (("evaluate", {"metrics": {"retrieval_p1.l4": rho}}),
                             ("downstream", {"labels": ["en", "de"], "test": {
                                 "en": {"accuracy": 0.8}, "de": {"accuracy": 0.8 * german}}}),
                             ("train", {"step_seconds": seconds})):
            write_record(results, "x", kind, result, model=model, config=config)


def test_a_study_figure_is_drawn_from_the_cells_and_is_the_same_bytes_twice(
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PRINT_VARIABLE, "yes")  # the default (the suite draws PNG only)
    from multilab.studies.figures import figure_points

    folder = tmp_path / "studies"
    shutil.copytree(STUDIES / "claims", folder / "claims")
    (folder / "lab-figure.yaml").write_text(yaml.safe_dump(FIGURE_SPEC))
    out, results = tmp_path / "docs", tmp_path / "results"
    args = ["--set", f"paths.results={results}", "study", "report", "lab-figure",
            "--out", str(out), "--studies", str(folder)]
    assert main(args) == 0  # no record yet: the markdown says so, no image
    assert "no points yet" in (out / "lab-figure.md").read_text()
    assert not (out / "figures").exists()
    _figure_records(results)
    assert main(args) == 0
    png = out / "figures" / "lab-figure-transfer-vs-minutes.png"
    pdf = png.with_suffix(".pdf")
    assert png.read_bytes().startswith(b"\x89PNG") and pdf.read_bytes().startswith(b"%PDF")
    markdown = (out / "lab-figure.md").read_text()
    assert "](figures/lab-figure-transfer-vs-minutes.png)" in markdown
    assert "no points yet" not in markdown
    first = png.read_bytes(), pdf.read_bytes()
    assert main(args) == 0
    assert (png.read_bytes(), pdf.read_bytes()) == first
    study = load_study(folder / "lab-figure.yaml", CLAIMS)
    result = study_result(study, iter_records(results), CLAIMS)
    points = figure_points(result, study.figures[0])
    for metric, found in points.items():
        assert [p.label for p in found] == ["h64", "h128"]  # h256 has no record: no point
        for point in found:
            x_cell, y_cell = result.cells[(point.label, "train.minutes")], \
                result.cells[(point.label, metric)]
            assert point.x == pytest.approx(sum(x_cell.values) / len(x_cell.values))
            assert point.y == pytest.approx(sum(y_cell.values) / len(y_cell.values))
    h64, h128 = points["downstream.ratio.s"]
    assert (h64.x, h64.y) == pytest.approx((10.5, 0.55))
    assert h64.y_err == pytest.approx(0.0707107, rel=1e-4) and h128.y_err is None
    assert points["retrieval_p1.l4"][1].y == pytest.approx(0.30)


@pytest.mark.parametrize(("figure", "message"), [
    ({"colour": "red"}, "figure 1: unknown key 'colour'; valid: name, title, x, y, axis_titles"),
    ({"y": ["retrieval_p1.l8"]}, "figure transfer-vs-minutes: y 'retrieval_p1.l8' is not among "
     "the study's metrics: retrieval_p1.l4, downstream.ratio.s, train.minutes"),
    ({"x": "train.hours"}, "x 'train.hours' is not among the study's metrics"),
    ({"y": []}, "y []: a metric or a list of metrics"),
    ({"name": "Rho vs Minutes"}, "name 'Rho vs Minutes': lowercase words"),
    ({"axis_titles": {"mu": "μ"}}, "axis_titles: unknown key 'mu'; valid: train.minutes"),
])
def test_a_bad_figure_spec_is_one_line(tmp_path: Path, capsys, figure: dict,
                                       message: str) -> None:
    folder = tmp_path / "studies"
    shutil.copytree(STUDIES / "claims", folder / "claims")
    spec = FIGURE_SPEC | {"figures": [FIGURE_SPEC["figures"][0] | figure]}
    (folder / "lab-figure.yaml").write_text(yaml.safe_dump(spec, allow_unicode=True))
    out = tmp_path / "docs"
    assert main(["--set", f"paths.results={tmp_path / 'results'}", "study", "report",
                 "lab-figure", "--out", str(out), "--studies", str(folder)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not out.exists()


def test_the_cost_of_a_run_is_the_fastest_cpu_training(tmp_path: Path) -> None:
    """A loaded machine only slows a training down, so the runs-needed column prices a model
    at the fastest CPU training on record; a GPU's training is no CPU cost."""
    from multilab.studies.document import run_costs

    results = tmp_path / "results"
    for seed, seconds, device in [(0, 6000.0, "cpu: x"), (1, 2700.0, "cpu: x"),
                                  (2, 3500.0, "cpu: x"), (3, 200.0, "cuda: NVIDIA H200")]:
        origin = {"commit": "abc", "date": "2026-11-28", "machine": {"device": device}}
        write_record(results, "multilab-quick", "train", {"step_seconds": seconds},
                     model={"modification": "original", "seed": seed, "profile": "quick",
                            "fingerprint": f"f{seed}"},
                     config={"profile": "quick"}, origin=origin)
    assert run_costs(iter_records(results)) == {"quick": 2700.0}


def test_a_row_never_trained_is_priced_by_a_training_of_its_shape(tmp_path: Path) -> None:
    """A row without a training of its own is priced by the fastest CPU training of the same
    shape and steps per language (another modification, another study), scaled by its
    number of languages (a character vocabulary or more heads: its own step's, else a
    cheaper step's as a lower bound); a row of another shape, or whose trainings of its shape
    all step dearer, has no such price (its profile's is used)."""
    study = _lab_toy(tmp_path, seeds=[0, 1], metrics=["retrieval_p1.l8"], rows=[
        {"label": "base", "modification": "original"},
        {"label": "lang-pos", "modification": "lang-pos"},
        {"label": "three", "modification": "original", "settings": {"languages": "[3, s, i]"}},
        {"label": "wide", "modification": "original",
         "settings": {"models.small.hidden_size": 128}},
        {"label": "heads", "modification": "original",
         "settings": {"models.small.num_attention_heads": 16}},
        {"label": "chars", "modification": "original", "settings": {"vocab.unit": "char"}},
        {"label": "words", "modification": "original", "settings": {"vocab.unit": "word"}}])
    results = tmp_path / "results"
    for seconds, device in ((1800.0, "cpu: x"), (2400.0, "cpu: x"), (60.0, "cuda: H200")):
        write_record(results, "x", "train", {"step_seconds": seconds},
                     config=_model_config("quick", "3,s"), origin={
                         "commit": "abc", "date": "2026-11-29", "machine": {"device": device}},
                     model={"modification": "original", "seed": 0, "fingerprint": f"{seconds}"})
    result = study_result(study, iter_records(results), CLAIMS)
    # a character vocabulary (its sentences fill max_length) steps dearer: a word piece
    # training of its shape is a lower bound, taken until one of its own unit exists; so
    # does a step at 16 heads of 4 dimensions (2.7 times one head's). A word's step is
    # cheaper than a word piece's: that training is no bound for it
    assert result.train_seconds == {"base": 1800.0, "lang-pos": 1800.0, "three": 2700.0,
                                    "heads": 1800.0, "chars": 1800.0}
    assert result.run_seconds("wide", {"quick": 900.0}) == 900.0
    assert result.run_seconds("words", {"quick": 900.0}) == 900.0
    # what a plan that must finish in time may rely on: no bound, neither unit's nor profile's
    assert result.lower_bounds == {"chars", "heads"}
    assert result.measured_seconds("chars") is None and result.measured_seconds("wide") is None
    assert result.measured_seconds("heads") is None
    assert result.measured_seconds("three") == 2700.0
    # the documents and `study next` mark a bound's price "≥": a cheaper step's or the profile's
    assert [label for label in ("base", "three", "wide", "heads", "chars", "words")
            if result.priced_at_least(label)] == ["wide", "heads", "chars", "words"]
    write_record(results, "x", "train", {"step_seconds": 5400.0},
                 config=_model_config("quick", "3,s", **{"vocab.unit": "char"}),
                 origin={"commit": "abc", "date": "2026-12-04", "machine": {"device": "cpu"}},
                 model={"modification": "original", "seed": 0, "fingerprint": "chars"})
    result = study_result(study, iter_records(results), CLAIMS)
    assert result.train_seconds["chars"] == 5400.0 and result.measured_seconds("chars") == 5400.0
    assert result.train_seconds["base"] == 1800.0 and "words" not in result.train_seconds


def test_runs_needed_price_every_missing_run_as_a_training(tmp_path: Path) -> None:
    """Seed 0 has every record, seed 1 a trained and evaluated model that lacks its fine-tune,
    seed 2 nothing: two runs needed, both priced as trainings (a checkout holds the records,
    not the weights, so seed 1's model is trained again on a fresh one), at the profile's
    fastest training until the row has one of its own."""
    from multilab.studies.document import models_to_train, studies_block

    study = _lab_toy(tmp_path, seeds=[0, 1, 2], metrics=["retrieval_p1.l8", "downstream.ratio.s"],
                     rows=[{"label": "base", "modification": "original"}])
    results = tmp_path / "results"
    config = _model_config("quick", "3,s")
    for seed, records in ((0, LAB_TOY_RECORDS[:2]), (1, LAB_TOY_RECORDS[:1])):
        model = {"modification": "original", "seed": seed, "fingerprint": f"f{seed}"}
        for kind, result in records:
            write_record(results, "x", kind, result, model=model, config=config)
    result = study_result(study, iter_records(results), CLAIMS)
    assert result.seeds_found == {"base": (0,)}
    line = studies_block([result], {"quick": 3600.0})[2]
    # the profile's fastest prices a row of its own shape only as a lower bound
    assert "| 1/3 | 2 (≥ 2.0 CPU-h of training) |" in line, line
    assert "2 models trained (≥ 2.0 CPU-h for the 2 whose profile has a measured CPU cost, " \
        "2 of them priced by a lower bound only)" in models_to_train([result], {"quick": 3600.0})
    # the row's own training on record (seed 0, 30 min) prices its other seeds, not the
    # profile's fastest (a smaller row's)
    write_record(results, "x", "train", LAB_TOY_RECORDS[2][1], config=config,
                 model={"modification": "original", "seed": 0, "fingerprint": "f0"})
    result = study_result(study, iter_records(results), CLAIMS)
    assert result.train_seconds == {"base": 1800.0}
    assert "| 1/3 | 2 (≈ 1.0 CPU-h of training) |" in studies_block([result], {"quick": 900.0})[2]
    assert "2 models trained (≈ 1.0 CPU-h" in models_to_train([result], {"quick": 900.0})


def test_a_row_of_its_own_seeds_is_complete_with_them(tmp_path: Path) -> None:
    """A row measured once by design (a control pair: ``seeds: [0]``) needs no other seed: the
    table says 1/1, the document counts no run needed, and ``study run`` plans none, while
    the study's other row still lacks its seeds 1 and 2."""
    from multilab.studies.document import runs_missing, studies_block
    from multilab.studies.runner import missing_runs

    study = _lab_toy(tmp_path, seeds=[0, 1, 2], metrics=["retrieval_p1.l8"],
                     rows=[{"label": "base", "modification": "original"},
                           {"label": "control", "modification": "original", "seeds": [0],
                            "settings": {"train.epochs": 2}}])
    results = tmp_path / "results"
    for label, settings in (("base", {}), ("control", {"train.epochs": 2})):
        write_record(results, "x", "evaluate", LAB_TOY_RECORDS[0][1],
                     config=_model_config("quick", "3,s", **settings),
                     model={"modification": "original", "seed": 0, "fingerprint": label})
    records = list(iter_records(results))
    result = study_result(study, records, CLAIMS)
    assert result.seeds_found == {"base": (0,), "control": (0,)}
    assert runs_missing(result) == 2
    assert [(step.row.label, step.seed) for step in missing_runs(study, records)] == \
        [("base", 1), ("base", 2)]
    assert "| 2/4 | 2" in studies_block([result], {"quick": 3600.0})[2]


@pytest.mark.parametrize(("metric", "words"), [
    ("mu", "μ (multilinguality score)"),
    ("train.minutes", "training minutes (wall time of the steps)"),
    ("retrieval_p1.l8", "sentence retrieval ρ, layer 8"),
    ("retrieval_p1.l4", "verse retrieval ρ (P@1), layer 4"),  # a layer Table 1 lacks
    ("downstream.zero_shot.s", "zero-shot accuracy on s"),
    ("downstream.ratio.s", "zero-shot ratio (accuracy on s over in-language)"),
    ("downstream.mds.s", "accuracy after the shift on s"),
    ("ppl_dev.fake", "MLM perplexity, dev, fake"),
    ("mrr.3-s.l4", "word retrieval MRR 3-s, layer 4"),
    ("mrr.3-s.best", "mrr.3-s.best"),  # no words known: the key itself
])
def test_a_figure_axis_is_titled_in_words(metric: str, words: str) -> None:
    from multilab.studies.figures import metric_words

    assert metric_words(metric) == words


def test_a_stopped_command_stops_the_study_run_instead_of_failing_it(tmp_path: Path) -> None:
    """`multilab train` under `study run` ended by SIGTERM (exit 143) or Ctrl-C (130) said
    so itself; the study run stops the same way (exit 143 / 130, resumable), not with a
    "failed: fix it" error."""
    from multilab.studies.runner import _Runner

    study = load_study(_spec(tmp_path), CLAIMS)
    for code, stop in ((143, Terminated), (130, KeyboardInterrupt)):
        with pytest.raises(stop):
            _Runner(study, lambda args, code=code: code, tmp_path, print, None).run([], "train")
    with pytest.raises(UserError, match="failed"):
        _Runner(study, lambda args: 1, tmp_path, print, None).run([], "train")


def test_two_metrics_of_the_same_models_are_compared_paired(tmp_path: Path) -> None:
    """Layer 0 against layer 8 of one row (Dufter & Schütze's "retrieval works better on
    layer 8"): both arms measure the same three models, so the test is the paired t over
    seeds matched by seed (``scipy.stats.ttest_rel``), not Welch's; two rows are other
    models, compared unpaired."""
    from scipy import stats

    from multilab.studies.spec import bind_claim
    from multilab.studies.tables import Cell, claim_outcome, same_models

    study = load_study(_spec(tmp_path), CLAIMS)
    cpu = ("cpu",) * 3
    l0, l8 = (0.50, 0.58, 0.52), (0.61, 0.55, 0.52)
    cells = {("original", "retrieval_p1.l0"): Cell(l0, cpu, (0, 1, 2)),
             ("original", "retrieval_p1.l8"): Cell(l8, cpu, (1, 2, 0))}  # seeds reordered
    claim = CLAIMS["dufter2020-t1-r0-retrieval-layer8"]
    outcome = claim_outcome(study, bind_claim(claim, study.claims[1]), cells)
    expected = stats.ttest_rel([0.52, 0.61, 0.55], [0.50, 0.58, 0.52])
    assert outcome.p == pytest.approx(expected.pvalue)
    assert outcome.verdict is Verdict.HELD and "paired t over 3 matched seeds" in outcome.reason
    assert same_models(study, "original", "original", "retrieval_p1.l8", "retrieval_p1.l0")
    assert not same_models(study, "lang-pos", "original", "mu", None)
    assert not same_models(study, "original", "original", "mu", "mu")


def test_the_study_that_speaks_for_a_claim_is_chosen_by_one_rule(tmp_path: Path) -> None:
    """Several studies test one claim: a verdict before none, the paper's budget before a
    smaller one, then more seeds, then the paper's real languages before a stand-in, then
    the first by name; the claim's row says which study speaks and why."""
    from dataclasses import replace

    from multilab.studies.tables import claim_verdicts, render_study, speakers
    from multilab.studies.verdict import Outcome

    def result(name: str, outcome: Outcome, **change: object):
        study = replace(load_study(_spec(tmp_path, name=name, claims=[LANG_POS]), CLAIMS),
                        **change)
        return replace(study_result(study, iter(()), CLAIMS), outcomes={LANG_POS: outcome})

    held = Outcome(Verdict.HELD, "3 seeds", p=0.01, n=(3, 3))
    noise = Outcome(Verdict.NOT_SEPARABLE, "3 seeds", p=0.4, n=(3, 3))
    quick = result("toy-a-quick", held, profile="quick")
    paper = result("toy-b-paper", noise, profile="paper")
    chosen = speakers([quick, paper])[LANG_POS]
    assert chosen.result is paper and chosen.why == "the paper's budget, toy-a-quick a CPU budget"
    assert claim_verdicts([quick, paper], CLAIMS)[LANG_POS] is Verdict.NOT_SEPARABLE
    # a one-seed reading at the paper's budget does not displace a three-seed verdict
    one_seed = result("toy-b-paper", Outcome(Verdict.INDICATIVE, "1 seed", n=(1, 1)),
                      profile="paper")
    assert speakers([quick, one_seed])[LANG_POS].result is quick
    # at one budget, more seeds; at the same seeds, the paper's real languages
    five = result("toy-c-five", Outcome(Verdict.NOT_HELD, "5 seeds", p=0.01, n=(5, 5)),
                  profile="quick")
    assert speakers([quick, five])[LANG_POS].why == "more seeds: 5, toy-a-quick 3"
    real = result("toy-d-real", noise, profile="quick", languages=("3", "s"), rows=tuple(
        replace(row, settings={}) for row in quick.study.rows))
    chosen = speakers([quick, real])[LANG_POS]
    assert chosen.result is real and "real languages" in chosen.why
    tie = result("toy-e-tie", noise, profile="quick")
    assert speakers([tie, quick])[LANG_POS].result is quick  # the first by name
    page = render_study(quick, CLAIMS, speaking={LANG_POS: speakers([quick, paper])[LANG_POS]})
    assert "toy-b-paper speaks (the paper's budget, toy-a-quick a CPU budget)" in page


def test_holm_runs_per_paper_over_distinct_tests(tmp_path: Path) -> None:
    """Two claims resting on one comparison (original > untrained on μ; untrained <
    original on μ) are one test: Holm's m counts it once and both claims get its adjusted p.
    Known p's .01 (the shared test), .04 and .03: Holm gives .03, .06, .06, so of three
    held verdicts on distinct tests one survives, and the shared test's two claims both do."""
    from dataclasses import replace

    from multilab.studies.document import summary_block
    from multilab.studies.tables import claim_verdicts, multiplicity, render_study, test_key
    from multilab.studies.verdict import Outcome

    shared = ("dufter2020-t1-r0-original-multilingual", "dufter2020-t1-r18-r19-untrained-poor")
    rows = [ORIGINAL, {"id": "18", "modification": "untrained"},
            {"id": "1", "modification": "lang-pos"}, {"id": "3", "modification": "inv-order"}]
    inv = "dufter2020-t1-r3-inv-order"
    study = load_study(_spec(tmp_path, rows=rows, claims=[*shared, LANG_POS, inv]), CLAIMS)
    keys = {test_key(study, CLAIMS[claim]) for claim in shared}
    assert len(keys) == 1
    held = {shared[0]: 0.01, shared[1]: 0.01, LANG_POS: 0.04, inv: 0.03}
    result = replace(study_result(study, iter(()), CLAIMS), outcomes={
        claim: Outcome(Verdict.HELD, "3 seeds", p=p, n=(3, 3)) for claim, p in held.items()})
    corrected = multiplicity([result], CLAIMS)
    assert corrected.tests == {"dufter2020": 3}
    assert corrected.adjusted == pytest.approx({shared[0]: 0.03, shared[1]: 0.03,
                                                LANG_POS: 0.06, inv: 0.06})
    assert corrected.significant == {"dufter2020": 4}
    assert corrected.surviving == {"dufter2020": 2}
    summary = summary_block(claim_verdicts([result], CLAIMS), CLAIMS, corrected)
    assert summary[0].startswith("|  | Dufter & Schütze 2020 | Liu et al. 2020a |")
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1] for line in summary[2:14]}
    assert rows == {"claims": "72", "**with a verdict** (≥ 3 seeds every arm)": "4",
                    "held": "4", "did not hold": "0", "not separable from seed noise": "0",
                    "held or did not hold": "4", "… of which survive Holm (α .05)": "2",
                    "distinct tests (Holm's m)": "3", "indicative": "0",
                    "not comparable": "0", "not testable": "2", "not measured": "66"}
    page = render_study(result, CLAIMS, adjusted=corrected.adjusted)
    assert f"| `{LANG_POS}` |" in page and "| **held** | 0.04 | 0.06 | this study |" in page


def test_still_a_high_degree_fails_where_our_row_7_is_far_below_the_original() -> None:
    """Dufter & Schütze's "only with 7 there is still a high degree of multilinguality"
    carries its criterion (at most a slight decrease from the original's μ, ≥ −31 %): a row
    7 at 29 % of the original's μ (our quick models: .070 against .245) did not hold, where
    the direction alone (7 above 6) held; the paper's own .68 against .70 holds it."""
    from multilab.studies.spec import bind_claim
    from multilab.studies.tables import Cell, claim_outcome

    study = load_study(STUDIES / "dufter2020-table1.yaml", CLAIMS)
    entry = next(e for e in study.claims if e.id == "dufter2020-t1-r7-still-high")
    claim = bind_claim(CLAIMS[entry.id], entry)
    assert claim.relative_bounds == (-0.31, None)
    seeds, cpu = (42, 43, 44), ("cpu",) * 3
    ours = {("original", "mu"): Cell((0.21, 0.25, 0.275), cpu, seeds),
            ("shift-special+no-random", "mu"): Cell((0.055, 0.070, 0.085), cpu, seeds)}
    outcome = claim_outcome(study, claim, ours)
    assert outcome.verdict is Verdict.NOT_HELD and "below the lower bound" in outcome.reason
    papers = {("original", "mu"): Cell((0.69, 0.70, 0.71), cpu, seeds),
              ("shift-special+no-random", "mu"): Cell((0.67, 0.68, 0.69), cpu, seeds)}
    assert claim_outcome(study, claim, papers).verdict is Verdict.HELD


def _curve_claim(study_file: str, claim_id: str):
    """A real study and its binding of one curve claim (the claim list's criterion kept)."""
    from multilab.studies.spec import bind_claim

    study = load_study(STUDIES / study_file, CLAIMS)
    entry = next(e for e in study.claims if e.id == claim_id)
    return study, bind_claim(CLAIMS[entry.id], entry)


def test_a_trend_criterion_holds_a_rising_curve_and_not_a_flat_one() -> None:
    """Dufter & Schütze 2020's "the longer a model is trained, the more multilingual it
    gets" (``criterion: {curve: trend}``): per seed, Spearman's ρ of μ over the curve
    points, tested against zero. A curve rising in every seed holds, though one step dips
    (a trend, not every step); a curve without a trend does not; two seeds are no verdict."""
    from multilab.studies.tables import Cell, claim_outcome

    study, claim = _curve_claim("dufter2020-figure6.yaml",
                                "dufter2020-f6-longer-more-multilingual")
    points = ("curve.mu.at20", "curve.mu.at40", "curve.mu.at60", "curve.mu.at80")
    seeds = (42, 43, 44)

    def curve(by_seed: dict[int, tuple[float, ...]]) -> dict[tuple[str, str], Cell]:
        used = tuple(seed for seed in seeds if seed in by_seed)
        return {("original", point): Cell(tuple(by_seed[seed][i] for seed in used),
                                          ("cpu",) * len(used), used)
                for i, point in enumerate(points)}

    rising = {42: (0.1, 0.3, 0.5, 0.7), 43: (0.1, 0.4, 0.35, 0.6), 44: (0.2, 0.3, 0.5, 0.6)}
    outcome = claim_outcome(study, claim, curve(rising))
    assert outcome.verdict is Verdict.HELD, outcome.reason
    assert "Spearman's ρ per seed +1.00, +0.80, +1.00" in outcome.reason
    flat = {42: (0.3, 0.31, 0.29, 0.30), 43: (0.3, 0.29, 0.31, 0.30), 44: (0.3, 0.3, 0.3, 0.3)}
    assert claim_outcome(study, claim, curve(flat)).verdict is Verdict.NOT_SEPARABLE
    falling = {seed: tuple(reversed(values)) for seed, values in rising.items()}
    assert claim_outcome(study, claim, curve(falling)).verdict is Verdict.NOT_HELD
    two_seeds = {seed: values for seed, values in rising.items() if seed != 44}
    assert claim_outcome(study, claim, curve(two_seeds)).verdict is Verdict.INDICATIVE


def test_an_end_vs_start_criterion_tests_the_claims_size() -> None:
    """Liu et al. 2020a's "data size largely improved" (``curve: end-vs-start``, last / first
    − 1 ≥ +6.6 %): the most data's MRR against the least's. A rise well beyond the bound
    holds; a rise that is significant but within the authors' "slight" does not hold."""
    from multilab.studies.tables import Cell, claim_outcome, comparison_text

    study, claim = _curve_claim("liu2020a-data-window.yaml", "liu2020a-s2-3-2-data-improves-bert")
    assert comparison_text(claim).endswith("criterion: end against start, last / first − 1 in "
                                           "[+7 %, open]")
    metric = str(claim.compare["metric"])
    first, last = (study.row(str(name)).label for name in claim.compare["rows"])
    seeds = (42, 43, 44)

    def cells(low: tuple[float, ...], high: tuple[float, ...]) -> dict[tuple[str, str], Cell]:
        return {(first, metric): Cell(low, ("cpu",) * 3, seeds),
                (last, metric): Cell(high, ("cpu",) * 3, seeds)}

    large = claim_outcome(study, claim, cells((0.40, 0.41, 0.42), (0.80, 0.81, 0.82)))
    assert large.verdict is Verdict.HELD and large.reason.startswith("end against start")
    slight = claim_outcome(study, claim, cells((0.400, 0.401, 0.402), (0.412, 0.413, 0.414)))
    assert slight.verdict is Verdict.NOT_HELD


def test_a_trend_in_every_seed_has_an_exact_permutation_p_not_zero() -> None:
    """Three seeds whose 4-point curves all rise: each seed's order has probability 1 / 4!
    under the null, so the trend's p is 1 / 24³ (a zero spread's t would say 0); falling
    curves are the other side, did not hold; ties rank by their average."""
    from multilab.studies.verdict import spearman, trend_test

    rising = trend_test([[0.1, 0.2, 0.3, 0.4]] * 3, ["cpu"] * 3, "greater")
    assert rising.verdict is Verdict.HELD and rising.p == pytest.approx(1 / 24 ** 3)
    falling = trend_test([[0.4, 0.3, 0.2, 0.1]] * 3, ["cpu"] * 3, "greater")
    assert falling.verdict is Verdict.NOT_HELD and falling.p == pytest.approx(1 / 24 ** 3)
    assert spearman([0.3, 0.3, 0.3]) == 0.0
    assert spearman([1.0, 2.0, 2.0, 3.0]) == pytest.approx(0.9486833)

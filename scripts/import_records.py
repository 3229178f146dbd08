"""Migrate results measured before records existed into ``results/``.

Each source below is a committed file (or a background run's output folder) whose numbers a
document cites; the record keeps its numbers unchanged and says where they came from: the
commit the run was made at (where known), the file, the date and the device. The
configuration is rebuilt from today's ``params.yaml`` for the run's modification and seed
(``provenance.config_rebuilt``). Run it from the project root; it is idempotent: a record
whose content would be the same is left as it is, and one that exists with other content
(today's params.yaml rebuilds another configuration) is never overwritten without
``--force``: nothing is written then, and one line names the first such record.

    python scripts/import_records.py                     # the committed sources
    python scripts/import_records.py --runs DIR ...      # background runs (run.json + JSONs)
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from multilab.errors import UserError
from multilab.files import write_text
from multilab.resolve import load_config, resolve_run
from multilab.studies.record_schema import CHECKED_FIELDS, check_document
from multilab.studies.records import model_identity, record_document

#: the records an import would write, (path, content): checked whole before any is written
PLANNED: list[tuple[Path, dict[str, Any]]] = []


def write_record(results: Path, experiment: str, kind: str, result: dict[str, Any], *,
                 model: dict[str, Any] | None, config: dict[str, Any], qualifier: str = "",
                 origin: dict[str, Any] | None = None) -> Path:
    """Plan one record (written by :func:`main` once every record is checked)."""
    path, data = record_document(results, experiment, kind, result, model=model,
                                 config=config, qualifier=qualifier, origin=origin)
    PLANNED.append((path, mark_unbacked(path, data)))
    return path


#: what a field the run never recorded is, in the words of an unbacked mark's reason
MISSING_WHAT = {"provenance.commit": "the commit it ran at",
                "provenance.command": "its command line",
                "model.fingerprint": "its model's fingerprint (it predates fingerprints)"}


def mark_unbacked(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """Say in the record which provenance fields its source lacks, and why
    (``provenance.unbacked``, read by ``multilab records check``): an import keeps the
    numbers it finds and never makes up the rest."""
    missing = [problem.field for problem in check_document(path, data)
               if problem.field in CHECKED_FIELDS]
    if not missing:
        return data
    provenance = data["provenance"]
    lacks = ", ".join(MISSING_WHAT.get(field, field) for field in missing)
    if provenance.get("imported_from"):
        reason = (f"imported by scripts/import_records.py from {provenance['imported_from']} "
                  f"(as of commit {str(provenance.get('imported_file_commit'))[:10]}), "
                  f"which holds the run's output but not {lacks}")
    else:
        reason = ("imported by scripts/import_records.py --runs from a background run's "
                  "folder (run.json, model.json, eval.json) that was not committed (no raw "
                  f"source is left); the run did not record {lacks}")
    provenance["unbacked"] = {"fields": missing, "reason": reason}
    return data

TABLE1_KEYS = ("mu", "align_f1.l0", "retrieval_p1.l0", "translation_p1.l0", "align_f1.l8",
               "retrieval_p1.l8", "translation_p1.l8", "ppl_train", "ppl_dev")


def file_commit(path: Path) -> tuple[str, str]:
    """The commit of the version of ``path`` that is read (the last that changed it; the
    commit that added it held other numbers where the file was rewritten later) and its
    date."""
    out = subprocess.run(["git", "log", "--format=%H %aI", "-1", "--",
                          str(path)], capture_output=True, text=True, check=True).stdout
    commit, date = out.split()
    return commit, date


def origin(source: Path, ran_at: str | None, device: str, note: str) -> dict[str, Any]:
    added, date = file_commit(source)
    return {"commit": ran_at, "dirty": None, "date": date, "machine": {"device": device},
            "command": None, "imported_from": str(source), "imported_file_commit": added,
            "config_rebuilt": True, "note": note}


def _config(modification: str, seed: int, overrides: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    """Today's configuration of a run, with the settings its document names (``overrides``,
    as params.yaml's nested keys: ``{"vocab": {"mode": "joint"}}``)."""
    cfg = load_config(Path("params.yaml"), {"profile": "quick", **(overrides or {})})
    return resolve_run(cfg, modification, seed).as_params()


def _downstream_config(run: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A downstream JSON's model configuration plus its fine-tuning settings and direction
    (``downstream.languages``: fine-tuned on the first, tested on every one)."""
    config = _config(run["modification"], run["seed"], overrides)
    config |= {f"downstream.{key}": value for key, value in run["settings"].items()}
    config["downstream.languages"] = ",".join(run["languages"])
    return config


def _downstream_model(run: dict[str, Any]) -> dict[str, Any]:
    return {key: run.get(key) for key in ("modification", "paper_id", "seed", "profile",
                                          "fingerprint", "run_id")}


def _import_downstream(results: Path, source: Path, overrides: dict[str, Any],
                       ran_at: str | None, note: str, with_evaluate: bool = False) -> Path:
    """One ``multilab downstream`` JSON as a downstream record (its numbers unchanged);
    ``with_evaluate``: its configuration also names the evaluate settings, as the command's
    own records do (a study setting such as ``evaluate.layers`` then matches)."""
    run = json.loads(source.read_text())
    config = _downstream_config(run, overrides)
    if with_evaluate:
        cfg = load_config(Path("params.yaml"), {"profile": "quick", **overrides})
        config |= {f"evaluate.{key}": value for key, value in asdict(cfg.evaluate).items()}
    return write_record(results, "multilab-quick", "downstream", run,
                        model=_downstream_model(run), config=config,
                        qualifier="-".join(run["languages"]).replace(":", "-"),
                        origin=origin(source, ran_at, "cpu", note))


def import_quick_study(results: Path) -> list[Path]:
    """The default study's seed-42 rows (README's main command at d3accbd, CPU)."""
    source = Path("docs/results/quick-study/table1.csv")
    written = []
    with source.open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            modification = row["modification"]
            metrics = {key: float(row[f"{key}_mean"]) for key in TABLE1_KEYS}
            model = {"modification": modification, "paper_id": row["paper_id"], "seed": 42,
                     "profile": "quick", "fingerprint": None, "run_id": None}
            written.append(write_record(
                results, "multilab-quick", "evaluate", {"metrics": metrics}, model=model,
                config=_config(modification, 42), origin=origin(
                    source, "d3accbd", "cpu", "the default study's table (one seed, its "
                    "standard deviation column is 0); no fingerprint was recorded")))
    return written


def import_e5_base(results: Path) -> list[Path]:
    """E5's default-corpus arm, seeds 43 and 44 (trained at 7a1dce8 on the CPU)."""
    folder = Path("docs/results/e5-web-quick-cpu")
    written = []
    for seed in (43, 44):
        evaluation = json.loads((folder / f"e5-base-s{seed}.json").read_text())
        trained = json.loads((folder / f"base-s{seed}.train.json").read_text())
        model = model_identity(trained)
        config = _config("original", seed)
        note = "E5's default-corpus arm (quick, 4 length pieces, one thread)"
        written.append(write_record(results, "multilab-quick", "evaluate", evaluation,
                                    model=model, config=config,
                                    origin=origin(folder / f"e5-base-s{seed}.json", "7a1dce8",
                                                  "cpu", note)))
        written.append(write_record(results, "multilab-quick", "train", trained, model=model,
                                    config=config,
                                    origin=origin(folder / f"base-s{seed}.train.json",
                                                  "7a1dce8", "cpu", note)))
    return written


#: K et al. 2020 Table 1 (word-piece overlap, Spanish; REPRODUCTION "K et al. 2020 Table 1"): the
#: pretraining languages of each file (fine-tuned on English or enfake, tested on Spanish)
K2020_TABLE1 = {"en-es.json": ["v", "3"], "enfake-es.json": ["v", "enfake:3"]}


def import_k2020_table1(results: Path) -> list[Path]:
    """K et al. 2020 Table 1 on Spanish, seed 42, quick: `[v, 3]` and `[v, enfake:3]`, under
    separate vocabularies (the default; the two models are bit-identical) and a joint one
    (the folder's name and REPRODUCTION's section say which). The section names no commit."""
    written = []
    for mode in ("joint", "separate"):
        folder = Path(f"docs/results/seed002-table1-es-{mode}-s42")
        for name, languages in K2020_TABLE1.items():
            written.append(_import_downstream(
                results, folder / name, {"languages": languages, "vocab": {"mode": mode}},
                None, f"K et al. 2020 Table 1, Spanish, vocab.mode {mode}: pretrained on "
                f"[{', '.join(languages)}], fine-tuned on the English side, Spanish "
                "zero-shot; the run's commit is not named in REPRODUCTION"))
    return written


#: Conneau et al. 2020 Table 1 on English–French (REPRODUCTION "Conneau et al. 2020
#: Table 1", its table's vocabulary column): each file's vocabulary mode
CONNEAU2020_TABLE1 = {"default-joint-en-fr.json": "joint",
                      "no-anchors-separate-en-fr.json": "separate",
                      "default-anchors-union-en-fr.json": "union",
                      "extra-anchors-joint-en-fr.json": "joint",
                      "sep-emb-en-fr.json": "separate", "sep-L1-3-en-fr.json": "separate",
                      "sep-L1-6-en-fr.json": "separate",
                      "sep-emb+sep-L1-6-en-fr.json": "separate"}


def import_conneau2020_table1(results: Path) -> list[Path]:
    """Conneau et al. 2020 Table 1 groups 2-3 on `[3, l]`, quick, seed 42,
    `train.eval_points=[]`, fine-tuned on English, French zero-shot."""
    folder = Path("docs/results/seed003-table1-3-l-s42")
    return [_import_downstream(
        results, folder / name, {"languages": ["3", "l"], "vocab": {"mode": mode},
                                 "train": {"eval_points": []}},
        None, f"Conneau et al. 2020 Table 1 on English-French, vocab.mode {mode}, "
        "train.eval_points=[]; the run's commit is not named in REPRODUCTION")
        for name, mode in CONNEAU2020_TABLE1.items()]


#: Dufter & Schütze 2020 Table 3 analogue on `[3, s, i]` (REPRODUCTION "Measured: real
#: languages" and its rows 3 and 8): folder → the commit each run was made at (fresh clones)
DUFTER2020_TABLE3 = {"lang3-quick-s42": "f7f3102", "lang3-quick-row3-s42": "9c72dfc",
                     "lang3-quick-row8-s42": "4054327"}


def import_dufter2020_table3(results: Path) -> list[Path]:
    """The downstream tables of `dvc exp run -S 'languages=[3,s,i]'` (quick, seed 42, the
    default separate vocabularies): one seed each, so the CSV's means are the values and its
    zero stds are not kept. Fine-tuned on English, tested on en, de and hi."""
    written = []
    for name, ran_at in DUFTER2020_TABLE3.items():
        source = Path("docs/results") / name / "downstream.csv"
        with source.open(encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                assert row["n_seeds"] == "1", source
                result = {"test": {iso: {"accuracy": float(row[f"acc.{iso}_mean"]),
                                         "macro_f1": float(row[f"f1.{iso}_mean"])}
                                   for iso in ("en", "de", "hi")},
                          "majority": {"accuracy": float(row["majority_acc_mean"]),
                                       "macro_f1": float(row["majority_f1_mean"])},
                          "languages": ["3", "s", "i"], "task": "bible-books"}
                modification = row["modification"]
                model = {"modification": modification, "paper_id": row["paper_id"],
                         "seed": 42, "profile": "quick", "fingerprint": None, "run_id": None}
                config = _config(modification, 42, {"languages": ["3", "s", "i"]})
                config["downstream.languages"] = "3,s,i"
                written.append(write_record(
                    results, "multilab-quick", "downstream", result, model=model,
                    config=config, qualifier="3-s-i", origin=origin(
                        source, ran_at, "cpu", "a [3, s, i] study's downstream table (one "
                        "seed; the CSV's mean columns); no fingerprint was recorded")))
    return written


#: K et al. 2020 Tables 2-4 and 8-10, one seed (42), quick (docs/notes/reproduction-log.md,
#: "K et al. 2020 Table N" sections): folder → (its commit where the section names one, the
#: pretraining languages, the settings every run of it had, {file: its own settings}). Files
#: fine-tuned on Spanish and tested on Fake-English (`*-es-enfake.json`) are records of the
#: same models fine-tuned the other way: a study tells them apart by ``fine_tune`` (the
#: record's first language).
LR_5E4 = {"models": {"small": {"lr": 5.0e-4}}}
K2020_SEED002 = {
    "seed002-tables2-3-es-joint-s42": (None, ["v", "enfake:3"], {"vocab": {"mode": "joint"}},
                                       {"permute-1-enfake-es.json": {},
                                        "unigram-target-enfake-es.json": {},
                                        "original-es-enfake.json": {},
                                        "unigram-target-es-enfake.json": {}}),
    "seed002-table4-ru-joint-s42": ("003827a", ["r", "enfake:3"],
                                    {"vocab": {"mode": "joint"}, "evaluate": {"layers": "all"}},
                                    {"depth-1.json": {}, "depth-4.json": {},
                                     "original-depth-12.json": {}}),
    "seed002-table8-10-es-joint-s42": (None, ["v", "enfake:3"], {"vocab": {"mode": "joint"}},
                                       {"nsp.json": {"train": {"eval_points": []}},
                                        "nsp-lr5e-4.json": {"train": {"eval_points": []},
                                                            **LR_5E4},
                                        "original-lr5e-4.json": {"train": {"eval_points": []},
                                                                 **LR_5E4},
                                        "char.json": {"vocab": {"unit": "char"}},
                                        "word.json": {"vocab": {"unit": "word"}}}),
    "seed002-table9-es-separate-s42": (None, ["v", "enfake:3"],
                                       {"vocab": {"mode": "separate"}},
                                       {"lang-id-enfake-es.json": {}}),
}
#: files of a folder trained at a commit the section names (Table 10's char and word models)
K2020_FILE_COMMITS = {"char.json": "003827a", "word.json": "003827a"}


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Nested params overrides, ``extra`` winning."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(
            out.get(key), dict) else value
    return out


def import_k2020_seed002(results: Path) -> list[Path]:
    """K et al. 2020's one-seed tables (word order, unigram frequency, depth, NSP,
    language markers, tokenization), each a `multilab downstream` JSON fine-tuned on the
    enfake side and tested zero-shot on Spanish or Russian."""
    written = []
    for name, (ran_at, languages, shared, files) in K2020_SEED002.items():
        folder = Path("docs/results") / name
        for file, own in files.items():
            overrides = _merge({"languages": languages, **shared}, own)
            commit = K2020_FILE_COMMITS.get(file, ran_at)
            written.append(_import_downstream(
                results, folder / file, overrides, commit,
                f"K et al. 2020 {name.split('-')[1]}, one seed: pretrained on "
                f"[{', '.join(languages)}] with {own or shared}; the run's settings as "
                "docs/notes/reproduction-log.md names them"
                + ("" if commit else "; it names no commit"), with_evaluate=True))
    return written


#: Liu et al. 2020a/b and Conneau et al. 2020 §5 analyses, seed 42, quick (reproduction-log
#: sections "§3.1.1: word retrieval MRR", "static embeddings against BERT", "§4: unsupervised
#: token translation", "Conneau et al. §5 (Figure 2)"): file → (kind, qualifier, the model's
#: pretraining languages, params overrides of the model; None: no lab model, the languages of
#: the comparison). The sections name no commit. A similarity record names its two models
#: (``model_a``, ``model_b``: modification, seed and the languages each was trained on), as
#: ``multilab similarity`` does.
ROW8_LANGUAGES = ["3", "s", "i"]
ANALYSES: dict[str, tuple[str, str, list[str], dict[str, Any] | None]] = {
    "mrr-s42/original-3fake.json": ("mrr", "3-fake", ["3", "fake"], {}),
    "mrr-s42/row8-3-s.json": ("mrr", "3-s", ROW8_LANGUAGES, {}),
    "mrr-s42/row8-3-i.json": ("mrr", "3-i", ROW8_LANGUAGES, {}),
    "static-3fake-s42/bert-2000-rows-mrr.json": ("mrr", "3-fake-2000-rows", ["3", "fake"],
                                                 {"train": {"max_train_sentences": 2000}}),
    "static-3fake-s42/bert-window20-mrr.json": ("mrr", "3-fake", ["3", "fake"], {}),
    "static-3fake-s42/static.json": ("static", "3-fake", ["3", "fake"], None),
    "translation-original-3fake-s42/3-fake/translation.json": ("translate", "3-fake",
                                                               ["3", "fake"], {}),
    "translation-original-3fake-s42/fake-3/translation.json": ("translate", "fake-3",
                                                               ["3", "fake"], {}),
    "translation-row8-s42/3-s/translation.json": ("translate", "3-s", ROW8_LANGUAGES, {}),
    "translation-row8-s42/3-i/translation.json": ("translate", "3-i", ROW8_LANGUAGES, {}),
    "seed003-similarity-3-l-s42/similarity.json": ("similarity", "3-l-s42-s42", ["3", "l"],
                                                   None),
    "seed003-similarity-3-3-s42-s43/similarity.json": ("similarity", "3-3-s42-s43", ["3"],
                                                       None),
}
#: the two models of each similarity JSON: (modification, seed, the languages it trained on)
SIMILARITY_MODELS = {
    "seed003-similarity-3-l-s42/similarity.json": (("original", 42, "3"),
                                                   ("original", 42, "l")),
    "seed003-similarity-3-3-s42-s43/similarity.json": (("original", 42, "3"),
                                                       ("original", 43, "3")),
}


def import_analyses(results: Path) -> list[Path]:
    """Word retrieval (MRR), static embeddings, token translation and representation
    similarity JSONs as records of their command's kind, their numbers unchanged."""
    written = []
    for name, (kind, qualifier, languages, overrides) in ANALYSES.items():
        source = Path("docs/results") / name
        run = json.loads(source.read_text())
        if overrides is None:  # two models or none of the lab's: no single model
            model = None
            config = {"profile": "quick", "languages": ",".join(languages)}
            for side, (modification, seed, trained_on) in zip(
                    ("model_a", "model_b"), SIMILARITY_MODELS.get(name, ()), strict=False):
                config[side] = {"modification": modification, "seed": seed,
                                "profile": "quick", "fingerprint": None,
                                "languages": trained_on}
        else:
            modification = run["modification"].replace(";", "+")
            model = {"modification": modification, "seed": run["seed"], "profile": "quick",
                     "fingerprint": None, "run_id": run.get("run_id")}
            config = _config(modification, run["seed"], {"languages": languages, **overrides})
        written.append(write_record(
            results, "multilab-quick", kind, run, model=model, config=config,
            qualifier=qualifier, origin=origin(
                source, None, "cpu", f"the `multilab {kind}` JSON of "
                f"docs/notes/reproduction-log.md's section on it (quick, seed 42); the run's "
                "commit is not named; no fingerprint was recorded")))
    return written


#: downstream JSONs beside the analyses (seed 42, quick, no commit named): file → (the
#: record's qualifier, the model's pretraining languages, params overrides). ``--mds`` runs
#: (Liu et al. 2020b §4.3: lower half frozen, shifted at layer 6) are qualified ``mds-…`` and
#: read only by the ``downstream.mds.*`` metrics; the static section's BERTs are the same
#: fine-tune as every downstream record.
ANALYSIS_DOWNSTREAM: dict[str, tuple[str, list[str], dict[str, Any]]] = {
    "mds-original-3fake-s42/seed42-mds.json": ("mds-3-fake", ["3", "fake"], {}),
    "mds-row8-s42/seed42-mds.json": ("mds-3-s-i", ROW8_LANGUAGES, {}),
    "static-3fake-s42/bert-2000-rows-downstream.json": (
        "3-fake", ["3", "fake"], {"train": {"max_train_sentences": 2000}}),
    "static-3fake-s42/bert-all-rows-downstream.json": ("3-fake", ["3", "fake"], {}),
    "static-3fake-s42/bert-window20-downstream.json": ("3-fake", ["3", "fake"], {}),
}


def import_analysis_downstream(results: Path) -> list[Path]:
    """The MDS and the static section's BERT downstream JSONs as downstream records."""
    written = []
    for name, (qualifier, languages, overrides) in ANALYSIS_DOWNSTREAM.items():
        source = Path("docs/results") / name
        run = json.loads(source.read_text())
        run["modification"] = run["modification"].replace(";", "+")
        written.append(write_record(
            results, "multilab-quick", "downstream", run, model=_downstream_model(run),
            config=_downstream_config(run, {"languages": languages, **overrides}),
            qualifier=qualifier, origin=origin(
                source, None, "cpu", "a `multilab downstream"
                + (" --mds" if "mds" in run else "") + "` JSON of docs/notes/"
                "reproduction-log.md's section on it (quick, seed 42); the run's commit is "
                "not named")))
    return written


#: GPU calls (one NVIDIA H200, 2026-11-27): folder → (the commit that added the results with
#: the script that ran them, the record qualifier, the --set overrides every run had, the
#: corpus of each file prefix as its overrides)
GPU_DEVICE = "cuda: NVIDIA H200"
GPU_SETTINGS = {"train": {"length_pieces": 1, "eval_points": []}}
GPU_CALLS = {
    "e4": (Path("benchmarks/results/gpu-h200-2026-11-27"), "1745b8f",
           {"e4-original": {}, "e4-attend-padding": {}, "e4-lang-pos": {},
            "e4-lang-pos+attend-padding": {}},
           "issue 24 E4 (benchmarks/gpu_e4.sh): twelve train + evaluate processes at once on one "
           "H200, quick, train.length_pieces=1, train.eval_points=[], float32 "
           "(MULTILAB_MIXED_PRECISION=no)"),
    "e3": (Path("benchmarks/results/gpu-h200-2026-11-27-e3"), "012a561",
           {"e3-base": {}, "e3-split-clauses": {"corpus": {"split_clauses": True},
                                                "train": {"epochs": 17.96875}}},
           "issue 24 E3 (scripts/gpu_corpora.sh): the default corpus and the same words split "
           "at clauses, 2,300 updates each, twelve processes at once on one H200 (a second "
           "lease), quick, train.length_pieces=1, train.eval_points=[], float32"),
}


def import_gpu_call(results: Path, call: str) -> list[Path]:
    """One GPU call's evaluation JSONs (``<prefix>-s<seed>.json``) as evaluate records,
    qualified by the call: a rerun of the same fingerprint in another call is another draw
    (GPU training is not bit-identical), not the same measurement."""
    folder, ran_at, prefixes, what = GPU_CALLS[call]
    written = []
    for source in sorted(folder.glob("*-s[0-9]*.json")):
        prefix = source.stem.rsplit("-s", 1)[0]
        if prefix not in prefixes:
            continue
        run = json.loads(source.read_text())
        model = {key: run.get(key) for key in ("modification", "paper_id", "seed", "profile",
                                               "fingerprint", "run_id")}
        overrides = {**GPU_SETTINGS, "train": {**GPU_SETTINGS["train"],
                                               **prefixes[prefix].get("train", {})},
                     **{k: v for k, v in prefixes[prefix].items() if k != "train"}}
        result = {"metrics": run["metrics"], "fingerprint": run["fingerprint"]}
        written.append(write_record(
            results, "multilab-quick", "evaluate", result, model=model,
            config=_config(run["modification"], run["seed"], overrides),
            qualifier=f"h200-{call}", origin=origin(
                source, ran_at, GPU_DEVICE, f"{what}; the commit is the one that added these "
                "files and the script that ran them (it changed nothing under src/); "
                "the run's own commit was not recorded")))
    return written


#: what a background run's run.json holds (its provenance)
RUN_KEYS = ("modification", "seed", "commit", "started", "finished", "device", "threads")


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; anything else is one line naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: not found; a run folder holds run.json (and model.json, "
                        "eval.json, downstream.json as its steps finished)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: not readable JSON ({err})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a JSON object is needed, not {type(data).__name__}")
    return data


def import_run(folder: Path, results: Path) -> list[Path]:
    """A background run's folder: run.json (provenance), model.json, eval.json,
    downstream.json (each present only if that step finished)."""
    if not folder.is_dir():
        raise UserError(f"--runs {folder}: not a folder (a background run's output folder)")
    run = _read_json(folder / "run.json")
    missing = [key for key in RUN_KEYS if key not in run]
    if missing:
        raise UserError(f"{folder / 'run.json'}: no {missing[0]!r}; a run.json has "
                        f"{', '.join(RUN_KEYS)}")
    if not isinstance(run["seed"], int) or isinstance(run["seed"], bool) or run["seed"] < 0:
        raise UserError(f"{folder / 'run.json'}: seed {run['seed']!r}: an integer >= 0")
    if not (folder / "model.json").is_file():
        return []
    trained = _read_json(folder / "model.json")
    model = model_identity(trained)
    if model.get("seed") != run["seed"] or model.get("modification") != run["modification"]:
        raise UserError(f"{folder / 'model.json'}: model {model.get('modification')!r} seed "
                        f"{model.get('seed')!r}, but run.json names {run['modification']!r} "
                        f"seed {run['seed']!r}")
    config = _config(run["modification"], run["seed"])
    stamp = {"commit": run["commit"], "dirty": False, "date": run["finished"],
             "machine": {"device": run["device"], "threads": run["threads"]},
             "command": None, "config_rebuilt": True, "started": run["started"],
             "note": f"multilab train/evaluate/downstream ({run['modification']}, seed "
                     f"{run['seed']}), one thread, nice 19"}
    written = [write_record(results, "multilab-quick", "train", trained, model=model,
                            config=config, origin=stamp)]
    for kind, name in (("evaluate", "eval.json"), ("downstream", "downstream.json")):
        if (folder / name).is_file():
            written.append(write_record(results, "multilab-quick", kind,
                                        _read_json(folder / name), model=model,
                                        config=config, origin=stamp))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results")
    parser.add_argument("--runs", nargs="*", default=None,
                        help="background run folders to import instead of the committed sources")
    parser.add_argument("--force", action="store_true",
                        help="overwrite records that exist with other content (never without)")
    args = parser.parse_args(argv)
    results = Path(args.results)
    PLANNED.clear()
    try:
        if args.runs is not None:
            for folder in args.runs:
                import_run(Path(folder), results)
        else:
            for step in (import_quick_study, import_e5_base, import_k2020_table1,
                         import_conneau2020_table1, import_dufter2020_table3,
                         lambda r: import_gpu_call(r, "e4"), lambda r: import_gpu_call(r, "e3"),
                         import_k2020_seed002, import_analyses, import_analysis_downstream):
                step(results)
        return _write_planned(bool(args.force))
    except UserError as err:
        print(f"import_records: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2


def _write_planned(force: bool) -> int:
    """Write the planned records: the same content is left as it is; other content where a
    record exists is refused, nothing written, unless ``force``."""
    texts = [(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
             for path, data in PLANNED]
    unchanged = [path for path, text in texts
                 if path.is_file() and path.read_text(encoding="utf-8") == text]
    changed = [(path, text) for path, text in texts if path not in unchanged]
    replaced = [path for path, _ in changed if path.exists()]
    if replaced and not force:
        more = f" (and {len(replaced) - 1} more)" if len(replaced) > 1 else ""
        raise UserError(f"{replaced[0]}{more} exists with other content: an import never "
                        "overwrites a record without --force (nothing written)")
    for path, text in changed:
        write_text(path, text)
        print(f"{'replaced' if path in replaced else 'wrote'} {path}")
    print(f"{len(unchanged)} record(s) unchanged, {len(changed)} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())

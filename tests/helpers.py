"""What several test modules share: paths, the smoke configuration, a CPU stand-in for the
Accelerator, and small helpers to set up and inspect projects. Fixtures live in conftest.py;
no test module imports another."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from multilab import tracking
from multilab.config import Config
from multilab.data import bible
from multilab.lab.metric_table import METRICS, TRAIN_LOSS
from multilab.resolve import load_config, parse_overrides, resolve_run

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params.yaml"
BIN = Path(sys.executable).parent  # the venv's dvc, multilab, mlflow
DVC = str(BIN / "dvc")


class CpuAccelerator:
    """What the trainer's ``_accumulate`` uses of an Accelerator, on one CPU process; counts
    the backward passes (each is a collective under DDP)."""

    device = "cpu"

    def __init__(self) -> None:
        self.backward_calls = 0

    def autocast(self):
        return contextlib.nullcontext()

    def no_sync(self, model):
        return contextlib.nullcontext()

    def backward(self, loss) -> None:
        self.backward_calls += 1
        loss.backward()


def smoke_config(tmp: Path, **overrides) -> Config:
    """The smoke profile with every path inside ``tmp``."""
    paths = {
        "data": str(tmp / "data"),
        "artifacts": str(tmp / "artifacts"),
        "reports": str(tmp / "reports"),
        "metrics": str(tmp / "metrics"),
        "mlruns": str(tmp / "mlruns"),
        "results": str(tmp / "results"),
    }
    merged = {"profile": "smoke", "paths": paths}
    for key, value in overrides.items():
        merged[key] = value
    return load_config(PARAMS, merged)


# --------------------------------------------------------------------------- short runs
# A short, checkpointed smoke run: 128 sentences (256 examples, 4 steps an epoch × 2 epochs =
# 8 steps), a checkpoint every step and no curve points, so a `multilab` subprocess costs
# little more than its imports.

SENTENCES, STEPS = 128, 8
LAUNCH_TIMEOUT = 300  # seconds for any one subprocess: a hang fails the test, never blocks CI


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Evaluate and train in-process on one thread, as the subprocesses do: on 2 shared
    cores a second thread mostly spins (several times the CPU for the same result), and
    runs compared bit for bit must use the same number of threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def link_project(built_project: Path, root: Path) -> Path:
    """A project root sharing the session's corpora and vocabulary (as ``project`` does)."""
    (root / "artifacts").mkdir(parents=True)
    for name in ("corpora", "vocab"):
        (root / "artifacts" / name).symlink_to(built_project / "artifacts" / name)
    (root / "data").symlink_to(built_project / "data")
    return root


def tracked_smoke_model(built_project: Path, root: Path) -> Config:
    """A project in ``root`` with a finished smoke model (original, seed 0, 128 sentences)
    tracked in its MLflow store: what commands that read a trained model need."""
    from multilab.training.train import train_model

    cfg = smoke_config(link_project(built_project, root),
                       train={"max_train_sentences": 128, "eval_points": []})
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    with one_torch_thread():
        train_model(resolve_run(cfg, "original", 0), experiment_id=experiment, progress=False)
    return cfg


def tracked_model_cli(cfg: Config, *command: str, extra: Sequence[str] = ()) -> int:
    """``multilab <command>`` on a :func:`tracked_smoke_model` project (its paths and
    settings, plus the ``--set`` values ``extra``); the exit status."""
    from multilab.cli import main

    settings = ["profile=smoke",
                *(f"paths.{n}={getattr(cfg.paths, n)}" for n in
                  ("data", "artifacts", "reports", "metrics", "mlruns", "results")),
                "train.max_train_sentences=128", "train.eval_points=[]", *extra]
    return main(cli_args(settings, *command))


def cli_settings(root: Path, **extra: object) -> list[str]:
    """``--set`` values: smoke profile, every path in ``root``, a short checkpointed run."""
    values: dict[str, object] = {
        "profile": "smoke",
        **{f"paths.{name}": root / name
           for name in ("data", "artifacts", "reports", "metrics", "mlruns", "results")},
        "seeds": "[0, 1]",
        "study": "[original]",
        "train.max_train_sentences": SENTENCES,
        "train.checkpoint_every": 1,
        "train.eval_points": "[]",
        **extra,
    }
    return [f"{key}={value}" for key, value in values.items()]


def config_of(settings: list[str]) -> Config:
    return load_config(PARAMS, parse_overrides(settings))


def cli_args(settings: list[str], *command: str) -> list[str]:
    return ["--params", str(PARAMS), *(f"--set={s}" for s in settings), *command]


#: What the tests' processes run with: one thread (bit-identical runs, modest CPU), no bars.
SUBPROCESS_VARIABLES = {"OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}


def subprocess_env(tracking_uri: str | None = None, preloaded: dict[str, str] | None = None
                   ) -> dict[str, str]:
    """Subprocess environment: :data:`SUBPROCESS_VARIABLES`, the chosen store (else none);
    ``preloaded``: the ``preloaded_multilab`` fixture's values (tests/zygote.py)."""
    env = {k: v for k, v in os.environ.items() if k != tracking.URI_VARIABLE}
    env |= {**SUBPROCESS_VARIABLES, **(preloaded or {})}
    if tracking_uri:
        env[tracking.URI_VARIABLE] = tracking_uri
    return env


def multilab_program(env: dict[str, str]) -> str:
    """The ``multilab`` to start with ``env``: the fork server's stand-in when ``env`` has
    ``preloaded_multilab``'s values (tests/zygote.py), else the real one."""
    from tests.zygote import ADDRESS_VARIABLE, OFF, stand_in_path

    if env.get(ADDRESS_VARIABLE, OFF) != OFF:
        return str(stand_in_path(env[ADDRESS_VARIABLE]))
    return str(BIN / "multilab")


def launch(settings: list[str], log: Path, env: dict[str, str], *command: str
            ) -> subprocess.Popen:
    """``multilab -v <command>`` in the background, its output in ``log``."""
    with log.open("a") as handle:
        return subprocess.Popen(
            [multilab_program(env), "-v", *cli_args(settings, *command)],
            stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=log.parent,
        )


def finish(process: subprocess.Popen, log: Path) -> None:
    try:
        code = process.wait(timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"{process.args[1:4]} hung for {LAUNCH_TIMEOUT}s:\n{log.read_text()[-3000:]}")
    if code != 0:
        pytest.fail(f"exit {code}:\n{log.read_text()[-4000:]}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def saved_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(model_dir / "model.safetensors"))


def evaluated_metrics(record: dict) -> dict[str, float]:
    return {k: v for k, v in record["metrics"].items() if k != "eval_seconds"}


def run_statuses(cfg: Config) -> list[str]:
    """Status of every run in the project's store (none if it was never created)."""
    if not (cfg.paths.mlruns / "mlflow.db").exists():
        return []
    return tracking.search_runs(cfg.paths, cfg.experiment)["status"].tolist()


def dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def fake_run(cfg: Config, experiment: str, mod: str, seed: int, value: float, *,
             fingerprint: str | None = None, evaluated: bool = True, fail: bool = False) -> None:
    """A run as train + evaluate leave it, with every table metric = ``value``; evaluated,
    its ``evaluate`` record is committed under ``results/`` and carried by the run, as
    ``multilab evaluate`` leaves both."""
    tags = {"modification": mod, "seed": seed, "profile": cfg.profile,
            "fingerprint": fingerprint or f"{mod}-{seed}"}
    if evaluated:
        tags["evaluated"] = "true"
    try:
        with tracking.run(experiment, tags=tags) as run_id:
            tracking.log_metrics(dict.fromkeys(METRICS, value))
            tracking.log_metrics({TRAIN_LOSS: 8.0 - value}, step=1)
            if fail:
                raise RuntimeError("crash")
    except RuntimeError:
        return
    if evaluated:
        fake_record(cfg, run_id, tags, dict.fromkeys(METRICS, value))


def fake_record(cfg: Config, run_id: str, tags: dict, metrics: dict[str, float]) -> Path:
    """The ``evaluate`` record of a fake run's model, committed and carried by the run."""
    from multilab.lab.modifications import paper_id
    from multilab.studies.records import write_record
    from multilab.studies.run_records import RECORDS_FOLDER, record_config

    model = {"modification": tags["modification"], "paper_id": paper_id(tags["modification"]),
             "seed": tags["seed"], "profile": tags["profile"],
             "fingerprint": tags["fingerprint"], "run_id": run_id, "steps": 1,
             "weights_sha256": None}
    path = write_record(cfg.paths.results, cfg.experiment, "evaluate",
                        model | {"metrics": metrics}, model=model,
                        config=record_config(cfg, tags["modification"], tags["seed"]))
    tracking.log_artifact_to_run(cfg.paths, run_id, path, RECORDS_FOLDER)
    return path


def files_of_fresh_processes(script: str, args: list[str], out_of: list[Path]
                             ) -> list[dict[Path, bytes]]:
    """Run ``python -c script *args out`` in two fresh processes with different hash seeds
    (``out`` = ``out_of[i]``, appended to the arguments) and return every file each wrote,
    by relative path: what must be byte-identical for a build to be reproducible."""
    written = []
    for hash_seed, out in zip(("1", "2"), out_of, strict=True):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        subprocess.run([sys.executable, "-c", script, *args, str(out)], env=env, check=True)
        files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
        written.append({f: (out / f).read_bytes() for f in files})
    return written


# --------------------------------------------------------------------------- user corpora

#: The fixture's corpora: name → (ISO code, Bible edition whose text stands in for Wikipedia)
TEXT_CORPORA = {"wiki-en": ("en", "3"), "wiki-de": ("de", "s"), "wiki-hi": ("hi", "i")}


def write_text_corpora(data: Path, dev_lines: int = 150) -> dict[str, dict[str, object]]:
    """Tiny user corpora shaped like WikiExtractor output, written under ``data/corpora``:
    the text is Bible verses (offline and real), three verses a "paragraph" line, each
    language a different book so that no train line is parallel; English is a folder of
    two files, the others one file each. Dev: the first ``dev_lines`` verses of Genesis,
    line-aligned across languages. Returns the ``corpora:`` parameter for them."""
    books = {"wiki-en": 41, "wiki-de": 42, "wiki-hi": 43}  # Mark, Luke, John
    corpora: dict[str, dict[str, object]] = {}
    for name, (iso, code) in TEXT_CORPORA.items():
        verses = [text for _, text in bible.read_verses(code, (books[name], books[name]))]
        paragraphs = [" ".join(verses[i:i + 3]) for i in range(0, len(verses), 3)]
        docs = []
        for number, start in enumerate(range(0, len(paragraphs), 20)):
            docs.append(f'<doc id="{number}" url="?curid={number}" title="Doc {number}">\n'
                        f"Doc {number}\n\n" + "\n".join(paragraphs[start:start + 20])
                        + "\n</doc>\n")
        root = data / "corpora" / name
        if name == "wiki-en":
            half = len(docs) // 2
            for file, part in (("AA/wiki_00", docs[:half]), ("AA/wiki_01", docs[half:])):
                (root / file).parent.mkdir(parents=True, exist_ok=True)
                (root / file).write_text("".join(part), encoding="utf-8")
            train = f"corpora/{name}"
        else:
            root.mkdir(parents=True, exist_ok=True)
            (root / "wiki.txt").write_text("".join(docs), encoding="utf-8")
            train = f"corpora/{name}/wiki.txt"
        dev = [text for _, text in bible.read_verses(code, (1, 1))[:dev_lines]]
        (data / "corpora" / f"dev.{iso}.txt").write_text("\n".join(dev) + "\n",
                                                          encoding="utf-8")
        corpora[name] = {"iso": iso, "train": train, "dev": f"corpora/dev.{iso}.txt"}
    return corpora


# --------------------------------------------------------------------------- XNLI fixture
# A few dozen rows in XNLI's official layout (data/xnli.py's docstring): the dev/test header
# of the release, every column present, pairIDs shared by the languages, and XNLI-MT's train
# files with their own header and label spelling (``contradictory``).

XNLI_EVAL_HEADER = (
    "language", "gold_label", "sentence1_binary_parse", "sentence2_binary_parse",
    "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "promptID", "pairID",
    "genre", "label1", "label2", "label3", "label4", "label5", "sentence1_tokenized",
    "sentence2_tokenized", "match",
)
XNLI_TRAIN_HEADER = ("premise", "hypo", "label")
XNLI_LABELS = ("entailment", "neutral", "contradiction")
#: the same twelve words in each fixture language (English ones the smoke vocabulary knows)
XNLI_WORDS = {
    "en": ("the", "lord", "said", "unto", "moses", "people", "went", "into", "land", "king",
           "house", "city"),
    "de": ("der", "herr", "sprach", "zu", "mose", "volk", "ging", "in", "land", "könig",
           "haus", "stadt"),
    "hi": ("वह", "यहोवा", "कहा", "से", "मूसा", "लोग", "गए", "में", "देश", "राजा", "घर",
           "नगर"),
}
XNLI_NEGATION = {"en": "not", "de": "nicht", "hi": "नहीं"}


def _xnli_pair(language: str, seed: int, label: int) -> tuple[str, str]:
    """A premise and a hypothesis whose relation follows the label (a subset of the premise,
    other words, or the subset negated), the same words in every language for one seed."""
    rng = random.Random(seed)
    words = XNLI_WORDS.get(language, XNLI_WORDS["en"])
    premise = [rng.randrange(len(words)) for _ in range(rng.randint(5, 9))]
    kept = premise[: rng.randint(2, 4)]
    hypothesis = {0: kept, 1: [rng.randrange(len(words)) for _ in range(3)], 2: kept}[label]
    text = [words[i] for i in hypothesis]
    if label == 2:
        text.insert(1, XNLI_NEGATION.get(language, "not"))
    return " ".join(words[i] for i in premise) + " .", " ".join(text) + " ."


def write_xnli_fixture(root: Path, languages: Sequence[str] = ("en", "de", "hi"),
                       pairs: int = 12, train_pairs: int = 24,
                       train_languages: Sequence[str] | None = None) -> Path:
    """A tiny XNLI release under ``root`` (``XNLI-1.0/xnli.{dev,test}.tsv`` with ``pairs``
    pairIDs in each of ``languages``, ``XNLI-MT-1.0/multinli/multinli.train.<iso>.tsv`` with
    ``train_pairs`` rows for each of ``train_languages``, default ``languages``); labels
    cycle entailment, neutral, contradiction. Returns ``root`` (``downstream.task_path``)."""
    xnli_dir = root / "XNLI-1.0"
    train_dir = root / "XNLI-MT-1.0" / "multinli"
    xnli_dir.mkdir(parents=True, exist_ok=True)
    train_dir.mkdir(parents=True, exist_ok=True)
    for split, first_id in (("dev", 1), ("test", 1001)):
        lines = ["\t".join(XNLI_EVAL_HEADER)]
        for language in languages:
            for i in range(pairs):
                pair_id, label = first_id + i, XNLI_LABELS[i % 3]
                premise, hypothesis = _xnli_pair(language, pair_id, i % 3)
                row = dict.fromkeys(XNLI_EVAL_HEADER, "") | {
                    "language": language, "gold_label": label, "sentence1": premise,
                    "sentence2": hypothesis, "promptID": str(pair_id // 3 + 1),
                    "pairID": str(pair_id), "genre": "fiction",
                    **{f"label{k}": label for k in range(1, 6)},
                    "sentence1_tokenized": premise, "sentence2_tokenized": hypothesis,
                    "match": "True"}
                lines.append("\t".join(row[column] for column in XNLI_EVAL_HEADER))
        (xnli_dir / f"xnli.{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for language in languages if train_languages is None else train_languages:
        lines = ["\t".join(XNLI_TRAIN_HEADER)]
        for i in range(train_pairs):
            premise, hypothesis = _xnli_pair(language, 5000 + i, i % 3)
            lines.append("\t".join([premise, hypothesis,
                                    ("entailment", "neutral", "contradictory")[i % 3]]))
        (train_dir / f"multinli.train.{language}.tsv").write_text("\n".join(lines) + "\n",
                                                                  encoding="utf-8")
    return root


def clone_working_tree(project: Path) -> Path:
    """A git clone of this repository at ``project`` whose dvc.yaml, params.yaml and src/ are
    the working tree's (what is under test, committed or not)."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(project)], check=True, cwd=ROOT)
    for tracked in ("dvc.yaml", "params.yaml", "src"):
        source, target = ROOT / tracked, project / tracked
        if source.is_dir():
            shutil.rmtree(target)
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    return project

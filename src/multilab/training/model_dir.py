"""What a trained model directory holds, for everyone who reads one without training.

A model directory is a ``save_pretrained`` folder (``AutoModelForMaskedLM.from_pretrained``
loads it) plus ``multilab.json``, the *done file*: its fingerprint says which configuration
and data it finished for, and its ``weights_sha256`` which weights. The whole folder is
written beside the model directory and renamed into place, so the done file always describes
the weights next to it.

Checkpoints live outside the model directory, in ``<artifacts>/checkpoints/<the model
directory's path under artifacts>/<fingerprint>/checkpoint-N`` (and ``.tmp-checkpoint-N``
while one is written): the model directory is a DVC out, and ``dvc exp run`` empties an out
it has no hash for, ``persist: true`` or not. That folder also holds ``train.lock``, taken
by the one process allowed to train the model.

Evaluation, figures, the variant runner and the report read model directories through this
module, not through the training loop.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from multilab.config import Paths, RunConfig
from multilab.data.multilingual_vocab import UNION
from multilab.errors import UserError
from multilab.files import read_utf8, write_json
from multilab.spaces.fasttext_spaces import KNN_TABLE

log = logging.getLogger(__name__)

DONE_FILE = "multilab.json"
TRAIN_LOG = "train_log.csv"
CHECKPOINT_PREFIX = "checkpoint-"
TMP_PREFIX = ".tmp-"  # a checkpoint being written; never read
CHECKPOINTS = "checkpoints"  # under paths.artifacts, never a DVC out
WEIGHTS = "model.safetensors"
WEIGHTS_HASH = "weights_sha256"  # in the done file


def data_fingerprint(run: RunConfig) -> str:
    """Hash of the training corpus and vocabulary (+ knn table): part of a model's identity."""
    digest = hashlib.sha256()
    vocab = run.study.paths.vocab
    made_by = {  # input file → the DVC stage that writes it
        run.study.paths.corpora / "train.txt": "corpus",
        vocab / "english" / "vocab.txt": "vocab",
    }
    if run.study.verses:  # every language's block, and where each one starts
        made_by = {run.study.paths.corpora / "train.txt": "corpus",
                   vocab / "multilingual" / "vocab.txt": "vocab", vocab / "blocks.json": "vocab"}
        blocks = vocab / "blocks.json"
        if run.study.vocab.mode == UNION and blocks.exists():  # which union ids each
            # language's own tokenizer can make: not said by the union's vocab.txt
            names = {b["tokenizer"] for b in json.loads(read_utf8(
                blocks, "rebuild it with `dvc repro vocab`"))["blocks"]}
            made_by |= {vocab / name / "vocab.txt": "vocab" for name in sorted(names)}
    if run.recipe.needs_knn:
        made_by[run.study.paths.spaces / KNN_TABLE] = "spaces"
    for path, stage in made_by.items():
        if not path.exists():
            raise UserError(f"{path} not found; run `dvc repro {stage}` first")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def model_fingerprint(run: RunConfig) -> str:
    """The identity of the model ``run`` trains: its configuration and its data."""
    return run.fingerprint(data_fingerprint(run))


#: what every reader of a done file uses
DONE_KEYS = ("fingerprint", "modification", "seed")


def read_done(model_dir: Path, *, damaged_ok: bool = False) -> dict[str, Any] | None:
    """The done file of a finished model, or None while (or if) it is not finished.

    A done file is written atomically, so an empty, truncated or incomplete one was damaged
    afterwards (disk, copy, hand): one clear error, or with ``damaged_ok`` (training) None
    after a warning, so that ``train`` retrains the model instead of staying blocked: nothing
    then says which configuration the weights beside it belong to.
    """
    path = Path(model_dir) / DONE_FILE
    if not path.exists():
        return None
    try:
        done = json.loads(path.read_bytes().decode("utf-8"))
        problem = "" if isinstance(done, dict) else f"holds a {type(done).__name__}"
        missing = [key for key in DONE_KEYS if not problem and key not in done]
        problem = problem or (f"lacks {', '.join(missing)}" if missing else "")
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        problem = f"is not valid JSON ({' '.join(str(err).split())})"
    if not problem:
        return done
    if damaged_ok:
        log.warning("%s %s: treating %s as unfinished", path, problem, model_dir)
        return None
    raise UserError(f"{path} {problem}: the model is damaged; run `multilab train` for it "
                    "again (it retrains a model whose done file is damaged), or restore the file")


def write_done(model_dir: Path, record: dict[str, Any]) -> None:
    """Mark a model finished: the last file its training writes."""
    write_json(Path(model_dir) / DONE_FILE, record)


def looks_like_model_dir(path: Path) -> bool:
    """A folder with a done file or at least a ``save_pretrained`` config."""
    return path.is_dir() and any((path / name).exists() for name in (DONE_FILE, "config.json"))


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks (BERT-base weights are 0.4 GB)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def check_weights(model_dir: Path, done: dict[str, Any]) -> None:
    """Refuse weights that are not the ones the done file recorded (damaged after training).

    safetensors has no checksum: a flipped bit loads fine and evaluates to NaN or to quietly
    wrong numbers. Models finished before the hash was recorded are not checked.
    """
    expected = done.get(WEIGHTS_HASH)
    weights = Path(model_dir) / WEIGHTS
    if expected and weights.exists() and file_sha256(weights) != expected:
        raise UserError(
            f"{weights} is damaged: it does not match the {WEIGHTS_HASH} of {DONE_FILE}; "
            f"delete {model_dir} to train it again"
        )


def checkpoint_home(paths: Paths, model_dir: Path) -> Path:
    """The folder of ``model_dir``'s checkpoints (all configurations) and its training lock.

    It mirrors the model directory's path under ``paths.artifacts`` (a model directory
    elsewhere gets a folder named by its path's hash): outside every DVC out, git-ignored
    with the rest of the artefacts.
    """
    artifacts, target = Path(paths.artifacts).resolve(), Path(model_dir).resolve()
    try:
        relative = target.relative_to(artifacts)
    except ValueError:
        relative = Path("elsewhere") / hashlib.sha256(str(target).encode()).hexdigest()[:16]
    return artifacts / CHECKPOINTS / relative


def checkpoint_area(paths: Paths, model_dir: Path, fingerprint: str) -> Path:
    """The checkpoints of one configuration of ``model_dir``: switching configurations back
    and forth never deletes another configuration's training."""
    return checkpoint_home(paths, model_dir) / fingerprint


def run_checkpoint_area(run: RunConfig, model_dir: Path | None = None) -> Path:
    """:func:`checkpoint_area` of the model ``run`` trains (into ``model_dir``)."""
    return checkpoint_area(run.study.paths, model_dir or run.model_dir, model_fingerprint(run))


def checkpoint_dir(area: Path, step: int) -> Path:
    return area / f"{CHECKPOINT_PREFIX}{step}"


def partial_checkpoint_dir(area: Path, step: int) -> Path:
    """Where checkpoint ``step`` is written before it is renamed into place."""
    return area / f"{TMP_PREFIX}{CHECKPOINT_PREFIX}{step}"


def checkpoint_steps(area: Path, partial: bool = False) -> dict[int, Path]:
    """Step → folder of the complete checkpoints (or of the partial ones, being written)."""
    prefix = TMP_PREFIX + CHECKPOINT_PREFIX if partial else CHECKPOINT_PREFIX
    found = {}
    for path in area.glob(f"{prefix}*"):
        number = path.name[len(prefix) :]
        if path.is_dir() and number.isdigit():
            found[int(number)] = path
    return found


def latest_checkpoint(area: Path) -> Path | None:
    """The highest complete ``checkpoint-N``; ``.tmp-…`` folders (writes cut short) never count."""
    complete = checkpoint_steps(area)
    return complete[max(complete)] if complete else None


def remove_checkpoints(area: Path, keep: Path | None = None) -> None:
    """Delete checkpoints and leftover temp folders of killed writes (all but ``keep``)."""
    for pattern in (f"{CHECKPOINT_PREFIX}*", f"{TMP_PREFIX}{CHECKPOINT_PREFIX}*"):
        for old in area.glob(pattern):
            if old != keep:
                shutil.rmtree(old, ignore_errors=True)


def staging_dir(model_dir: Path) -> Path:
    """Where a finished model is written before it replaces ``model_dir``: a sibling (one file
    system, so the rename is atomic) outside the DVC out."""
    return model_dir.with_name(f".{model_dir.name}.staging")

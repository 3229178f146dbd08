"""The multi-process path on CPU: ``accelerate launch`` with 2 processes (DDP over gloo).

One launch is shared by the tests of this module (it costs tens of seconds on 2 cores):

* it runs the real CLI (``multilab ... train``) through this file's ``__main__`` block, which
  only (a) switches dropout off, so that a 2-process run and a 1-process run with the same
  global batch must reach the same weights, and (b) records every checkpoint write (which
  rank, which step, whether it loads back);
* ``accelerate launch --cpu --num_processes 2`` starts ONE process unless MPI is set up, and
  ``--multi_gpu`` on a machine without GPUs starts 2 processes that each think they are
  alone; the launcher that really gives 2 CPU ranks is ``--multi_gpu`` with
  ``ACCELERATE_USE_CPU=true`` (Accelerate then uses gloo).

A fast unit test checks, without processes, that every rank runs the same number of
forward/backward passes per step (each is a DDP collective; a rank that runs fewer makes
the others wait forever).

The equivalence tests (same LR schedule, same logged loss, same weights as one process with
the same global batch) guard three defects that multi-process training once had: the
scheduler stepped once per process, the logged loss was one rank's share, and ranks could
run different numbers of DDP passes (a hang).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from multilab.resolve import resolve_run

PROCESSES = 2
CHECKPOINT_LOG = "MULTILAB_TEST_CHECKPOINT_LOG"
LAUNCH_TIMEOUT = 300  # seconds; a hang in a collective must fail the test, not block CI
# 128 sentences → 256 examples → 4 global batches of 64 per epoch × 2 smoke epochs = 8 steps
# (tests.helpers has the same short run; this file also runs as the launched script, where the
# tests package is not importable, so it keeps its own two numbers).
SENTENCES, STEPS = 128, 8
slow = pytest.mark.slow


def _settings(root: Path) -> list[str]:
    paths = {name: root / name
             for name in ("data", "artifacts", "reports", "metrics", "mlruns", "results")}
    return [
        "profile=smoke",
        *(f"paths.{name}={path}" for name, path in paths.items()),
        f"train.max_train_sentences={SENTENCES}",
    ]


def _no_dropout_config():
    """``multilab.training.model.bert_config`` with dropout off (run-to-run comparable weights)."""
    import multilab.training.model as model_module

    original = model_module.bert_config

    def bert_config(model, vocab_size, languages=2):
        config = original(model, vocab_size, languages)
        config.hidden_dropout_prob = 0.0
        config.attention_probs_dropout_prob = 0.0
        return config

    return bert_config


def _read_log(path: Path) -> list[dict[str, float]]:
    with path.open() as handle:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle)]


@pytest.fixture(scope="module")
def launched(built_project: Path, tmp_path_factory: pytest.TempPathFactory):
    """A 2-process smoke training of ``original`` seed 0 through ``accelerate launch``."""
    from multilab import tracking
    from multilab.resolve import load_config, parse_overrides
    from tests.helpers import BIN, PARAMS, free_port, link_project

    root = link_project(built_project, tmp_path_factory.mktemp("distributed"))
    settings = _settings(root)
    cfg = load_config(PARAMS, parse_overrides(settings))

    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    # Create the local MLflow store first, as the pipeline's `spaces` stage does before any
    # `train` stage: every rank runs `tracking.connect`, and two ranks creating a new SQLite
    # store at once race in MLflow's schema migration (reported, see cli/train.py's cmd_train).
    tracking.connect(cfg.paths, cfg.experiment)
    env |= {
        "ACCELERATE_USE_CPU": "true",
        "OMP_NUM_THREADS": "1",
        "HF_HOME": str(root / "hf"),  # no user accelerate config can leak into the launch
        CHECKPOINT_LOG: str(root / "checkpoints.log"),
    }
    command = [
        str(BIN / "accelerate"), "launch",
        "--multi_gpu", "--num_processes", str(PROCESSES), "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()),  # other workers' tests may run at once
        __file__, "--params", str(PARAMS), *(f"--set={s}" for s in settings),
        "train", "--modification", "original", "--seed", "0",
    ]
    started = time.perf_counter()
    output = root / "launch.log"
    with output.open("w") as log:
        try:
            result = subprocess.run(
                command, env=env, stdout=log, stderr=subprocess.STDOUT,
                timeout=LAUNCH_TIMEOUT, cwd=root, check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"2-process training hung for {LAUNCH_TIMEOUT}s:\n"
                        + output.read_text()[-3000:])
    if result.returncode != 0:
        pytest.fail(f"accelerate launch exited {result.returncode}:\n"
                    + output.read_text()[-4000:])
    return {
        "cfg": cfg,
        "model_dir": cfg.paths.model_dir("original", 0),
        "checkpoint_log": root / "checkpoints.log",
        "seconds": time.perf_counter() - started,
    }


@pytest.fixture(scope="module")
def single_process(launched, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same configuration trained by 1 process (in this one), dropout off as well."""
    import torch

    import multilab.training.model as model_module
    from multilab.training.train import train_model

    model_dir = tmp_path_factory.mktemp("single") / "original" / "seed0"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 threads on 2 shared cores are several times slower
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(model_module, "bert_config", _no_dropout_config())
            train_model(resolve_run(launched["cfg"], "original", 0), model_dir=model_dir,
                        progress=False)
    finally:
        torch.set_num_threads(threads)
    return model_dir


@slow
def test_two_processes_write_one_loadable_model(launched) -> None:
    from transformers import AutoModelForMaskedLM

    from multilab.training.model_dir import read_done

    model_dir = launched["model_dir"]
    done = read_done(model_dir)
    assert done["world_size"] == PROCESSES
    assert done["steps"] == STEPS and done["train_examples"] == 2 * SENTENCES
    model = AutoModelForMaskedLM.from_pretrained(str(model_dir))
    assert model.config.hidden_size == 64 and model.config.hidden_dropout_prob == 0.0
    assert len(_read_log(model_dir / "train_log.csv")) == STEPS  # log_every 1, one writer
    leftovers = [p.name for p in model_dir.iterdir() if p.name.startswith((".tmp", "checkpoint"))]
    assert leftovers == []


@slow
def test_one_finished_mlflow_run(launched) -> None:
    from multilab import tracking
    from multilab.lab.metric_table import curve_key

    cfg = launched["cfg"]
    runs = tracking.search_runs(cfg.paths, cfg.experiment)
    assert len(runs) == 1
    row = runs.iloc[0]
    assert row["status"] == tracking.FINISHED
    assert row["tags.seed"] == "0" and row["tags.paper_id"] == "0"
    assert row["params.world_size"] == str(PROCESSES)  # a constant: a param, not a metric
    history = tracking.metric_history(cfg.paths, row["run_id"], "train_loss")
    assert [step for step, _ in history] == list(range(1, STEPS + 1))  # each step once
    curve = tracking.metric_history(cfg.paths, row["run_id"], curve_key("ppl_dev"))
    # eval_points [0.5]; the final point belongs to the evaluate stage (full dev set), so
    # training never logs a second value at the last step
    assert [step for step, _ in curve] == [STEPS // 2]
    assert json.loads((launched["model_dir"] / "multilab.json").read_text())["run_id"] == (
        row["run_id"]
    )


@slow
def test_checkpoints_are_written_once_by_the_main_process(launched) -> None:
    records = [line.split() for line in launched["checkpoint_log"].read_text().splitlines()]
    # checkpoint_every 2 (smoke) and the curve point 4; none at the last step (the model is)
    assert records == [["0", str(s), str(s)] for s in (2, 4, 6)]


@slow
def test_learning_rate_schedule_does_not_depend_on_the_process_count(
    launched, single_process: Path
) -> None:
    two = _read_log(launched["model_dir"] / "train_log.csv")
    one = _read_log(single_process / "train_log.csv")
    assert [r["lr"] for r in two] == pytest.approx([r["lr"] for r in one], rel=1e-6)


@slow
def test_logged_loss_is_the_loss_of_the_global_batch(launched, single_process: Path) -> None:
    two = _read_log(launched["model_dir"] / "train_log.csv")
    one = _read_log(single_process / "train_log.csv")
    # step 1: identical initial weights and masking, no dropout → the same loss
    assert two[0]["loss"] == pytest.approx(one[0]["loss"], abs=1e-4)


@slow
def test_same_global_batch_gives_the_same_weights_as_one_process(
    launched, single_process: Path
) -> None:
    from transformers import AutoModelForMaskedLM

    two = AutoModelForMaskedLM.from_pretrained(str(launched["model_dir"])).state_dict()
    one = AutoModelForMaskedLM.from_pretrained(str(single_process)).state_dict()
    assert two.keys() == one.keys()
    worst = max(float((two[k] - one[k]).abs().max()) for k in one)
    assert worst < 1e-5, f"largest weight difference {worst:.2e}"


class _CountingObjective:
    def __init__(self) -> None:
        import torch

        self.weight = torch.ones((), requires_grad=True)
        self.forward_calls = 0

    def __call__(self, selected, labels, **inputs):
        self.forward_calls += 1
        return self.weight * labels.float().mean()


def _masked(selected_rows: list[list[bool]]):
    import torch

    from multilab.data.batches import MaskedBatch

    selected = torch.tensor(selected_rows)
    ids = torch.arange(selected.numel()).reshape(selected.shape) + 10
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "position_ids": torch.arange(ids.shape[1]).expand_as(ids),
        "token_type_ids": torch.zeros_like(ids),
    }
    return MaskedBatch(inputs=inputs, selected=selected, labels=ids[selected],
                       token_mask=torch.ones_like(ids))


@pytest.mark.parametrize(
    ("rows", "accum", "length_pieces"),
    [
        # the last global batch of an epoch holds 3 rows: rank 0 gets 2, rank 1 gets 1
        ([[True, False], [True, False], [False, True]], 2, 1),
        # 4 full rows, but rank 1's second piece has no masked position
        ([[True, False], [True, False], [False, True], [False, False]], 2, 1),
        # fewer rows than processes: rank 1 has nothing at all
        ([[True, True]], 1, 1),
        # length pieces: rank 1's single row cannot fill 3 pieces
        ([[True, False], [True, False], [False, True]], 1, 3),
        ([[True, False], [True, False], [False, True], [True, True]], 2, 2),
    ],
)
def test_every_rank_runs_the_same_number_of_passes(rows, accum, length_pieces) -> None:
    import torch

    from multilab.data.batches import gradient_pieces
    from multilab.training.train import _accumulate
    from tests.helpers import CpuAccelerator

    masked = _masked(rows)
    counts = []
    for rank in range(PROCESSES):
        objective, accelerator = _CountingObjective(), CpuAccelerator()
        lengths = masked.inputs["attention_mask"].sum(1)
        _, pieces = gradient_pieces(torch.arange(len(lengths)), lengths, length_pieces, accum,
                                    PROCESSES, rank)
        _accumulate(objective, accelerator, masked, pieces, PROCESSES, len(masked.labels))
        counts.append((objective.forward_calls, accelerator.backward_calls))
    assert len(set(counts)) == 1, f"(forward, backward) passes per rank: {counts}"
    assert counts[0] == (accum * length_pieces,) * 2


def _child() -> int:
    """Run inside each launched process: the real CLI, dropout off, checkpoint writes logged."""
    import torch

    import multilab.training.model as model_module
    import multilab.training.train as train_module
    from multilab.cli import main
    from multilab.training.model_dir import checkpoint_dir

    model_module.bert_config = _no_dropout_config()
    save = train_module.save_checkpoint
    log_path = Path(os.environ[CHECKPOINT_LOG])

    def recorded_save(run, model_dir, model, optimizer, scheduler, state, *rest, **named):
        save(run, model_dir, model, optimizer, scheduler, state, *rest, **named)
        step = state.step
        final = checkpoint_dir(Path(model_dir), step) / "state.pt"
        saved_step = torch.load(final, weights_only=False)["state"]["step"]
        with log_path.open("a") as log:
            log.write(f"{os.environ.get('RANK', '?')} {step} {saved_step}\n")

    train_module.save_checkpoint = recorded_save
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(_child())

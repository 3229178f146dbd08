"""params.yaml + profile + overrides → one validated config; bad values fail in one line."""

from __future__ import annotations

import pytest

from multilab.config import load_config, parse_overrides
from multilab.errors import UserError
from tests.helpers import PARAMS


def test_profiles_override_the_paper_values() -> None:
    paper = load_config(PARAMS, {"profile": "paper"})
    quick = load_config(PARAMS, {"profile": "quick"})
    smoke = load_config(PARAMS, {"profile": "smoke"})
    assert paper.train.epochs == 100 and paper.models["small"].lr == 2e-3
    assert paper.models["base"].batch_size * paper.models["base"].grad_accum == 256
    assert quick.train.epochs < paper.train.epochs
    assert smoke.train.max_train_sentences and smoke.models["small"].batch_size == 64
    assert smoke.models["small"].hidden_size == 64  # only what the profile says changes
    # every profile keeps the paper's batch composition (random batches); on the CPU they
    # run in length-sorted pieces, on the GPU (paper) in one piece
    assert paper.train.bucket_chunk == quick.train.bucket_chunk == 1
    assert paper.train.length_pieces == 1 and quick.train.length_pieces > 1


@pytest.mark.parametrize("key", ["bucket_chunk", "length_pieces"])
@pytest.mark.parametrize("value", [0, -2, 1.5, "four"])
def test_batch_shape_keys_must_be_positive_integers(key: str, value) -> None:
    with pytest.raises(UserError, match=rf"train\.{key} = .*must be an integer >= 1"):
        load_config(PARAMS, {"train": {key: value}})


def test_run_config_applies_the_modification() -> None:
    cfg = load_config(PARAMS, {"profile": "paper"})
    run = cfg.run("21", 42)
    assert run.modification == "no-parallel" and run.epochs == 200
    assert cfg.run("overparam", 0).model.hidden_size == 768
    assert run.model_dir.parts[-2:] == ("no-parallel", "seed42")
    assert run.fingerprint("a") != run.fingerprint("b")
    assert cfg.run("lang-pos;no-random", 0).fingerprint() == cfg.run(
        "lang-pos+no-random", 0
    ).fingerprint()


def test_command_line_overrides_win_over_the_profile() -> None:
    cfg = load_config(PARAMS, parse_overrides(["profile=smoke", "train.epochs=7"]))
    assert cfg.train.epochs == 7


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"profile": "huge"}, "unknown profile 'huge'; valid: paper, quick, smoke"),
        ({"seeds": []}, "seeds = []"),
        ({"modification": "bogus"}, "unknown modification 'bogus'"),
        ({"study": ["lang-pos;no-random"]}, "join parts with '+'"),
        ({"train": {"replacement_override": [0.5, 0.1, 0.1]}}, "sums to 0.7, not 1"),
        ({"train": {"epochs": 0}}, "train.epochs = 0"),
        ({"train": {"bogus": 1}}, "unknown key train.bogus"),
        ({"profiles": {"smoke": {"seeds": [1]}}, "profile": "smoke"}, "profile 'smoke' sets seeds"),
    ],
)
def test_bad_values_fail_clearly(overrides: dict, message: str) -> None:
    with pytest.raises(UserError) as err:
        load_config(PARAMS, overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_override_syntax() -> None:
    with pytest.raises(UserError, match="key=value"):
        parse_overrides(["train.epochs"])


def test_fingerprint_ignores_what_does_not_change_the_weights() -> None:
    """Logging and checkpoint cadence don't change weights, so they don't force a retrain."""
    base = load_config(PARAMS, {"profile": "smoke"}).run("original", 0).fingerprint("d")
    cadence = {"profile": "smoke", "train": {"checkpoint_every": 7, "log_every": 3,
                                             "eval_points": [0.25]}}
    assert load_config(PARAMS, cadence).run("original", 0).fingerprint("d") == base
    longer = {"profile": "smoke", "train": {"epochs": 3}}
    assert load_config(PARAMS, longer).run("original", 0).fingerprint("d") != base

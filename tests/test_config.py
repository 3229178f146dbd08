"""params.yaml + profile + overrides → one validated config; bad values fail in one line."""

from __future__ import annotations

import re

import pytest
import yaml

from multilab.errors import UserError
from multilab.resolve import load_config, parse_overrides, resolve_run
from tests.helpers import PARAMS


def test_profiles_override_the_paper_values() -> None:
    paper = load_config(PARAMS, {"profile": "paper"})
    quick = load_config(PARAMS, {"profile": "quick"})
    smoke = load_config(PARAMS, {"profile": "smoke"})
    # the paper's 13,500 updates on our 92 batches an epoch (docs/notes/reproduction-log.md, run F)
    assert paper.train.epochs == 147 and paper.models["small"].lr == 2e-3
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
    run = resolve_run(cfg, "21", 42)
    # no-parallel: twice the profile's epochs (the paper's: 2 x its 100 = 13.5k updates each)
    assert run.modification == "no-parallel" and run.epochs == 2 * cfg.train.epochs == 294
    assert resolve_run(cfg, "overparam", 0).model.hidden_size == 768
    assert run.model_dir.parts[-2:] == ("no-parallel", "seed42")
    assert run.fingerprint("a") != run.fingerprint("b")
    assert resolve_run(cfg, "lang-pos;no-random", 0).fingerprint() == resolve_run(
        cfg, "lang-pos+no-random", 0
    ).fingerprint()


def test_command_line_overrides_win_over_the_profile() -> None:
    cfg = load_config(PARAMS, parse_overrides(["profile=smoke", "train.epochs=7"]))
    assert cfg.train.epochs == 7


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"profile": "huge"},
         "unknown profile 'huge'; valid: paper, real, quick, real-quick, smoke"),
        ({"seeds": []}, "seeds = []"),
        ({"modification": "bogus"}, "unknown modification 'bogus'"),
        ({"train": {"replacement_override": [0.5, 0.1, 0.1]}}, "sums to 0.7, not 1"),
        ({"train": {"epochs": 0}}, "train.epochs = 0"),
        ({"train": {"bogus": 1}}, "unknown key train.bogus"),
        ({"spaces": {"seed_dictionary": "gold"}},
         "spaces.seed_dictionary = 'gold'; valid: none, silver"),
        ({"spaces": {"seed_dictionary": "silver"}}, "'silver' needs real languages"),
        ({"spaces": {"knn_k": 0}}, "spaces.knn_k = 0"),
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
    base = resolve_run(load_config(PARAMS, {"profile": "smoke"}), "original", 0).fingerprint("d")
    cadence = {"profile": "smoke", "train": {"checkpoint_every": 7, "log_every": 3,
                                             "eval_points": [0.25]}}
    assert resolve_run(load_config(PARAMS, cadence), "original", 0).fingerprint("d") == base
    longer = {"profile": "smoke", "train": {"epochs": 3}}
    assert resolve_run(load_config(PARAMS, longer), "original", 0).fingerprint("d") != base


#: each bad value → one line naming the value and what is valid
STRICT = [
    ({"trian": {"epochs": 3}}, "unknown key trian (did you mean 'train'?); valid: profile,"),
    ({"train": {"epochs": "abc"}}, "train.epochs = 'abc': must be a number > 0"),
    ({"train": {"mask_prob": 1.5}}, "train.mask_prob = 1.5: must be a number between 0 and 1"),
    ({"train": {"mask_prob": 0}}, "train.mask_prob = 0: must be a number between 0 and 1"),
    ({"train": {"max_length": 0}}, "train.max_length = 0: must be an integer >= 3 ([CLS]"),
    ({"models": {"small": {"batch_size": 0}}},
     "models.small.batch_size = 0: must be an integer >= 1"),
    ({"train": {"checkpoint_every": 0}}, "train.checkpoint_every = 0: must be an integer >= 1"),
    ({"vocab": {"size": 0}}, "vocab.size = 0: must be an integer > 5 (the special tokens"),
    ({"models": {"base": {"lr": -1e-4}}}, "models.base.lr = -0.0001: must be a number > 0"),
    ({"train": {"warmup_steps": -5}}, "train.warmup_steps = -5: must be an integer >= 0"),
    ({"train": {"max_train_sentences": -3}},
     "train.max_train_sentences = -3: must be null or an integer >= 1"),
    ({"evaluate": {"batch_size": 0}}, "evaluate.batch_size = 0: must be an integer >= 1"),
    ({"models": {"small": {"num_attention_heads": 3}}},
     "models.small.num_attention_heads = 3 does not divide models.small.hidden_size = 64; "
     "valid: 1, 2, 4, 8"),
    ({"train": {"compile": "yes"}}, "train.compile = 'yes': must be true or false"),
    ({"train": {"eval_points": [0.5, 1.0]}}, "each strictly between 0 and 1"),
    ({"corpus": {"train_books": [66, 40]}}, "corpus.train_books = [66, 40]: must be a list of 2"),
    ({"corpus": {"train_scope": "ot"}}, "corpus.train_scope = 'ot'; valid: nt, bible"),
    ({"corpus": {"train_scope": "bible"}}, "corpus.train_scope = 'bible' needs real languages"),
    ({"corpus": {"train_scope": "bible"}, "languages": ["3", "ot"]},
     "needs Bible editions of the Bible's own domain"),
    ({"seeds": [2**70]}, f"seeds: entry {2**70}: must be an integer from 0 to 4294967295"),
    ({"seeds": [0, 0]}, "seed 0 twice"),
    ({"seeds": ["7"]}, "seeds: entry '7': must be an integer"),
    ({"models": {"large": {"lr": 1.0}}}, "unknown key models.large; valid: small, base"),
    ({"models": {"small": {"heads": 2}}}, "unknown key models.small.heads"),
    ({"profiles": {"smoke": {"trian": {"epochs": 1}}}, "profile": "smoke"},
     "unknown key profiles.smoke.trian (did you mean 'train'?)"),
    ({"train": 5}, "train = 5: must be a mapping with keys among epochs,"),
    ({"train": {"max_length": 200}},
     "is too small for 'lang-pos' with train.max_length = 200: language-specific positions"),
    ({"train": {"max_length": 300}}, "max_position_embeddings = 256 is less than train.max_length"),
    ({"evaluate": {"layers": [0, 13]}}, "evaluate.layers = [0, 13] but models.small has 12"),
    ({"evaluate": {"dev_sentences": 20000}}, "evaluate.dev_sentences = 20000 is more than"),
    ({"experiment": ""}, "experiment = '': must be a name or null"),
    # check resolves every modification as train does (train rejected this, check did not)
    ({"modification": "no-random;knn-replace"}, "both set replacement differently"),
    ({"study": ["no-random+knn-replace"]}, "both set replacement differently"),
    ({"study": ["lang-pos+no-random", "no-random+lang-pos"]}, "the same model twice"),
    ({"rows": ["original"]}, "rows = ['original']: must map modifications to study row labels"),
    ({"rows": {"lang-poss": "1"}}, "lang-poss"),
    ({"languages": 3}, "languages = 3: must be a list such as [3, fake]"),
    ({"corpora": {"s": {"iso": "de", "train": "a.txt", "dev": "b.txt"}}},
     "corpora.s: 's' cannot name a corpus"),
    ({"corpora": {"wiki-de": {"iso": "de", "train": "a.txt"}}},
     "corpora.wiki-de.dev missing; a corpus needs iso, train and dev"),
    ({"modification": True}, "modification = True: must be a name, '+'-joined names"),
    ({"study": "original"}, "study = 'original': must be a list of modification names"),
    ({"train": {"replacement_override": [0.5, 0.5]}},
     "train.replacement_override = [0.5, 0.5]: need 3 or 4 non-negative probabilities"),
    ({"paths": {"data": ""}}, "paths.data = ''"),
    ({"study": ["attend-padding"], "train": {"length_pieces": 4}},
     "train.length_pieces = 4 with 'attend-padding': attending to padding needs each batch run "
     "whole"),
]


@pytest.mark.parametrize(("overrides", "message"), STRICT, ids=[m[:40] for _, m in STRICT])
def test_strict_parameters(overrides: dict, message: str) -> None:
    with pytest.raises(UserError) as err:
        load_config(PARAMS, overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("entries", "message"),
    [("[1]", "study entry '1' is a paper ID: write 'lang-pos' instead"),
     ("['3']", "study entry '3' is a paper ID: write 'inv-order' instead"),
     ("[' lang-pos']", "study entry ' lang-pos': write it 'lang-pos'"),
     ("['lang-pos;no-random']", "join parts with '+'")],
)
def test_study_in_the_file_is_spelled_as_dvc_paths(tmp_path, entries: str, message: str
                                                   ) -> None:
    """dvc.yaml builds `models/${item.mod}/…` from the entry as written: an ID there would
    declare an output that `multilab train` (which names folders after names) never writes."""
    params = tmp_path / "params.yaml"
    raw = yaml.safe_load(PARAMS.read_text()) | {"study": yaml.safe_load(entries)}
    params.write_text(yaml.safe_dump(raw))
    with pytest.raises(UserError) as err:
        load_config(params)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_paper_ids_stay_valid_where_multilab_builds_the_path() -> None:
    """``modification``, ``train -m`` and a study given on the command line (the report of
    the queued Table 1) take paper IDs: multilab names the folders itself."""
    cfg = load_config(PARAMS, {"modification": 17, "train": {"epochs": 2},
                               "study": [0, "1", "lang-pos;no-random", 30]})
    assert cfg.modification == "17"
    assert cfg.study == ("original", "lang-pos", "lang-pos+no-random", "knn-replace")
    assert resolve_run(cfg, "1", 0).model_dir.parts[-2] == "lang-pos"
    assert cfg.train.epochs == 2 and isinstance(cfg.train.epochs, int)  # kept as written


def test_a_seed_beyond_64_bits_is_refused_by_run() -> None:
    cfg = load_config(PARAMS)
    with pytest.raises(UserError, match=r"seed 36893488147419103232: must be an integer from 0"):
        resolve_run(cfg, "original", 2**65)


def test_special_token_count_matches_the_vocabulary() -> None:
    from multilab.config import SPECIAL_TOKEN_COUNT
    from multilab.data.tokenizers import SPECIAL_TOKENS

    assert len(SPECIAL_TOKENS) == SPECIAL_TOKEN_COUNT


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("profile: smoke\ntrain:\n  epochs: [1\n", "YAML syntax error at line 4, column 1"),
        ("- 1\n- 2\n", "holds a list, not a mapping of parameters"),
        ("just words\n", "holds a str, not a mapping of parameters"),
        ("trian:\n  epochs: 3\n", "unknown key trian (did you mean 'train'?)"),
    ],
)
def test_broken_parameter_files_fail_in_one_line(tmp_path, text: str, message: str) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(text)
    with pytest.raises(UserError) as err:
        load_config(params)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_missing_or_empty_params_file(tmp_path) -> None:
    """No file is one line; an empty one is every default (the code's, then the profile's)."""
    with pytest.raises(UserError, match=re.escape(f"parameter file {tmp_path / 'no.yaml'} "
                                                  "not found")):
        load_config(tmp_path / "no.yaml")
    (tmp_path / "params.yaml").write_text("# nothing set yet\n")
    with pytest.raises(UserError, match="unknown profile 'quick'"):
        load_config(tmp_path / "params.yaml")


def test_params_file_that_is_not_utf8(tmp_path) -> None:
    params = tmp_path / "params.yaml"
    params.write_bytes(b"profile: sm\xffoke\n")
    with pytest.raises(UserError, match=r"is not UTF-8 text \(byte 11"):
        load_config(params)


def test_empty_section_in_a_profile_changes_nothing(tmp_path) -> None:
    """``evaluate:`` with nothing under it in a profile keeps the file's values (it used to
    reset the section to the code's defaults)."""
    text = PARAMS.read_text().replace("  paper:\n", "  paper:\n    models:\n", 1)
    params = tmp_path / "params.yaml"
    params.write_text(text)
    assert load_config(params, {"profile": "paper"}).models == load_config(
        PARAMS, {"profile": "paper"}).models


@pytest.mark.parametrize(
    ("pairs", "message"),
    [(["train.epochs=[1"], "--set train.epochs=[1: YAML syntax error"),
     (["train=5", "train.epochs=3"], "train is already set to a value"),
     (["train..epochs=3"], "empty key part")],
)
def test_bad_overrides_fail_in_one_line(pairs: list[str], message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        parse_overrides(pairs)


def test_check_rejects_what_train_rejects(capsys) -> None:
    """One validation path: `check` fails (exit 2, one line) where `train` would."""
    from multilab.cli import main

    for bad in ("modification=no-random;knn-replace", "trian.epochs=3", "train.epochs=abc"):
        assert main(["--params", str(PARAMS), "--set", bad, "check"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("multilab: error:"), err
    assert main(["--params", str(PARAMS), "check"]) == 0


@pytest.mark.parametrize(("settings", "neighbours"), [
    ([], 1),  # the paper's Fake-English: the nearest neighbour
    (["languages=[3,s,i]"], 5),  # real languages: one of the five nearest (App. A.3)
    (["languages=[3,s,i]", "spaces.knn_k=2"], 2),
])
def test_knn_neighbours_default_to_the_papers(settings: list[str], neighbours: int) -> None:
    assert load_config(PARAMS, parse_overrides(settings)).knn_neighbours == neighbours


def test_vocab_modes_union_is_a_shared_block_like_joint() -> None:
    """``vocab.mode: union`` (Conneau et al. 2020's default-anchors) is accepted; like ``joint`` it
    puts every language in one block, so what needs blocks per language is refused with it, each
    refusal one line naming the mode and what is valid."""
    from multilab.lab.modifications import ModificationError

    def study(mode: str, languages: tuple[str, ...] = ("3", "s")):
        return load_config(PARAMS, {"profile": "smoke", "languages": list(languages),
                                    "vocab": {"mode": mode}})

    assert [study(m).vocab.shared for m in ("separate", "joint", "union")] == [
        False, True, True]
    for modification in ("original", "lang-pos", "inv-order", "no-parallel", "nsp"):
        assert resolve_run(study("union"), modification, 0).study.vocab.mode == "union"
    for modification, says in (("knn-replace", "gives the languages shared ids"),
                               ("shift-special", "has one block for all languages"),
                               ("lang-id", "has one block for all languages"),
                               ("sep-emb", "has one block for all languages"),
                               ("sep-L1-3", "has one block for all languages")):
        for mode in ("joint", "union"):
            with pytest.raises(ModificationError) as err:
                resolve_run(study(mode), modification, 0)
            message = str(err.value)
            assert f"vocab.mode = {mode!r} {says}" in message and "valid with it" in message
            assert "\n" not in message
        resolve_run(study("separate"), modification, 0)
    # extra-anchors switches words on one shared WordPiece: joint only
    assert resolve_run(study("joint"), "extra-anchors", 0).recipe.code_switch
    with pytest.raises(ModificationError, match=r"vocab\.mode = 'joint' \(not union"):
        resolve_run(study("union"), "extra-anchors", 0)
    with pytest.raises(UserError, match=r"^vocab\.mode = 'union' needs real languages; \[3, "):
        study("union", ("3", "fake"))


def test_unknown_vocab_mode_names_the_valid_ones() -> None:
    with pytest.raises(UserError) as err:
        load_config(PARAMS, {"vocab": {"mode": "anchors"}})
    assert str(err.value) == "vocab.mode = 'anchors'; valid: separate, joint, union"

"""Languages as data: parsing a study's language list, its errors, the transform registry."""

from __future__ import annotations

import pytest

from multilab.errors import UserError
from multilab.lab.languages import (
    DEFAULT_LANGUAGES,
    EDITIONS,
    TRANSFORMS,
    Language,
    LanguageError,
    check_modification,
    editions_of,
    language_keys,
    parse_languages,
)


def test_default_is_english_and_its_id_shifted_fake() -> None:
    langs = parse_languages(DEFAULT_LANGUAGES)
    assert langs == (Language("3"), Language("3", "fake"))
    assert TRANSFORMS["fake"].acts_on == "ids"
    assert langs[1].text("In the beginning") == "In the beginning"  # ids shift, text same
    assert [lang.iso for lang in langs] == ["en", "en-fake"]
    assert editions_of(langs) == ("3",)


def test_yaml_integers_and_comma_strings() -> None:
    assert parse_languages([3, "s", "i"]) == parse_languages("3, s, i")
    langs = parse_languages([3, "s", "i"])
    assert [lang.iso for lang in langs] == ["en", "de", "hi"]
    assert langs[1].name == EDITIONS["s"][1]
    assert editions_of(langs) == ("3", "s", "i")


def test_transform_of_another_listed_language() -> None:
    langs = parse_languages(["3", "s", "enfake:s", "fake"])
    assert langs[2] == Language("s", "enfake") and langs[3] == Language("3", "fake")
    assert langs[2].iso == "de-enfake"
    shifted = langs[2].text("Im Anfang")
    assert shifted != "Im Anfang" and not set(shifted) & set("ImAnfang")
    assert editions_of(langs) == ("3", "s")


def test_a_text_transform_may_name_an_unlisted_edition() -> None:
    """K et al. 2020's enfake-es is Spanish and unicode-shifted English, without English; an id
    transform (fake) copies a listed language's block, so its base must be listed."""
    langs = parse_languages(["v", "enfake:3"])
    assert langs == (Language("v"), Language("3", "enfake"))
    assert language_keys(langs) == ["v", "enfake:3"] and editions_of(langs) == ("v", "3")
    with pytest.raises(LanguageError, match="'fake:3' transforms '3', which is not a listed"):
        parse_languages(["v", "fake:3"])
    with pytest.raises(LanguageError, match="'enfake:zz' transforms 'zz', which is not a"):
        parse_languages(["v", "enfake:zz"])


def test_a_reordering_reads_keys_as_the_study_spells_them() -> None:
    """``downstream --languages``: any order of the study's languages, a transform first."""
    study = parse_languages(["v", "enfake:3"])
    again = parse_languages("enfake:3,v", study_first="v")
    assert again == (study[1], study[0])
    assert language_keys(again, "v") == ["enfake:3", "v"]
    assert parse_languages("fake,3", study_first="3") == (Language("3", "fake"), Language("3"))


def test_canonical_keys_round_trip() -> None:
    langs = parse_languages(["3", "s", "fake:3", "enfake:s"])
    assert language_keys(langs) == ["3", "s", "fake", "enfake:s"]
    assert parse_languages(language_keys(langs)) == langs


def test_languages_are_immutable_and_hashable() -> None:
    lang = Language("3")
    with pytest.raises(AttributeError):
        lang.edition = "k"  # type: ignore[misc]
    assert len({Language("3"), Language("3"), Language("3", "fake")}) == 2


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ([], "empty"),
        (["3", "q"], "unknown language 'q'"),
        (["x"], "unknown language 'x'"),
        (["3", "s", "3"], "listed twice"),
        (["3", "fake", "fake:3"], "listed twice"),
        (["3", "fake:s"], "not a listed edition"),
        (["3", "enfake", "fake:enfake"], "not a listed edition"),
        (["fake", "3"], "first language 'fake' is a transform"),
        (["3", "shuffle:3"], "unknown language 'shuffle:3'"),
        ([3, True], "booleans"),
        ([3.0], "is not an edition code"),
    ],
)
def test_bad_lists_are_one_line_errors(values: list[object], says: str) -> None:
    with pytest.raises(LanguageError, match=says) as err:
        parse_languages(values)
    message = str(err.value)
    assert "\n" not in message and isinstance(err.value, UserError)


def test_unknown_code_names_the_valid_ones() -> None:
    with pytest.raises(LanguageError) as err:
        parse_languages(["3", "K"])
    assert all(code in str(err.value) for code in EDITIONS)
    assert "fake" in str(err.value) and "enfake" in str(err.value)


def test_a_yaml_list_as_params_yaml_or_dvc_exp_run_writes_it() -> None:
    import yaml

    langs = parse_languages(yaml.safe_load("[3, y, n, i, fake, 'enfake:i']"))
    assert [lang.iso for lang in langs] == ["en", "ar", "ko", "hi", "en-fake", "hi-enfake"]
    with pytest.raises(LanguageError, match="booleans"):
        parse_languages(yaml.safe_load("[3, on]"))  # YAML 1.1: on is True


@pytest.mark.parametrize(
    ("modification", "languages", "says"),
    [
        ("lang-pos", ["3"], "acts between languages; \\[3\\] has one"),
        ("no-parallel", ["s"], "acts between languages"),
        ("inv-order", ["3"], "acts between languages; \\[3\\] has one"),
        ("3", ["s"], "'inv-order' acts between languages"),  # paper ID 3 is inv-order
        ("knn-replace", ["s"], "'knn-replace' acts between languages; \\[s\\] has one"),
    ],
)
def test_modifications_that_cannot_apply(modification: str, languages: list, says: str) -> None:
    from multilab.lab.modifications import ModificationError

    with pytest.raises(ModificationError, match=says) as err:
        check_modification(modification, parse_languages(languages))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("modification", "languages"),
    [
        ("original", ["3"]),
        ("8", ["3", "s", "i"]),  # lang-pos;shift-special;no-random
        ("no-parallel", ["3", "s"]),
        ("inv-order", ["3", "s", "fake"]),
        ("inv-order", ["3", "s", "i"]),  # German inverted: Dufter & Schütze 2020 Table 3 row 3
        ("30", ["3", "s", "i"]),  # knn-replace, neighbours in German and Hindi: row 30
        ("knn-replace", ["3", "s", "fake"]),
        ("knn-replace", ["3", "fake"]),
        ("overparam;lang-pos", ["k", "fake"]),
    ],
)
def test_modifications_that_apply(modification: str, languages: list) -> None:
    check_modification(modification, parse_languages(languages))


@pytest.mark.parametrize(("languages", "mode"), [("[3, ot:3]", "joint"), ("[l, ot:l]", "joint"),
                                                 ("[3, s, ot:s]", "union")])
def test_an_edition_beside_its_own_other_domain_is_refused_with_a_shared_vocabulary(
        tmp_path, capsys, languages: str, mode: str) -> None:
    """Issue 53, case 2: both languages read the same dev verses, so with shared ids an
    untrained model scored rho0 = rho8 = 1.000, recorded without a word. Refused in one line
    before anything is built or trained (no corpus, no run, no record); the same list with a
    separate vocabulary (disjoint ids, as Fake-English has) stays valid."""
    from multilab.cli import main
    from tests.helpers import cli_args

    settings = ["profile=smoke", f"languages={languages}", f"vocab.mode={mode}",
                *(f"paths.{name}={tmp_path / name}" for name in
                  ("data", "artifacts", "reports", "metrics", "mlruns", "results"))]
    for command in (["check"], ["corpus", "build"], ["train", "--seed", "0"]):
        assert main(cli_args(settings, *command)) == 2
        err = capsys.readouterr().err
        assert err.startswith("multilab: error: languages [") and err.count("\n") == 1, err
        assert "1.000 by construction" in err and "vocab.mode separate" in err
    assert list(tmp_path.iterdir()) == []  # nothing built, no store, no record
    separate = [s if not s.startswith("vocab.mode=") else "vocab.mode=separate"
                for s in settings]
    assert main(cli_args(separate, "check")) == 0

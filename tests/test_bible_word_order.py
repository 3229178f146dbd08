"""Word order across the Bible: Match on association weights, the sanity anchors of
the tau pipeline on real verses (English vs itself, vs a renamed copy, vs its reversal), the
shared verse sample, the `word-order` command and its report section."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from multilab import tracking
from multilab.cli import main
from multilab.config import ALL_EDITIONS, WordOrderConfig
from multilab.data.parallel import read_edition
from multilab.errors import UserError
from multilab.evaluation.bible_word_order import (
    bible_word_order,
    content_words,
    edition_word_order,
    in_books,
    scored_verse_ids,
)
from multilab.evaluation.wordorder import match_weights
from multilab.lab.languages import EDITIONS, parse_languages
from multilab.reporting.word_order_table import (
    PAPER_TABLE4,
    correlation_markdown,
    plot_correlation,
    plot_word_order,
    retrieval_points,
    study_points,
    word_order_markdown,
)
from tests.helpers import cli_args, cli_settings, config_of, link_project

BOOKS = (62, 66)  # 1 John .. Revelation: ≈ 540 verses, IBM-1 in about a second


@pytest.fixture(scope="module")
def english() -> list[tuple[str, str]]:
    return in_books(read_edition("3"), BOOKS)


def _rewritten(verses: list[tuple[str, str]], words) -> list[tuple[str, str]]:
    return [(vid, " ".join(words(content_words(text)))) for vid, text in verses]


# --------------------------------------------------------------------------- Match on weights


def test_match_on_weights_by_hand() -> None:
    # source word 0 likes target 1, word 1 likes target 0, word 2 co-occurs with nothing
    weights = np.array([[0.1, 0.9, 0.0],
                        [0.8, 0.2, 0.0],
                        [0.0, 0.0, 0.0]])
    assert match_weights(weights, min_weight=0.0).tolist() == [1, 0, -1]
    # without the cut the full matching forces the leftover pair
    assert match_weights(weights).tolist() == [1, 0, 2]


def test_match_on_weights_prefers_the_diagonal_among_equal_weights() -> None:
    # a repeated word ("and ... and" against "und ... und"): straight and crossed tie
    weights = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    assert match_weights(weights).tolist() == [0, 1, 2]


def test_match_on_weights_rejects_an_empty_matrix() -> None:
    with pytest.raises(ValueError, match="non-empty 2-d"):
        match_weights(np.zeros((0, 3)))


# --------------------------------------------------------------------------- sanity anchors


def _tau(english, other, scored):
    return edition_word_order(english, other, "3", scored, BOOKS)


def test_english_against_itself_is_one(english) -> None:
    scored = scored_verse_ids({"3": english}, BOOKS, 150, seed=0)
    result = _tau(english, english, scored)
    assert result.tau == pytest.approx(1.0) and result.tau_linked == pytest.approx(1.0)
    assert result.aligned_share == pytest.approx(1.0)
    assert result.verses == 150


def test_english_against_a_renamed_copy_is_one(english) -> None:
    """Fake-English: every word replaced by a new one, the order kept."""
    fake = _rewritten(english, lambda words: [f"{w}qz" for w in words])
    scored = scored_verse_ids({"3": english}, BOOKS, 150, seed=0)
    assert _tau(english, fake, scored).tau == pytest.approx(1.0)


def test_english_against_its_reversal_is_near_zero(english) -> None:
    """Inverted Fake-English: near the scale's minimum. Not 0: a word repeated in a verse
    ("the", "and", "of") has equal weights to both of its copies, so the two orders tie and
    the tie-break takes the straight one (.13 on these verses; docs/notes/reproduction-log.md)."""
    inverted = _rewritten(english, lambda words: [f"{w}qz" for w in reversed(words)])
    scored = scored_verse_ids({"3": english}, BOOKS, 150, seed=0)
    result = _tau(english, inverted, scored)
    assert result.tau < 0.2
    assert result.aligned_share > 0.95


def test_a_shuffled_copy_scores_near_the_random_value(english) -> None:
    rng = np.random.default_rng(0)
    shuffled = _rewritten(english, lambda words: list(rng.permutation(words)))
    scored = scored_verse_ids({"3": english}, BOOKS, 300, seed=0)
    assert _tau(english, shuffled, scored).tau == pytest.approx(0.29, abs=0.06)


def test_german_lies_between_english_and_its_reversal(english) -> None:
    german = in_books(read_edition("s"), BOOKS)
    scored = scored_verse_ids({"3": english, "s": german}, BOOKS, 200, seed=0)
    result = edition_word_order(english, german, "s", scored, BOOKS)
    assert 0.35 < result.tau < 0.9
    # unaligned words move with their left neighbour: leaving them out can only lower tau here
    assert 0.3 < result.tau_linked <= result.tau + 0.01
    assert (result.iso, result.verses) == ("de", 200)


def test_the_scored_verses_are_shared_seeded_and_in_order(english) -> None:
    bengali = in_books(read_edition("b"), BOOKS)
    both = {"3": english, "b": bengali}
    first = scored_verse_ids(both, BOOKS, 100, seed=3)
    assert first == scored_verse_ids(both, BOOKS, 100, seed=3) == sorted(first)
    assert first != scored_verse_ids(both, BOOKS, 100, seed=4)
    texts = dict(bengali)
    assert all(any(ch.isalnum() for ch in texts[vid]) for vid in first)  # no "-" placeholder
    assert len(scored_verse_ids(both, BOOKS, 10**6, seed=0)) < len(english)


@pytest.mark.slow  # IBM-1 for three editions, serially and in 2 processes
def test_two_processes_give_the_same_numbers_in_the_same_order(english) -> None:
    verses = {"3": english, **{code: in_books(read_edition(code), BOOKS) for code in "sci"}}
    kwargs = {"books": BOOKS, "verses": 60, "sample_seed": 0}
    serial = bible_word_order(verses, "3", ["s", "c", "i"], **kwargs)
    seen: list[str] = []
    side_by_side = bible_word_order(verses, "3", ["s", "c", "i"], processes=2, **kwargs,
                                    progress=lambda result: seen.append(result.edition))
    assert seen == ["s", "c", "i"]

    def numbers(result):
        return (result.edition, result.tau, result.tau_std, result.tau_linked,
                result.aligned_share, result.verses)

    assert [numbers(r) for r in side_by_side] == [numbers(r) for r in serial]


def test_punctuation_is_not_a_word() -> None:
    assert content_words("And God said, Let there be light: and there was light.") == [
        "And", "God", "said", "Let", "there", "be", "light", "and", "there", "was", "light"]


# --------------------------------------------------------------------------- config


def test_all_editions_include_the_reference() -> None:
    settings = WordOrderConfig(editions=ALL_EDITIONS)
    assert settings.edition_list() == tuple(EDITIONS)
    assert WordOrderConfig(editions=("s", "i")).edition_list() == ("s", "i")


@pytest.mark.parametrize(("override", "fragment"), [
    ({"word_order": {"editions": ["s", "x"]}}, "word_order.editions = 'x'"),
    ({"word_order": {"editions": ["s", "s"]}}, "repeated"),
    ({"word_order": {"editions": "some"}}, "valid: 'all' or a list of edition codes"),
    ({"word_order": {"reference": "s"}}, "must be an English edition; valid: 2, 3, 4, k"),
    ({"word_order": {"books": [50, 40]}}, "word_order.books"),
    ({"word_order": {"verses": 0}}, "word_order.verses = 0"),
])
def test_bad_word_order_parameters_are_one_line(override, fragment, tmp_path: Path) -> None:
    with pytest.raises(UserError) as caught:
        config_of(cli_settings(tmp_path, **{f"word_order.{k}": json.dumps(v)
                                            for k, v in override["word_order"].items()}))
    assert fragment in str(caught.value)


# --------------------------------------------------------------------------- command + report


@pytest.mark.slow  # IBM-1 over the editions and an MLflow run
def test_word_order_command_writes_taus_and_one_finished_run(built_project: Path,
                                                            tmp_path: Path, capsys) -> None:
    root = link_project(built_project, tmp_path / "project")
    settings = cli_settings(root, **{"word_order.books": "[64, 66]", "word_order.verses": 60})
    assert main(cli_args(settings, "word-order")) == 0
    data = json.loads((root / "metrics" / "word_order.json").read_text())
    assert sorted(data["editions"]) == ["3", "c", "s"]  # the smoke profile's
    assert data["editions"]["3"]["tau"] == pytest.approx(1.0)
    assert all(0.3 < data["editions"][code]["tau"] < 0.9 for code in ("s", "c"))
    assert data["verses"] == 60 and data["reference"] == "3"
    runs = tracking.search_runs(config_of(settings).paths, "multilab-smoke-word-order")
    assert runs["status"].tolist() == ["FINISHED"]
    assert runs["metrics.tau.s"].iloc[0] == pytest.approx(data["editions"]["s"]["tau"])
    assert "s de  tau" in capsys.readouterr().out


def _data() -> dict:
    editions = {"3": ("en", 1.0), "s": ("de", 0.6), "i": ("hi", 0.5), "c": ("zh", 0.48),
                "t": ("tr", 0.5), "f": ("tl", 0.55)}
    return {"reference": "3", "verses": 100, "editions": {
        code: {"edition": code, "iso": iso, "name": EDITIONS[code][1], "tau": tau,
               "tau_std": 0.1, "tau_linked": tau - 0.01, "aligned_share": 0.9, "verses": 100}
        for code, (iso, tau) in editions.items()}}


def test_the_table_sits_beside_the_papers() -> None:
    table = word_order_markdown(_data())
    german = next(line for line in table.splitlines() if line.startswith("| s |"))
    assert "0.600 ± 0.100 | 0.590 |" in german
    assert german.endswith(f"| {PAPER_TABLE4['de'][0]:.3f} |")  # the one precision rule
    tagalog = next(line for line in table.splitlines() if line.startswith("| f |"))
    assert tagalog.endswith("| – |")  # no Tagalog in Table 4
    rows = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| ")][1:]
    assert rows[0] == "| 3"  # highest tau first


def test_correlation_needs_three_languages_besides_english() -> None:
    languages = parse_languages(["3", "s", "i"])
    downstream = pd.DataFrame([{"acc.en_mean": 0.45, "acc.de_mean": 0.41,
                                "acc.hi_mean": 0.36}])
    points = study_points(_data(), downstream, languages, ["en", "de", "hi"])
    text, found = correlation_markdown(points, "en", "original")
    assert found == {} and "Not computed" in text and "de, hi" in text


def test_correlation_with_and_without_english(tmp_path: Path) -> None:
    languages = parse_languages(["3", "s", "i", "c", "t", "fake:s"])
    labels = ["en", "de", "hi", "zh", "tr", "de-fake"]
    accuracy = {"en": 0.6, "de": 0.5, "hi": 0.35, "zh": 0.42, "tr": 0.4, "de-fake": 0.3}
    downstream = pd.DataFrame([{f"acc.{k}_mean": v for k, v in accuracy.items()}])
    points = study_points(_data(), downstream, languages, labels)
    assert "de-fake" not in points  # a transform has no edition tau
    text, found = correlation_markdown(points, "en", "original")
    taus = [1.0, 0.6, 0.5, 0.48, 0.5]
    accs = [0.6, 0.5, 0.35, 0.42, 0.4]
    assert found["pearson with English"].r == pytest.approx(stats.pearsonr(taus, accs)[0])
    assert found["pearson without English"].r == pytest.approx(
        stats.pearsonr(taus[1:], accs[1:])[0])
    assert found["pearson without English"].n == 4
    assert "| pearson with English |" in text and "| 0.640 |" in text
    for drawn in (plot_word_order(_data(), tmp_path / "a.png"),
                  plot_correlation(points, tmp_path / "b.png")):
        assert drawn.read_bytes().startswith(b"\x89PNG")


def test_correlation_with_verse_retrieval_at_layer_8(tmp_path: Path) -> None:
    # tau against P@1 between English and each language, both directions
    languages = parse_languages(["3", "s", "i", "c", "t", "fake:s"])
    keys = ["3", "s", "i", "c", "t", "fake:s"]
    labels = ["en", "de", "hi", "zh", "tr", "de-fake"]
    p1 = {"s": (0.30, 0.50), "i": (0.10, 0.20), "c": (0.05, 0.15), "t": (0.20, 0.20),
          "fake:s": (0.9, 0.9)}
    records = []
    for key, (forward, backward) in p1.items():
        name = key.replace(":", "_")
        for layer, scale in ((0, 0.1), (8, 1.0)):  # layer 0 must not be read
            records += [{"modification": "original", "layer": layer, "query": "3",
                         "key": name, "p1_mean": forward * scale},
                        {"modification": "original", "layer": layer, "query": name,
                         "key": "3", "p1_mean": backward * scale}]
        records.append({"modification": "lang-pos", "layer": 8, "query": "3", "key": name,
                        "p1_mean": 0.0})  # another row of the study: not read either
    retrieval = pd.DataFrame.from_records(records)
    points = retrieval_points(_data(), retrieval, languages, keys, labels, "original")
    assert points == {"de": (0.6, pytest.approx(0.40)), "hi": (0.5, pytest.approx(0.15)),
                      "zh": (0.48, pytest.approx(0.10)), "tr": (0.5, pytest.approx(0.20))}
    text, found = correlation_markdown(points, "en", "original", measure="retrieval")
    assert list(found) == ["pearson without English", "spearman without English"]
    assert found["pearson without English"].r == pytest.approx(
        stats.pearsonr([0.6, 0.5, 0.48, 0.5], [0.40, 0.15, 0.10, 0.20])[0])
    assert "### Word order against verse retrieval" in text and "| 0.460 |" in text
    assert plot_correlation(points, tmp_path / "r.png", "retrieval").read_bytes().startswith(
        b"\x89PNG")
    # three zero-shot languages at least, as for accuracy
    text, found = correlation_markdown({"de": points["de"]}, "en", "original",
                                       measure="retrieval")
    assert found == {} and "Not computed" in text

"""English parts of speech from Brill's lexicon as TextBlob bundles it (Liu et al. 2020a
Table 1's word classes)."""

from __future__ import annotations

from multilab.data.pos_lexicon import POS_GROUPS, brill_lexicon, pos_groups, word_tag


def test_each_word_has_its_most_likely_tag_and_its_groups() -> None:
    assert len(brill_lexicon()) > 90_000
    assert word_tag("loved") == "VBD" and word_tag("God") == "NNP"
    assert word_tag("And") == "CC"  # a capitalised sentence start: looked up lower-cased
    assert word_tag("zzzqx") is None
    groups = pos_groups(["kingdom", "loved", "good", "quickly", "the", "unto", "seven", "zzzqx"])
    assert groups == {"kingdom": ("noun", "open"), "loved": ("verb", "open"),
                      "good": ("adj", "open"), "quickly": ("adv", "open"),
                      "the": ("closed",), "unto": ("closed",), "seven": (), "zzzqx": ()}


def test_open_is_the_four_lexical_classes_and_closed_shares_no_tag_with_them() -> None:
    lexical = POS_GROUPS["noun"] | POS_GROUPS["verb"] | POS_GROUPS["adj"] | POS_GROUPS["adv"]
    assert POS_GROUPS["open"] == lexical
    assert not POS_GROUPS["closed"] & lexical


def test_a_missing_textblob_is_one_line(monkeypatch) -> None:
    """Where TextBlob is not installed (a bare GPU image), the lexicon's absence is a one-line
    UserError naming the package, not a traceback after the work."""
    import pytest

    from multilab.data import pos_lexicon
    from multilab.errors import UserError

    monkeypatch.setattr(pos_lexicon, "LEXICON", ("multilab_no_such_package", "en-lexicon.txt"))
    pos_lexicon.brill_lexicon.cache_clear()
    try:
        with pytest.raises(UserError, match=r"pip install textblob==0\.20\.1"):
            pos_lexicon.brill_lexicon()
    finally:
        pos_lexicon.brill_lexicon.cache_clear()

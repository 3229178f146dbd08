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

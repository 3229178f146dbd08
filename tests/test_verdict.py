"""The verdict rule on hand-made cases (multilab.studies.verdict)."""

from __future__ import annotations

import pytest
from scipy import stats

from multilab.studies.verdict import (
    Arm,
    PaperValue,
    Verdict,
    compare_rows,
    compare_with_paper,
    holm,
    welch,
)


def test_tau8_against_the_papers_std_did_not_hold() -> None:
    """Dufter & Schütze Table 1 row 0 gives τ₈ .79 ± .03 over 5 seeds; ours .67 ± .05 over 3."""
    ours = Arm.of([0.62, 0.67, 0.72])
    outcome = compare_with_paper(ours, PaperValue(0.79, 0.03, 5))
    assert outcome.verdict is Verdict.NOT_HELD
    assert outcome.p is not None and 0.02 < outcome.p < 0.05
    assert outcome.difference == pytest.approx(-0.12)
    assert "Welch" in outcome.reason


def test_welch_matches_scipy() -> None:
    a, b = [0.21, 0.25, 0.30], [0.11, 0.19, 0.12, 0.16]
    ours = compare_rows(Arm.of(a), Arm.of(b), "greater")
    expected = stats.ttest_ind(a, b, equal_var=False)
    assert ours.p == pytest.approx(expected.pvalue)
    t, _ = welch(sum(a) / 3, stats.tstd(a) ** 2, 3, sum(b) / 4, stats.tstd(b) ** 2, 4)
    assert t == pytest.approx(expected.statistic)


def test_clear_drop_held_and_reverse_did_not_hold() -> None:
    lang_pos, original = Arm.of([0.01, 0.02, 0.015]), Arm.of([0.24, 0.28, 0.21])
    assert compare_rows(lang_pos, original, "less").verdict is Verdict.HELD
    assert compare_rows(lang_pos, original, "greater").verdict is Verdict.NOT_HELD


def test_overlapping_seeds_are_not_separable() -> None:
    outcome = compare_rows(Arm.of([0.20, 0.26, 0.23]), Arm.of([0.22, 0.27, 0.19]), "less")
    assert outcome.verdict is Verdict.NOT_SEPARABLE
    assert outcome.p is not None and outcome.p > 0.05


def test_fewer_than_three_seeds_is_indicative_never_held() -> None:
    big_gap = compare_rows(Arm.of([0.01, 0.02]), Arm.of([0.5, 0.6, 0.55]), "less")
    assert big_gap.verdict is Verdict.INDICATIVE
    assert "as claimed" in big_gap.reason and big_gap.p is None
    one_seed = compare_with_paper(Arm.of([0.24]), PaperValue(0.70, 0.02, 5))
    assert one_seed.verdict is Verdict.INDICATIVE
    assert not Verdict.INDICATIVE.counts


def test_no_record_is_not_measured() -> None:
    assert compare_rows(Arm.of([]), Arm.of([1, 2, 3]), "less").verdict is Verdict.NOT_MEASURED
    assert compare_with_paper(Arm.of([]), PaperValue(0.5)).verdict is Verdict.NOT_MEASURED


def test_zero_variance_in_both_arms() -> None:
    """F1 1.00 ± .00 against 1.00 ± .00: no difference exists at this precision."""
    ones = Arm.of([1.0, 1.0, 1.0])
    assert compare_rows(ones, ones, "equal").verdict is Verdict.HELD
    assert compare_rows(ones, ones, "less").verdict is Verdict.NOT_HELD
    lower = compare_rows(Arm.of([0.5, 0.5, 0.5]), ones, "less")
    assert lower.verdict is Verdict.HELD and lower.p == 0.0
    assert compare_rows(Arm.of([0.5, 0.5, 0.5]), ones, "equal").verdict is Verdict.NOT_HELD


def test_one_arm_without_spread_is_an_ordinary_test() -> None:
    outcome = compare_rows(Arm.of([0.0, 0.0, 0.0]), Arm.of([0.4, 0.5, 0.45]), "less")
    assert outcome.verdict is Verdict.HELD and 0 < (outcome.p or 0) < 0.05


def test_paper_without_std_uses_a_one_sample_test_and_says_so() -> None:
    outcome = compare_with_paper(Arm.of([0.60, 0.62, 0.61]), PaperValue(0.70))
    assert outcome.verdict is Verdict.NOT_HELD
    assert "no std" in outcome.reason and "the paper gives no std" in outcome.notes
    expected = stats.ttest_1samp([0.60, 0.62, 0.61], 0.70)
    assert outcome.p == pytest.approx(expected.pvalue)


def test_consistent_with_the_paper_without_a_margin_is_not_separable() -> None:
    outcome = compare_with_paper(Arm.of([0.66, 0.71, 0.74]), PaperValue(0.70, 0.02, 5))
    assert outcome.verdict is Verdict.NOT_SEPARABLE
    assert "no margin" in outcome.reason


def test_equivalence_needs_a_margin_and_tost() -> None:
    a, b = Arm.of([0.500, 0.502, 0.501]), Arm.of([0.501, 0.499, 0.500])
    assert compare_rows(a, b, "equal", margin=0.02).verdict is Verdict.HELD
    assert compare_rows(a, b, "equal").verdict is Verdict.NOT_SEPARABLE
    wide = compare_rows(Arm.of([0.4, 0.6, 0.5]), Arm.of([0.45, 0.55, 0.6]), "equal",
                        margin=0.02)
    assert wide.verdict is Verdict.NOT_SEPARABLE and "not shown" in wide.reason


def test_not_comparable_magnitude() -> None:
    outcome = compare_with_paper(Arm.of([0.4, 0.5, 0.45]), PaperValue(0.8), comparable=False)
    assert outcome.verdict is Verdict.NOT_COMPARABLE
    assert outcome.difference == pytest.approx(-0.35)


def test_mixed_devices_are_flagged_not_hidden() -> None:
    mixed = Arm.of([0.20, 0.21, 0.22], ["cpu: AMD EPYC", "cuda: NVIDIA H200", "cpu"])
    outcome = compare_rows(mixed, Arm.of([0.5, 0.52, 0.51]), "less")
    assert outcome.verdict is Verdict.HELD
    assert outcome.mixed_devices and outcome.notes
    same = Arm.of([0.1, 0.2, 0.3], ["cpu: AMD EPYC", "cpu: Intel Xeon", "cpu"])
    assert not same.mixed_devices


def test_bad_direction_is_refused() -> None:
    with pytest.raises(ValueError, match="less, greater, equal"):
        compare_rows(Arm.of([1, 2, 3]), Arm.of([1, 2, 3]), "lower")
    with pytest.raises(ValueError, match="less, greater, equal"):
        compare_with_paper(Arm.of([1, 2, 3]), PaperValue(2.0), "lower")


def test_no_spread_against_the_paper_is_an_exact_difference() -> None:
    """Three identical seeds (an untrained model's constant, say): with the paper's std of
    zero too, or no std, the difference is exact and only its sign is read."""
    ones = Arm.of([1.0, 1.0, 1.0])
    assert compare_with_paper(ones, PaperValue(1.0, 0.0, 5)).verdict is Verdict.HELD
    above = compare_with_paper(ones, PaperValue(0.8), "greater")
    assert above.verdict is Verdict.HELD and above.p == 0.0
    assert above.difference == pytest.approx(0.2) and "the paper gives no std" in above.notes
    assert compare_with_paper(ones, PaperValue(0.8, None, 5), "less").verdict is \
        Verdict.NOT_HELD


def test_holm_adjustment() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([]) == []


def test_outcome_serialises() -> None:
    outcome = compare_rows(Arm.of([0.1, 0.2, 0.3]), Arm.of([0.1, 0.2, 0.3]), "less")
    data = outcome.as_dict()
    assert data["verdict"] == "not separable from seed noise" and data["n"] == [3, 3]


def test_a_significant_difference_inside_the_margin_is_equivalence() -> None:
    """The paper's μ .00 (two decimals) against our .0017 ± .0002: significant, yet inside
    the paper's rounding (±.005), so equal."""
    ours = Arm.of([0.0015, 0.0017, 0.0019])
    assert compare_with_paper(ours, PaperValue(0.0)).verdict is Verdict.NOT_HELD
    assert compare_with_paper(ours, PaperValue(0.0), margin=0.005).verdict is Verdict.HELD
    outside = compare_with_paper(Arm.of([0.019, 0.021, 0.02]), PaperValue(0.0), margin=0.005)
    assert outside.verdict is Verdict.NOT_HELD


def test_paired_test_equals_scipy_ttest_rel() -> None:
    """Layer 0 against layer 8 of the same three models: a paired t over seeds matched by
    seed (the arms list their seeds in different orders), not Welch's."""
    layer8 = Arm.of([0.52, 0.61, 0.55], seeds=[42, 43, 44])
    layer0 = Arm.of([0.52, 0.50, 0.58], seeds=[44, 42, 43])  # 42: .50, 43: .58, 44: .52
    outcome = compare_rows(layer8, layer0, "greater", paired=True)
    expected = stats.ttest_rel([0.52, 0.61, 0.55], [0.50, 0.58, 0.52])
    assert outcome.p == pytest.approx(expected.pvalue)
    assert outcome.difference == pytest.approx(0.08 / 3)
    assert outcome.verdict is Verdict.HELD and "paired t over 3 matched seeds" in outcome.reason
    welch_p = compare_rows(layer8, layer0, "greater").p
    assert welch_p is not None and welch_p > 0.05  # unpaired, the same numbers are noise


def test_paired_test_needs_three_matched_seeds() -> None:
    a = Arm.of([0.5, 0.6, 0.7], seeds=[42, 43, 44])
    b = Arm.of([0.4, 0.5, 0.6], seeds=[42, 43, 45])
    outcome = compare_rows(a, b, "greater", paired=True)
    assert outcome.verdict is Verdict.INDICATIVE and outcome.n == (2, 2)


def test_a_slight_decrease_criterion_fails_a_71_percent_drop() -> None:
    """Dufter & Schütze's row 7 "still a high degree of multilinguality" (at most a slight
    decrease, ≥ −31 % of the original's μ): our row 7 is 71 % below the original."""
    original, row7 = Arm.of([0.21, 0.25, 0.275]), Arm.of([0.055, 0.070, 0.085])
    assert compare_rows(row7, original, "greater").verdict is Verdict.NOT_HELD
    outcome = compare_rows(row7, original, "equal", relative=[-0.31, None])
    assert outcome.verdict is Verdict.NOT_HELD
    assert "relative change -71 %" in outcome.reason and "below the lower bound" in outcome.reason
    # the linear test of a − 0.69·b: Welch's t with b's variance scaled by 0.69²
    t, df = welch(row7.mean, row7.std**2, 3, 0.69 * original.mean, (0.69 * original.std)**2, 3)
    assert outcome.p == pytest.approx(stats.t.cdf(t, df))
    # a 5 % drop is slight: inside [−31 %, 0), shown one-sided at each bound
    slight = compare_rows(Arm.of([0.665, 0.67, 0.675]), Arm.of([0.70, 0.705, 0.71]), "less",
                          relative=[-0.31, 0.0])
    assert slight.verdict is Verdict.HELD


def test_a_relative_equivalence_margin_from_the_papers_spread() -> None:
    """"Perplexity is stable" at ±26 %, the paper's own largest deviation of IDs 1–8 from ID
    0: the paper's Table 1 (row 4 273 against row 0 217, +26 %) would pass it."""
    row0 = Arm.of([217 - 7.8, 217.0, 217 + 7.8])
    near = compare_rows(Arm.of([226.0, 230.0, 234.0]), row0, "equal", relative=[-0.26, 0.26])
    assert near.verdict is Verdict.HELD
    far = compare_rows(Arm.of([350.0, 359.0, 368.0]), row0, "equal", relative=[-0.26, 0.26])
    assert far.verdict is Verdict.NOT_HELD and "above the upper bound" in far.reason
    unclear = compare_rows(Arm.of([200.0, 270.0, 330.0]), row0, "equal",
                           relative=[-0.26, 0.26])
    assert unclear.verdict is Verdict.NOT_SEPARABLE


def test_an_equivalence_held_reports_its_tost_p() -> None:
    outcome = compare_rows(Arm.of([1.00, 1.01, 0.99]), Arm.of([1.002, 1.012, 0.992]), "equal",
                           margin=0.05)
    assert outcome.verdict is Verdict.HELD
    assert outcome.p is not None and outcome.p < 0.05 and "TOST" in outcome.reason

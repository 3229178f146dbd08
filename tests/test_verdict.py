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

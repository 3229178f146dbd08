"""The lab's one verdict rule: what a claim's measurements say, computed, never written by hand.

A claim compares two arms — two rows of a study (``compare_rows``) or our row against the
paper's reported value (``compare_with_paper``) — on one metric, over seeds. The rule:

- **held** / **did not hold** need at least :data:`MIN_SEEDS` (3) values in every measured arm
  and a test at :data:`ALPHA` (.05). Between rows: Welch's t-test over the seeds (unequal
  variances; two-sided p); where both arms are measurements of the same models (one row's
  layer 0 and layer 8, its open- and closed-class words: ``paired``), the paired t over the
  seeds both arms have, matched by seed (``scipy.stats.ttest_rel``). Against the paper:
  Welch's t-test from the paper's mean, std and seed count where the paper gives all three;
  a one-sample t-test against the paper's mean where it gives no std or no seed count (the
  reason says so).
- A claim of a direction (``less`` / ``greater``: "A lowers μ") **held** when the difference
  is significant and has the claimed sign, **did not hold** when it is significant with the
  other sign, and is **not separable from seed noise** when p ≥ α.
- A claim of no difference (``equal``: "word-piece overlap is not needed", or our row against
  the paper's value) **held** only when an equivalence margin is stated (by the claim, or the
  paper's rounding) and both one-sided tests of TOST reject a difference of that size — a
  significant difference inside the margin is no difference; otherwise it **did not hold** when
  the difference is significant, and without a margin p ≥ α reads *not separable from seed
  noise* (consistent with the claim, not proof of it). An equivalence held reports the TOST p,
  the p it rests on.
- A claim of a size ("slight", "drastically", "stable": the claim's ``criterion``) states
  bounds on the relative change a / b − 1 (:func:`compare_relative`): **held** when every
  bound is shown one-sided at α, **did not hold** when the change is shown beyond one, else
  *not separable*.
- Fewer than 3 values in an arm: **indicative** (the direction is read and reported, no test);
  no value at all: **not measured**. A claim whose magnitude cannot be compared (the paper's
  model or task is of another scale) is **not comparable**; one the lab cannot test, or whose
  run failed in a way that voids it (e.g. the NSP head never learned), is **not testable**, with
  the reason.

Hard cases, decided once:

- *Zero variance in both arms* (F1 1.00 ± .00 against 1.00 ± .00): the t statistic is 0/0.
  Equal means: no difference exists at this precision — a claimed direction **did not hold**,
  a claimed equality **held**. Different means with no spread: the difference is treated as
  certain (p = 0). One arm without spread is an ordinary Welch test.
- *Three seeds* give 2–4 degrees of freedom: Welch's test is valid but weak, so most small
  gaps read *not separable*; that is the honest answer, not a defect. The p-value is reported
  beside every verdict.
- *Many claims at once*: no correction for multiple testing is applied to the verdict (each
  claim is its own question); the report prints beside every p its Holm-adjusted p over the
  paper's distinct tests (:func:`holm`; :mod:`multilab.studies.tables`) and counts the
  verdicts that survive it — at α = .05 about one true null in twenty reads significant.
- *Mixed devices*: CPU and GPU runs of one configuration are not bit-identical. An arm whose
  seeds ran on different device kinds is flagged (``mixed_devices``); the verdict is computed
  the same way.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from scipy import stats

#: The significance level of every test.
ALPHA = 0.05
#: Seeds an arm needs before a test may say held or did not hold.
MIN_SEEDS = 3
#: The directions a claim may state (arm a against arm b).
DIRECTIONS = ("less", "greater", "equal")


class Verdict(StrEnum):
    HELD = "held"
    NOT_HELD = "did not hold"
    NOT_SEPARABLE = "not separable from seed noise"
    INDICATIVE = "indicative"
    NOT_COMPARABLE = "not comparable"
    NOT_TESTABLE = "not testable"
    NOT_MEASURED = "not measured"

    @property
    def counts(self) -> bool:
        """A verdict the lab is judged by: a test over ≥ 3 seeds per arm was made."""
        return self in (Verdict.HELD, Verdict.NOT_HELD, Verdict.NOT_SEPARABLE)


@dataclass(frozen=True)
class Arm:
    """The values of one metric over the seeds of one row, with the device each ran on."""

    values: tuple[float, ...]
    devices: tuple[str, ...] = ()
    #: the seed of each value, where known: a paired test matches the two arms by seed
    seeds: tuple[int, ...] = ()

    @classmethod
    def of(cls, values: Iterable[float], devices: Iterable[str] = (),
           seeds: Iterable[int] = ()) -> Arm:
        return cls(tuple(float(v) for v in values), tuple(devices), tuple(seeds))

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float:
        """Sample standard deviation (n − 1); 0 for one value."""
        return statistics.stdev(self.values) if self.n > 1 else 0.0

    @property
    def mixed_devices(self) -> bool:
        """Its values ran on more than one kind of device (two CPU models are one kind)."""
        return len({kind for device in self.devices for kind in device_kinds(device)}) > 1


@dataclass(frozen=True)
class PaperValue:
    """What a paper reports for one row and metric; std and n are None where it gives none."""

    mean: float
    std: float | None = None
    n: int | None = None


@dataclass(frozen=True)
class Outcome:
    """A verdict with the numbers behind it."""

    verdict: Verdict
    reason: str
    p: float | None = None
    difference: float | None = None  # mean of a minus mean of b (or minus the paper's mean)
    n: tuple[int, ...] = ()
    mixed_devices: bool = False
    notes: tuple[str, ...] = field(default=())
    #: the (1 − α) confidence interval of ``difference`` by the test's own t distribution
    #: (its standard error and degrees of freedom): the effect size's spread over seeds; an
    #: exact difference (no spread) is its own interval, too few seeds none
    interval: tuple[float, float] | None = None

    def as_dict(self) -> dict[str, object]:
        return {"verdict": str(self.verdict), "reason": self.reason, "p": self.p,
                "difference": self.difference, "n": list(self.n),
                "mixed_devices": self.mixed_devices, "notes": list(self.notes),
                "interval": None if self.interval is None else list(self.interval)}


def device_kind(device: str) -> str:
    """``cpu: AMD EPYC …`` and ``cpu`` are one kind; ``cuda: NVIDIA H200`` another."""
    return device.split(":", 1)[0].strip().lower()


def device_kinds(device: str) -> set[str]:
    """The kinds of one value's device: ``cpu: x + cuda: y`` (its records ran on both) is
    both kinds."""
    return {device_kind(part) for part in device.split(" + ")}


def welch(mean_a: float, var_a: float, n_a: int, mean_b: float, var_b: float, n_b: int
          ) -> tuple[float, float]:
    """Welch's t statistic and Welch–Satterthwaite degrees of freedom from summary statistics.

    ``var`` are sample variances (n − 1). Both variances zero is the caller's case."""
    se_a, se_b = var_a / n_a, var_b / n_b
    t = (mean_a - mean_b) / math.sqrt(se_a + se_b)
    df = (se_a + se_b) ** 2 / ((se_a**2 / (n_a - 1) if se_a else 0.0)
                                + (se_b**2 / (n_b - 1) if se_b else 0.0))
    return t, df


def _p_two_sided(t: float, df: float) -> float:
    return float(2 * stats.t.sf(abs(t), df))


def _p_one_sided_greater(t: float, df: float) -> float:
    """P(T ≥ t): small when the difference is clearly above zero."""
    return float(stats.t.sf(t, df))


def _direction_verdict(difference: float, p: float, direction: str, alpha: float,
                       margin: float | None, tost_p: float | None
                       ) -> tuple[Verdict, str, float]:
    """The verdict, its reason and the p it rests on (an equivalence held: the TOST p)."""
    verdict, reason = _direction_reading(difference, p, direction, alpha, margin, tost_p)
    if verdict is Verdict.HELD and direction == "equal" and tost_p is not None:
        return verdict, reason, tost_p
    return verdict, reason, p


def _direction_reading(difference: float, p: float, direction: str, alpha: float,
                       margin: float | None, tost_p: float | None) -> tuple[Verdict, str]:
    if direction == "equal":
        # equivalence first: a difference inside the margin is no difference, however
        # significant (three seeds with no spread make any gap significant)
        if margin is not None and tost_p is not None and tost_p < alpha:
            return Verdict.HELD, (f"equivalent within ±{margin:g} (TOST p {tost_p:.3g} "
                                  f"< {alpha}; difference {difference:+.3g})")
        if p < alpha:
            return Verdict.NOT_HELD, f"a difference of {difference:+.3g} (p {p:.3g} < {alpha})"
        if margin is not None:
            return Verdict.NOT_SEPARABLE, (f"no difference found (p {p:.3g}) but equivalence "
                                           f"within ±{margin:g} not shown (TOST p "
                                           f"{tost_p:.3g})")
        return Verdict.NOT_SEPARABLE, (f"no difference found (p {p:.3g} ≥ {alpha}); no margin "
                                       "stated, so equality is not shown either")
    claimed_sign = -1 if direction == "less" else 1
    if p >= alpha:
        return Verdict.NOT_SEPARABLE, f"difference {difference:+.3g}, p {p:.3g} ≥ {alpha}"
    if math.copysign(1, difference) == claimed_sign and difference != 0:
        return Verdict.HELD, f"difference {difference:+.3g} as claimed, p {p:.3g} < {alpha}"
    return Verdict.NOT_HELD, f"difference {difference:+.3g} against the claim, p {p:.3g}"


def _interval(difference: float, se: float, df: float, alpha: float
              ) -> tuple[float, float]:
    """The two-sided (1 − α) t interval of a difference with standard error ``se``."""
    half = float(stats.t.ppf(1 - alpha / 2, df)) * se
    return difference - half, difference + half


def _tost(mean_diff: float, se: float, df: float, margin: float) -> float:
    """Two one-sided tests: the larger p of 'difference > −margin' and '< +margin'."""
    p_low = _p_one_sided_greater((mean_diff + margin) / se, df)
    p_high = _p_one_sided_greater((margin - mean_diff) / se, df)
    return max(p_low, p_high)


def _too_few(arms: Sequence[Arm], difference: float | None, direction: str) -> Outcome:
    ns = tuple(arm.n for arm in arms)
    if min(ns) == 0:
        return Outcome(Verdict.NOT_MEASURED, "no record in an arm", n=ns)
    assert difference is not None
    if direction == "equal":
        read = f"difference {difference:+.3g}"
    else:
        agrees = difference != 0 and math.copysign(1, difference) == (
            -1 if direction == "less" else 1)
        read = f"difference {difference:+.3g}, {'as' if agrees else 'against the'} claimed"
    seeds = " / ".join(str(n) for n in ns)
    return Outcome(Verdict.INDICATIVE, f"{read} (seeds {seeds}: fewer than {MIN_SEEDS})",
                   difference=difference, n=ns,
                   mixed_devices=any(arm.mixed_devices for arm in arms))


def matched(a: Arm, b: Arm) -> tuple[Arm, Arm]:
    """The two arms' values at the seeds both have, in one order (for a paired test); arms
    without seeds are matched by position where they are of one length."""
    if not a.seeds or not b.seeds:
        if a.n != b.n:
            raise ValueError("a paired test needs the arms' seeds, or arms of one length")
        return a, b
    at_b = dict(zip(b.seeds, zip(b.values, b.devices or ("",) * b.n, strict=True),
                    strict=True))
    common = [(seed, value, device) for seed, value, device in
              zip(a.seeds, a.values, a.devices or ("",) * a.n, strict=True) if seed in at_b]

    def arm(pick: int) -> Arm:
        rows = [(value, device) if pick == 0 else at_b[seed] for seed, value, device in common]
        return Arm.of([v for v, _ in rows], [d for _, d in rows] if a.devices and b.devices
                      else (), [seed for seed, _, _ in common])

    return arm(0), arm(1)


def compare_rows(a: Arm, b: Arm, direction: str, alpha: float = ALPHA,
                 margin: float | None = None, paired: bool = False,
                 relative: Sequence[float | None] | None = None) -> Outcome:
    """Claim: arm ``a`` is ``direction`` (less / greater / equal) than arm ``b``.

    ``paired``: both arms are measurements of the same models (one row's layer 0 and layer 8,
    its open- and closed-class words), so the test is the paired t over the seeds both arms
    have, matched by seed, not Welch's. ``relative``: the claim's size as bounds ``[low,
    high]`` on the relative change ``a / b − 1`` (either may be None, open), tested by
    :func:`compare_relative` instead of the direction alone."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r}: one of {', '.join(DIRECTIONS)}")
    if paired and a.n and b.n:
        a, b = matched(a, b)
    if relative is not None:
        return compare_relative(a, b, relative, alpha, paired)
    difference = a.mean - b.mean if a.n and b.n else None
    if a.n < MIN_SEEDS or b.n < MIN_SEEDS:
        outcome = _too_few((a, b), difference, direction)
        return replace(outcome, reason=f"paired over matched seeds: {outcome.reason}") \
            if paired and outcome.verdict is Verdict.INDICATIVE else outcome
    assert difference is not None
    mixed = a.mixed_devices or b.mixed_devices
    notes = ("seeds ran on different devices in an arm",) if mixed else ()
    if paired:
        return _paired(a, b, direction, alpha, margin, mixed, notes)
    var_a, var_b = a.std**2, b.std**2
    if var_a == 0 and var_b == 0:
        return _zero_variance(difference, direction, (a.n, b.n), mixed, notes)
    t, df = welch(a.mean, var_a, a.n, b.mean, var_b, b.n)
    p = _p_two_sided(t, df)
    se = math.sqrt(var_a / a.n + var_b / b.n)
    tost_p = _tost(difference, se, df, margin) if margin is not None else None
    verdict, reason, p = _direction_verdict(difference, p, direction, alpha, margin, tost_p)
    return Outcome(verdict, f"Welch's t over seeds: {reason}", p=p, difference=difference,
                   n=(a.n, b.n), mixed_devices=mixed, notes=notes,
                   interval=_interval(difference, se, df, alpha))


def _paired(a: Arm, b: Arm, direction: str, alpha: float, margin: float | None,
            mixed: bool, notes: tuple[str, ...]) -> Outcome:
    """The paired t over matched seeds: a one-sample t of the per-seed differences a − b
    (``scipy.stats.ttest_rel``), n − 1 degrees of freedom."""
    differences = Arm.of([x - y for x, y in zip(a.values, b.values, strict=True)])
    difference, n = differences.mean, differences.n
    if differences.std == 0:
        exact = _zero_variance(difference, direction, (n, n), mixed, notes)
        return replace(exact, reason=f"paired over {n} matched seeds, the same difference on "
                       f"every seed: {exact.reason}")
    se = differences.std / math.sqrt(n)
    p = _p_two_sided(difference / se, n - 1)
    tost_p = _tost(difference, se, n - 1, margin) if margin is not None else None
    verdict, reason, p = _direction_verdict(difference, p, direction, alpha, margin, tost_p)
    return Outcome(verdict, f"paired t over {n} matched seeds: {reason}", p=p,
                   difference=difference, n=(n, n), mixed_devices=mixed, notes=notes,
                   interval=_interval(difference, se, n - 1, alpha))


def _percent(value: float | None) -> str:
    return "open" if value is None else f"{value * 100:+.0f} %"


def compare_relative(a: Arm, b: Arm, bounds: Sequence[float | None], alpha: float = ALPHA,
                     paired: bool = False) -> Outcome:
    """Claim: the relative change of ``a`` against ``b``, ``a / b − 1``, lies within
    ``bounds`` (``[low, high]``, None: open): a claim at its own strength ("slight": a
    decrease of at most 31 %; "stable": within ±26 %).

    Each bound k is a linear test of ``a − (1 + k)·b`` (b's mean > 0): Welch's t with b's
    variance scaled by (1 + k)², or, paired, the one-sample t of the per-seed ``a − (1 + k)·b``.
    **held**: every stated bound is shown one-sided at α (the intersection–union test; p:
    the larger); **did not hold**: the change is shown beyond a bound (one-sided at α, p:
    that test's); otherwise **not separable** (p: the held side's)."""
    low, high = bounds
    if low is not None and high is not None and not low < high:
        raise ValueError(f"relative change bounds {list(bounds)}: low < high")
    difference = a.mean - b.mean if a.n and b.n else None
    if a.n < MIN_SEEDS or b.n < MIN_SEEDS:
        outcome = _too_few((a, b), difference, "equal")
        if outcome.verdict is Verdict.INDICATIVE:
            change = a.mean / b.mean - 1 if b.mean > 0 else math.nan
            return replace(outcome, reason=f"relative change {_percent(change)} against the "
                           f"criterion [{_percent(low)}, {_percent(high)}] "
                           + outcome.reason[outcome.reason.index("(seeds"):])
        return outcome
    assert difference is not None
    ns = (a.n, b.n)
    mixed = a.mixed_devices or b.mixed_devices
    notes = ("seeds ran on different devices in an arm",) if mixed else ()
    if b.mean <= 0:
        return Outcome(Verdict.NOT_TESTABLE, f"arm b's mean {b.mean:.3g} ≤ 0: a relative "
                       "change is not defined", difference=difference, n=ns)
    interval = _difference_interval(a, b, difference, paired, alpha)
    change = a.mean / b.mean - 1
    criterion = f"relative change {_percent(change)}, criterion [{_percent(low)}, " \
        f"{_percent(high)}]"
    inside_p: list[float] = []  # per bound: p of "on the claimed side of it"
    beyond: list[tuple[float, str]] = []  # per bound: p of "on the wrong side of it"
    for bound, side in ((low, 1.0), (high, -1.0)):
        if bound is None:
            continue
        scale = 1 + bound
        if paired:
            combined = Arm.of([x - scale * y for x, y in zip(a.values, b.values, strict=True)])
            mean, se, df = combined.mean, combined.std / math.sqrt(a.n), a.n - 1.0
        else:
            var_a, var_b = a.std**2, (scale * b.std) ** 2
            mean = a.mean - scale * b.mean
            se = math.sqrt(var_a / a.n + var_b / b.n)
            df = 0.0 if se == 0 else welch(a.mean, var_a, a.n, scale * b.mean, var_b, b.n)[1]
        if se == 0:  # no spread: the side is exact
            toward = 0.0 if side * mean > 0 else 1.0
        else:
            toward = _p_one_sided_greater(side * mean / se, df)
        inside_p.append(toward)
        beyond.append((1.0 - toward if se else (0.0 if side * mean < 0 else 1.0),
                       "below the lower bound" if side > 0 else "above the upper bound"))
    test = f"paired t over {a.n} matched seeds" if paired else "Welch's t over seeds"
    held_p = max(inside_p)
    if held_p < alpha:
        return Outcome(Verdict.HELD, f"{test}: {criterion}: inside, shown at p {held_p:.3g} "
                       f"< {alpha}", p=held_p, difference=difference, n=ns,
                       mixed_devices=mixed, notes=notes, interval=interval)
    worst_p, where = min(beyond)
    if worst_p < alpha:
        return Outcome(Verdict.NOT_HELD, f"{test}: {criterion}: {where}, p {worst_p:.3g} "
                       f"< {alpha}", p=worst_p, difference=difference, n=ns,
                       mixed_devices=mixed, notes=notes, interval=interval)
    return Outcome(Verdict.NOT_SEPARABLE, f"{test}: {criterion}: neither inside nor outside "
                   f"shown (p {held_p:.3g} ≥ {alpha})", p=held_p, difference=difference, n=ns,
                   mixed_devices=mixed, notes=notes, interval=interval)


def _difference_interval(a: Arm, b: Arm, difference: float, paired: bool, alpha: float
                         ) -> tuple[float, float]:
    """The (1 − α) interval of a − b by the test a relative criterion's bounds share (paired
    t of the per-seed differences, else Welch's); exact where neither arm varies."""
    if paired:
        differences = Arm.of([x - y for x, y in zip(a.values, b.values, strict=True)])
        se, df = differences.std / math.sqrt(differences.n), differences.n - 1.0
    else:
        var_a, var_b = a.std**2, b.std**2
        se = math.sqrt(var_a / a.n + var_b / b.n)
        df = welch(a.mean, var_a, a.n, b.mean, var_b, b.n)[1] if se else 0.0
    return _interval(difference, se, df, alpha) if se else (difference, difference)


def compare_with_paper(ours: Arm, paper: PaperValue, direction: str = "equal",
                       alpha: float = ALPHA, margin: float | None = None,
                       comparable: bool = True) -> Outcome:
    """Claim: our row's value is ``direction`` (by default equal to) the paper's value.

    ``comparable=False`` (the paper's scale or task differs): the magnitude cannot be
    compared, whatever the numbers say."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r}: one of {', '.join(DIRECTIONS)}")
    difference = ours.mean - paper.mean if ours.n else None
    if not ours.n:
        return Outcome(Verdict.NOT_MEASURED, "no record", n=(0,))
    if not comparable:
        return Outcome(Verdict.NOT_COMPARABLE, "the paper's model or task is of another "
                       "scale: the magnitude cannot be compared", difference=difference,
                       n=(ours.n,))
    if ours.n < MIN_SEEDS:
        return _too_few((ours,), difference, direction)
    assert difference is not None
    mixed = ours.mixed_devices
    notes: tuple[str, ...] = ("seeds ran on different devices",) if mixed else ()
    var = ours.std**2
    if paper.std is not None and paper.n is not None and paper.n >= 2:
        how = f"Welch's t against the paper's mean, std and {paper.n} seeds"
        paper_var = paper.std**2
        if var == 0 and paper_var == 0:
            return _zero_variance(difference, direction, (ours.n, paper.n), mixed, notes)
        t, df = welch(ours.mean, var, ours.n, paper.mean, paper_var, paper.n)
        se = math.sqrt(var / ours.n + paper_var / paper.n)
    else:
        missing = "std" if paper.std is None else "seed count"
        how = f"one-sample t against the paper's mean (the paper gives no {missing})"
        notes = (*notes, f"the paper gives no {missing}")
        if var == 0:
            return _zero_variance(difference, direction, (ours.n,), mixed, notes)
        se = math.sqrt(var / ours.n)
        t, df = difference / se, ours.n - 1
    p = _p_two_sided(t, df)
    tost_p = _tost(difference, se, df, margin) if margin is not None else None
    verdict, reason, p = _direction_verdict(difference, p, direction, alpha, margin, tost_p)
    return Outcome(verdict, f"{how}: {reason}", p=p, difference=difference,
                   n=(ours.n,) if paper.n is None else (ours.n, paper.n),
                   mixed_devices=mixed, notes=notes,
                   interval=_interval(difference, se, df, alpha))


def _zero_variance(difference: float, direction: str, ns: tuple[int, ...], mixed: bool,
                   notes: tuple[str, ...]) -> Outcome:
    """Neither side varies: the difference is exact (see the module docstring)."""
    if difference == 0:
        if direction == "equal":
            return Outcome(Verdict.HELD, "identical values on every seed (no spread)", p=0.0,
                           difference=0.0, n=ns, mixed_devices=mixed, notes=notes,
                           interval=(0.0, 0.0))
        return Outcome(Verdict.NOT_HELD, "no difference on any seed (no spread): the claimed "
                       "direction is absent", p=1.0, difference=0.0, n=ns,
                       mixed_devices=mixed, notes=notes, interval=(0.0, 0.0))
    verdict, reason, _ = _direction_verdict(difference, 0.0, direction, ALPHA, None, None)
    return Outcome(verdict, f"no spread, exact difference: {reason}", p=0.0,
                   difference=difference, n=ns, mixed_devices=mixed, notes=notes,
                   interval=(difference, difference))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input's order (for a reader's correction)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def spearman(values: Sequence[float]) -> float:
    """Spearman's ρ of ``values`` against their order (ties: average ranks); 0 for a
    constant curve, which has no trend."""
    if len(set(values)) < 2:
        return 0.0
    ranks = [0.0] * len(values)
    ordered = sorted(range(len(values)), key=lambda i: values[i])
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and values[ordered[end + 1]] == values[ordered[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[ordered[k]] = (start + end) / 2
        start = end + 1
    return statistics.correlation([float(i) for i in range(len(values))], ranks)


#: curves longer than this are tested on a fixed sample of orders, not all of them
EXACT_POINTS = 8
_SAMPLED_ORDERS = 20_000


def _null_rhos(values: Sequence[float]) -> list[float]:
    """ρ of every reordering of one seed's curve (its null: no order effect), or of a fixed
    sample of reorderings for a long curve (the same p on every run)."""
    if len(values) <= EXACT_POINTS:
        return [spearman(order) for order in itertools.permutations(values)]
    draw = random.Random(0)
    return [spearman(draw.sample(list(values), len(values))) for _ in range(_SAMPLED_ORDERS)]


def trend_test(curves: Sequence[Sequence[float]], devices: Sequence[str], direction: str,
               alpha: float = ALPHA) -> Outcome:
    """"X increases with training": per seed, Spearman's ρ of the curve against its order;
    the mean ρ over seeds tested by its exact permutation distribution (each seed's curve
    reordered at random under the null), one-sided in the claimed ``direction`` (greater:
    rising), so a trend in every seed has an exact p, not a zero spread's 0. The one rule:
    ≥ 3 seeds for a verdict; held when p < α, did not hold when the other side's p < α."""
    rhos = [spearman(curve) for curve in curves]
    n = len(rhos)
    mixed = len({kind for device in devices for kind in device_kinds(device)}) > 1
    if n == 0:
        return Outcome(Verdict.NOT_MEASURED, "no seed with the curve's points", n=(0,))
    mean = statistics.fmean(rhos)
    sign = 1 if direction == "greater" else -1
    shown = ", ".join(f"{rho:+.2f}" for rho in rhos)
    read = f"Spearman's ρ per seed {shown}, mean {mean:+.2f}"
    if n < MIN_SEEDS:
        agrees = "as" if mean * sign > 0 else "against the"
        return Outcome(Verdict.INDICATIVE, f"{read}, {agrees} claimed (seeds {n}: fewer than "
                       f"{MIN_SEEDS})", difference=mean, n=(n,), mixed_devices=mixed)
    sums: Counter[float] = Counter({0.0: 1})
    for curve in curves:
        null = Counter(round(rho, 9) for rho in _null_rhos(curve))
        combined: Counter[float] = Counter()
        for total, count in sums.items():
            for rho, times in null.items():
                combined[round(total + rho, 9)] += count * times
        sums = combined
    whole, observed = sum(sums.values()), round(sum(rhos), 9)
    p_claimed = sum(c for total, c in sums.items() if sign * total >= sign * observed - 1e-9)
    p_other = sum(c for total, c in sums.items() if sign * total <= sign * observed + 1e-9)
    p_claimed, p_other = p_claimed / whole, p_other / whole
    test = f"exact permutation test of the mean ρ over {n} seeds"
    if p_claimed < alpha:
        return Outcome(Verdict.HELD, f"{read}; {test}: as claimed, p {p_claimed:.3g} < "
                       f"{alpha:g}", p=p_claimed, difference=mean, n=(n,), mixed_devices=mixed)
    if p_other < alpha:
        return Outcome(Verdict.NOT_HELD, f"{read}; {test}: against the claim, p "
                       f"{p_other:.3g}", p=p_other, difference=mean, n=(n,), mixed_devices=mixed)
    return Outcome(Verdict.NOT_SEPARABLE, f"{read}; {test}: p {p_claimed:.3g} ≥ {alpha:g}",
                   p=p_claimed, difference=mean, n=(n,), mixed_devices=mixed)

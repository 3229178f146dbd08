"""One precision rule for every table cell multilab writes (the report, the study tables, the
downstream tables), so a column never mixes ``0.966 ± 0.00048`` with ``1,848 ± 0``:

* a value in [-1, 1] (a score: μ, F1, ρ, τ, an accuracy) has three decimals, and one that
  would round to zero keeps two significant digits (τ of 0.00043 never reads as none);
* a larger value has three significant digits (``8.91``, ``12.3``) and from 100 on none,
  with thousands separators (``1,848``); an integer is written as one (``18,514``);
* a standard deviation has its mean's decimals; one that rounds to zero there reads
  ``< 0.001`` (``< 1``); none (one seed) or a zero beside a mean without decimals (a count,
  ``1,848``) is left out, a zero beside a score is kept (``1.000 ± 0.000``: a measured std).
"""

from __future__ import annotations

import math

#: what a missing value reads
MISSING = "–"


def decimals(value: float) -> int:
    """The decimals of the rule for this value."""
    magnitude = abs(value)
    if magnitude <= 1:
        return 3
    if magnitude < 10:
        return 2
    return 1 if magnitude < 100 else 0


def number(value: float | int | None) -> str:
    """A value by the rule."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    places = decimals(value)
    if value != 0 and round(value, places) == 0:  # two significant digits, never 8.3e-05
        return f"{value:.{1 - math.floor(math.log10(abs(value)))}f}"
    return f"{value:,.{places}f}"


def spread(mean: float | int | None, std: float | None) -> str | None:
    """A standard deviation with its mean's decimals; None where the rule leaves it out."""
    if number(mean) == MISSING or std is None or math.isnan(std):
        return None
    places = 0 if isinstance(mean, int) and not isinstance(mean, bool) else decimals(mean)
    if std == 0:
        return f"{0:.{places}f}" if places else None
    text = f"{std:,.{places}f}"
    if float(text.replace(",", "")) == 0:
        return f"< {10 ** -places:.{places}f}" if places else "< 1"
    return text


def cell(mean: float | int | None, std: float | None = None) -> str:
    """``mean ± std`` by the rule (the mean alone without a spread)."""
    shown = spread(mean, std)
    return number(mean) if shown is None else f"{number(mean)} ± {shown}"


#: joins the parts of a compact cell (``.245 ± .032 / .70``) so that a table cell never
#: wraps inside a number's spread: a no-break space, which reads as a space in the source
JOIN = "\u00a0"


def _drop_leading_zero(text: str) -> str:
    """``0.245`` → ``.245``, ``-0.010`` → ``-.010``, ``< 0.001`` → ``< .001``."""
    for whole, short in (("-0.", "-."), ("+0.", "+."), ("< 0.", "< ."), ("0.", ".")):
        if text.startswith(whole):
            return short + text[len(whole):]
    return text


def compact(value: float | int | None, sign: bool = False) -> str:
    """A value by the rule, a score without its leading zero (``.245``); ``sign``: with
    ``+`` before a positive value (an effect)."""
    text = number(value)
    if sign and text != MISSING and not text.startswith("-") and value != 0:
        text = "+" + text
    return _drop_leading_zero(text)


def compact_cell(mean: float | int | None, std: float | None = None) -> str:
    """``mean ± std`` by the rule, compact (``.245 ± .032``), its parts never wrapped."""
    shown = spread(mean, std)
    if shown is None:
        return compact(mean)
    return f"{compact(mean)}{JOIN}±{JOIN}{_beside(mean, shown)}"


def _beside(mean: float | int | None, spread_text: str) -> str:
    """A spread as its mean reads: without the leading zero beside a score (``.245 ±
    .032``), with it beside a larger number (``25.3 ± 0.8``); ``< .001`` unbroken."""
    text = _drop_leading_zero(spread_text) if mean is not None and abs(mean) <= 1 \
        else spread_text
    return text.replace("< ", f"<{JOIN}")


def reported(value: float, decimals: int | None = None) -> str:
    """A paper's number as the paper writes it: a score with the ``decimals`` the study
    states, else a score with the fewest decimals (at least two) that give it
    (``.70``, ``.392``), a larger number as it is (``72.3``, ``3,484``)."""
    if decimals is not None and abs(value) <= 1:
        return _drop_leading_zero(f"{value:,.{decimals}f}")
    if abs(value) <= 1:
        places = next((p for p in range(2, 6) if round(value, p) == value), 6)
        return _drop_leading_zero(f"{value:.{places}f}")
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,}"


def reported_cell(mean: float, std: float | None = None, decimals: int | None = None) -> str:
    """A paper's ``mean ± std`` as it writes them (:func:`reported`)."""
    if std is None:
        return reported(mean, decimals)
    # beside a larger number a spread is written as it is (``9 ± 0.2``, ``3,484 ± 44.1``)
    shown = reported(std, decimals) if abs(mean) <= 1 else (
        f"{int(std):,}" if float(std).is_integer() else f"{std:,}")
    return f"{reported(mean, decimals)}{JOIN}±{JOIN}{shown}"

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
    if value != 0 and round(value, places) == 0:
        return f"{value:.2g}"
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

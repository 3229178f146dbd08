"""Each study row's colour in the MLflow UI: the baseline's own, then a palette.

MLflow 3's UI keeps a run's colour in the run tag ``mlflow.runColor`` (its colour picker
writes the same tag), so a colour set here is the one every user of the store sees. A row's
parent and its seed runs share the row's colour.
"""

from __future__ import annotations

from collections.abc import Iterable

from multilab.lab.modifications import same_modification

#: The run tag the MLflow UI reads (and its colour picker writes) for a run's colour.
RUN_COLOR_TAG = "mlflow.runColor"
#: The row every variant is compared with, drawn in a colour no other row gets.
BASELINE, BASELINE_COLOR = "original", "#1f1f1f"
#: The other rows' colours, in the order their parents are created (Okabe–Ito, then Paul
#: Tol's muted set: told apart also with colour-vision deficiencies); cycled past the last.
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#882255",
           "#44aa99", "#999933", "#332288", "#aa4499", "#117733", "#cc6677", "#88ccee")


def pick_color(modification: str, used: Iterable[str | None]) -> str:
    """The colour of a new row: the baseline's own (for the first baseline row: a study's
    rows may share it), else the first palette colour that no other row (``used``: the
    colours the experiment's rows have) has."""
    taken = set(used)
    if same_modification(modification, BASELINE) and BASELINE_COLOR not in taken:
        return BASELINE_COLOR
    free = [color for color in PALETTE if color not in taken]
    return free[0] if free else PALETTE[len(taken) % len(PALETTE)]

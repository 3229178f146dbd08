"""The one table of what multilab reports: each metric's key, column, label and decimals, and
the paper's values of it.

Every reader takes its keys from here: the evaluation (the parts of μ), the report (Table 1
and 2 columns, the paper's values, the plot data of ``dvc plots``), the figures (curve
panels), the variant summary (``metrics/variant.json``), and a test checks that ``dvc.yaml``'s
plots name these keys. Adding a metric to the tables is one row here.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class Metric:
    key: str  # MLflow metric, evaluation JSON and metrics/*.json key
    column: str  # Table 1 column header
    label: str  # figure panel title
    decimals: int  # shown in the tables (3: τ of 0.0027 must not read 0.00)
    dvc: str  # the DVC metrics key: Table 1's column in ASCII (see DVC_SEEDS)
    perplexity: bool = False  # a perplexity (log axis, lower is better), not a 0–1 score


#: Table 1 of Dufter & Schütze 2020, in the paper's column order.
METRICS: dict[str, Metric] = {
    m.key: m
    for m in (
        Metric("mu", "μ", "μ (multilinguality score)", 3, "1.mu"),
        Metric("align_f1.l0", "L0 F1", "word alignment F1, layer 0", 3, "2.l0.f1"),
        Metric("retrieval_p1.l0", "L0 ρ", "sentence retrieval ρ, layer 0", 3, "3.l0.rho"),
        Metric("translation_p1.l0", "L0 τ", "word translation τ, layer 0", 3, "4.l0.tau"),
        Metric("align_f1.l8", "L8 F1", "word alignment F1, layer 8", 3, "5.l8.f1"),
        Metric("retrieval_p1.l8", "L8 ρ", "sentence retrieval ρ, layer 8", 3, "6.l8.rho"),
        Metric("translation_p1.l8", "L8 τ", "word translation τ, layer 8", 3, "7.l8.tau"),
        Metric("ppl_train", "ppl train", "MLM perplexity, train", 0, "8.ppl.train",
               perplexity=True),
        Metric("ppl_dev", "ppl dev", "MLM perplexity, dev", 0, "9.ppl.dev", perplexity=True),
    )
}


class LayerMetric(NamedTuple):
    symbol: str  # Table 1's column symbol: ``L8 ρ``
    words: str  # a figure axis's words: ``verse retrieval ρ (P@1), layer 8``


#: The evaluation metrics measured at a layer (``retrieval_p1.l4``, see ``layer_key``): a study
#: of other layers than Table 1's 0 and 8 heads and titles them the same way (``L4 ρ`` beside
#: ``L0 ρ``, not ``retrieval_p1.l4``).
LAYER_METRICS = {"align_f1": LayerMetric("F1", "word alignment F1"),
                 "retrieval_p1": LayerMetric("ρ", "verse retrieval ρ (P@1)"),
                 "translation_p1": LayerMetric("τ", "word translation τ")}


def split_layer_key(key: str) -> tuple[str, int] | None:
    """``layer_key`` undone for a metric of ``LAYER_METRICS``: ``retrieval_p1.l4`` is
    (``retrieval_p1``, 4); None for any other key (``retrieval_p1.l4.3-s``, ``mrr.3-s.l4``)."""
    name, _, layer = key.rpartition(".l")
    if name in LAYER_METRICS and layer.isascii() and layer.isdigit():
        return name, int(layer)
    return None


#: Every evaluation metric beside Table 1's and the per-layer ones, as an ``evaluate``
#: record's ``metrics`` names it: the positional similarities (``evaluation.metrics``) and
#: what the evaluation says of itself (:data:`EVALUATION_FACTS`).
POSITION_KEYS = ("position.cos.same", "position.cos.other", "position.diagonal",
                 "position.cos.same.frequent", "position.cos.same.rare")
#: The per-layer families an evaluation writes besides ``LAYER_METRICS`` (precision, recall,
#: P@5, P@10): ``align_p.l8``, ``retrieval_p10.l8`` …, read from records but not headed.
OTHER_LAYER_FAMILIES = ("align_p", "align_r", "retrieval_p5", "retrieval_p10", "translation_p5")
_EDITION = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)?$")  # a language (``3``) or a pair (``3-s``)


def evaluation_metric(key: str) -> bool:
    """Whether ``key`` is a metric an ``evaluate`` record can hold: Table 1's, a per-layer
    one at any layer (``retrieval_p1.l4``, per language or pair: ``retrieval_p1.l4.3-s``),
    a perplexity per language (``ppl_dev.s``), a positional similarity or an evaluation
    fact. A study metric that is none of these would be an empty column."""
    if key in METRICS or key in POSITION_KEYS or key in EVALUATION_FACTS:
        return True
    name, _, language = key.partition(".")
    if name in PERPLEXITY_KEYS:
        return bool(_EDITION.match(language))
    family, dot, rest = key.partition(".l")
    layer, _, language = rest.partition(".")
    return bool(dot) and family in (*LAYER_METRICS, *OTHER_LAYER_FAMILIES) and \
        layer.isascii() and layer.isdigit() and (not language or bool(_EDITION.match(language)))


def evaluation_metric_names() -> list[str]:
    """The evaluation metrics as a user would write them, for a did-you-mean."""
    return [*METRICS, *POSITION_KEYS, *(f"{family}.l<k>" for family in
                                        (*LAYER_METRICS, *OTHER_LAYER_FAMILIES)),
            *(f"{key}.<edition>" for key in PERPLEXITY_KEYS)]


def column_title(key: str) -> str:
    """A metric's table header: Table 1's column, its form at any other layer, else the key."""
    if key in METRICS:
        return METRICS[key].column
    if split := split_layer_key(key):
        name, layer = split
        return f"L{layer} {LAYER_METRICS[name].symbol}"
    return key


#: The DVC metrics files (``metrics/study/<row>.json``, ``metrics/variant.json``) name each
#: metric by its Table 1 column in ASCII, numbered by its place in the paper's table (``6.l8.rho``
#: for L8 ρ, MLflow's ``retrieval_p1.l8``), and the seeds behind the means ``seeds``: ``dvc
#: metrics show`` sorts its columns by name, so the numbers make them read in the paper's order
#: (μ, layer 0, layer 8, perplexity train and dev). One spelling in every DVC file; MLflow, the
#: evaluation JSONs and the report keep the full keys.
DVC_SEEDS = "seeds"
#: ``metrics/variant.json``'s key for the modification's name: `dvc metrics show` prints it on
#: the variant's row (a path alone does not say which variant it is)
VARIANT_KEY = "variant"


#: The decimals of a DVC metrics file's values: ``dvc metrics show`` prints what is stored
#: (5 decimals by default), and a mean over seeds has no more than three that mean anything.
DVC_DECIMALS = 3


def dvc_metrics(stats: dict[str, tuple[float, float]], n_seeds: int) -> dict[str, float | int]:
    """A DVC metrics file's content: the mean of each table metric under its DVC key, rounded
    to :data:`DVC_DECIMALS`, in the paper's column order, and the number of seeds (standard
    deviations are in the report and beside the models)."""
    return {metric.dvc: round(stats[key][0], DVC_DECIMALS) for key, metric in METRICS.items()
            if key in stats} | {DVC_SEEDS: n_seeds}


#: The few metrics a one-line view of a row shows (``multilab exp``, an MLflow experiment's
#: description), in the paper's column order: μ, τ₀, ρ₈, dev perplexity; their short headers.
HEADLINE = {"mu": "μ", "translation_p1.l0": "τ₀", "retrieval_p1.l8": "ρ₈", "ppl_dev": "ppl dev"}

#: μ of the paper: the mean of retrieval (ρ) and translation (τ) at layers 0 and 8.
MU_PARTS = ("retrieval_p1.l0", "retrieval_p1.l8", "translation_p1.l0", "translation_p1.l8")
#: The curves of multilinguality during training (figures, ``dvc plots``).
MULTILINGUALITY_CURVES = ("mu", *MU_PARTS)
PERPLEXITY_KEYS = tuple(key for key, metric in METRICS.items() if metric.perplexity)
#: What the training curve points log and the figures draw.
CURVE_KEYS = MULTILINGUALITY_CURVES + PERPLEXITY_KEYS
#: Curve points during training are evaluated on ``evaluate.curve_sentences`` dev sentences
#: (1,000), the final evaluation on ``evaluate.dev_sentences`` (10,000): retrieval P@1 among
#: 1,000 candidates and among 10,000 are different numbers, so the curve points are logged
#: under their own names (``curve/mu``, ``curve/ppl_dev``, ...) and never share a history with
#: the final values (``mu``, ``ppl_dev``, ...).
CURVE_PREFIX = "curve/"
#: What an evaluation's results say of the evaluation itself, not of the model: how long it
#: took and on how many dev sentences. They go to MLflow as tags, not metrics (a constant
#: among the metrics is a chart of one dot, and Compare would offer it as a metric).
EVALUATION_FACTS = ("eval_seconds", "eval_sentences")


def curve_key(key: str) -> str:
    """The MLflow name of ``key`` at a curve point: ``mu`` → ``curve/mu``."""
    return CURVE_PREFIX + key


#: The per-step training loss (``multilab train`` logs it, ``dvc plots`` draws it).
TRAIN_LOSS = "train_loss"
#: ``dvc plots``: one chart per quantity, every model of the study overlaid. The report writes
#: ``reports/plots/<quantity>.csv`` with a ``step`` column and one column per study entry
#: (mean over seeds); dvc.yaml draws each file with ``y: ${study}``. Quantity → its MLflow
#: metric: the loss of every step, the others at the curve points.
PLOTS: dict[str, str] = {TRAIN_LOSS: TRAIN_LOSS} | {key: curve_key(key) for key in CURVE_KEYS}


def label(key: str) -> str:
    return METRICS[key].label if key in METRICS else key


def layer_key(name: str, layer: int) -> str:
    """The key of a per-layer metric: ``retrieval_p1`` at layer 8 is ``retrieval_p1.l8``."""
    return f"{name}.l{layer}"


# Dufter & Schütze 2020, Tables 1 and 2: the means the paper reports, one row per paper model ID,
# one column per metric key (the header names them).
_PAPER_TABLE = """
ID   mu    align_f1.l0  retrieval_p1.l0  translation_p1.l0  align_f1.l8  retrieval_p1.l8  translation_p1.l8  ppl_train  ppl_dev
0    0.70  1.00         0.16             0.88               1.00         0.97             0.79               9          217
1    0.30  0.87         0.33             0.40               0.89         0.39             0.09               9          216
2    0.66  1.00         0.15             0.88               1.00         0.97             0.63               9          227
4    0.68  1.00         0.19             0.87               1.00         0.85             0.82               9          273
5    0.20  0.62         0.22             0.27               0.72         0.27             0.05               10         205
6    0.30  0.91         0.29             0.36               0.89         0.32             0.25               10         271
7    0.68  1.00         0.21             0.85               1.00         0.89             0.79               8          259
8    0.12  0.46         0.09             0.18               0.54         0.11             0.11               10         254
15   0.58  1.00         0.27             0.63               1.00         0.97             0.47               2          261
16   0.01  0.25         0.01             0.01               0.37         0.01             0.00               3          254
17   0.00  0.05         0.00             0.00               0.05         0.00             0.00               1          307
3    0.01  0.02         0.00             0.01               0.02         0.01             0.00               11         209
9    0.00  0.04         0.00             0.00               0.03         0.00             0.00               10         270
18   0.00  0.97         0.00             0.00               0.96         0.00             0.00               3484       4128
19   0.00  0.02         0.00             0.00               0.02         0.00             0.00               3488       4133
30   0.74  1.00         0.31             0.88               1.00         0.97             0.81               11         225
21   0.25  0.98         0.06             0.28               0.98         0.50             0.15               14         383
21b  0.07  0.60         0.10             0.07               0.73         0.11             0.02               16         456
"""  # noqa: E501 (a table is read across)


def _number(text: str) -> float | int:
    return float(text) if "." in text else int(text)


def _parse(table: str) -> dict[str, dict[str, float | int]]:
    header, *rows = (line.split() for line in table.strip().splitlines())
    return {row[0]: dict(zip(header[1:], map(_number, row[1:]), strict=True)) for row in rows}


#: Paper model ID → {metric key: the paper's mean}.
PAPER_VALUES: dict[str, dict[str, float | int]] = _parse(_PAPER_TABLE)
#: Table 2 of the paper: parallel vs non-parallel corpus (the first ID is the baseline).
TABLE2_IDS = ("0", "21", "21b")


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single seed)."""
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else 0.0


#: The columns of the short table ``multilab evaluate`` and ``variant`` print.
SHORT_TABLE = ("mu", "align_f1.l8", "retrieval_p1.l0", "retrieval_p1.l8", "translation_p1.l0",
               "translation_p1.l8", "ppl_dev")


def short_table(rows: dict[str, dict[str, float]]) -> str:
    """A few headline metrics of some models, one line each (the terminal's view; the full
    results are in the JSON files)."""
    width = max([len("model"), *map(len, rows)])
    head = f"{'model':<{width}}" + "".join(f"{METRICS[k].column:>10}" for k in SHORT_TABLE)
    lines = [head]
    for name, values in rows.items():
        cells = []
        for key in SHORT_TABLE:
            value = values.get(key)
            digits = METRICS[key].decimals
            cells.append(f"{'–':>10}" if value is None else f"{value:>10,.{digits}f}")
        lines.append(f"{name:<{width}}" + "".join(cells))
    return "\n".join(lines)


def summarise(per_seed: list[dict[str, float]]) -> dict[str, tuple[float, float]]:
    """(mean, std) over seeds of each table metric that every seed has, in table order."""
    summary = {}
    for key in METRICS:
        values = [metrics[key] for metrics in per_seed if key in metrics]
        if values and len(values) == len(per_seed):
            summary[key] = mean_std(values)
    return summary

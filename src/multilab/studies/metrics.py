"""Study metrics: where a metric's number is in the records, and how it is read.

A study names its metrics as text (``mu``, ``downstream.zero_shot.s``, ``mrr.3-fake.best``,
``translate.3-s.convert_rate.l10.a1``, ``similarity.cka.floor_gap``,
``static.skipgram.w5.r2000.mrr``, a Δ ``A minus B``); :func:`metric_source` says which record
kind holds it, which of a model's records of that kind (its language pair, a ``--mds`` run)
and how the number is read. A metric of a known kind in another form is a ValueError, so a
spec naming one is refused when it is loaded.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from multilab.data.pos_lexicon import POS_GROUPS
from multilab.studies.records import Record, flatten

#: record kinds measured on no single lab model: a static row's embeddings (``multilab
#: static``), a similarity of two models (the row of its first model)
MODEL_LESS = ("static", "similarity")
#: a model's training minutes, from its ``train`` record
MINUTES = "train.minutes"
#: ``A minus B``: a Δ metric, per seed, of two metrics of the same row
MINUS = " minus "


@dataclass(frozen=True)
class Source:
    """Where a study metric's value is in the records: the record ``kind``, which of a
    model's records of that kind (``variant``: a language pair of ``mrr`` / ``translate``,
    ``mds`` for a ``downstream --mds`` record, else empty) and how the number is read."""

    kind: str
    variant: str
    read: Callable[[Record], float | None]


def record_variant(record: Record) -> str:
    """The variant of a record (see :class:`Source`): a model's records of one kind that
    measure different things (two directions of word retrieval, a shifted fine-tune)."""
    result = record.data["result"]
    if record.kind in ("mrr", "translate"):
        return f"{result.get('source')}-{result.get('target')}"
    if record.kind == "downstream" and "mds" in result:
        return "mds"
    return ""


def _avg_wo_first(record: Record, what: str) -> float | None:
    """The mean zero-shot accuracy over every test language but the fine-tuning one (the
    first of the record's languages), or of the shifted / unshifted MDS accuracies."""
    result = record.data["result"]
    if what != "zero_shot":
        field = "test_shifted" if what == "mds" else "test_unshifted"
        values = [v[field] for v in result.get("mds", {}).get("languages", {}).values()]
    else:
        languages = result.get("languages") or []
        first = _test_key(str(languages[0])) if languages else None
        values = [v["accuracy"] for key, v in result.get("test", {}).items() if key != first]
    return statistics.fmean(values) if values else None


def _ratio(record: Record, key: str) -> float | None:
    """Zero-shot accuracy on ``key`` over the in-language accuracy of the fine-tuning
    language (the record's first label): how much of what was learnt transfers."""
    result = record.data["result"]
    tests, labels = result.get("test", {}), result.get("labels") or [None]
    own = tests.get(labels[0], {}).get("accuracy")
    other = tests.get(key, {}).get("accuracy")
    return other / own if own and other is not None else None


def _minutes(record: Record) -> float | None:
    """A train record's training time in minutes (its ``step_seconds``: the wall time of the
    training steps, longer on a loaded machine)."""
    seconds = record.data["result"].get("step_seconds")
    return seconds / 60 if isinstance(seconds, int | float) else None


def _at(path: str) -> Callable[[Record], float | None]:
    return lambda record: record.metrics.get(path)


def _layer(text: str) -> int:
    if not text.startswith("l") or not text[1:].isdigit():
        raise ValueError(text)
    return int(text[1:])


def _by_layer(entries: Any, layer: int, key: str) -> float | None:
    found = [e.get(key) for e in entries or () if isinstance(e, Mapping)
             and e.get("layer") == layer]
    return float(found[0]) if found and found[0] is not None else None


def _best(entries: Any, key: str, what: str) -> float | None:
    """The largest ``key`` over layers (``what`` = value) or its layer (``what`` = layer)."""
    rows = [e for e in entries or () if isinstance(e, Mapping) and e.get(key) is not None]
    if not rows:
        return None
    top = max(rows, key=lambda e: e[key])
    return float(top[key] if what == "value" else top["layer"])


def _pos_at_best(entries: Any, group: str) -> float | None:
    """MRR of one part-of-speech group's queries at the layer of the best MRR overall (the
    layer ``best`` reads), where the record has groups (an English source)."""
    rows = [e for e in entries or () if isinstance(e, Mapping) and e.get("mrr") is not None]
    if not rows:
        return None
    found = (max(rows, key=lambda e: e["mrr"]).get("pos") or {}).get(group) or {}
    return float(found["mrr"]) if found.get("mrr") is not None else None


def _mrr_reader(rest: list[str]) -> Callable[[Record], float | None]:
    """``l<k>`` (MRR at layer k), ``best``, ``best_layer``, ``p1.l<k>``, ``untrained.l<k>``,
    ``untrained.best``, ``pos.<group>`` (a part-of-speech group of English source words at
    the best layer: noun, verb, adj, adv, open, closed)."""
    if len(rest) == 2 and rest[0] == "pos":
        if rest[1] not in POS_GROUPS:
            raise ValueError(rest[1])
        return lambda r: _pos_at_best(r.data["result"].get("trained"), rest[1])
    side = "trained"
    if rest[:1] == ["untrained"]:
        side, rest = "untrained", rest[1:]
    key = "mrr"
    if rest[:1] == ["p1"]:
        key, rest = "p1", rest[1:]
    if rest == ["best"]:
        return lambda r: _best(r.data["result"].get(side), key, "value")
    if rest == ["best_layer"]:
        return lambda r: _best(r.data["result"].get(side), key, "layer")
    (layer,) = rest
    k = _layer(layer)
    return lambda r: _by_layer(r.data["result"].get(side), k, key)


def _grid_cell(result: Mapping[str, Any], measure: str, layer: int, alpha: float
               ) -> float | None:
    alphas = [float(a) for a in result.get("alphas", ())]
    layers = list(result.get("layers", ()))
    if alpha not in alphas or layer not in layers:
        return None
    return float(result[measure][alphas.index(alpha)][layers.index(layer)])


def _grid_best(result: Mapping[str, Any], measure: str, what: str) -> float | None:
    """The largest cell of an α × layer grid, or its α or layer (the first of ties)."""
    cells = [(value, float(alpha), layer)
             for alpha, row in zip(result.get("alphas", ()), result.get(measure, ()),
                                   strict=False)
             for layer, value in zip(result.get("layers", ()), row, strict=False)]
    if not cells:
        return None
    value, alpha, layer = max(cells, key=lambda cell: cell[0])
    return float({"value": value, "alpha": alpha, "layer": layer}[what])


def _layer_span(text: str) -> tuple[int, int]:
    """``l<a>-<b>``: layers a to b, both included."""
    first, dash, last = text[1:].partition("-")
    if not text.startswith("l") or not dash or not (first.isdigit() and last.isdigit()) \
            or int(first) > int(last):
        raise ValueError(text)
    return int(first), int(last)


def _span_best(result: Mapping[str, Any], measure: str, span: tuple[int, int], alpha: float
               ) -> float | None:
    """The largest cell of layers ``span`` at ``alpha`` (None unless every layer is there)."""
    cells = [_grid_cell(result, measure, layer, alpha) for layer in range(span[0], span[1] + 1)]
    return max(cells) if cells and None not in cells else None  # type: ignore[type-var]


def _translate_reader(rest: list[str]) -> Callable[[Record], float | None]:
    """``<convert_rate|bleu1>.l<k>.a<alpha>``, ``<measure>.best``, ``<measure>.best_layer``,
    ``<measure>.best_alpha``, ``<measure>.best.l<a>-<b>.a<alpha>`` (the best of layers a-b
    at one α: where along the depth a measure peaks), ``unshifted.<measure>``."""
    if rest[0] == "unshifted":
        return _at(".".join(["unshifted", *rest[1:]]))
    measure, *where = rest
    if measure not in ("convert_rate", "bleu1"):
        raise ValueError(measure)
    if where in (["best"], ["best_layer"], ["best_alpha"]):
        what = {"best": "value", "best_layer": "layer", "best_alpha": "alpha"}[where[0]]
        return lambda r: _grid_best(r.data["result"], measure, what)
    if len(where) == 3 and where[0] == "best":
        span, alpha = _layer_span(where[1]), where[2]
        if not alpha.startswith("a"):
            raise ValueError(alpha)
        at = float(alpha[1:])
        return lambda r: _span_best(r.data["result"], measure, span, at)
    layer, alpha = where
    if not alpha.startswith("a"):
        raise ValueError(alpha)
    k, a = _layer(layer), float(alpha[1:])
    return lambda r: _grid_cell(r.data["result"], measure, k, a)


def _similarity_reader(rest: list[str]) -> Callable[[Record], float | None]:
    """``<measure>.l<k>``, ``<measure>.untrained.l<k>``, ``<measure>.best``,
    ``<measure>.floor_gap`` (the smallest gap over layers between the trained models and
    the untrained pair of the same shapes: above zero at every layer = above the floor)."""
    measure, *where = rest

    def curve(record: Record, side: str) -> list[float]:
        return [float(v) for v in record.data["result"].get(side, {}).get(measure, ())]

    if where == ["floor_gap"]:
        def gap(record: Record) -> float | None:
            pairs = list(zip(curve(record, "trained"), curve(record, "untrained"),
                             strict=False))
            return min(t - u for t, u in pairs) if pairs else None
        return gap
    side = "trained"
    if where[:1] == ["untrained"]:
        side, where = "untrained", where[1:]
    if where == ["best"]:
        return lambda r: max(curve(r, side), default=None)
    (layer,) = where
    k = _layer(layer)

    def at_layer(record: Record) -> float | None:
        layers = list(record.data["result"].get("layers", ()))
        values = curve(record, side)
        return values[layers.index(k)] if k in layers and layers.index(k) < len(values) \
            else None
    return at_layer


def _static_reader(rest: list[str]) -> Callable[[Record], float | None]:
    """``<model>.w<window>.r<rows|all>.<mrr|p1>`` or ``….zero_shot.<test label>``: one
    static model (skipgram, cbow) of a window and a number of train rows (``all``)."""
    model, window, rows, *path = rest
    if not window.startswith("w") or not rows.startswith("r") or not path:
        raise ValueError(rest)
    w = int(window[1:])

    def read(record: Record) -> float | None:
        result = record.data["result"]
        n = result.get("train_rows") if rows == "rall" else int(rows[1:])
        for entry in result.get("results", ()):
            if entry.get("model") == model and entry.get("window") == w and \
                    entry.get("rows") == n:
                key = (f"zero_shot.test.{path[1]}.accuracy" if path[0] == "zero_shot"
                       else ".".join(path))
                return flatten(entry).get(key)
        return None
    return read


def _curve_reader(rest: list[str], metric: str) -> Callable[[Record], float | None]:
    """``<metric>.at<percent>``: the curve point taken at ``round(percent / 100 × steps)``
    (how training places them, ``train.eval_points``); None where the record has none."""
    if len(rest) < 2 or not rest[-1].startswith("at") or not rest[-1][2:].isdigit() \
            or not 0 < int(rest[-1][2:]) < 100:
        raise ValueError(metric)
    name, share = ".".join(rest[:-1]), int(rest[-1][2:]) / 100

    def read(record: Record) -> float | None:
        result = record.data["result"]
        steps = result.get("steps")
        if not isinstance(steps, int | float):
            return None
        at = max(1, round(share * steps))
        found = [point.get(name) for point in result.get("curve") or ()
                 if isinstance(point, Mapping) and point.get("step") == at]
        return float(found[0]) if found and found[0] is not None else None
    return read


def metric_source(metric: str) -> Source:
    """Which record holds a study metric and how its number is read.

    - ``mu``, ``retrieval_p1.l8`` …: an ``evaluate`` record's ``metrics``.
    - ``downstream.zero_shot.<edition>``: a ``downstream`` record's test accuracy (claims
      name the edition, ``s``; records key test sets by ISO code, ``de``);
      ``downstream.ratio.<edition>``: that accuracy over the fine-tuning language's own;
      ``downstream.mds.<edition>`` / ``downstream.mds_unshifted.<edition>``: a
      ``downstream --mds`` record's accuracy with and without the shift.
    - ``mrr.<source>-<target>.<l<k>|best|best_layer|p1.l<k>|untrained.l<k>|pos.<group>>``:
      word retrieval (``pos``: English source words of one part-of-speech group).
    - ``translate.<source>-<target>.<convert_rate|bleu1>.<l<k>.a<α>|best|best_layer|
      best_alpha|best.l<a>-<b>.a<α>>``, ``translate.<pair>.unshifted.<measure>``: token
      translation.
    - ``similarity.<measure>.<l<k>|untrained.l<k>|best|floor_gap>``: two models compared.
    - ``static.<model>.w<window>.r<rows|all>.<mrr|p1|zero_shot.<label>>``: static embeddings.
    - ``train.minutes``: a ``train`` record's training time.
    - ``curve.<metric>.at<percent>``: a ``train`` record's curve point at that share of its
      steps (``curve.mu.at20``: μ at 20 %, on ``evaluate.curve_sentences`` dev sentences).

    ValueError: a metric of a known kind whose form is not one of these."""
    parts = metric.split(".")
    head = parts[0]
    if metric.startswith("downstream."):
        if len(parts) < 3:
            raise ValueError(metric)
        what, language = parts[1], ".".join(parts[2:])
        if language == "avg_wo_first" and what in ("zero_shot", "mds", "mds_unshifted"):
            return Source("downstream", "" if what == "zero_shot" else "mds",
                          lambda record: _avg_wo_first(record, what))
        key = _test_key(language)
        if what == "ratio":
            return Source("downstream", "", lambda record: _ratio(record, key))
        if what == "zero_shot":
            return Source("downstream", "", _at(f"test.{key}.accuracy"))
        if what in ("mds", "mds_unshifted"):
            which = "test_shifted" if what == "mds" else "test_unshifted"
            return Source("downstream", "mds", _at(f"mds.languages.{key}.{which}"))
        raise ValueError(metric)
    if metric == MINUTES:
        return Source("train", "", _minutes)
    if head == "curve":
        return Source("train", "", _curve_reader(parts[1:], metric))
    try:
        if head in ("mrr", "translate") and len(parts) >= 3:
            reader = (_mrr_reader if head == "mrr" else _translate_reader)(parts[2:])
            return Source(head, parts[1], reader)
        if head == "similarity" and len(parts) >= 3:
            return Source("similarity", "", _similarity_reader(parts[1:]))
        if head == "static" and len(parts) >= 5:
            return Source("static", "", _static_reader(parts[1:]))
    except (ValueError, TypeError) as err:
        raise ValueError(metric) from err
    if head in ("mrr", "translate", "similarity", "static"):
        raise ValueError(metric)
    return Source("evaluate", "", _at(f"metrics.{metric}"))


def metric_sources(metric: str) -> list[Source]:
    """The sources a metric reads: two for a Δ (``A minus B``), else one."""
    return [metric_source(part) for part in metric.split(MINUS)]


def _test_key(language: str) -> str:
    """``s`` → ``de``, ``enfake:3`` → ``en-enfake``; an ISO code (or anything that is no
    edition) stays as written."""
    from multilab.lab.languages import LanguageError, parse_languages

    try:
        (parsed,) = parse_languages([language])
    except (LanguageError, ValueError):
        return language
    return parsed.iso

"""The paper's figures (Dufter & Schütze 2020 Figs. 4–8) from saved models and their MLflow curves.

* positions: cosine similarity of the position embeddings (Figs. 5 and 8),
* pca: 2-D PCA of the layer-0 token embeddings, English vs Fake-English (Fig. 4),
* curves: multilinguality and model fit against training steps, mean ± std over seeds
  (Figs. 6 and 7).

Figures are drawn on :class:`matplotlib.figure.Figure` objects with an explicit Agg canvas,
never through ``pyplot``: no global backend switch, no figure registry to leak memory in long
report runs, no GUI ever touched. A model's tables are read from its safetensors (no
transformers). MLflow is reached only through :mod:`multilab.tracking`.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import matplotlib
import matplotlib.ticker as ticker
import pandas as pd
import torch
import torch.nn.functional as F
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from multilab import tracking
from multilab.config import Config, Paths
from multilab.data.vocab import FAKE_PREFIX, saved_words
from multilab.errors import UserError
from multilab.files import save_figure
from multilab.lab.metric_table import (
    CURVE_KEYS,
    PAPER_VALUES,
    PERPLEXITY_KEYS,
    curve_key,
    label,
)
from multilab.lab.modifications import (
    canonical_name,
    file_stem,
    paper_id,
    resolve_recipe,
)
from multilab.labels import label_points
from multilab.training.model_dir import DONE_FILE, looks_like_model_dir, read_done

ENGLISH_COLOUR, FAKE_COLOUR = "tab:blue", "tab:orange"
STUDY_CURVES = "study-curves.png"
ARTIFACT_FOLDER = "figures"
RUN_ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")
SAMPLE_WORDS = 15


# --------------------------------------------------------------------------- positions


class SavedEmbeddings(NamedTuple):
    """A saved model's layer-0 tables, all its figures draw."""

    words: torch.Tensor  # [vocabulary, hidden]
    positions: torch.Tensor  # [position ids, hidden]


#: their names in a saved BertForMaskedLM's model.safetensors
WORD_EMBEDDINGS = "bert.embeddings.word_embeddings.weight"
POSITION_EMBEDDINGS = "bert.embeddings.position_embeddings.weight"


def saved_embeddings(model_dir: Path) -> SavedEmbeddings:
    """The word and position embeddings of a saved model, read from its safetensors without
    building the model: the report's figures import no transformers (≈ 4.5 CPU s a report)."""
    from safetensors import safe_open

    missing = [f for f in ("config.json", "model.safetensors") if not (model_dir / f).exists()]
    if missing:
        raise UserError(
            f"{model_dir} is not a multilab model directory (missing {', '.join(missing)})"
        )
    try:
        with safe_open(str(model_dir / "model.safetensors"), framework="pt") as weights:
            return SavedEmbeddings(weights.get_tensor(WORD_EMBEDDINGS).float(),
                                   weights.get_tensor(POSITION_EMBEDDINGS).float())
    except Exception as err:  # a cut or foreign file surfaces as several exception types
        raise UserError(f"{model_dir} holds a corrupted checkpoint: {err}") from err


def position_similarity(weights: torch.Tensor) -> torch.Tensor:
    """Cosine similarity between every pair of position embeddings ([P, P], float32)."""
    unit = F.normalize(weights.detach().float().cpu(), dim=1)
    similarity = unit @ unit.T
    return (similarity + similarity.T) / 2  # exactly symmetric despite matmul rounding


def plot_position_similarity(
    sim: torch.Tensor,
    path: Path,
    title: str,
    boundary: int = 128,
    region_labels: tuple[str, str] = ("English", "Fake-English"),
) -> Path:
    """Heat map of a position similarity matrix; dashed lines where Fake-English starts.

    Under lang-pos, ids ``0..boundary-1`` are English positions and ``boundary..`` the
    Fake-English ones; otherwise ``region_labels`` should say the upper half is unused.
    """
    size = sim.shape[0]
    figure = Figure(figsize=(6.6, 5.8), layout="constrained")
    axes = figure.add_subplot()
    image = axes.imshow(
        sim.numpy(), cmap="viridis", vmin=-1.0, vmax=1.0, interpolation="nearest"
    )
    colour_bar = figure.colorbar(image, ax=axes, shrink=0.85)
    colour_bar.set_label("cosine similarity")
    ticks = [*range(0, size, 32), size - 1]
    axes.set_xticks(ticks)
    axes.set_yticks(ticks)
    axes.set_xlabel("position embedding id")
    axes.set_ylabel("position embedding id")
    if 0 < boundary < size:
        for line in (axes.axvline, axes.axhline):
            line(boundary - 0.5, color="white", linestyle="--", linewidth=1.0)
        regions = axes.secondary_xaxis("top")
        regions.set_xticks(
            [(boundary - 1) / 2, (boundary + size - 1) / 2],
            [f"{region_labels[0]} (0–{boundary - 1})",
             f"{region_labels[1]} ({boundary}–{size - 1})"],
        )
        regions.tick_params(length=0)
    # long combos ("lang-pos;inv-order;shift-special;no-random, seed 0") would run off the
    # square figure: wrap them
    axes.set_title("\n".join(textwrap.wrap(title, 52, break_on_hyphens=False)), fontsize=11)
    return save_png(figure, path)


# --------------------------------------------------------------------------- token PCA


class TokenPCA(NamedTuple):
    """2-D PCA coordinates and the share of the variance each component explains."""

    coords: torch.Tensor  # [n, 2]
    explained: torch.Tensor  # [2]


def pca_2d(points: torch.Tensor) -> TokenPCA:
    """Exact PCA by SVD in float64, with the sign of each axis fixed (deterministic).

    SVD leaves each component's sign arbitrary; flipping it so that the largest loading is
    positive makes the picture identical across runs and machines.
    """
    centred = points.detach().double().cpu()
    centred = centred - centred.mean(dim=0)
    _, singular, components = torch.linalg.svd(centred, full_matrices=False)
    components = components[:2]
    largest = components.abs().argmax(dim=1)
    signs = torch.sign(components[torch.arange(2), largest])
    components = components * signs[:, None]
    variance = singular**2
    return TokenPCA(
        coords=(centred @ components.T).float(),
        explained=(variance[:2] / variance.sum()).float(),
    )


def token_pca(embeddings: torch.Tensor, vocab_size: int = 2048) -> TokenPCA:
    """PCA of the layer-0 token embeddings of English (``0..V-1``) and Fake-English (``V..2V-1``).

    One PCA over both languages, so the two clouds share axes and can be compared (Fig. 4).
    """
    if embeddings.shape[0] < 2 * vocab_size:
        raise UserError(
            f"model has {embeddings.shape[0]} token embeddings, fewer than 2 x {vocab_size}"
        )
    return pca_2d(embeddings[: 2 * vocab_size])


def sample_word_ids(tokens: list[str], count: int = SAMPLE_WORDS) -> list[int]:
    """The first ``count`` whole words of ≥ 3 letters in vocabulary order.

    WordPiece adds merges in order of frequency, so the earliest whole-word tokens are
    frequent words (the, and, you, ...): a fixed, readable sample without corpus counts.
    """
    chosen = [i for i, token in enumerate(tokens) if token.isalpha() and len(token) >= 3]
    return chosen[:count]


def plot_token_pca(
    embeddings: torch.Tensor, tokens: list[str], path: Path, title: str
) -> Path:
    """Left: all tokens of both languages; right: a word sample with its Fake twins joined.

    The sample panel is a PCA of the sample alone, so its pairs are not lost among the
    4096 points of the full cloud.
    """
    vocab_size = len(tokens)
    full = token_pca(embeddings, vocab_size)
    figure = Figure(figsize=(13, 5.6), layout="constrained")
    cloud, sample = figure.subplots(1, 2)
    points = full.coords.numpy()
    for rows, colour, name in (
        (slice(0, vocab_size), ENGLISH_COLOUR, f"English (ids 0–{vocab_size - 1})"),
        (slice(vocab_size, 2 * vocab_size), FAKE_COLOUR,
         f"Fake-English (ids {vocab_size}–{2 * vocab_size - 1})"),
    ):
        cloud.scatter(points[rows, 0], points[rows, 1], s=3, alpha=0.45, color=colour,
                      label=name, linewidths=0)
    _label_pca_axes(cloud, full)
    cloud.set_title("all token embeddings (layer 0)")
    cloud.legend(loc="best", markerscale=4, fontsize=9)

    words = sample_word_ids(tokens)
    if words:
        ids = torch.tensor(words + [w + vocab_size for w in words])
        zoom = pca_2d(embeddings[ids])
        english, fake = zoom.coords[: len(words)].numpy(), zoom.coords[len(words) :].numpy()
        for (ex, ey), (fx, fy) in zip(english, fake, strict=True):
            sample.plot([ex, fx], [ey, fy], color="grey", linewidth=0.8, zorder=1)
        sample.scatter(english[:, 0], english[:, 1], color=ENGLISH_COLOUR, s=22, zorder=2,
                       label="English")
        sample.scatter(fake[:, 0], fake[:, 1], color=FAKE_COLOUR, s=22, zorder=2,
                       label="Fake-English")
        _label_pca_axes(sample, zoom)
        sample.margins(x=0.16, y=0.06)  # room for the outermost labels inside the frame
        sample.set_title(f"{len(words)} frequent words and their Fake twins (own PCA)")
        # below the panel: inside, "best" still covers labels (it sees points, not text)
        sample.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=2, fontsize=9,
                      frameon=False)
    figure.suptitle(title, fontsize=12)
    if words:  # last: placing the labels fixes the layout
        names = [tokens[w] for w in words]
        label_points(sample, [*map(tuple, english), *map(tuple, fake)],
                     [*names, *(FAKE_PREFIX + name for name in names)],
                     [ENGLISH_COLOUR] * len(words) + [FAKE_COLOUR] * len(words),
                     partners=[*range(len(words), 2 * len(words)), *range(len(words))])
    return save_png(figure, path)


def _label_pca_axes(axes, pca: TokenPCA) -> None:
    axes.set_xlabel(f"PC 1 ({pca.explained[0]:.0%} of variance)")
    axes.set_ylabel(f"PC 2 ({pca.explained[1]:.0%} of variance)")


# --------------------------------------------------------------------------- curves


def run_curves(paths: Paths, run_id: str, keys: tuple[str, ...] = CURVE_KEYS) -> pd.DataFrame:
    """A run's curve points from MLflow: a ``step`` column and one column per key.

    Curve points are logged as ``curve/<key>`` (measured on ``curve_sentences``); the final
    evaluation's value of ``<key>`` is another measurement (:func:`final_values`). Runs logged
    before the split carry both under ``<key>``: their final step is left out here.
    """
    names = {key: curve_key(key) for key in keys}
    frame = metric_frame(paths, run_id, names)
    if len(frame.columns) > 1:
        return frame
    legacy = metric_frame(paths, run_id, {key: key for key in keys})
    total = tracking.metric_history(paths, run_id, "total_steps")
    if total and not legacy.empty:
        legacy = legacy[legacy["step"] != int(total[-1][1])].reset_index(drop=True)
    return legacy if len(legacy) else pd.DataFrame(columns=["step"])


def metric_frame(paths: Paths, run_id: str, names: dict[str, str]) -> pd.DataFrame:
    """Histories of MLflow metrics (``names``: column → metric) joined on ``step``; a step
    logged twice (a resumed run replaying steps) counts once, as the mean of its values."""
    columns = {}
    for column, metric in names.items():
        history = tracking.metric_history(paths, run_id, metric)
        if history:
            frame = pd.DataFrame(history, columns=["step", column])
            columns[column] = frame.groupby("step")[column].mean()
    if not columns:
        return pd.DataFrame(columns=["step"])
    return pd.DataFrame(columns).rename_axis("step").reset_index()


def final_values(paths: Paths, run_id: str, keys: tuple[str, ...] = CURVE_KEYS
                 ) -> dict[str, tuple[int, float]]:
    """The final evaluation of a run: key → (step, value), the latest point of each key."""
    found = {}
    for key in keys:
        history = tracking.metric_history(paths, run_id, key)
        if history:
            found[key] = history[-1]
    return found


def curve_stats(frames: list[pd.DataFrame], key: str) -> pd.DataFrame:
    """Mean and sample std of ``key`` over seeds at each step (outer-aligned on step).

    A step that only some seeds reached is averaged over those (``seeds`` says how many);
    a single value has std 0, as in the report tables.
    """
    series = [
        frame.groupby("step")[key].mean().dropna()
        for frame in frames
        if key in frame.columns and "step" in frame.columns
    ]
    series = [s for s in series if not s.empty]
    if not series:
        return pd.DataFrame(columns=["step", "mean", "std", "seeds"])
    table = pd.concat(series, axis=1, join="outer").sort_index()
    stats = pd.DataFrame(
        {
            "mean": table.mean(axis=1),
            "std": table.std(axis=1, ddof=1).fillna(0.0),
            "seeds": table.count(axis=1),
        }
    )
    return stats.rename_axis("step").reset_index()


#: Line styles and markers cycled with the colours. Groups with equal values (untrained and
#: inv-order both at 0) lie on one another: each later group is drawn above the earlier ones
#: with a thinner, dashed line, so the wider line below still shows on both sides.
LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


@dataclass(frozen=True)
class CurveGroup:
    """One line of a curve figure: curve points per seed, final evaluations per seed, the
    paper's final values (key → value) where the paper reports them."""

    frames: list[pd.DataFrame]
    finals: list[dict[str, tuple[int, float]]] = ()
    paper: dict[str, float] | None = None


def plot_curves(
    groups: dict[str, list[pd.DataFrame] | CurveGroup],
    keys: tuple[str, ...],
    path: Path,
    title: str,
    legend_title: str | None = "mean ± std over seeds",
    note: str | None = None,
) -> Path:
    """One panel per metric, one colour, line style and marker per group: mean line and ±std
    band over seeds; the final evaluation as a large hollow marker at the last step; the
    paper's final value as a thin dotted horizontal line in the group's colour."""
    groups = {name: g if isinstance(g, CurveGroup) else CurveGroup(g)
              for name, g in groups.items()}
    present = [
        key for key in keys
        if any(key in frame.columns for g in groups.values() for frame in g.frames)
        or any(key in final for g in groups.values() for final in g.finals)
    ]
    if not present:
        raise UserError(f"no curve metric ({', '.join(keys)}) to plot for {path.name}")
    columns = 3 if len(present) <= 6 else 4
    rows = math.ceil(len(present) / columns)
    figure = Figure(figsize=(4.4 * columns, 3.4 * rows + 0.9), layout="constrained")
    panels = figure.subplots(rows, columns, squeeze=False).ravel()
    palette = matplotlib.colormaps["tab10" if len(groups) <= 10 else "tab20"]
    handles: dict[str, object] = {}
    means: dict[str, list[float]] = {key: [] for key in present}
    count = len(groups)
    for index, (name, group) in enumerate(groups.items()):
        colour = palette(index % palette.N)
        style = {"color": colour, "linestyle": LINE_STYLES[index % len(LINE_STYLES)],
                 "marker": MARKERS[index % len(MARKERS)],
                 "markersize": 3 + 2 * (count - 1 - index) ** 0.5,
                 "linewidth": 1.2 + 1.2 * (count - 1 - index), "zorder": 3 + index}
        for panel, key in zip(panels, present, strict=False):
            stats = curve_stats(group.frames, key)
            if not stats.empty:
                steps = stats["step"].to_numpy(dtype=float)
                mean, std = stats["mean"].to_numpy(), stats["std"].to_numpy()
                (handles[name],) = panel.plot(steps, mean, label=name, **style)
                panel.fill_between(steps, mean - std, mean + std, color=colour, alpha=0.15,
                                   linewidth=0)
                means[key] += mean.tolist()
            finals = [final[key] for final in group.finals if key in final]
            if finals:
                step = max(s for s, _ in finals)
                value = sum(v for _, v in finals) / len(finals)
                (marker,) = panel.plot([step], [value], linestyle="none",
                                       marker=style["marker"], markersize=9,
                                       markerfacecolor="none", markeredgecolor=colour,
                                       markeredgewidth=1.8, zorder=style["zorder"] + count)
                handles.setdefault(name, marker)
                means[key].append(value)
            if group.paper and key in group.paper:
                panel.axhline(group.paper[key], color=colour, linestyle=":", linewidth=1.1,
                              alpha=0.9, zorder=1)
                means[key].append(float(group.paper[key]))
    for panel, key in zip(panels, present, strict=False):
        _style_curve_panel(panel, key, means[key])
    spare = panels[len(present) :]
    for panel in spare:
        panel.set_axis_off()
    if len(spare) > 0:  # an empty grid cell holds the legend
        spare[0].legend(handles.values(), handles.keys(), loc="center", fontsize=9,
                        frameon=False, title=legend_title)
    else:
        figure.legend(handles.values(), handles.keys(), loc="outside lower center",
                      ncols=min(len(handles), 3), fontsize=9, title=legend_title)
    figure.suptitle(title + (f"\n{note}" if note else ""), fontsize=11)
    return save_png(figure, path)


# --------------------------------------------------------------------------- one model


@dataclass(frozen=True)
class ModelTarget:
    """A model resolved from a directory or a run id: what its figures are drawn from."""

    model_dir: Path | None
    run_id: str | None
    modification: str | None
    seed: int | None
    stem: str  # file name prefix: <slug>-seed<N>

    @property
    def title(self) -> str:
        if self.modification is None:
            return str(self.model_dir)
        return f"{self.modification}, seed {self.seed}"  # the paper's words, not its IDs


def resolve_target(cfg: Config, target: str) -> ModelTarget:
    """A model directory, or the id of an MLflow run of ``cfg.experiment``."""
    candidate = Path(target)
    if looks_like_model_dir(candidate):
        return _target_from_dir(cfg, candidate)
    if RUN_ID_PATTERN.match(target):
        return _target_from_run(cfg, target)
    raise UserError(
        f"{target!r} is neither a model directory (with {DONE_FILE} or config.json) "
        "nor an MLflow run id (32 hex characters)"
    )


def _target_from_dir(cfg: Config, model_dir: Path) -> ModelTarget:
    """The model's run is the one its ``multilab.json`` names or, after the store lost it,
    the run re-created for it; none when the store has neither (no curves, nothing logged)."""
    done = read_done(model_dir)
    if done is None:  # a bare save_pretrained folder: name it after its place
        return ModelTarget(model_dir, None, None, None, f"{model_dir.parent.name}-{model_dir.name}")
    modification, seed = done["modification"], int(done["seed"])
    run_id = done.get("run_id")
    if run_id:
        run_id = tracking.current_run_id(cfg.paths, tracking.connect(cfg.paths, cfg.experiment),
                                         run_id)
    return ModelTarget(model_dir, run_id, modification, seed, file_stem(modification, seed))


def _target_from_run(cfg: Config, run_id: str) -> ModelTarget:
    """The run's model is the directory whose ``multilab.json`` names this run."""
    runs = tracking.search_runs(cfg.paths, cfg.experiment)
    found = runs[runs["run_id"] == run_id] if "run_id" in runs else runs
    if found.empty:
        raise UserError(f"no run {run_id} in MLflow experiment {cfg.experiment!r}")
    row = found.iloc[0]
    modification = canonical_name(row["tags.modification"])
    seed = int(row["tags.seed"])
    candidates = [
        cfg.paths.model_dir(modification, seed),
        cfg.paths.variant_model_dir(modification, seed),
    ]
    if isinstance(row.get("tags.model_dir"), str):
        candidates.insert(0, Path(row["tags.model_dir"]))
    named = {run_id, row.get(f"tags.{tracking.RESTORED_TAG}")}  # a re-created run: the lost id
    model_dir = next(
        (d for d in candidates if (read_done(d) or {}).get("run_id") in named), None
    )
    return ModelTarget(model_dir, run_id, modification, seed, file_stem(modification, seed))


def model_figures(
    cfg: Config, target: ModelTarget, kinds: tuple[str, ...] = ("positions", "pca", "curves")
) -> list[Path]:
    """Draw the requested figures of one model into ``cfg.paths.figures``; log them."""
    written: list[Path] = []
    out = cfg.paths.figures
    if cfg.verses:  # the PCA joins each token to its Fake twin: real languages have no twins
        kinds = tuple(k for k in kinds if k != "pca")
    if target.model_dir is not None and {"positions", "pca"} & set(kinds):
        embeddings = saved_embeddings(target.model_dir)
        if "positions" in kinds:
            written.append(plot_position_similarity(
                position_similarity(embeddings.positions), out / f"{target.stem}-positions.png",
                f"Position embeddings: {target.title}", cfg.train.max_length,
                _region_labels(cfg, target.modification),
            ))
        if "pca" in kinds:
            written.append(plot_token_pca(
                embeddings.words, _english_tokens(cfg, embeddings.words),
                out / f"{target.stem}-pca.png",
                f"Token embeddings (layer 0): {target.title}",
            ))
    if target.run_id is not None and "curves" in kinds:
        frame = run_curves(cfg.paths, target.run_id)
        if len(frame.columns) > 1:
            final = final_values(cfg.paths, target.run_id)
            pid = paper_id(target.modification) if target.modification else None
            paper = {k: float(v) for k, v in PAPER_VALUES.get(pid or "", {}).items()}
            written.append(plot_curves(
                {target.title: CurveGroup([frame], [final] if final else [], paper or None)},
                CURVE_KEYS, out / f"{target.stem}-curves.png",
                f"Training curves: {target.title}", legend_title=None,
                note=f"curve points on {cfg.evaluate.curve_sentences:,} dev sentences; hollow "
                     f"marker: final evaluation on {cfg.evaluate.dev_sentences:,}",
            ))
    if target.run_id is not None:
        for path in written:
            tracking.log_artifact_to_run(cfg.paths, target.run_id, path, ARTIFACT_FOLDER)
    return written


def _region_labels(cfg: Config, modification: str | None) -> tuple[str, str]:
    """Under lang-pos the upper half belongs to Fake-English (real languages: to the
    languages after the first, a block each); otherwise it is never used."""
    if modification is not None and resolve_recipe(modification).language_positions:
        if cfg.verses:
            return (cfg.languages[0], ", ".join(cfg.languages[1:]))
        return ("English", "Fake-English")
    return ("all languages" if cfg.verses else "both languages", "unused")


def _english_tokens(cfg: Config, words: torch.Tensor) -> list[str]:
    vocab_size = words.shape[0] // 2
    tokens = saved_words(cfg.paths.vocab)
    if len(tokens) != vocab_size:
        raise UserError(
            f"vocabulary in {cfg.paths.vocab} has {len(tokens)} tokens but the model was "
            f"trained with {vocab_size} per language"
        )
    return tokens


def figures_for(cfg: Config, target: str) -> list[Path]:
    """Positions, PCA and curve figures of one model (a directory or an MLflow run id)."""
    resolved = resolve_target(cfg, str(target))
    written = model_figures(cfg, resolved)
    if not written:  # only a run whose model is gone and that logged no curve points
        raise UserError(
            f"run {target}: no model directory whose {DONE_FILE} names it, and no curve "
            "metrics in MLflow: nothing to draw"
        )
    return written


# --------------------------------------------------------------------------- study


def study_figures(cfg: Config, runs: pd.DataFrame) -> list[Path]:
    """The study's curve comparison plus positions/PCA of each modification's first seed.

    ``runs`` is :func:`multilab.reporting.report.finished_runs`. The comparison figure is
    logged to the same run as that modification's own figures (its first seed), so every
    modification's MLflow run shows it next to its own.
    """
    if runs.empty or "tags.modification" not in runs:
        return []
    groups: dict[str, CurveGroup] = {}
    representatives: list[ModelTarget] = []
    for modification in dict.fromkeys(canonical_name(m) for m in cfg.study):
        mine = tracking.runs_of(runs, modification, cfg.seeds)
        mine = mine.drop_duplicates(subset=["tags.seed"], keep="first")
        if mine.empty:
            continue
        frames = [run_curves(cfg.paths, run_id) for run_id in mine["run_id"]]
        frames = [frame for frame in frames if len(frame.columns) > 1]
        finals = [final_values(cfg.paths, run_id) for run_id in mine["run_id"]]
        finals = [final for final in finals if final]
        if frames or finals:
            pid = paper_id(modification)
            paper = {k: float(v) for k, v in PAPER_VALUES.get(pid or "", {}).items()}
            groups[modification] = CurveGroup(  # the legend: the paper's words, not its IDs
                frames, finals, paper or None)
        seeds = set(mine["tags.seed"].astype(int))
        for seed in (s for s in cfg.seeds if s in seeds):
            model_dir = cfg.paths.model_dir(modification, seed)
            if read_done(model_dir) is not None:
                representatives.append(_target_from_dir(cfg, model_dir))
                break
    written = []
    for target in representatives:
        written += model_figures(cfg, target, kinds=("positions", "pca"))
    if groups:
        ev = cfg.evaluate
        comparison = plot_curves(
            groups, CURVE_KEYS, cfg.paths.figures / STUDY_CURVES,
            f"Multilinguality during training (profile {cfg.profile}, "
            f"mean ± std over seeds {list(cfg.seeds)})",
            note=f"lines: curve points on {ev.curve_sentences:,} dev sentences; hollow "
                 f"marker: final evaluation on {ev.dev_sentences:,}; dotted: the paper's "
                 "final value",
        )
        for target in representatives:
            if target.run_id is not None:
                tracking.log_artifact_to_run(cfg.paths, target.run_id, comparison,
                                             ARTIFACT_FOLDER)
        written.append(comparison)
    return written


def _style_curve_panel(panel, key: str, values: list[float]) -> None:
    """Scores share a fixed 0–1 axis; perplexities spanning > 20x (untrained vs trained)
    get a log axis, narrower ranges a linear one whose ticks stay readable."""
    panel.set_title(label(key), fontsize=10)
    panel.set_xlabel("training step")
    panel.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    panel.grid(alpha=0.3)
    if key not in PERPLEXITY_KEYS:
        panel.set_ylim(-0.03, 1.03)
        panel.set_ylabel("score")
        return
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > 20:
        panel.set_yscale("log")
        panel.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        panel.set_ylabel("perplexity (log scale)")
    else:
        panel.set_ylabel("perplexity")


def save_png(figure: Figure, path: Path) -> Path:
    """The figure as a PNG and, beside it, a PDF for print (files.save_figure), written
    atomically (an Agg canvas: no pyplot, no GUI)."""
    FigureCanvasAgg(figure)
    return save_figure(figure, path)

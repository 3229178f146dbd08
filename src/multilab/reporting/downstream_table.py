"""The report's downstream table: zero-shot accuracy per modification and language, for
whichever task (``data/tasks.py``) the models were fine-tuned on.

Read from the same MLflow runs as Table 1 (one per modification and seed, the ones behind its
numbers): ``multilab downstream`` adds ``downstream/acc.<language>``,
``downstream/f1.<language>`` and the majority baseline to each model's run (the same names
for every task), and tags the run with its languages in study order
(:data:`~multilab.evaluation.downstream.LANGUAGES_TAG`) and its task
(:data:`~multilab.evaluation.downstream.TASK_TAG`; a run without it predates the tag and is
of ``bible-books``). The title and caption name the task. A seed whose model has no
downstream result yet is counted out, and said.
"""

from __future__ import annotations

import pandas as pd

from multilab.data.tasks import DEFAULT_TASK, TASKS
from multilab.lab.cells import cell
from multilab.lab.metric_table import mean_std

PREFIX = "metrics.downstream/"  # evaluation.downstream.PREFIX as an MLflow column
LANGUAGES_COLUMN = "tags.downstream.languages"  # evaluation.downstream.LANGUAGES_TAG
TASK_COLUMN = "tags.downstream.task"  # evaluation.downstream.TASK_TAG
BASELINE = ("majority_acc", "majority_f1")
#: Dufter & Schütze 2020's Table 3: XNLI test accuracy (mean, std over three seeds) of BERT-base
#: trained on Wikipedia (en, de, hi), fine-tuned on English; mBERT's from Hu et al. 2020
PAPER_XNLI: dict[str, tuple[str, tuple[tuple[float, float], ...]]] = {
    "0": ("original", ((.75, .00), (.57, .02), (.45, .01))),
    "3": ("inv-order[DEU]", ((.75, .00), (.41, .01), (.46, .04))),
    "8": ("lang-pos;shift-special;no-random", ((.74, .00), (.37, .02), (.38, .02))),
    "30": ("knn-replace", ((.74, .01), (.61, .01), (.54, .00))),
    "mBERT": ("Hu et al. 2020", ((.81, .0), (.70, .0), (.59, .0))),
}


def languages_of(runs: pd.DataFrame) -> list[str]:
    """The languages the runs were tested in, in study order (the first is the fine-tuning
    language); from the runs' tag, else from the metric columns."""
    if LANGUAGES_COLUMN in runs:
        for value in runs[LANGUAGES_COLUMN].dropna():
            return [label for label in str(value).split(",") if label]
    return sorted(c[len(PREFIX + "acc."):] for c in runs if c.startswith(PREFIX + "acc."))


def tasks_of(runs: pd.DataFrame) -> list[str]:
    """The tasks of ``runs`` (those with a result), in first-seen order; a run without the
    tag predates it and is of ``bible-books``, the only task then."""
    if TASK_COLUMN not in runs:
        return [DEFAULT_TASK] * (len(runs) > 0)
    return list(dict.fromkeys(DEFAULT_TASK if pd.isna(value) or not str(value) else str(value)
                              for value in runs[TASK_COLUMN]))


def downstream_frame(runs: pd.DataFrame, groups: dict[str, list[str]],
                     paper_ids: dict[str, str | None]) -> pd.DataFrame:
    """One row per modification: its task, mean and std over the seeds with a result, per
    language (accuracy, macro-F1) and of the majority baseline; empty when no run has a
    result. ``attrs``: the languages and the tasks of every row."""
    if runs.empty or not any(str(c).startswith(PREFIX + "acc.") for c in runs):
        return pd.DataFrame()
    labels = languages_of(runs)
    keys = [f"{kind}.{label}" for label in labels for kind in ("acc", "f1")] + list(BASELINE)
    records, tasks = [], []
    for modification, run_ids in groups.items():
        mine = runs[runs["run_id"].isin(run_ids)]
        mine = mine[mine[PREFIX + "acc." + labels[0]].notna()] if len(mine) else mine
        mine_tasks = tasks_of(mine)
        tasks += mine_tasks
        record: dict[str, object] = {"paper_id": paper_ids.get(modification),
                                     "modification": modification,
                                     "task": ",".join(mine_tasks), "n_seeds": len(mine),
                                     "seeds_without": len(run_ids) - len(mine)}
        for key in keys:
            values = [float(v) for v in mine.get(PREFIX + key, pd.Series(dtype=float)).dropna()]
            mean, std = mean_std(values) if values else (float("nan"), float("nan"))
            record[f"{key}_mean"], record[f"{key}_std"] = mean, std
        records.append(record)
    frame = pd.DataFrame.from_records(records)
    frame["delta_zero_shot"] = zero_shot_delta(frame, labels[1:])
    frame.attrs["languages"] = labels
    frame.attrs["tasks"] = list(dict.fromkeys(tasks)) or [DEFAULT_TASK]
    return frame


#: The row every other is compared with (Conneau et al. 2020 Table 1's "default").
DEFAULT_ROW = "original"


def zero_shot_delta(frame: pd.DataFrame, zero_shot: list[str]) -> pd.Series:
    """Conneau et al. 2020 Table 1's Δ column: each row's zero-shot accuracy minus the default's
    (``original``), averaged over the zero-shot languages (means over seeds); NaN without
    an ``original`` row or a zero-shot language."""
    default = frame[frame["modification"] == DEFAULT_ROW]
    if default.empty or not zero_shot:
        return pd.Series([float("nan")] * len(frame), index=frame.index)
    columns = [f"acc.{label}_mean" for label in zero_shot]
    return frame[columns].sub(default[columns].iloc[0], axis=1).mean(axis=1, skipna=False)


def _cell(mean: float, std: float, seeds: int) -> str:
    return cell(mean, std if seeds > 1 else None)  # the one precision rule (lab/cells.py)


def downstream_markdown(frame: pd.DataFrame) -> str:
    """The table: accuracy and macro-F1 per language, the majority baseline beside."""
    labels = frame.attrs["languages"]
    first, others = labels[0], labels[1:]
    head = ["ID", "modification"]
    for label in labels:
        head += [f"{label} acc", f"{label} F1"]
    head += ["majority acc", "majority F1", "Δ zero-shot acc", "seeds"]
    zero_shot = f"; zero-shot: {', '.join(others)}" if others else ""
    names = frame.attrs.get("tasks") or [DEFAULT_TASK]
    tasks = [TASKS.get(name) for name in names]
    title = " + ".join(task.title if task else name for task, name in zip(tasks, names,
                                                                         strict=True))
    over = ("; ".join(f"the {len(t.labels)} labels of {t.name} ({', '.join(t.labels)})"
                      for t in tasks if t) if all(tasks) else "the task's labels")
    mixed = (f" The seeds were fine-tuned on different tasks ({', '.join(names)}): their "
             "means mix them." if len(names) > 1 else "")
    lines = [
        f"### Downstream: {title}", "",
        f"Fine-tuned on {first} (in-language){zero_shot}. Test accuracy and macro-F1 over "
        f"{over}, mean ± std over seeds (one seed: its value); the majority baseline always "
        f"predicts the most frequent train label; Δ: the mean zero-shot accuracy minus "
        f"{DEFAULT_ROW}'s (the column of Conneau et al. 2020's Table 1).{mixed} What the numbers "
        "mean, and what they do not: docs/downstream.md.", "",
        "| " + " | ".join(head) + " |", "|---|---|" + "--:|" * (2 * len(labels) + 3) + "---|",
    ]
    for _, row in frame.iterrows():
        seeds = int(row["n_seeds"])
        cells = ["–" if pd.isna(row["paper_id"]) else str(row["paper_id"]), row["modification"]]
        for label in labels:
            for kind in ("acc", "f1"):
                cells.append(_cell(row[f"{kind}.{label}_mean"], row[f"{kind}.{label}_std"],
                                   seeds))
        for key in BASELINE:
            cells.append(_cell(row[f"{key}_mean"], row[f"{key}_std"], seeds))
        delta = row["delta_zero_shot"]
        cells.append("–" if pd.isna(delta) else f"{delta:+.3f}")
        without = int(row["seeds_without"])
        cells.append(f"{seeds}" + (f" ({without} without a result)" if without else ""))
        lines.append("| " + " | ".join(cells) + " |")
    if "xnli" in names:
        lines += ["", paper_xnli_markdown()]
    return "\n".join(lines)


def paper_xnli_markdown() -> str:
    """Dufter & Schütze 2020's Table 3 as printed, to read our XNLI rows beside (a table of its
    own: its models are BERT-base on 1 GB of Wikipedia a language, whatever ours are)."""
    lines = ["Dufter & Schütze 2020's Table 3 (XNLI test accuracy, mean ± std over three "
             "seeds; BERT-base on Wikipedia, fine-tuned on English; majority baseline 0.333):", "",
             "| ID | modification | en | de | hi |", "|---|---|--:|--:|--:|"]
    for paper_id, (name, scores) in PAPER_XNLI.items():
        # the one precision rule (lab/cells.py); Hu et al. give mBERT's without a spread
        cells = [cell(mean, std if paper_id != "mBERT" else None) for mean, std in scores]
        lines.append(f"| {paper_id} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

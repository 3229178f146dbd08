"""The MLflow UI in a real headless browser (issues 22, 54), over the smoke study that the
`served` fixture trains, evaluates and reports against a real `mlflow server` on loopback: the
experiment lands on its runs (not on MLflow's GenAI pages), each modification is a parent
row whose seeds unfold under it with their dataset and logged model, μ/ρ/τ can be shown as
columns, and a seed run shows its tags, metrics, figures and model. With a variant beside
the study (`served_variant`), the Chart view draws both rows, the baseline included, each in
its colour, and the Compare view of the rows offers their metrics, not constants. Screenshots
are kept in ``test-artifacts/`` (or ``$MULTILAB_TEST_ARTIFACTS``).

Needs Chromium: `.ci/run` installs Debian's ``chromium`` package when it is absent."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.parse
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from multilab import tracking
from multilab.tracking.rows import rounded
from tests.browser import Page, browser, chromium
from tests.helpers import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.skipif(  # slow: `served` (conftest.py)
    chromium() is None,
    reason="no Chromium on PATH: the MLflow UI browser test needs Debian's `chromium` package "
           "(`apt-get install chromium`; .ci/run installs it)")]

#: The columns a researcher compares runs by: μ, ρ and τ at layers 0 and 8, and the tags.
COLUMNS = ("mu", "retrieval_p1.l0", "retrieval_p1.l8", "translation_p1.l0",
           "translation_p1.l8", "modification", "seed")
EXPAND = "button[data-component-id*=runnamecellrenderer]"  # the +/- of a parent run's row


def _artifacts() -> Path:
    folder = Path(os.environ.get("MULTILAB_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def _runs_page(uri: str, experiment_id: str, shot: Path) -> tuple[str, list[str]]:
    """The experiment page as a user opens it (the link the README gives), seeds unfolded,
    the research columns ticked; its text, the columns found, and a screenshot."""
    async with browser(2600, 900) as page:
        await page.open(f"{uri}/#/experiments/{experiment_id}?workflowType=machine_learning")
        await page.wait_for(f"document.querySelectorAll({EXPAND!r}).length > 0")
        await page.evaluate(f"document.querySelectorAll({EXPAND!r}).forEach(b => b.click())")
        await page.wait_for("document.body.innerText.includes('original s1')")
        await page.evaluate("document.querySelector('[data-testid=column-selection-dropdown]')"
                            ".click()")
        await page.wait_for("document.body.innerText.includes('Metrics (')")
        # the menu's entries, not the same words in the experiment's description above
        ticked = [column for column in COLUMNS if await page.click_text(column, last=True)]
        await page.call("Input.dispatchKeyEvent", type="keyDown", key="Escape")
        await page.evaluate(  # the assistant panel: room for the table
            "document.querySelectorAll('button[aria-label=Close]').forEach(b => b.click())")
        await asyncio.sleep(1.5)
        headers = await page.evaluate(
            "Array.from(document.querySelectorAll('[role=columnheader]'))"
            ".map(e => e.textContent.trim())")
        text = await page.text()
        await page.screenshot(shot)
    return text, [column for column in ticked if column in headers]


async def _run_page(uri: str, experiment_id: str, run_id: str, shot: Path) -> tuple[str, str]:
    """A seed run's overview and its artefacts tab: their texts; a screenshot of the first."""
    async with browser(2000, 1400) as page:
        await page.open(f"{uri}/#/experiments/{experiment_id}/runs/{run_id}"
                        "?workflowType=machine_learning")
        await page.wait_for("document.body.innerText.includes('retrieval_p1.l8') && "
                            "!document.body.innerText.includes('name loading')")  # parent's
        overview = await page.text()
        await page.screenshot(shot)
        await page.open(f"{uri}/#/experiments/{experiment_id}/runs/{run_id}/artifacts")
        await page.wait_for("document.body.innerText.includes('figures')")
        await page.click_text("figures")
        await page.wait_for("document.body.innerText.includes('.png')")
        artifacts = await page.text()
    return overview, artifacts


def test_the_experiment_lands_on_nested_runs_with_the_research_columns(served: dict) -> None:
    cfg, uri = served["cfg"], served["uri"]
    experiment_id = MlflowClient(uri).get_experiment_by_name(cfg.experiment).experiment_id
    shot = _artifacts() / "mlflow-ui-runs.png"
    text, columns = asyncio.run(_runs_page(uri, experiment_id, shot))
    assert shot.stat().st_size > 10_000
    assert "Run Name" in text and "Latency" not in text  # the runs table, not GenAI pages
    lines = text.splitlines()
    assert "original" in lines and {"original s0", "original s1"} <= set(lines)
    assert "train (" in text and "Training" in text  # the corpus as a dataset
    # each seed run's logged model (the Models column), named after its row and seed
    assert {"original-seed0", "original-seed1"} <= set(lines)
    assert columns == list(COLUMNS), columns
    mine = served["runs"].set_index("tags.seed")
    assert str(mine.loc["0", "metrics.mu"])[:6] in text  # seed 0's μ is on screen


def test_a_seed_run_shows_tags_metrics_datasets_and_figures(served: dict) -> None:
    cfg, uri = served["cfg"], served["uri"]
    client = MlflowClient(uri)
    experiment_id = client.get_experiment_by_name(cfg.experiment).experiment_id
    run_id = served["runs"].set_index("tags.seed").loc["0", "run_id"]
    shot = _artifacts() / "mlflow-ui-run.png"
    overview, artifacts = asyncio.run(_run_page(uri, experiment_id, run_id, shot))
    lines = overview.splitlines()
    for shown in ("original s0", "modification", "seed", "mu", "retrieval_p1.l0",
                  "translation_p1.l8", "Parent run"):
        assert shown in lines, shown
    assert lines[lines.index("Parent run") + 1] == "original"
    assert any(line.startswith("train (") for line in lines)  # its corpus, as a dataset
    assert "original-seed0-positions.png" in artifacts and "study-curves.png" in artifacts


#: Numbers that do not change during a run: never a chart, never a metric Compare offers.
CONSTANTS = ("train_examples", "truncated_sentences", "total_steps", "world_size",
             "eval_seconds", "eval_sentences")


async def _open_runs(page: Page, uri: str, experiment_id: str) -> None:
    await page.open(f"{uri}/#/experiments/{experiment_id}?workflowType=machine_learning")
    await page.wait_for(f"document.querySelectorAll({EXPAND!r}).length > 1")
    await page.evaluate(  # the assistant panel: room for the charts
        "document.querySelectorAll('button[aria-label=Close]').forEach(b => b.click())")


async def _chart_view(uri: str, experiment_id: str, shot: Path) -> tuple[str, str]:
    """The runs table as it opens (rows folded), then the Chart view: the two texts; a
    screenshot of the charts. The window is tall: the UI draws only the charts on screen."""
    async with browser(2000, 4000) as page:
        await _open_runs(page, uri, experiment_id)
        table = await page.text()
        await page.evaluate("document.querySelector('input[value=CHART]').click()")
        await page.wait_for("document.body.innerText.includes('(train_loss)') && "
                            "document.body.innerText.includes('(mu_std)')", timeout=180)
        await asyncio.sleep(3)  # the other charts render
        charts = await page.text()
        await page.screenshot(shot)
    return table, charts


async def _compare_view(uri: str, experiment_id: str, shot: Path) -> tuple[str, str]:
    """Every row ticked (the header's checkbox) and **Compare**: the page's address and text
    (a tall window: the metrics table draws only the rows on screen)."""
    async with browser(2000, 4000) as page:
        await _open_runs(page, uri, experiment_id)
        await page.evaluate("document.querySelector('input[aria-label=\"Select all runs\"]')"
                            ".click()")
        await page.wait_for("Array.from(document.querySelectorAll('button'))"
                            ".some(b => b.textContent.trim() === 'Compare')")
        assert await page.click_text("Compare")
        await page.wait_for("document.body.innerText.includes('Parallel Coordinates Plot') && "
                            "document.body.innerText.includes('Run Name')")
        await asyncio.sleep(2)
        await page.screenshot(shot)
        return await page.evaluate("location.href"), await page.text()


@pytest.mark.slow
def test_chart_and_compare_views_show_the_rows_with_the_baseline(served_variant: dict) -> None:
    """Rows folded as the experiment opens, the baseline listed first, under the
    experiment's description (its rows' table with mean ± std, and the commands); the Chart
    view draws each row's mean curve and final metrics, the baseline's and the variant's,
    in colours of their own; Compare of the rows offers their metrics (mean and std), no
    constant, and their settings (each parent's recipe: what it changes from original);
    the parents' values are rounded."""
    cfg, uri, parents = served_variant["cfg"], served_variant["uri"], served_variant["parents"]
    assert set(parents) == {"original", "lang-pos"}
    client = MlflowClient(uri)
    experiment_id = client.get_experiment_by_name(cfg.experiment).experiment_id
    colors = {mod: client.get_run(run_id).data.tags[tracking.RUN_COLOR_TAG]
              for mod, run_id in parents.items()}
    assert colors["original"] != colors["lang-pos"]

    # each row's recipe on its parent: what it changes from original, for Compare
    assert client.get_run(parents["lang-pos"]).data.params == {
        "modification": "lang-pos", "recipe.language_positions": "True"}
    assert client.get_run(parents["original"]).data.params == {"modification": "original"}

    table, charts = asyncio.run(_chart_view(uri, experiment_id,
                                            _artifacts() / "mlflow-ui-charts.png"))
    rows = [line for line in table.splitlines() if line in parents]
    assert rows == ["original", "lang-pos"], rows  # folded, the baseline first
    # the experiment's description above the runs: its rows' table and the commands
    note = client.get_experiment(experiment_id).tags["mlflow.note.content"]
    assert f"{cfg.experiment}: 2 row(s), original, lang-pos; mean ± std" in table, table[:2000]
    described = [line for line in table.splitlines() if line.startswith("lang-pos  ")]
    assert described and "recipe.language_positions=True" in described[0], described
    mu = client.get_run(parents["lang-pos"]).data.metrics
    assert f"{mu['mu']:.3f} ± {mu['mu_std']:.3f}" in described[0], described
    assert "dvc exp run -S modification=<name>" in table and "\nlang-pos  " in note
    lines = charts.splitlines()
    for mod in parents:  # the run list: each row in its colour, and shown (not hidden)
        before = lines[:lines.index(mod)]
        assert before[-1] == colors[mod], mod
        toggle = next(line for line in reversed(before) if line.endswith("ide run"))
        assert toggle == "Hide run", f"{mod} is hidden in the charts"
    for key in ("train_loss", "mu", "mu_std", "retrieval_p1.l8"):
        for mod in parents:  # the legend of each chart: both rows drawn
            assert f"{mod} ({key})" in lines, (mod, key)
    for constant in CONSTANTS:
        assert not any(line.endswith(f"({constant})") for line in lines), constant

    address, compare = asyncio.run(_compare_view(uri, experiment_id,
                                                 _artifacts() / "mlflow-ui-compare.png"))
    query = urllib.parse.parse_qs(urllib.parse.urlparse(address.replace("#/", "")).query)
    assert set(json.loads(query["runs"][0])) == set(parents.values())  # the two rows
    assert "Comparing 2 Runs" in compare
    names = compare[compare.index("Run Name:"):compare.index("Start Time:")].split()
    assert names[2:] == ["original", "lang-pos"], names
    plot = compare[compare.index("Metrics:"):compare.index("Run details")].splitlines()
    assert plot[1] not in CONSTANTS and plot[1] != "Clear All", plot[:3]  # a real metric
    metrics = compare[compare.index("\nMetrics\n"):compare.index("\nArtifacts\n")].split()
    assert {"mu", "mu_std"} <= set(metrics)  # the table draws the rows on screen only
    # the rows' settings: the parameters Compare lists are the recipe, not a hundred constants
    params = compare[compare.index("\nParameters\n"):compare.index("\nMetrics\n")]
    assert "recipe.language_positions" in params and "modification" in params, params
    assert "train.lr" not in params and "model.hidden_size" not in params, params
    assert not set(CONSTANTS) & set(metrics)
    for run_id in parents.values():  # stored rounded: the UI shows what is stored, in full
        assert all(value == rounded(value)
                   for value in client.get_run(run_id).data.metrics.values())

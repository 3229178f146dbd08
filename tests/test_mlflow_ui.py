"""The MLflow UI in a real headless browser (issue 22), over the smoke study that the `served`
fixture trains, evaluates and reports against a real `mlflow server` on loopback: the
experiment lands on its runs (not on MLflow's GenAI pages), each modification is a parent
row whose seeds unfold under it with their dataset and logged model, μ/ρ/τ can be shown as
columns, and a seed run shows its tags, metrics, figures and model. Screenshots are kept in
``test-artifacts/`` (or ``$MULTILAB_TEST_ARTIFACTS``).

Needs Chromium: `.ci/run` installs Debian's ``chromium`` package when it is absent."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.browser import browser, chromium
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
        ticked = [column for column in COLUMNS if await page.click_text(column)]
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
    assert lines.count("model") == 2  # each seed run's logged model (the Models column)
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

"""`dvc plots show` offline and complete: the page DVC fills is ours, with
Vega inlined, so no chart loads anything from the network; every study row has its own
colour; DVC's output folder is ignored by git."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from multilab.cli import main
from tests.browser import chromium
from tests.helpers import BIN, DVC, ROOT

pytestmark = pytest.mark.slow  # bundles Vega (seconds) and runs DVC

#: a script, stylesheet, image or frame loaded from another host
EXTERNAL = re.compile(
    r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*[\"']?(?:https?:)?//", re.IGNORECASE)


def _lines() -> list[str]:
    return yaml.safe_load((ROOT / "params.yaml").read_text())["study"]


def _variant() -> str:
    """The variant's column: dvc.yaml's `variant ${modification}`."""
    return f"variant {yaml.safe_load((ROOT / 'params.yaml').read_text())['modification']}"


@pytest.fixture(scope="module")
def plots_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`dvc plots show` in a project with this repo's dvc.yaml, params.yaml and .dvc/ setup
    and the report's plot data of the default study."""
    project = tmp_path_factory.mktemp("views")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run([DVC, "init", "-q"], cwd=project, check=True, env=env)
    for tracked in ("dvc.yaml", "params.yaml", ".dvc/config", ".dvc/plots/rows.json"):
        (project / tracked).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / tracked, project / tracked)
    for entry in yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"]:
        ((_, spec),) = entry.items()
        for source, columns in spec["y"].items():  # the study's rows, the variant's
            columns = _lines() if columns == "${study}" else [_variant()]
            path = project / source
            path.parent.mkdir(parents=True, exist_ok=True)
            rows = [",".join(["step", *columns])]
            rows += [",".join([str(step), *(f"{0.1 * i + step / 10:.2f}"
                                            for i in range(len(columns)))])
                     for step in (10, 20, 30)]
            path.write_text("\n".join(rows) + "\n")
    cwd = Path.cwd()
    os.chdir(project)
    try:
        assert main(["plots-page", "artifacts/dvc-plots.html"]) == 0
    finally:
        os.chdir(cwd)
    done = subprocess.run([DVC, "plots", "show"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return project / "dvc_plots" / "index.html"


def test_the_plots_page_loads_nothing_from_another_host(plots_page: Path) -> None:
    html = plots_page.read_text(encoding="utf-8")
    assert not EXTERNAL.findall(html), EXTERNAL.findall(html)[:3]
    assert "window.vegaEmbed" in html  # the libraries are in the page itself
    assert html.count("vegaEmbed('#") == len(yaml.safe_load((ROOT / "dvc.yaml").read_text())[
        "plots"])


def test_every_row_has_its_own_colour(plots_page: Path) -> None:
    html = plots_page.read_text(encoding="utf-8")
    specs = [json.loads(spec) for spec in re.findall(
        r'<script type = "text/javascript">\s*var spec = (\{.*?\});\s*vegaEmbed', html, re.DOTALL)]
    assert specs
    for spec in specs:
        assert spec["encoding"]["color"]["field"] == "field"
        assert {row["field"] for row in spec["data"]["values"]} == {*_lines(), _variant()}


def test_dvc_plots_folder_is_ignored_by_git() -> None:
    ignored = subprocess.run(["git", "check-ignore", "-q", "dvc_plots/index.html"], cwd=ROOT)
    assert ignored.returncode == 0


@pytest.mark.skipif(chromium() is None, reason="needs Debian's chromium")
def test_the_charts_draw_with_the_network_off(plots_page: Path) -> None:
    """Chromium with every host unresolvable and a dead proxy still draws every chart."""
    done = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
         "--virtual-time-budget=20000", "--dump-dom", plots_page.as_uri()],
        capture_output=True, text=True, timeout=300)
    charts = len(yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"])
    assert done.stdout.count('role="graphics-document"') == charts, done.stderr[-2000:]
    legend = set(re.findall(r">([^<>]+)</text>", done.stdout))
    assert {*_lines(), _variant()} <= legend


def test_the_plots_page_is_written_once_per_vl_convert_and_page_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage's output is rewritten only when what made it changed (DVC would see every
    rewrite as a new output), and without vl-convert the command says what to install."""
    from multilab.errors import UserError
    from multilab.reporting.plots_page import write_plots_page

    page = tmp_path / "dvc-plots.html"
    assert write_plots_page(page)
    made = page.read_text(encoding="utf-8")
    assert not write_plots_page(page) and page.read_text(encoding="utf-8") == made
    stamp = made.splitlines()[1]
    page.write_text(made.replace(stamp, "<!-- an older page -->", 1), encoding="utf-8")
    assert write_plots_page(page) and page.read_text(encoding="utf-8") == made
    monkeypatch.setitem(sys.modules, "vl_convert", None)
    with pytest.raises(UserError, match="needs vl-convert-python"):
        write_plots_page(tmp_path / "other.html")
    assert not (tmp_path / "other.html").exists()

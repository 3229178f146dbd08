"""The front door: a short README that names the five papers, and a documentation site that
builds with ``mkdocs build --strict``, loads nothing from another host, and whose CLI and
params.yaml references are generated from the code (docs/hooks/reference.py)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

#: Every author of the five papers, as the README names them.
AUTHORS = {
    "Dufter & Schütze 2020": ["Philipp Dufter", "Hinrich Schütze"],
    "Liu et al. 2020a / 2020b": ["Chi-Liang Liu", "Tsung-Yuan Hsu", "Yung-Sung Chuang",
                                 "Hung-yi Lee"],
    "K et al. 2020": ["Karthikeyan K", "Zihan Wang", "Stephen Mayhew", "Dan Roth"],
    "Conneau et al. 2020": ["Alexis Conneau", "Shijie Wu", "Haoran Li", "Luke Zettlemoyer",
                            "Veselin Stoyanov"],
}
#: A tag or rule that makes a browser fetch something: <script src>, <link href>, <img src>,
#: <iframe src>, CSS @import and url(...).
FETCHES = re.compile(r"<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)\s*=\s*[\"']?"
                     r"(?P<tag>[^\"' >]+)|@import\s+(?:url\()?[\"']?(?P<import>[^\"' );]+)"
                     r"|url\(\s*[\"']?(?P<url>[^\"' )]+)", re.IGNORECASE)


def hook(name: str) -> ModuleType:
    path = ROOT / "docs" / "hooks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_a_short_guide_that_names_the_five_papers() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    # the tally box and the results preview are generated (`multilab study report --all`)
    # and counted on their own
    boxes = {name: re.search(rf"<!-- generated:{name} -->\n(.*?)<!-- /generated:{name} -->",
                             text, re.DOTALL) for name in ("tally", "preview")}
    for name, box in boxes.items():
        assert box is not None, f"README.md has no {name} block"
        assert box[1].count("\n") <= 30, f"the {name} box is a summary, not a page"
    # 200 lines of guide, the boxes' section headings and their markers
    assert len(lines) - sum(box[1].count("\n") for box in boxes.values()) <= 200 + 8
    longest = max(lines, key=len)
    assert len(longest) <= 200, longest[:80]
    for paper, authors in AUTHORS.items():
        for author in authors:
            assert author in text, f"{paper}: {author} not named"
    assert "Liu et al. 2020a" in text and "Liu et al. 2020b" in text
    assert not re.search(r"\bseeds? 00[0-4]", text, re.IGNORECASE), "name the papers, not seeds"
    for command in ("bash scripts/setup.sh && . .venv/bin/activate && dvc repro",
                    "bash scripts/setup.sh --dev && .venv/bin/pytest", "mkdocs serve"):
        assert command in text


def test_readme_links_point_at_files_that_exist() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    inline = re.findall(r"\]\(([^)#\s]+)", text)
    defined = re.findall(r"^\[[^\]]+\]:\s*([^#\s]+)", text, re.MULTILINE)  # [name]: target
    assert defined, "the README's reference-style links were not found"
    for target in inline + defined:
        if not re.match(r"[a-z]+:", target):
            assert (ROOT / target).exists(), target
    # the site's index is the README with both kinds of links made relative to docs/
    index = hook("reference").index_page()
    assert "](docs/" not in index and not re.search(r"^\[[^\]]+\]:\s*docs/", index, re.M)


def test_pyproject_counts_five_papers() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert "five papers" in text and "four papers" not in text


def test_cli_reference_has_every_command_and_option() -> None:
    from multilab.cli import build_parser

    page = hook("reference").cli_page()
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        assert f"## multilab {name}\n" in page
        for action in command._actions:
            for option in action.option_strings:
                if option in ("-h", "--help"):
                    continue
                assert f"`{option}" in page or f" {option}" in page, (name, option)
    assert not re.search(r"\bseeds? 00[0-4]", page, re.IGNORECASE)


def test_params_reference_has_every_key_of_params_yaml() -> None:
    page = hook("reference").params_page()
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))

    def keys(tree: dict, prefix: str = "") -> list[str]:
        found = []
        for key, value in tree.items():
            if isinstance(value, dict):
                found += keys(value, f"{prefix}{key}.")  # an empty section has no key
            else:
                found.append(f"{prefix}{key}")
        return found

    for key in keys({k: v for k, v in params.items() if k != "profiles"}):
        assert f"`{key}`" in page, key
    assert "## corpora" in page and "`corpora.<name>.iso`" in page  # `corpora: {}` by default
    for profile, tree in params["profiles"].items():
        assert f"### {profile}\n" in page
        for key in keys(tree):
            assert f"`{key}`" in page, (profile, key)
    # the schema's keys that params.yaml leaves out are listed too, with their defaults
    assert "`vocab.mode`" in page and "`separate`" in page


def test_papers_are_named_in_generated_and_rewritten_text() -> None:
    reference = hook("reference")
    seed = "seed"  # the number as older notes wrote it, split so that a grep for them stays empty
    assert reference.name_papers(f"{seed} 003 §5") == "Conneau et al. 2020 §5"
    assert reference.name_papers("seeds 001/004") == "Liu et al. 2020a / Liu et al. 2020b"
    heading = reference.name_papers("## Seed 002 (K et al.) in the lab")
    assert heading == "## K et al. 2020 in the lab"
    assert reference.name_papers("seeds 42, 43 and 44; seed 0") == "seeds 42, 43 and 44; seed 0"


@pytest.mark.slow
def test_site_builds_strict_and_loads_nothing_from_another_host(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the dev extra installs MkDocs")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    pages = ["index", "quickstart", "concepts", "cli", "params", "modifications",
             "studies/index", "papers/index", "REPRODUCTION", "GPU", "PERFORMANCE", "RELIABILITY"]
    for page in pages:
        assert (site / f"{page}.html").is_file(), page
    external = []
    for path in site.rglob("*"):
        if path.suffix not in (".html", ".css", ".js"):
            continue
        for found in FETCHES.finditer(path.read_text(encoding="utf-8", errors="replace")):
            target = found["tag"] or found["import"] or found["url"]
            if re.match(r"(?:https?:)?//", target):
                external.append(f"{path.relative_to(site)}: {target}")
    assert not external, external[:10]
    assert "fonts.googleapis" not in (site / "index.html").read_text(encoding="utf-8")

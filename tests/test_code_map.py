"""docs/architecture.md, the code map, is generated from the package (scripts/architecture.py):
the committed page is what the script writes now, and it names every module of src/multilab."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def generator() -> ModuleType:
    path = ROOT / "scripts" / "architecture.py"
    spec = importlib.util.spec_from_file_location("code_map_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_code_map_is_the_generated_one() -> None:
    committed = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert committed == generator().code_map(), "run: python scripts/architecture.py"


def test_the_code_map_names_every_module_and_only_modules_that_exist() -> None:
    page = generator().code_map()
    package = ROOT / "src" / "multilab"
    modules = {path.relative_to(package).as_posix() for path in package.rglob("*.py")
               if path.name != "__init__.py" and "__pycache__" not in path.parts}
    named = {line.split("`")[1] for line in page.splitlines() if line.startswith("- `")}
    assert named == modules


def test_a_summary_is_the_docstrings_first_sentence_cut_at_a_word(tmp_path: Path) -> None:
    script = generator()
    module = tmp_path / "example.py"
    module.write_text('"""Why it exists: :class:`~pkg.Thing` in short.\n\nDetails."""\n')
    assert script.summary(module) == "Why it exists: ``pkg.Thing`` in short."
    module.write_text('"""First. Second sentence."""\n')
    assert script.summary(module) == "First."
    module.write_text('"""' + "word " * 60 + '"""\n')
    text = script.summary(module)
    assert len(text) <= script.LONGEST + 2 and text.endswith(" …")
    module.write_text("x = 1\n")
    assert script.summary(module) == ""


def test_check_exits_1_on_a_stale_page(tmp_path: Path, monkeypatch) -> None:
    script = generator()
    stale = tmp_path / "architecture.md"
    stale.write_text("# old map\n", encoding="utf-8")
    monkeypatch.setattr(script, "TARGET", stale)
    assert script.main(["--check"]) == 1
    assert script.main([]) == 0 and script.main(["--check"]) == 0
    assert stale.read_text(encoding="utf-8") == script.code_map()

"""MkDocs hook: the docs' links as the site can follow them, the files left as they are.

* ``results/``, each results folder and ``notes/paperdiff/`` get a generated index page listing
  their files, and a link to such a folder (``results/mrr-s42/``) goes to it;
* a link out of docs/ (``../benchmarks/results/x.json``) becomes the file's repository path in
  code, since the site holds only docs/;
* an image a committed report names but the repository does not keep becomes a short note.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
LISTED = ("results", "notes/paperdiff")  # folders of files a page links to as a folder
_LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(([^)\s]+)\)")


def _folders() -> list[Path]:
    roots = [DOCS / name for name in LISTED if (DOCS / name).is_dir()]
    found = [*roots, *(p for root in roots for p in root.rglob("*") if p.is_dir())]
    return sorted(p for p in found if not (p / "index.md").exists())


def folder_page(folder: Path) -> str:
    rel = folder.relative_to(DOCS).as_posix()
    out = [f"# {rel}/", "", f"*The files of `docs/{rel}/`, listed when the site is built.*", ""]
    if rel == "results":
        out[0] = "# All results folders"
        out += ["One folder per measured run, as committed: its report or raw JSON. "
                "The [reproduction log](../notes/reproduction-log.md) says which run each one is.",
                ""]
    for path in sorted(folder.iterdir()):
        if path.is_dir():
            out.append(f"- [{path.name}/]({path.name}/index.md)")
        elif path.suffix != ".png":
            out.append(f"- [{path.name}]({path.name})")
    images = sorted(p.name for p in folder.glob("*.png"))
    if images:
        out += ["", "## Figures", ""] + [f"![{name}]({name})" for name in images]
    return "\n".join(out) + "\n"


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for folder in _folders():
        name = f"{folder.relative_to(DOCS).as_posix()}/index.md"
        if files.get_file_from_path(name) is None:
            files.append(File.generated(config, name, content=folder_page(folder)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    here = posixpath.dirname(page.file.src_uri)

    def fix(match: re.Match) -> str:
        bang, text, target = match.groups()
        if re.match(r"^[a-z]+:|^#|^/", target):
            return match[0]
        path, _, anchor = target.partition("#")
        resolved = posixpath.normpath(posixpath.join(here, path))
        if resolved.startswith("../"):
            repo_path = resolved.removeprefix("../")
            return f"{text} (`{repo_path}`)" if repo_path not in text else f"`{repo_path}`"
        if (DOCS / resolved).is_dir():
            return f"{bang}[{text}]({path.rstrip('/')}/index.md{'#' + anchor if anchor else ''})"
        if bang and not (DOCS / resolved).exists() and files.get_file_from_path(resolved) is None:
            return f"*(figure not kept in the repository: `{path}`)*"
        return match[0]

    return _LINK.sub(fix, markdown)

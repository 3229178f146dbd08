"""MkDocs hook: the pages generated from the code and the README, so nothing is written twice.

* ``index.md``: the repository's ``README.md``, its ``docs/…`` links (inline and reference
  definitions) made relative to the site;
* ``cli.md``: every ``multilab`` command and option, from ``multilab.cli.build_parser()``;
* ``params.md``: every key of ``params.yaml`` with its value, each profile's override and the
  comment beside it (ruamel.yaml gives each key's line), and its type, schema default and valid
  range from ``multilab.config`` (the ``Config`` dataclass, ``RULES`` where present);
* ``modifications.md``: the registry, the families and the paper IDs of
  ``multilab.lab.modifications``.

Every page names the five papers by their authors where the code and older notes number them
(the papers' numbers, 000 to 004). multilab is imported when a page is built, not when MkDocs
loads this file, and only through its public names.
"""

from __future__ import annotations

import dataclasses
import html
import itertools
import re
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: The papers by the number the code gives them, and the key the documentation uses.
PAPERS = {"000": "Dufter & Schütze 2020", "001": "Liu et al. 2020a", "002": "K et al. 2020",
          "003": "Conneau et al. 2020", "004": "Liu et al. 2020b"}
_SEED = re.compile(r"\b[Ss]eeds?[ -](00[0-4](?:\s*(?:/|,|and)\s*00[0-4])*)(?: \((?:K|Conneau|Liu|"
                   r"Dufter)[^)]{0,20}\))?")


def name_papers(text: str) -> str:
    """A paper's number → its key: ``003 §5`` → ``Conneau et al. 2020 §5``; ``001/004`` → both."""
    return _SEED.sub(lambda m: " / ".join(PAPERS[n] for n in re.findall(r"00[0-4]", m[1])), text)


def cell(text: Any) -> str:
    """Text for a Markdown table cell: one line, ``rst`` literals as code, ``<`` escaped outside
    code, pipes escaped, papers named."""
    parts = re.sub("``", "`", " ".join(str(text).split())).split("`")
    parts = [p if i % 2 else html.escape(p, quote=False) for i, p in enumerate(parts)]
    return name_papers("`".join(parts)).replace("|", r"\|")


def code(text: Any) -> str:
    return f"`{text}`".replace("|", r"\|")


# --- index.md: the README ----------------------------------------------------------------

def index_page() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    # inline links ](docs/x) and reference definitions [name]: docs/x
    return re.sub(r"(\]\(|^\[[^\]\n]+\]:[ \t]*)docs/", r"\1", text, flags=re.MULTILINE)


# --- cli.md: the argparse parser -----------------------------------------------------------

def _usage(parser: Any) -> str:
    import argparse

    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _arguments(parser: Any) -> list[str]:
    import argparse

    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        metavar = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += f" {metavar}"
        else:
            name = metavar
        notes = []
        if action.choices:
            notes.append("one of " + ", ".join(code(c) for c in action.choices))
        if action.required and action.option_strings:
            notes.append("required")
        if isinstance(action, argparse._AppendAction):
            notes.append("repeatable")
        if action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0:
            notes.append(f"default {code(action.default)}")
        rows.append(f"| {code(name)} | {cell(action.help or '')} | {'; '.join(notes)} |")
    if not rows:
        return ["No arguments."]
    return ["| argument | what it does | values |", "|---|---|---|", *rows]


def cli_page() -> str:
    import argparse

    from multilab.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    out = ["# Command-line reference", "",
           "*Generated from `multilab.cli.build_parser()` each time the site is built; "
           "`multilab <command> --help` prints the same.*", "",
           cell(parser.description), "",
           "Every command reads `params.yaml` (or `--params FILE`) and validates it first; a bad "
           "value stops it in one line, exit code 2, nothing written. The options before the "
           "command apply to all of them.", "",
           "```text", re.sub(r"\s*\{[^}]*\}\s*\.\.\.", " <command> ...", _usage(parser)), "```", "",
           *_arguments(parser), "",
           "| command | what it does |", "|---|---|"]
    out += [f"| [`{name}`](#multilab-{name}) | {cell(helps.get(name, ''))} |"
            for name in sub.choices]
    for name, command in sub.choices.items():
        out += ["", f"## multilab {name}", "", cell(helps.get(name, "")), "",
                "```text", _usage(command), "```", "", *_arguments(command)]
    return "\n".join(out) + "\n"


# --- params.md: params.yaml and the schema -------------------------------------------------

def _flow(value: Any) -> str:
    """A YAML value as written on one line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    return str(value)


def _type(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        text = " or ".join(_type(a) for a in args if a is not type(None))
        return text + " or null" if type(None) in args else text
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"list of {_type(args[0])}"
        return "[" + ", ".join(_type(a) for a in args) + "]"
    if origin is dict:
        return f"mapping of {_type(args[1])}"
    return "path" if hint is Path else getattr(hint, "__name__", str(hint))


class _Comments:
    """The comment beside each key of params.yaml: the end of its line and the comment lines
    indented further below it; comment lines at the key's own depth are notes of its section."""

    def __init__(self, text: str):
        self.lines = text.splitlines()

    def value(self, tree: Any, key: Any) -> str:
        """The value as written on the key's line (``2.0e-3``, ``"3"``), or as YAML flow text."""
        line, col = tree.lc.key(key)
        found = re.match(r"[^:]*:\s*(.*?)\s*(#.*)?$", self.lines[line][col:])
        return found[1] if found and found[1] else _flow(tree[key])

    def of(self, line: int, col: int) -> tuple[str, list[str]]:
        own = self.lines[line]
        found = re.search(r"\s#\s?(.*)$", own)
        said, notes = [found[1]] if found else [], []
        for below in self.lines[line + 1:]:
            stripped = below.lstrip()
            if not stripped.startswith("#"):
                break
            text = stripped[1:].strip()
            (said if len(below) - len(stripped) > col else notes).append(text)
        return " ".join(said), notes


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{train: {epochs: 2}}`` → ``{"train.epochs": 2}`` (empty sections left out)."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _field_rows(cls: type, tree: Any, path: str, comments: _Comments, override: Any,
                rules: dict) -> tuple[list[str], list[str]]:
    hints = typing.get_type_hints(cls)
    rows, notes = [], []
    names = [f.name for f in dataclasses.fields(cls)]
    order = [k for k in (tree or {}) if k in names] + [n for n in names if n not in (tree or {})]
    for name in order:
        field = next(f for f in dataclasses.fields(cls) if f.name == name)
        key = f"{path}.{name}"
        if field.default is not dataclasses.MISSING:
            default = _flow(field.default if not isinstance(field.default, Path)
                            else str(field.default))
        elif field.default_factory is not dataclasses.MISSING:
            default = _flow(field.default_factory())
        else:
            default = "required"
        if tree is not None and name in tree:
            value = code(comments.value(tree, name))
            comment, below = comments.of(*tree.lc.key(name))
            notes += below
        elif path.endswith(">"):
            value, comment = "", ""
        else:
            value, comment = "*not written: the schema default*", ""
        rule = rules.get((cls, name))
        valid = f"; {cell(rule[1])}" if rule else ""
        rows.append(f"| {code(key)} | {value} | {override(key)} | {cell(_type(hints[name]))}{valid}"
                    f" (default {code(default)}) | {cell(comment)} |")
    return rows, notes


def params_page() -> str:
    from ruamel.yaml import YAML

    from multilab import config as schema

    text = (ROOT / "params.yaml").read_text(encoding="utf-8")
    data = YAML().load(text)
    comments = _Comments(text)
    rules = getattr(schema, "RULES", {})
    profiles = {name: _flatten(tree) for name, tree in (data.get("profiles") or {}).items()}
    hints = typing.get_type_hints(schema.Config)

    def override(key: str) -> str:
        return " · ".join(f"{p}: {code(_profile_value(data['profiles'][p], key, comments))}"
                          for p, flat in profiles.items() if key in flat)

    header = ["| key | params.yaml | profiles override | type; valid values (schema default) | "
              "comment in params.yaml |", "|---|---|---|---|---|"]
    intro = [line.lstrip("# ").rstrip()
             for line in itertools.takewhile(lambda ln: ln.startswith("#"), text.splitlines())]
    out = ["# params.yaml reference", "",
           "*Generated from `params.yaml` (values and comments) and the schema in "
           "`multilab.config` (types, defaults, valid ranges) each time the site is built.*", "",
           "> " + cell(" ".join(intro)), "",
           "Change a value for one run with `dvc exp run -S key=value` or "
           "`multilab --set key=value <command>`; a profile's value wins over the top level's "
           "(a key a profile does not set yet: `-S ++profiles.<profile>.<key>=value`). "
           "Profiles: " + ", ".join(code(p) for p in profiles) + ".", "",
           "## Top level", "", *header]
    sections = []
    for name in [*data, *(n for n in hints if n not in data)]:
        if name == "profiles":
            continue
        hint = hints.get(name)
        inner = typing.get_args(hint)[1] if typing.get_origin(hint) is dict else hint
        if dataclasses.is_dataclass(inner):
            sections.append((name, inner, typing.get_origin(hint) is dict))
            continue
        value = code(comments.value(data, name)) if name in data else "*not written*"
        comment, _ = comments.of(*data.lc.key(name)) if name in data else ("", [])
        kind = cell(_type(hint)) if hint else "not in the schema"
        out.append(f"| {code(name)} | {value} | {override(name)} | {kind} | {cell(comment)} |")
    for name, cls, per_name in sections:
        tree = data.get(name)
        out += ["", f"## {name}", ""]
        if name in data:
            comment, _ = comments.of(*data.lc.key(name))
            out += [cell(comment), ""] if comment else []
        if per_name and tree:
            entries = list(tree.items())
        elif per_name:
            entries = [("<name>", None)]
            out += [f"Each entry of `{name}` is a mapping with these keys (none in "
                    "params.yaml now).", ""]
        else:
            entries = [(None, tree)]
        for entry, subtree in entries:
            path = name if entry is None else f"{name}.{entry}"
            if entry is not None and subtree is not None:
                said, _ = comments.of(*tree.lc.key(entry))
                out += [f"### {path}", "", cell(said), ""] if said else [f"### {path}", ""]
            rows, notes = _field_rows(cls, subtree, path, comments, override, rules)
            out += [*header, *rows, ""]
            out += [f"> {cell(' '.join(notes))}", ""] if notes else []
    out += ["## Profiles", "", "What each profile sets, with the comments beside it in "
            "params.yaml.", ""]
    for name, tree in (data.get("profiles") or {}).items():
        said, _ = comments.of(*data["profiles"].lc.key(name))
        out += [f"### {name}", "", cell(said), "", "| key | value | comment |", "|---|---|---|"]
        out += [f"| {code(key)} | {code(_profile_value(tree, key, comments))} | "
                f"{cell(_profile_comment(tree, key, comments))} |" for key in profiles[name]]
        out.append("")
    return "\n".join(out) + "\n"


def _leaf(tree: Any, key: str) -> tuple[Any, str]:
    *parents, last = key.split(".")
    for part in parents:
        tree = tree[part]
    return tree, last


def _profile_value(tree: Any, key: str, comments: _Comments) -> str:
    return comments.value(*_leaf(tree, key))


def _profile_comment(tree: Any, key: str, comments: _Comments) -> str:
    parent, last = _leaf(tree, key)
    return comments.of(*parent.lc.key(last))[0]


# --- modifications.md: the registry ---------------------------------------------------------

def modifications_page() -> str:
    from multilab.lab import modifications as mods

    ids: dict[str, list[str]] = {}
    for pid, text in mods.PAPER_IDS.items():
        ids.setdefault(text, []).append(pid)
    out = ["# Modifications reference", "",
           "*Generated from `multilab.lab.modifications` each time the site is built; "
           "`multilab ids` prints the paper-ID table.*", "",
           "A modification names what it changes in the setup (fields of `Recipe`); a "
           "combination joins names with `+` (or `;`), the merge of its parts from left to right, "
           "and two parts that set one field to different values are refused. How to add one: "
           "[Concepts](concepts.md#adding-a-modification).", "",
           "## Registered modifications", "",
           "| name | what it changes | paper ID | recipe fields |", "|---|---|---|---|"]
    for name, mod in mods.REGISTRY.items():
        fields = ", ".join(f"{code(k)} = {code(_flow(v))}" for k, v in mod.changes.items())
        out.append(f"| {code(name)} | {cell(mod.description)} | "
                   f"{', '.join(ids.get(name, []))} | {fields} |")
    out += ["", "## Families: a number in the name", "",
            "| name | valid values | what it changes | recipe field |", "|---|---|---|---|"]
    for family in mods.FAMILIES.values():
        symbol = f"<{family.symbol}>"
        text = re.sub(r"\{value(:[^}]*)?\}", symbol, family.description)
        out.append(f"| {code(f'{family.prefix}-{symbol}')} | {cell(family.valid())} | "
                   f"{cell(text)} | {code(family.field)} |")
    out += ["", "## Paper IDs", "",
            f"The model IDs of {PAPERS['000']}'s Tables 1 and 2: `-S modification=<ID>` and "
            "`multilab train -m <ID>` take them; `study:` in params.yaml takes the names.", "",
            "| ID | modification | what it changes |", "|---|---|---|"]
    out += [f"| {pid} | {code(text)} | {cell(mods.describe(text))} |"
            for pid, text in mods.PAPER_IDS.items()]
    return "\n".join(out) + "\n"


# --- MkDocs events ---------------------------------------------------------------------------

BUILDERS = {"index.md": index_page, "cli.md": cli_page, "params.md": params_page,
            "modifications.md": modifications_page}


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for name, build in BUILDERS.items():
        if files.get_file_from_path(name) is None:
            files.append(File.generated(config, name, content=build()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return name_papers(markdown)


def on_serve(server: Any, config: Any, builder: Any) -> Any:
    for path in ("README.md", "params.yaml", "src/multilab"):
        server.watch(str(ROOT / path))
    return server

"""The command line as a new user meets it: `--set` before or after the
command, a description in every `--help`, "did you mean" for a mistyped command, action,
parameter key, profile or modification, one precision rule for table cells, and every figure
as a PDF for print beside its PNG."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from multilab.cli import build_parser, main
from multilab.files import PRINT_VARIABLE
from multilab.lab.cells import cell, number
from multilab.reporting.figures import save_png
from tests.helpers import PARAMS


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_has_a_description() -> None:
    commands = _commands()
    assert {"variant", "report", "train", "check"} <= set(commands)
    for name, command in commands.items():
        text = command.description or ""
        assert len(text.split()) >= 4 and text.endswith("."), name
        assert "seed 00" not in text, name  # the papers by their authors
        assert " ".join(text.split()) in " ".join(command.format_help().split()), name


def test_set_is_accepted_after_the_command_too(tmp_path: Path, monkeypatch, capsys) -> None:
    shutil.copy(PARAMS, tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    assert main(["--set", "seeds=[1,2]", "check", "--set", "profile=smoke"]) == 0
    said = capsys.readouterr().out
    assert "profile=smoke" in said and "seeds=[1, 2]" in said
    assert main(["check", "--set", "profile=paper", "--set", "seeds=[7]"]) == 0
    said = capsys.readouterr().out
    assert "profile=paper" in said and "seeds=[7]" in said
    args = build_parser().parse_args(["train", "--seed", "42", "--set", "profile=smoke"])
    assert args.seed == [42] and args.set_after == ["profile=smoke"]  # --seed repeats


@pytest.mark.parametrize(("argv", "suggestion"), [
    (["trian"], "did you mean 'train'?"),
    (["reprot"], "did you mean 'report'?"),
    (["corpus", "biuld"], "did you mean 'build'?"),
])
def test_a_mistyped_command_gets_a_suggestion(argv: list[str], suggestion: str, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert suggestion in capsys.readouterr().err


@pytest.mark.parametrize(("setting", "suggestion"), [
    ("modification=lang-poss", "did you mean 'lang-pos'?"),
    ("profile=quik", "did you mean 'quick'?"),
    ("train.epoch=3", "did you mean 'epochs'?"),
])
def test_a_mistyped_value_or_key_gets_a_suggestion(setting: str, suggestion: str, tmp_path: Path,
                                                   monkeypatch, capsys) -> None:
    shutil.copy(PARAMS, tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--set", setting]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and suggestion in error, error


def test_one_precision_rule_for_table_cells() -> None:
    # scores in [0, 1]: three decimals, the std with its mean's decimals
    assert cell(0.9661, 0.00048) == "0.966 ± < 0.001"
    assert cell(0.5, 0.3606) == "0.500 ± 0.361"
    assert number(0.00043) == "0.00043"  # a small effect never reads as none
    assert number(8.3e-05) == "0.000083" and number(-0.0000461) == "-0.000046"  # nor as 8.3e-05
    # larger values: three significant digits, from 100 on none, thousands separated
    assert cell(8.912, 0.31) == "8.91 ± 0.31" and cell(12.34, 1.2) == "12.3 ± 1.2"
    assert cell(1848.3, 12.6) == "1,848 ± 13" and cell(1848.3, 0.2) == "1,848 ± < 1"
    # integers: thousands separators and no "± 0"; one seed (no std): the mean alone
    assert cell(1848, 0.0) == "1,848" and cell(1848.0, 0.0) == "1,848"
    assert number(18514) == "18,514" and cell(1.0, 0.0) == "1.000 ± 0.000"  # a measured zero
    assert cell(0.5) == "0.500" and cell(float("nan"), 0.1) == "–"


def test_the_papers_cells_follow_the_same_rule() -> None:
    """The paper's values beside ours read like ours (``0.750 ± 0.000``, not ``.75 ± .00``)."""
    from multilab.reporting.downstream_table import paper_xnli_markdown

    rows = {line.split(" | ")[0]: line for line in paper_xnli_markdown().splitlines()
            if line.startswith("| ")}
    assert rows["| 0"] == "| 0 | original | 0.750 ± 0.000 | 0.570 ± 0.020 | 0.450 ± 0.010 |"
    assert rows["| mBERT"].endswith("| 0.810 | 0.700 | 0.590 |")  # printed without a spread


def test_every_figure_has_a_pdf_for_print_beside_its_png(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """By default (the suite itself sets ``MULTILAB_PRINT_FIGURES=no``); ``no`` leaves the
    PDF out; another value is one line naming the valid ones, before any work."""
    monkeypatch.delenv(PRINT_VARIABLE)
    figure = Figure(figsize=(3, 2))
    figure.subplots().plot([0, 1], [0, 1], label="lang-pos")
    path = save_png(figure, tmp_path / "figure.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert path.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-"
    monkeypatch.setenv(PRINT_VARIABLE, "no")
    screen_only = save_png(figure, tmp_path / "screen.png")
    assert screen_only.read_bytes()[:4] == b"\x89PNG"
    assert not screen_only.with_suffix(".pdf").exists()
    monkeypatch.setenv(PRINT_VARIABLE, "sometimes")
    assert main(["--set", f"paths.results={tmp_path / 'results'}", "ids"]) == 2
    assert capsys.readouterr().err == ("multilab: error: MULTILAB_PRINT_FIGURES='sometimes' "
                                       "is not one of yes, no\n")


class _ClosedPipe:
    """Standard output whose reader has gone (`multilab study list | head -1`)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_pipe_ends_the_command_quietly(monkeypatch, capsys) -> None:
    """A reader that stops early (`| head`) ends the command with the shell's SIGPIPE status
    (141) and no traceback."""
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    assert main(["study", "list"]) == 141
    assert capsys.readouterr().err == ""


@pytest.mark.slow  # starts a multilab process
def test_a_closed_pipe_leaves_no_traceback_in_a_process() -> None:
    """The same through a real pipe closed before the command writes: nothing on stderr
    (Python's flush at exit would otherwise raise a second time)."""
    process = subprocess.Popen([sys.executable, "-m", "multilab.cli", "study", "list"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first line
    _, err = process.communicate(timeout=120)
    assert process.returncode == 141 and err.decode() == "", err.decode()


def test_a_bare_multilab_prints_the_help(capsys) -> None:
    """No command at all asks what there is (as ``--help`` does): the help, exit 0; an
    option without a command is still an error naming the missing command."""
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: multilab") and "study" in out and "train" in out
    with pytest.raises(SystemExit) as stopped:
        main(["-v"])
    assert stopped.value.code == 2
    assert "<command>" in capsys.readouterr().err


def _widths(text: str) -> list[int]:
    return [len(line) for line in text.splitlines()]


def test_ids_fits_the_columns_with_a_header(monkeypatch, capsys) -> None:
    """``ids`` was 357 columns: now a header, lines cut to $COLUMNS with "…", --wide whole."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["ids"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:2] == ["ID", "modification"]
    assert max(_widths(out)) == 80 and "…\n" in out
    assert main(["ids", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert max(_widths(wide)) > 80 and "…" not in wide
    monkeypatch.delenv("COLUMNS")
    assert main(["ids"]) == 0  # no terminal (a capture): 100 columns
    assert max(_widths(capsys.readouterr().out)) == 100


def test_study_list_and_next_fit_the_columns(monkeypatch, capsys) -> None:
    """``study list`` (180 columns, no header) and ``study next`` (267) fit $COLUMNS; the
    commands ``next`` prints to copy stay whole; --wide prints the full lines."""
    monkeypatch.setenv("COLUMNS", "70")
    assert main(["study", "list"]) == 0
    listed = capsys.readouterr().out
    assert listed.splitlines()[0].split()[:3] == ["study", "paper", "table"]
    assert max(_widths(listed)) == 70 and "…" in listed
    assert main(["study", "list", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "…" not in wide and "multilab study report dufter2020-table1\n" in wide
    assert main(["study", "next", "--limit", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    commands = [line for line in lines if line.lstrip().startswith("multilab ")]
    assert commands and all("…" not in line for line in commands)
    assert all(len(line) <= 70 for line in lines if line not in commands)
    assert any(line.endswith("…") for line in lines)

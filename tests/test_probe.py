"""`multilab probe`: any Hugging Face masked LM with its fast tokenizer, on
Bible verses. A tiny untrained BERT over a joint WordPiece is enough to check the measures:
even at its embedding layer, two near-identical English editions retrieve each other and
align word for word, while English and German do neither."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from multilab.cli import main
from multilab.data.parallel import read_edition
from multilab.data.vocab import save_tokenizer, train_wordpiece
from multilab.errors import UserError
from multilab.evaluation.probe import probe_model
from tests.helpers import PARAMS

EDITIONS = ("k", "2", "s")  # King James, King James 2000 (a light modernisation), German


@pytest.fixture(scope="module")
def verses() -> dict[str, list[tuple[str, str]]]:
    return {code: read_edition(code) for code in EDITIONS}


@pytest.fixture(scope="module")
def tiny_model(verses, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained 2-layer BERT and a 1,500-token WordPiece over the three editions."""
    out = tmp_path_factory.mktemp("tiny-mlm")
    texts = [text for code in EDITIONS for _, text in verses[code][:3000]]
    save_tokenizer(train_wordpiece(texts, 1500, exact=False), out)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=1500, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=130)
    BertForMaskedLM(config).save_pretrained(str(out))
    return out


@pytest.mark.slow  # a tiny model trained for the module
def test_probe_tells_a_twin_edition_from_another_language(tiny_model: Path, verses) -> None:
    result = probe_model(tiny_model, verses, ["k", "2", "s"], layer=0, count=120)
    assert result["verses"] == 120 and result["layer"] == 0
    p1 = result["retrieval_p1"]
    assert set(p1) == {"k-2", "2-k", "k-s", "s-k", "2-s", "s-2"}
    assert p1["k-2"] > 0.9 and p1["2-k"] > 0.9  # near-identical word bags
    assert p1["k-s"] < 0.5
    twin, german = result["alignment"]["2"], result["alignment"]["s"]
    assert twin["agreement"] > 0.6 > german["agreement"]
    assert twin["tau"] > german["tau"]
    assert 0 <= german["tau"] <= 1 and 0 <= german["ibm1_tau"] <= 1


@pytest.mark.slow  # a tiny model trained for the module
def test_probe_command_writes_json(tiny_model: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "probe.json"
    args = ["--params", str(PARAMS), "--set", f"paths.results={tmp_path / 'results'}",
            "probe", str(tiny_model), "--languages", "k,s",
            "--layer", "1", "--verses", "40", "--out", str(out)]
    assert main(args) == 0
    data = json.loads(out.read_text())
    assert data["editions"] == ["k", "s"] and set(data["alignment"]) == {"s"}
    assert "k-s:" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "fragment"), [
    (["--languages", "k"], "needs at least two editions"),
    (["--languages", "k,x"], "unknown Bible edition 'x'"),
    (["--languages", "k,k"], "edition 'k' is listed twice"),  # the fault audit's case 8: ValueError
    (["--languages", "k,s", "--layer", "7"], "layer 7: the model has layers 0-2"),
    (["--languages", "k,s", "--verses", "0"], "--verses 0: must be >= 1"),
])
def test_bad_probe_input_is_one_line(args, fragment, tiny_model: Path, capsys) -> None:
    assert main(["--params", str(PARAMS), "probe", str(tiny_model), *args]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines()
              if line.startswith("multilab: error:")]
    assert len(errors) == 1 and fragment in errors[0], errors


def test_a_folder_without_a_model_is_refused(tmp_path: Path, verses) -> None:
    with pytest.raises(UserError, match="not a Hugging Face model directory"):
        probe_model(tmp_path, verses, ["k", "s"], layer=0, count=10)

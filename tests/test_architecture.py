"""BERT parameter counts in closed form and the fixed-count shape solver (K et al. 2020 §3.3)."""

from __future__ import annotations

import pytest
import torch
from transformers import BertForMaskedLM, BertForPreTraining

from multilab.architecture import (
    BertShape,
    parameter_count,
    solve_hidden_size,
)
from multilab.resolve import resolve_run

#: (hidden, layers, heads, vocab, positions, token types, intermediate or None)
SHAPES = [
    (64, 12, 1, 4096, 256, 2, None),  # the lab's BERT-small, bilingual vocabulary
    (48, 3, 3, 1000, 64, 3, None),
    (30, 2, 5, 77, 16, 1, 50),
    (36, 1, 12, 500, 40, 2, None),
]
BERT_SMALL = BertShape(64, 12, 1, 4096, 256)
BERT_SMALL_COUNT = 886_976


def numel(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def one_line_error(excinfo: pytest.ExceptionInfo[ValueError]) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message
    return message


@pytest.mark.parametrize("fields", SHAPES)
def test_count_equals_the_models_parameters(fields: tuple) -> None:
    shape = BertShape(*fields[:6], intermediate_size=fields[6])
    torch.manual_seed(0)
    mlm = BertForMaskedLM(shape.config())
    count = parameter_count(shape)
    assert count.total == numel(mlm)
    assert count.embeddings == numel(mlm.bert.embeddings)
    assert count.encoder == numel(mlm.bert.encoder)
    assert count.mlm_head + count.embeddings == numel(mlm) - numel(mlm.bert.encoder)
    assert count.non_embedding == count.total - numel(mlm.bert.embeddings)
    pretraining = BertForPreTraining(shape.config())
    full = parameter_count(shape, pooler=True, nsp_head=True)
    assert full.total == numel(pretraining)
    assert full.pooler == numel(pretraining.bert.pooler)
    assert full.nsp_head == numel(pretraining.cls.seq_relationship)
    untied = BertForMaskedLM(shape.config(tie_word_embeddings=False))
    assert parameter_count(shape, tied=False).total == numel(untied)


def test_the_lab_bert_small_count() -> None:
    assert parameter_count(BERT_SMALL).total == BERT_SMALL_COUNT


def test_the_paper_counts_bert_base_with_embeddings_pooler_and_nsp_head() -> None:
    """132.78 M (K et al. 2020 Tables 4–7) is BertForPreTraining with a 60,000 vocabulary."""
    base = BertShape(768, 12, 12, 60_000, 512)
    assert parameter_count(base, pooler=True, nsp_head=True).total == 132_775_010


@pytest.mark.parametrize(
    ("millions", "layers", "heads", "hidden"),
    [  # K et al. 2020 Table 6 (every row) and Table 4 rows at depth 2, 4, 6
        (7.87, 3, 3, 120),
        (12.19, 3, 3, 180),
        (16.78, 3, 3, 240),
        (8.40, 6, 6, 120),
        (13.37, 6, 6, 180),
        (18.87, 6, 6, 240),
        (4.23, 12, 12, 60),
        (11.83, 12, 12, 144),
        (29.65, 12, 12, 288),
        (283.11, 12, 12, 1200),
        (136.32, 2, 12, 1404),
        (136.20, 4, 12, 1152),
        (138.86, 6, 12, 1020),
    ],
)
def test_closed_form_reproduces_the_papers_table_counts(
    millions: float, layers: int, heads: int, hidden: int
) -> None:
    shape = BertShape(hidden, layers, heads, 60_000, 512)
    total = parameter_count(shape, pooler=True, nsp_head=True).total
    assert round(total / 1e6, 2) == pytest.approx(millions)


@pytest.mark.parametrize("layers", [1, 2, 4, 6, 12, 18, 24])
def test_solver_picks_the_closest_multiple_of_the_heads(layers: int) -> None:
    shape = solve_hidden_size(BERT_SMALL_COUNT, layers, 1, 4096, 256)
    assert shape.num_hidden_layers == layers and shape.intermediate == 4 * shape.hidden_size

    def error(hidden: int) -> int:
        other = BertShape(hidden, layers, 1, 4096, 256)
        return abs(parameter_count(other).total - BERT_SMALL_COUNT)

    best = error(shape.hidden_size)
    assert best <= 0.05 * BERT_SMALL_COUNT
    assert best <= error(shape.hidden_size - 1) and best <= error(shape.hidden_size + 1)


def test_solver_gives_back_bert_small_and_bert_base() -> None:
    assert solve_hidden_size(BERT_SMALL_COUNT, 12, 1, 4096, 256).hidden_size == 64
    for heads in (1, 2, 3, 6, 12, 16, 24):  # 768 is a multiple of every head count
        base = solve_hidden_size(132_775_010, 12, heads, 60_000, 512, pooler=True, nsp_head=True)
        assert base.hidden_size == 768


@pytest.mark.parametrize("heads", [1, 2, 3, 6, 12, 16, 24])
def test_solver_hidden_sizes_divide_by_the_heads(heads: int) -> None:
    shape = solve_hidden_size(554_896, 12, heads, 4096, 256)
    assert shape.hidden_size % heads == 0
    assert shape.hidden_size == 48  # lcm of the Table 5 head counts: one shape for all


def test_solver_without_embeddings_matches_the_non_embedding_count() -> None:
    target = parameter_count(BERT_SMALL).non_embedding
    shape = solve_hidden_size(target, 12, 1, 4096, 256, include_embeddings=False)
    assert shape.hidden_size == 64


@pytest.mark.parametrize(
    ("target", "layers", "heads"),
    [
        (BERT_SMALL_COUNT, 12, 24),  # hidden 48 → 554,896, hidden 72 → 1,080,856
        (1_000, 12, 1),  # below the smallest BERT of this vocabulary
    ],
)
def test_unreachable_target_fails_in_one_line(target: int, layers: int, heads: int) -> None:
    with pytest.raises(ValueError) as excinfo:
        solve_hidden_size(target, layers, heads, 4096, 256)
    message = one_line_error(excinfo)
    assert f"{target:,}" in message and f"{heads} heads" in message


def test_heads_that_do_not_divide_the_hidden_size_fail_in_one_line() -> None:
    with pytest.raises(ValueError) as excinfo:
        BertShape(64, 12, 3, 4096, 256)
    assert "num_attention_heads=3" in one_line_error(excinfo)


def test_nsp_head_needs_the_pooler() -> None:
    with pytest.raises(ValueError) as excinfo:
        parameter_count(BERT_SMALL, nsp_head=True)
    one_line_error(excinfo)


def test_solver_rejects_zero_heads_in_one_line() -> None:
    with pytest.raises(ValueError) as excinfo:
        solve_hidden_size(BERT_SMALL_COUNT, 12, 0, 4096, 256)
    assert "num_attention_heads=0" in one_line_error(excinfo)


# --------------------------------------------------------------------------- the studies


def _study(**evaluate: object):
    from multilab.resolve import load_config
    from tests.helpers import PARAMS

    return load_config(PARAMS, {"evaluate": evaluate} if evaluate else {})


@pytest.mark.parametrize(("modification", "layers", "heads", "hidden"), [
    ("depth-1", 1, 1, 142), ("depth-4", 4, 1, 97), ("depth-24", 24, 1, 48),
    ("heads-2", 12, 2, 64), ("depth-4;heads-4", 4, 4, 96),
])
def test_depth_and_heads_keep_the_parameter_count(modification: str, layers: int, heads: int,
                                                  hidden: int) -> None:
    """K et al. 2020 Tables 4–5 at the lab's scale: the small model (12 × 64, one head, 4,096
    ids: 886,976 parameters) reshaped, the count within 5 %."""
    cfg = _study(layers="all")
    model = resolve_run(cfg, modification, 0).model
    assert (model.num_hidden_layers, model.num_attention_heads, model.hidden_size) == (
        layers, heads, hidden)
    assert model.intermediate_size == 4 * hidden
    count = parameter_count(BertShape(hidden, layers, heads, 4096, 256)).total
    assert abs(count - 886_976) / 886_976 < 0.05
    original = resolve_run(cfg, "original", 0).model
    assert (original.hidden_size, original.num_hidden_layers) == (64, 12)  # untouched


@pytest.mark.parametrize(("modification", "factor", "layers", "heads"), [
    ("params-0.5", 0.5, 12, 1), ("params-2", 2.0, 12, 1), ("depth-4;heads-4;params-0.5", 0.5, 4, 4),
])
def test_params_scales_the_count_at_fixed_depth_and_heads(modification: str, factor: float,
                                                         layers: int, heads: int) -> None:
    """K et al. 2020 Table 6 (and Table 7's smaller, deeper models): the count times x at the
    depth and heads given, the hidden size solved."""
    model = resolve_run(_study(layers="all"), modification, 0).model
    assert (model.num_hidden_layers, model.num_attention_heads) == (layers, heads)
    assert model.hidden_size % heads == 0 and model.intermediate_size == 4 * model.hidden_size
    count = parameter_count(BertShape(model.hidden_size, layers, heads, 4096, 256)).total
    assert abs(count - factor * 886_976) / (factor * 886_976) < 0.05


def test_unreachable_shapes_and_missing_layers_fail_in_one_line() -> None:
    from multilab.lab.modifications import ModificationError

    cfg = _study(layers="all")
    with pytest.raises(ModificationError, match="no BERT with 12 layers and 24 heads") as err:
        resolve_run(cfg, "heads-24", 0)
    assert "\n" not in str(err.value)
    with pytest.raises(ModificationError, match=r"evaluate.layers = \[0, 8\] asks for layer 8"):
        resolve_run(_study(), "depth-4", 0)
    with pytest.raises(ModificationError, match="'x' is not an integer"):
        resolve_run(cfg, "depth-x", 0)
    with pytest.raises(ModificationError, match="n = 0 is outside"):
        resolve_run(cfg, "heads-0", 0)
    with pytest.raises(ModificationError, match=r"p = 0 is outside \[0.05, 20\]; valid: "
                       "params-<p>"):
        resolve_run(cfg, "params-0", 0)


@pytest.mark.slow  # a 2-layer smoke model trained and evaluated on its own layers
def test_a_shallow_model_trains_and_evaluates_every_layer(built_project, tmp_path) -> None:
    import json

    from multilab.evaluation.evaluate import evaluate_and_record
    from multilab.training.train import train_model
    from tests.helpers import link_project, one_torch_thread, smoke_config

    cfg = smoke_config(link_project(built_project, tmp_path), evaluate={"layers": "all"},
                       train={"max_train_sentences": 64, "eval_points": []})
    run = resolve_run(cfg, "depth-2", 0)
    with one_torch_thread():
        model_dir = train_model(run, progress=False)
        record = evaluate_and_record(cfg, model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["hidden_size"] == run.model.hidden_size
    assert {"align_f1.l0", "align_f1.l1", "align_f1.l2"} <= set(record["metrics"])
    assert "align_f1.l8" not in record["metrics"]

"""The fused CPU step (training/fused_step.py): the same model as the Hugging Face forward,
a dropout mask that is a fair coin, a compiled graph that computes what the eager one does,
and a trainer that resumes to identical weights with it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForMaskedLM

from multilab.config import Config
from multilab.errors import StoppedEarly, UserError
from multilab.resolve import resolve_run
from multilab.training.fused_step import FusedObjective, hash_dropout, keep_mask, mix32
from multilab.training.model import MaskedLMObjective
from multilab.training.model_dir import read_done
from multilab.training.train import make_optimizer, train_model
from tests.helpers import cli_settings, config_of, one_torch_thread, saved_weights

slow = pytest.mark.slow


def _model(layers: int = 2, heads: int = 2, seed: int = 0) -> BertForMaskedLM:
    torch.manual_seed(seed)
    return BertForMaskedLM(BertConfig(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_attention_heads=heads,
        num_hidden_layers=layers, max_position_embeddings=64, type_vocab_size=2,
        tie_word_embeddings=True))


def _piece(rows: int = 6, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """A padded piece of rows of different lengths, 15 % of the real tokens selected."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 20, (rows,), generator=g)
    width = int(lengths.max())
    attention = (torch.arange(width)[None] < lengths[:, None]).long()
    inputs = {
        "input_ids": torch.randint(5, 300, (rows, width), generator=g) * attention,
        "attention_mask": attention,
        "position_ids": torch.arange(width)[None].expand(rows, width).contiguous(),
        "token_type_ids": (torch.arange(rows)[:, None] % 2).expand(rows, width).contiguous(),
    }
    selected = (torch.rand(rows, width, generator=g) < 0.15) & attention.bool()
    selected[0, 1] = True  # at least one
    labels = torch.randint(5, 300, (int(selected.sum()),), generator=g)
    return selected, labels, inputs


def test_keep_mask_is_a_fair_coin_and_keys_are_independent() -> None:
    """Rate 1 - p to three decimals over a million elements; masks of two keys uncorrelated;
    the same key gives the same mask (what resume relies on)."""
    shape = (1000, 1000)
    first = keep_mask(shape, torch.tensor(1, dtype=torch.int32), 0.1)
    second = keep_mask(shape, torch.tensor(2, dtype=torch.int32), 0.1)
    assert abs(first.float().mean().item() - 0.9) < 1e-3
    assert abs(second.float().mean().item() - 0.9) < 1e-3
    corr = torch.corrcoef(torch.stack([first.flatten().float(), second.flatten().float()]))
    assert abs(corr[0, 1].item()) < 5e-3
    # neighbouring elements of one mask are uncorrelated too (no stripes along a row)
    flat = first.flatten().float()
    assert abs(torch.corrcoef(torch.stack([flat[:-1], flat[1:]]))[0, 1].item()) < 5e-3
    assert torch.equal(first, keep_mask(shape, torch.tensor(1, dtype=torch.int32), 0.1))
    x = torch.ones(shape)
    dropped = hash_dropout(x, torch.tensor(1, dtype=torch.int32), 0.1)
    assert torch.equal(dropped == 0, ~first)
    assert torch.allclose(dropped[first], torch.tensor(1 / 0.9))


@pytest.mark.parametrize("heads", [1, 2])
def test_fused_loss_and_gradients_equal_the_hugging_face_forward(heads: int) -> None:
    """Without dropout the unpadded forward is BertForMaskedLM's: the summed loss to 1e-5
    relative, every parameter's gradient to 1e-5 of the model's largest (the key bias's true
    gradient is zero: softmax ignores a constant per query, so only rounding is left there)."""
    selected, labels, inputs = _piece()
    reference, fused = _model(heads=heads), _model(heads=heads)
    reference.eval()
    fused.eval()
    want = MaskedLMObjective(reference)(selected, labels, **inputs)
    got = FusedObjective(fused, compile=False)(selected, labels, **inputs)
    assert abs(got.item() - want.item()) <= 1e-5 * abs(want.item())
    want.backward()
    got.backward()
    scale = max(float(p.grad.abs().max()) for p in reference.parameters())
    for (name, p), (_, q) in zip(reference.named_parameters(), fused.named_parameters(),
                                 strict=True):
        assert float((p.grad - q.grad).abs().max()) <= 1e-5 * scale, name


@slow
def test_compiled_graph_computes_the_eager_fused_loss_with_dropout() -> None:
    """The compiled graph (inductor's C++ loops, integer hash included) gives the loss and
    gradients of the same function run eagerly, with dropout on and the same keys."""
    selected, labels, inputs = _piece(rows=9, seed=3)
    eager, compiled = _model(), _model()
    results = []
    for model, do_compile in ((eager, False), (compiled, True)):
        model.train()
        objective = FusedObjective(model, compile=do_compile)
        objective.seed_step(7)  # as the trainer does before a step's pieces
        loss = objective(selected, labels, **inputs)
        loss.backward()
        results.append((float(loss), {n: p.grad for n, p in model.named_parameters()}))
    (want, want_grads), (got, got_grads) = results
    assert abs(got - want) <= 1e-4 * abs(want)
    scale = max(float(grad.abs().max()) for grad in want_grads.values())
    for name, grad in want_grads.items():
        assert float((grad - got_grads[name]).abs().max()) <= 1e-4 * scale, name


@slow
def test_recomputed_masks_are_the_saved_masks_step_bit_for_bit() -> None:
    """Recomputing each dropout mask's hash in the backward pass (hash_dropout's
    checkpointed region) moves where the bits are computed, not which bits nor what is done
    with them: at one thread the compiled step's loss and every gradient equal, bit for bit,
    those of the earlier graph, which saved the masks. And it does recompute them: no bool
    tensor is saved for the backward pass any more (the earlier graph saved five of its seven
    sites' masks)."""
    selected, labels, inputs = _piece(rows=9, seed=3)
    results = []
    with one_torch_thread():
        for recompute in (False, True):
            model = _model()
            model.train()
            objective = FusedObjective(model, recompute_masks=recompute)
            objective.seed_step(11)
            saved: list[torch.dtype] = []

            def pack(tensor: torch.Tensor, saved: list[torch.dtype] = saved) -> torch.Tensor:
                saved.append(tensor.dtype)
                return tensor

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
                loss = objective(selected, labels, **inputs)
            loss.backward()
            results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()},
                            saved.count(torch.bool)))
    (before, before_grads, before_bools), (now, now_grads, now_bools) = results
    assert torch.equal(before, now)
    for name, grad in before_grads.items():
        assert torch.equal(grad, now_grads[name]), name
    assert before_bools > 0  # the earlier graph did save masks: the count can tell
    assert now_bools == 0


def test_fused_step_is_refused_where_it_would_train_another_model(project: Config,
                                                                  tmp_path: Path) -> None:
    """One line naming the value and the valid ones: a bad step name, a stack, compile,
    NSP, separate layers, attended padding."""
    with pytest.raises(UserError, match=r"train.step = 'fast': valid: eager, fused"):
        config_of(cli_settings(tmp_path, **{"train.step": "fast"}))
    with pytest.raises(UserError, match=r"train\.step = fused with train\.stack = 2"):
        config_of(cli_settings(tmp_path, **{"train.step": "fused", "train.stack": 2}))
    with pytest.raises(UserError, match=r"train\.compile = true: the fused step is compiled"):
        config_of(cli_settings(tmp_path, **{"train.step": "fused", "train.compile": "true"}))
    cfg = config_of(cli_settings(tmp_path, **{"train.step": "fused"}))
    with pytest.raises(UserError, match=r"next_sentence; valid: step eager"):
        resolve_run(cfg, "nsp", 0)
    with pytest.raises(UserError, match=r"not separate_layers; valid: step eager"):
        resolve_run(cfg, "sep-L1-3", 0)
    whole = config_of(cli_settings(tmp_path, **{"train.step": "fused",
                                                "train.length_pieces": 1}))
    with pytest.raises(UserError, match=r"not attend_padding; valid: step eager"):
        resolve_run(whole, "attend-padding", 0)


def test_fused_step_has_its_own_fingerprint(project: Config, tmp_path: Path) -> None:
    """Another dropout stream is another model; the eager default keeps every fingerprint."""
    eager = config_of(cli_settings(tmp_path))
    named = config_of(cli_settings(tmp_path, **{"train.step": "eager"}))
    fused = config_of(cli_settings(tmp_path, **{"train.step": "fused"}))
    prints = [resolve_run(c, "original", 0).fingerprint() for c in (eager, named, fused)]
    assert prints[0] == prints[1] != prints[2]


@slow
def test_fused_training_resumes_to_identical_weights(project: Config, tmp_path: Path) -> None:
    """Stopped after step 2 and resumed, a fused run ends with the weights of an
    uninterrupted one (its dropout keys come from the step's seeded generator). At one
    thread, as the lanes train: at two, inductor's parallel loops sum in a varying order
    and two uninterrupted runs already differ by float rounding (≈ 1e-7)."""
    small = {"train.step": "fused", "train.max_train_sentences": 64,
             "models.small.num_hidden_layers": 2, "evaluate.layers": "[0, 2]"}
    run = resolve_run(config_of(cli_settings(tmp_path, **small)), "original", 0)
    finals = []
    with one_torch_thread():
        for name, stop in (("whole", None), ("stopped", 2)):
            model_dir = tmp_path / name
            if stop:
                with pytest.raises(StoppedEarly):
                    train_model(run, stop_after_step=stop, progress=False, model_dir=model_dir)
            train_model(run, progress=False, model_dir=model_dir)
            assert read_done(model_dir)["steps"] == 4
            finals.append(saved_weights(model_dir))
    whole, resumed = finals
    assert whole.keys() == resumed.keys()
    for key, tensor in whole.items():
        assert torch.equal(tensor, resumed[key]), key


# --------------------------------------------------------------------------- the frozen step
# The fused step as the paper-budget study's first seeds were trained by it (commit 4628f30):
# a later, faster step must compute the same function (same dropout bits, same loss and
# gradients), or a later seed would be another trainer's. Frozen here, never edited.


def _frozen_mix32(x: torch.Tensor) -> torch.Tensor:
    x = x ^ ((x >> 16) & 0xFFFF)
    x = x * 0x7FEB352D
    x = x ^ ((x >> 15) & 0x1FFFF)
    x = x * (0x846CA68B - (1 << 32))
    return x ^ ((x >> 16) & 0xFFFF)


def _frozen_dropout(x: torch.Tensor, key: torch.Tensor, p: float) -> torch.Tensor:
    if p == 0.0:
        return x
    index = torch.arange(x.numel(), dtype=torch.int32).view(x.shape)
    keep = _frozen_mix32(_frozen_mix32(index ^ key) + key) >= round(p * 2**32) - 2**31
    return torch.where(keep, x * (1.0 / (1.0 - p)), 0.0)


def _frozen_norm(x: torch.Tensor, module: torch.nn.LayerNorm) -> torch.Tensor:
    return F.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)


def _frozen_unpadded_loss(model, input_ids, position_ids, token_type_ids, tokens, key_bias,
                          selected, labels, rows, width, keys, hidden_p, attention_p,
                          recompute_masks=True):  # how masks reach backward: same loss
    bert, head = model.bert, model.cls.predictions
    emb = bert.embeddings
    x = (emb.word_embeddings.weight[input_ids] + emb.position_embeddings.weight[position_ids]
         + emb.token_type_embeddings.weight[token_type_ids])
    x = _frozen_dropout(_frozen_norm(x, emb.LayerNorm), keys[0], hidden_p)
    hidden = x.shape[-1]
    for number, layer in enumerate(bert.encoder.layer):
        site = 1 + 3 * number
        attention = layer.attention
        heads = attention.self.num_attention_heads
        size = hidden // heads
        projections = (attention.self.query, attention.self.key, attention.self.value)
        qkv = F.linear(x, torch.cat([p.weight for p in projections]),
                       torch.cat([p.bias for p in projections]))
        padded = qkv.new_zeros(rows * width, 3 * hidden).index_copy(0, tokens, qkv)
        q, k, v = padded.view(rows, width, 3, heads, size).permute(2, 0, 3, 1, 4).unbind(0)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(size)) + key_bias
        probs = _frozen_dropout(scores.softmax(-1), keys[site], attention_p)
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(rows * width, hidden)
        out = F.linear(context[tokens], attention.output.dense.weight,
                       attention.output.dense.bias)
        x = _frozen_norm(_frozen_dropout(out, keys[site + 1], hidden_p) + x,
                         attention.output.LayerNorm)
        inner = F.gelu(F.linear(x, layer.intermediate.dense.weight,
                                layer.intermediate.dense.bias))
        out = F.linear(inner, layer.output.dense.weight, layer.output.dense.bias)
        x = _frozen_norm(_frozen_dropout(out, keys[site + 2], hidden_p) + x,
                         layer.output.LayerNorm)
    picked = x[selected]
    picked = _frozen_norm(F.gelu(F.linear(picked, head.transform.dense.weight,
                                          head.transform.dense.bias)), head.transform.LayerNorm)
    logits = F.linear(picked, emb.word_embeddings.weight, head.bias)
    return F.cross_entropy(logits.float(), labels, reduction="sum")


class _FrozenObjective(FusedObjective):
    """FusedObjective's unpadding and key drawing around the frozen loss."""

    def __init__(self, model: BertForMaskedLM) -> None:
        super().__init__(model, compile=False)
        self._loss = _frozen_unpadded_loss


#: Today's keep bits, computed once by the frozen formula: (key, p, shape) → kept count,
#: the first 64 bits (element i at bit i) and the first dropped indices.
PINNED_MASKS = [
    (12345, 0.1, (1000, 1000), 899730, 0xFFFFFFFFFFDF7FFE, [0, 15, 21, 67, 84, 107, 109, 121]),
    (-7, 0.1, (300, 7, 11), 20731, 0xBDFFB6BBFFFF6FF7, [3, 12, 15, 34, 38, 40, 43, 46]),
    (2**31 - 1, 0.5, (4096,), 1997, 0x8EB0C0A4CD183803, [2, 3, 4, 5, 6, 7, 8, 9]),
]


@pytest.mark.parametrize(("key", "p", "shape", "kept", "first_bits", "first_dropped"),
                         PINNED_MASKS)
def test_keep_mask_bits_are_the_ones_the_study_trained_with(
        key: int, p: float, shape: tuple[int, ...], kept: int, first_bits: int,
        first_dropped: list[int]) -> None:
    """The paper-budget study's seeds are trained over several processes and sessions: the
    mask of a key must never change, whatever makes the step faster."""
    mask = keep_mask(shape, torch.tensor(key, dtype=torch.int32), p)
    flat = mask.flatten()
    assert int(mask.sum()) == kept
    assert sum(int(bit) << i for i, bit in enumerate(flat[:64].tolist())) == first_bits
    assert torch.nonzero(~flat)[:8].flatten().tolist() == first_dropped
    assert mix32(torch.tensor([0, 1, 2, -1, 123456789], dtype=torch.int32)).tolist() == [
        0, 1753845952, -787275391, 1734902346, -1460544632]


def _against_frozen(do_compile: bool, heads: int = 2, rows: int = 9, seed: int = 3) -> None:
    """The step's loss and every gradient, dropout on and the same keys, against the frozen
    step's: to 1e-5 of the loss and of the largest gradient."""
    selected, labels, inputs = _piece(rows=rows, seed=seed)
    results = []
    for objective_of in (_FrozenObjective,
                         lambda model: FusedObjective(model, compile=do_compile)):
        model = _model(heads=heads)
        model.train()
        objective = objective_of(model)
        objective.seed_step(11)
        loss = objective(selected, labels, **inputs)
        loss.backward()
        results.append((float(loss), {n: p.grad for n, p in model.named_parameters()}))
    (want, want_grads), (got, got_grads) = results
    assert abs(got - want) <= 1e-5 * abs(want)
    scale = max(float(grad.abs().max()) for grad in want_grads.values())
    for name, grad in want_grads.items():
        assert float((grad - got_grads[name]).abs().max()) <= 1e-5 * scale, name


@pytest.mark.parametrize("heads", [1, 2])
def test_eager_step_computes_the_frozen_step(heads: int) -> None:
    """Run eagerly, today's step is the frozen one's function, dropout included."""
    _against_frozen(do_compile=False, heads=heads)


@slow
def test_compiled_step_computes_the_frozen_step() -> None:
    """Compiled (what the trainer runs), the step is still the frozen one's function."""
    _against_frozen(do_compile=True)


def test_one_kernel_adamw_makes_the_default_adamw_update() -> None:
    """The fused step's optimizer (torch's fused AdamW) is the default AdamW of the same
    hyper-parameters and decay groups: parameters within 1e-6 after five steps of real
    gradients, the learning rate changing between steps as the schedule changes it."""
    selected, labels, inputs = _piece()
    models = [_model().eval(), _model().eval()]  # no dropout: the same gradients for both
    optimizers = [make_optimizer(model, 2e-3, 0.01, 1e-6, one_kernel=one_kernel)
                  for model, one_kernel in zip(models, (False, True), strict=True)]
    assert [o.param_groups[0]["fused"] for o in optimizers] == [None, True]
    for step in range(5):
        for model, optimizer in zip(models, optimizers, strict=True):
            for group in optimizer.param_groups:
                group["lr"] = 2e-3 * (step + 1) / 5
            MaskedLMObjective(model)(selected, labels, **inputs).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    default, fused = (dict(model.named_parameters()) for model in models)
    moved = max(float((p - q).abs().max()) for p, q in
                zip(default.values(), _model().parameters(), strict=True))
    assert moved > 1e-3  # the steps did move the weights
    for name, param in default.items():
        assert float((param - fused[name]).abs().max()) <= 1e-6, name

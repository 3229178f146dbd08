"""The fused CPU step (``train.step: fused``): BERT's MLM loss on the real tokens only,
with counter-hash dropout, compiled by inductor into a few dozen C++ loops.

Why: at BERT-small's sizes the eager step spends two thirds of its time outside the matrix
products (benchmarks/bench_cpu_floor.py, its record in benchmarks/results/): a pass over memory per
element-wise op, dropout's Bernoulli masks drawn one element at a time, and the padding of each
piece. This forward is the same arithmetic as ``BertForMaskedLM`` on the same parameters (the
loss equals the Hugging Face forward's to float rounding when dropout is off:
tests/test_fused_step.py), with three differences in how it runs:

- **unpadded**: every per-token op (embeddings, the four products of a layer, layer norms,
  GELU, the MLM head) runs on the piece's real tokens, gathered once; only attention scatters
  them back to the piece's padded ``[rows, width]`` for its two batched products;
- **counter-hash dropout**: an element's keep bit is a 32-bit hash of its index and a key
  drawn per (step, piece, site) from a generator the trainer seeds from (seed, step), so
  the mask is computed inside the fused loop that uses it (vectorised integer ops), never
  stored, and recomputed in the backward pass. It is a different random
  stream from ``torch.nn.Dropout``'s: a model trained with this step has another fingerprint;
- **compiled**: the whole forward and its backward are one inductor graph each, with dynamic
  shapes (rows, width, tokens and selected positions vary every piece), compiled once per
  process (≈ 2 min on two cores; inductor caches it on disk for the next process). At one
  thread a run is bit-identical after a resume; at two, inductor's parallel loops sum in a
  varying order, so runs agree to float rounding only.

The model stays a ``BertForMaskedLM``: checkpoints, ``save_pretrained`` and evaluation are
unchanged. Architectures it does not cover (the NSP head, per-language layers, attended
padding) are refused at resolve time (``resolve._check_run``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import BertForMaskedLM

from multilab.errors import UserError

#: Dropout sites of one forward: the embeddings, then per layer the attention map, the
#: attention output and the feed-forward output (BERT's order).
SITES_PER_LAYER = 3

# murmur3-style finaliser constants (Chris Wellons' "lowbias32"), as signed 32-bit integers:
# torch has no unsigned 32-bit arithmetic, and a logical right shift is an arithmetic shift
# masked to the bits that remain
_MIX1 = 0x7FEB352D
_MIX2 = 0x846CA68B - (1 << 32)


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A bijective avalanche of int32 values (every input bit flips each output bit with
    probability ≈ 1/2): the counter hash's round."""
    x = x ^ ((x >> 16) & 0xFFFF)
    x = x * _MIX1
    x = x ^ ((x >> 15) & 0x1FFFF)
    x = x * _MIX2
    return x ^ ((x >> 16) & 0xFFFF)


def keep_mask(shape: torch.Size | tuple[int, ...], key: torch.Tensor, p: float) -> torch.Tensor:
    """The keep bits of dropout at rate ``p`` for a tensor of ``shape``: element i is kept
    when ``mix32(mix32(i ^ key) + key)``, uniform over int32, is at or above the ``p``
    quantile. Two rounds, so that masks of different keys are independent at each i
    (tests/test_fused_step.py measures rate and correlation)."""
    index = torch.arange(math.prod(shape), dtype=torch.int32, device=key.device).view(shape)
    threshold = round(p * 2**32) - 2**31
    return mix32(mix32(index ^ key) + key) >= threshold


def hash_dropout(x: torch.Tensor, key: torch.Tensor, p: float,
                 recompute_mask: bool = True) -> torch.Tensor:
    """Inverted dropout with the counter-hash mask (the identity at ``p`` = 0).

    ``recompute_mask``: under torch.compile, the mask's hash is an activation-checkpointed
    region, so the backward pass recomputes it from the key instead of loading it. Left to
    itself the partitioner may not recompute ``arange`` and the bitwise ops, so it saved
    each site's mask as a bool tensor; inductor's CPU loop stores a vector of bools one
    element at a time, ten times the cost of the hash itself. The bits and the arithmetic
    are the same either way (tests/test_fused_step.py compares the two compiled graphs);
    False is the earlier graph, kept for benchmarks/bench_cpu_floor.py's paired arm."""
    if p == 0.0:
        return x
    if recompute_mask and torch.compiler.is_compiling():
        keep = checkpoint(keep_mask, x.shape, key, p, use_reentrant=False)
    else:
        keep = keep_mask(x.shape, key, p)
    return torch.where(keep, x * (1.0 / (1.0 - p)), 0.0)


def _norm(x: torch.Tensor, module: torch.nn.LayerNorm) -> torch.Tensor:
    return F.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)


def unpadded_loss(
    model: BertForMaskedLM, input_ids: torch.Tensor, position_ids: torch.Tensor,
    token_type_ids: torch.Tensor, tokens: torch.Tensor, key_bias: torch.Tensor,
    selected: torch.Tensor, labels: torch.Tensor, rows: int, width: int,
    keys: torch.Tensor, hidden_p: float, attention_p: float, recompute_masks: bool = True,
) -> torch.Tensor:
    """The summed MLM loss of one piece, on its ``T`` real tokens.

    ``input_ids``, ``position_ids``, ``token_type_ids``: [T] of the real tokens in row-major
    order; ``tokens``: [T] their flat positions in the padded ``rows × width`` piece;
    ``key_bias``: [rows, 1, 1, width], 0 at real keys and the dtype's minimum at padding;
    ``selected``: [N] which of the T tokens the loss predicts, ``labels`` [N] their ids;
    ``keys``: [1 + 3 × layers] int32 dropout keys; ``recompute_masks``: see
    :func:`hash_dropout`.
    """
    def drop(x: torch.Tensor, key: torch.Tensor, p: float) -> torch.Tensor:
        return hash_dropout(x, key, p, recompute_masks)

    bert, head = model.bert, model.cls.predictions
    emb = bert.embeddings
    x = (emb.word_embeddings.weight[input_ids] + emb.position_embeddings.weight[position_ids]
         + emb.token_type_embeddings.weight[token_type_ids])
    x = drop(_norm(x, emb.LayerNorm), keys[0], hidden_p)
    hidden = x.shape[-1]
    for number, layer in enumerate(bert.encoder.layer):
        site = 1 + SITES_PER_LAYER * number
        attention = layer.attention
        heads = attention.self.num_attention_heads
        size = hidden // heads
        projections = (attention.self.query, attention.self.key, attention.self.value)
        qkv = F.linear(x, torch.cat([p.weight for p in projections]),
                       torch.cat([p.bias for p in projections]))
        padded = qkv.new_zeros(rows * width, 3 * hidden).index_copy(0, tokens, qkv)
        q, k, v = padded.view(rows, width, 3, heads, size).permute(2, 0, 3, 1, 4).unbind(0)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(size)) + key_bias
        probs = drop(scores.softmax(-1), keys[site], attention_p)
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(rows * width, hidden)
        out = F.linear(context[tokens], attention.output.dense.weight,
                       attention.output.dense.bias)
        x = _norm(drop(out, keys[site + 1], hidden_p) + x, attention.output.LayerNorm)
        inner = F.gelu(F.linear(x, layer.intermediate.dense.weight,
                                layer.intermediate.dense.bias))
        out = F.linear(inner, layer.output.dense.weight, layer.output.dense.bias)
        x = _norm(drop(out, keys[site + 2], hidden_p) + x, layer.output.LayerNorm)
    picked = x[selected]
    picked = _norm(F.gelu(F.linear(picked, head.transform.dense.weight,
                                   head.transform.dense.bias)), head.transform.LayerNorm)
    logits = F.linear(picked, emb.word_embeddings.weight, head.bias)
    return F.cross_entropy(logits.float(), labels, reduction="sum")


def check_supported(model: BertForMaskedLM) -> None:
    """The forward above is BERT's with exact GELU and absolute positions: refuse anything
    else loudly rather than train another model quietly."""
    config = model.config
    if config.hidden_act != "gelu" or getattr(config, "position_embedding_type",
                                              "absolute") != "absolute":
        raise ValueError(f"the fused step computes BERT with exact GELU and absolute "
                         f"positions; this model has {config.hidden_act!r}, "
                         f"{config.position_embedding_type!r}")


#: what a refusal of the fused step's compile offers instead
_INSTEAD = "or train.step eager (another fingerprint)"


def check_compiler() -> None:
    """Inductor compiles the step's CPU loops with a C++ compiler (``CXX``, else g++): none
    found is one line before the data is prepared, not a traceback two minutes into the
    first step. Never a silent fall-back to the uncompiled function: it is several times
    slower and agrees with the compiled one to float rounding only."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:  # another torch: the first step's compile says what it lacks
        return
    try:
        get_cpp_compiler()
    except Exception as err:  # InvalidCxxCompiler, or its own search failing
        raise UserError(f"train.step = fused needs a C++ compiler for torch.compile "
                        f"({_first_line(err)}); install g++ or set CXX to one, "
                        f"{_INSTEAD}") from None


def check_no_silent_fallback() -> None:
    """Dynamo with its errors suppressed (``TORCHDYNAMO_SUPPRESS_ERRORS``, read when torch is
    imported) runs a step whose compile failed uncompiled, a warning its only trace: the
    model would train by another function under the fused step's fingerprint."""
    import torch._dynamo

    if torch._dynamo.config.suppress_errors:
        raise UserError("train.step = fused: TORCHDYNAMO_SUPPRESS_ERRORS is set, so a compile "
                        "that fails would train with the uncompiled step unnoticed; unset "
                        f"it, {_INSTEAD}")


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _compile_failure(err: Exception) -> UserError | None:
    """A failure of torch.compile itself (dynamo's tracing, inductor's code or its
    compiler) as one line; None for any other error (a bug: its traceback is wanted)."""
    module = type(err).__module__
    if not module.startswith(("torch._dynamo", "torch._inductor")):
        return None
    return UserError(f"train.step = fused: torch.compile failed ({type(err).__name__}: "
                     f"{_first_line(err)[:300]}); fix the compiler it names, {_INSTEAD}")


class FusedObjective(torch.nn.Module):
    """``MaskedLMObjective``'s interface (the summed MLM loss of a piece) on the fused path.

    The unpadding (which positions are real, which are selected) is computed here, eagerly:
    it is data-dependent and cheap; everything after it is the compiled graph. Dropout keys
    come from a generator the trainer seeds from (seed, step) before a step's pieces
    (:meth:`seed_step`), so a resumed run draws the same keys as an uninterrupted one.
    """

    def __init__(self, model: BertForMaskedLM, compile: bool = True,
                 recompute_masks: bool = True) -> None:
        super().__init__()
        check_supported(model)
        if compile:
            check_no_silent_fallback()
        self.model = model
        config = model.config
        self.hidden_p = float(config.hidden_dropout_prob)
        self.attention_p = float(config.attention_probs_dropout_prob)
        self.sites = 1 + SITES_PER_LAYER * config.num_hidden_layers
        self._loss = torch.compile(unpadded_loss, dynamic=True) if compile else unpadded_loss
        self._keys = torch.Generator().manual_seed(0)
        self.recompute_masks = recompute_masks  # False: the earlier graph (benchmarks)

    def seed_step(self, seed: int) -> None:
        """Seed the dropout keys of the next pieces (the trainer: once a step, from (seed,
        step)). Their own generator, not the global one: compiling draws from the global
        generator, and it compiles at a resumed run's first step, not at step 0."""
        self._keys.manual_seed(seed)

    def forward(self, selected: torch.Tensor, labels: torch.Tensor,
                **inputs: torch.Tensor) -> torch.Tensor:
        attention = inputs["attention_mask"]
        rows, width = attention.shape
        tokens = attention.reshape(-1).nonzero().squeeze(1)
        ids, positions, types = (inputs[name].reshape(-1)[tokens] for name in
                                 ("input_ids", "position_ids", "token_type_ids"))
        picked = selected.reshape(-1)[tokens].nonzero().squeeze(1)
        dtype = self.model.bert.embeddings.word_embeddings.weight.dtype
        key_bias = (1 - attention[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        keys = torch.randint(-2**31, 2**31 - 1, (self.sites,), dtype=torch.int32,
                             generator=self._keys).to(attention.device)
        training = self.model.training  # the model's mode, as MaskedLMObjective follows it
        try:
            return self._loss(self.model, ids, positions, types, tokens, key_bias, picked,
                              labels, rows, width, keys, self.hidden_p if training else 0.0,
                              self.attention_p if training else 0.0,
                              recompute_masks=self.recompute_masks)
        except Exception as err:  # a stop is a BaseException: it passes as it is
            if (failure := _compile_failure(err)) is None:
                raise
            raise failure from err

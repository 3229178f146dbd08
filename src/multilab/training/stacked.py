"""Many BERT models of one architecture trained in one process as one batched computation.

BERT-small is far too small for a GPU: a step is thousands of tiny kernel launches whatever
the GPU's size (docs/PERFORMANCE.md). A *stack* of k members (seeds of a row, or rows that
differ only in data, masking or positions) runs as one module whose parameters carry a
leading member dimension: ``torch.func.stack_module_state`` stacks them,
``torch.func.functional_call`` under ``torch.func.vmap`` runs one member's forward on all k,
so each kernel launch serves k models. The stack is an execution detail: everything a member
draws is its own and does not depend on who it is stacked with.

- **data and masks**: each member its own :class:`~multilab.data.batches.BatchOrder` (seeded
  by its seed) and :func:`~multilab.data.batches.mask_tokens` (``seeded_generator(seed,
  step, 1)``), as the single-model trainer draws them; a step's pieces are padded to the
  widest member's (masked, never attended, so a member's outputs do not see them). The
  stack builds them for all members at once (:class:`StackBatcher`: the same integers as
  member by member, each member's draws from its own generator), optionally in a worker
  thread ahead of the step (:meth:`StackedTrainer.prefetch`).
- **dropout**: ``vmap(randomness="different")`` would draw every member's masks from one
  global stream, so a member's masks would depend on its place in the stack. Dropout is
  counter-based instead (:class:`CounterDropout`): the keep bit of an element is a hash of
  the member's per-(seed, step, piece, site) word and the element's coordinates (padding-
  proof: sequence dimensions count in a fixed stride), the same whether the member runs
  alone or in a stack. vmap runs with ``randomness="error"``: no global draw can slip in.
- **optimizer**: :class:`StackedAdamW` is torch's single-tensor AdamW element by element,
  BERT's decay groups, each member's own learning rate (its own linear schedule); gradients
  are clipped per member (each member's global norm, as ``clip_grad_norm_``).

:class:`SoloTrainer` trains one member with a plain module, ``torch.optim.AdamW``,
``clip_grad_norm_`` and the same counter dropout: the reference a stack must equal
(tests/test_stacked.py) and the baseline of benchmarks/bench_stacked.py. The single-model
trainer (training/train.py) takes its batches and masks from the same contract
(:mod:`~multilab.training.member`: :class:`Member`, ``step_batch``) and keeps the
global-generator dropout.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface, BertForMaskedLM, get_linear_schedule_with_warmup

from multilab.config import ModelConfig, RunConfig, TrainConfig
from multilab.data.batches import (
    Examples,
    MaskedBatch,
    gradient_pieces,
    knn_neighbours,
    mix_seed,
    random_replacement_ids,
    replacement_probs,
    seeded_generator,
)
from multilab.data.inputs import CLS_ID, PAD_ID, InputEncoder
from multilab.errors import UserError
from multilab.lab import modifications as mods
from multilab.training.member import Member, step_batch
from multilab.training.model import build_model

#: The stack's parameter names are :class:`MaskedLMLoss`'s: the model's behind this prefix.
_PREFIX = "model."
#: Labels of padded selected positions: not counted by the loss.
IGNORE = -100
#: Key of the dropout words' stream (with the seed, the step and the piece).
DROPOUT_STREAM = 5056
#: The stride a padded (sequence) dimension counts in: a coordinate's place in the hash does
#: not depend on how wide the stack padded it (any max_position_embeddings below this).
SEQUENCE_STRIDE = 1 << 12
_LOW32 = 0xFFFFFFFF
#: Name of the counter-dropout attention (eager attention with :class:`CounterDropout` on
#: the probabilities) in transformers' attention registry.
ATTENTION = "multilab_counter_dropout"


# --------------------------------------------------------------------------- counter dropout


def _mix32(x: torch.Tensor | int) -> torch.Tensor | int:
    """lowbias32 (C. Wellons' integer hash) of 32-bit values held in int64 (or a Python int).

    Products may pass 2**63 and wrap; their low 32 bits, all that is kept, are exact.
    """
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _LOW32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _LOW32
    return x ^ (x >> 16)


def dropout_words(seed: int, step: int, piece: int, sites: int) -> list[int]:
    """The 32-bit words of one member's dropout sites for piece ``piece`` of step ``step``."""
    base = mix_seed(seed, step, DROPOUT_STREAM, piece)
    base = _mix32(_mix32(base & _LOW32) ^ (base >> 32))
    return [_mix32(base ^ _mix32(site + 1)) for site in range(sites)]


_active_words: list[torch.Tensor] = []


@contextlib.contextmanager
def using_words(words: torch.Tensor) -> Iterator[None]:
    """Counter dropout reads its site's word from ``words`` ([sites], int64) meanwhile."""
    _active_words.append(words)
    try:
        yield
    finally:
        _active_words.pop()


class CounterDropout(nn.Module):
    """Dropout whose keep bits are a hash of (member word, element coordinates).

    ``padded`` names the dimensions a stack may pad (sequence positions): they count in
    :data:`SEQUENCE_STRIDE`, so an element keeps its bit whatever the padded width. The keep
    probability is 1 - p up to 2**-32; kept elements are scaled by 1 / (1 - p) as
    ``nn.Dropout`` does.
    """

    def __init__(self, p: float, site: int, padded: tuple[int, ...]) -> None:
        super().__init__()
        self.p, self.site, self.padded = p, site, padded
        self._threshold = int(p * 2**32)
        self._counters: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        if not _active_words:
            raise RuntimeError("counter dropout runs inside using_words(...) only")
        low, high = self._coordinates(tuple(x.shape), x.device)
        word = _active_words[-1][self.site]
        hashed = _mix32(_mix32(low ^ word) ^ high)
        keep = hashed >= self._threshold
        return x * (keep * (1.0 / (1.0 - self.p))).to(x.dtype)

    def _coordinates(self, shape: tuple[int, ...], device: torch.device
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each element's index in the virtual layout (padded dimensions at the fixed
        stride), as low and high 32-bit halves; cached per shape."""
        key = (shape, device)
        if key not in self._counters:
            index = torch.zeros((), dtype=torch.long, device=device)
            for dim, size in enumerate(shape):
                extent = SEQUENCE_STRIDE if dim in self.padded and dim > 0 else size
                view = [1] * len(shape)
                view[dim] = size
                index = index * extent + torch.arange(size, device=device).view(view)
            if len(self._counters) > 64:  # bucketed widths: a few dozen shapes in a run
                self._counters.clear()
            self._counters[key] = (index & _LOW32, index >> 32)
        return self._counters[key]


def _counter_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                       value: torch.Tensor, attention_mask: torch.Tensor | None,
                       scaling: float | None = None, dropout: float = 0.0, **kwargs):
    """transformers' eager attention with the module's :class:`CounterDropout` on the
    probabilities (the eager one draws them from the global generator)."""
    scaling = query.size(-1) ** -0.5 if scaling is None else scaling
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = F.softmax(weights, dim=-1)
    weights = module.dropout(weights)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


AttentionInterface.register(ATTENTION, _counter_attention)


class PaddingSafeEmbedding(nn.Embedding):
    """``nn.Embedding`` whose padding row gets no gradient also under vmap.

    vmap's batching rule of the embedding backward offsets the ids of member i by i × rows,
    so ``padding_idx`` only spares member 0's row (member 1's [PAD] row took the gradient
    of every pad token: found by tests/test_stacked.py). The forward value is unchanged;
    the pad positions' gradient is cut before the lookup's backward.
    """

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        looked_up = F.embedding(ids, self.weight, self.padding_idx)
        if self.padding_idx is None:
            return looked_up
        return torch.where((ids == self.padding_idx)[..., None], looked_up.detach(), looked_up)


def install_counter_dropout(model: BertForMaskedLM) -> int:
    """Make ``model`` a stack member: every ``nn.Dropout`` becomes a :class:`CounterDropout`
    (attention probabilities: padded in their last two dimensions; hidden states: in
    dimension 1), the word embedding a :class:`PaddingSafeEmbedding`; returns the number of
    dropout sites."""
    model.bert.embeddings.word_embeddings.__class__ = PaddingSafeEmbedding
    sites = 0
    for name, module in list(model.named_modules()):
        if not isinstance(module, nn.Dropout):
            continue
        padded = (2, 3) if name.endswith("attention.self.dropout") else (1,)
        parent_name, _, attribute = name.rpartition(".")
        setattr(model.get_submodule(parent_name), attribute,
                CounterDropout(module.p, sites, padded))
        sites += 1
    model.config._attn_implementation = ATTENTION
    for module in model.modules():  # sub-configs are the same object, but be sure
        if hasattr(module, "config"):
            module.config._attn_implementation = ATTENTION
    return sites


# --------------------------------------------------------------------------- the loss


class MaskedLMLoss(nn.Module):
    """One member's summed MLM loss over a piece, in shapes a stack can batch.

    The selected positions come as flat indices into [rows × width] and their labels, both
    padded with :data:`IGNORE` labels (no boolean indexing: its shape would depend on the
    member). The encoder runs layer by layer with BERT's additive attention mask (what
    ``BertModel`` builds for eager attention), without transformers' mask helpers, whose
    shortcuts look at the data.
    """

    def __init__(self, model: BertForMaskedLM) -> None:
        super().__init__()
        self.model = model

    def forward(self, words: torch.Tensor, input_ids: torch.Tensor,
                attention_mask: torch.Tensor, position_ids: torch.Tensor,
                token_type_ids: torch.Tensor, positions: torch.Tensor,
                labels: torch.Tensor) -> torch.Tensor:
        with using_words(words):
            bert = self.model.bert
            hidden = bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids,
                                     position_ids=position_ids)
            blocked = 1.0 - attention_mask[:, None, None, :].to(hidden.dtype)
            additive = blocked * torch.finfo(hidden.dtype).min
            for layer in bert.encoder.layer:
                hidden = layer(hidden, additive)
            picked = hidden.reshape(-1, hidden.shape[-1])[positions]
            logits = self.model.cls.predictions(picked)
            return F.cross_entropy(logits.float(), labels, ignore_index=IGNORE,
                                   reduction="sum")


# --------------------------------------------------------------------------- members and pieces


@dataclass(frozen=True)
class Settings:
    """What every member of a stack shares: the architecture and the step's mechanics."""

    model: ModelConfig
    vocab_size: int
    languages: int
    train: TrainConfig
    max_grad_norm: float = 1.0


@dataclass
class Piece:
    """One member's share of one gradient piece, unpadded."""

    inputs: dict[str, torch.Tensor]
    positions: torch.Tensor  # flat indices into [rows × width] of the selected positions
    labels: torch.Tensor


def member_pieces(member: Member, settings: Settings, step: int
                  ) -> tuple[list[Piece | None], int, int]:
    """The pieces of ``member``'s global batch of ``step`` (None: an empty piece), the
    number of selected positions of the whole batch and its real tokens: the single-model
    trainer's step batch (:func:`~multilab.training.member.step_batch`), cut per piece."""
    drawn = step_batch(member, settings.model, settings.train, step)
    out: list[Piece | None] = []
    for piece in drawn.pieces:
        out.append(_piece(drawn.masked, piece) if len(piece) else None)
    return out, len(drawn.masked.labels), int(drawn.batch.real_tokens().sum())


def _piece(masked: MaskedBatch, rows: torch.Tensor) -> Piece:
    width = int(masked.token_mask[rows].sum(1).max())
    inputs = {k: v[rows][:, :width] for k, v in masked.inputs.items()}
    selected = masked.selected[rows][:, :width]
    owner = masked.selected.nonzero()[:, 0]
    labels = masked.labels[torch.isin(owner, rows)]
    return Piece(inputs, selected.flatten().nonzero()[:, 0], labels)


def stack_pieces(pieces: Sequence[Piece | None]) -> dict[str, torch.Tensor]:
    """The members' pieces padded to one shape and stacked ([k, rows, width] inputs,
    [k, selected] positions and labels). Padding is masked from attention (even under
    attend-padding, whose own padding inside its width stays attended), its selected
    positions carry :data:`IGNORE`."""
    present = [p for p in pieces if p is not None]
    rows = max(p.inputs["input_ids"].shape[0] for p in present)
    width = max(p.inputs["input_ids"].shape[1] for p in present)
    count = max(max(len(p.labels) for p in present), 1)
    fills = {"input_ids": PAD_ID, "attention_mask": 0, "position_ids": 0, "token_type_ids": 0}
    out: dict[str, list[torch.Tensor]] = {k: [] for k in (*fills, "positions", "labels")}
    for piece in pieces:
        if piece is None:
            for key, fill in fills.items():
                out[key].append(torch.full((rows, width), fill, dtype=torch.long))
            out["positions"].append(torch.zeros(count, dtype=torch.long))
            out["labels"].append(torch.full((count,), IGNORE, dtype=torch.long))
            continue
        own_rows, own_width = piece.inputs["input_ids"].shape
        for key, fill in fills.items():
            padded = torch.full((rows, width), fill, dtype=torch.long)
            padded[:own_rows, :own_width] = piece.inputs[key]
            out[key].append(padded)
        row, column = piece.positions // own_width, piece.positions % own_width
        extra = count - len(piece.labels)
        out["positions"].append(F.pad(row * width + column, (0, extra)))
        out["labels"].append(F.pad(piece.labels, (0, extra), value=IGNORE))
    return {k: torch.stack(v) for k, v in out.items()}


def stacked_dropout_words(seeds: Sequence[int], step: int, piece: int, sites: int
                          ) -> torch.Tensor:
    """:func:`dropout_words` of every member at once ([k, sites] int64, the same words):
    the hash on int64 tensors instead of one Python int at a time."""
    base = torch.tensor([mix_seed(seed, step, DROPOUT_STREAM, piece) for seed in seeds])
    base = _mix32(_mix32(base & _LOW32) ^ (base >> 32))
    site = _mix32(torch.arange(1, sites + 1, dtype=torch.long))
    return _mix32(base[:, None] ^ site[None, :])


@dataclass
class _FlatExamples:
    """A member's examples as flat token arrays: a batch is then one gather, not
    ``collate`` over hundreds of small tensors."""

    ids: torch.Tensor  # [tokens] int32, every example's ids one after another
    positions: torch.Tensor  # [tokens] int32
    segments: torch.Tensor  # [tokens] int32
    words: torch.Tensor  # [tokens] bool: word_mask
    starts: torch.Tensor  # [examples] int64: an example's first token
    lengths: torch.Tensor  # [examples] int64
    languages: torch.Tensor  # [examples] int64


def _flat_examples(examples: Examples) -> _FlatExamples:
    """Built once per examples and kept with them (a regroup builds a new stack of the same
    members: 60,000 examples take seconds to flatten; int32, a quarter of the encoded
    tensors' bytes)."""
    cached = getattr(examples, "_flat", None)
    if cached is None:
        ids, positions, segments, words = zip(*examples.encoded, strict=True)
        lengths = torch.tensor([len(row) for row in ids], dtype=torch.long)
        cached = _FlatExamples(
            torch.cat(ids).to(torch.int32), torch.cat(positions).to(torch.int32),
            torch.cat(segments).to(torch.int32), torch.cat(words).to(torch.bool),
            torch.cumsum(lengths, 0) - lengths, lengths,
            torch.tensor(examples.languages, dtype=torch.long))
        examples._flat = cached  # type: ignore[attr-defined]
    return cached


class StackBatcher:
    """The CPU part of a stacked step, vectorised over the members: what
    :func:`member_pieces` and :func:`stack_pieces` build member after member (and
    :func:`dropout_words`), the same integers, in a few tensor operations on [k, rows,
    width] tensors.

    What stays per member is what must: its batch order and gradient pieces (its own
    schedule of examples) and its random draws, each from its own generator in the order
    :func:`~multilab.data.batches.mask_tokens` draws them (uniforms of its batch's own
    shape, replacement choices, random ids, knn columns), so a member's masks do not depend
    on who it is stacked with. Everything else (gathering the batches from flat token
    arrays, collate's padding, selection, replacement, cutting and padding the pieces,
    selected positions and labels, dropout words) is one call for all members.
    tests/test_stacked.py checks the result against the member-by-member path, key by key.
    """

    def __init__(self, members: Sequence[Member], settings: Settings, sites: int) -> None:
        self.members, self.settings, self.sites = list(members), settings, sites
        flats = [_flat_examples(m.examples) for m in self.members]
        #: a member's first example in the concatenation of every member's examples
        self.example_base = torch.tensor(
            [0, *torch.cumsum(torch.tensor([len(f.lengths) for f in flats]), 0).tolist()[:-1]])
        token_base = [0, *torch.cumsum(torch.tensor([len(f.ids) for f in flats]), 0).tolist()]
        # one padding token after the last (what a batch holds outside its rows)
        def joined(part: str, pad: int) -> torch.Tensor:
            tensors = [getattr(f, part) for f in flats]
            return torch.cat([*tensors, torch.full((1,), pad, dtype=tensors[0].dtype)])

        self.ids, self.positions = joined("ids", PAD_ID), joined("positions", 0)
        self.segments, self.words = joined("segments", 0), joined("words", False)
        self.starts = torch.cat([f.starts + base for f, base in zip(flats, token_base,
                                                                     strict=False)])
        self.lengths = torch.cat([f.lengths for f in flats])
        self.languages = torch.cat([f.languages for f in flats])
        self.attend_padding = torch.tensor([m.examples.attend_padding for m in self.members])
        self.any_attend = bool(self.attend_padding.any())
        languages = settings.languages
        self.mask_ids = torch.tensor([[m.encoder.mask_id(lang) for lang in range(languages)]
                                      for m in self.members])
        self.probs = [replacement_probs(m.replacement) for m in self.members]
        probs = {m.mask_prob for m in self.members}
        self.mask_prob: float | torch.Tensor = probs.pop() if len(probs) == 1 else \
            torch.tensor([m.mask_prob for m in self.members], dtype=torch.float32)[:, None, None]

    def __call__(self, step: int) -> tuple[list[dict[str, torch.Tensor]], list[int], list[int]]:
        """Step ``step``'s stacked pieces (as :meth:`StackedTrainer.batch`, on the CPU, with
        their dropout words), every member's count of selected positions and real tokens."""
        train, k = self.settings.train, len(self.members)
        orders, member_pieces_ = [], []
        for member in self.members:
            order = member.order(self.settings.model.global_batch, train.bucket_chunk)
            indices, pieces = gradient_pieces(order(step), member.examples.lengths,
                                              train.length_pieces, self.settings.model.grad_accum)
            orders.append(indices)
            member_pieces_.append(pieces)
        rows = torch.tensor([len(o) for o in orders])
        most = int(rows.max())
        example = torch.zeros(k, most, dtype=torch.long)
        real_row = torch.arange(most)[None, :] < rows[:, None]
        for index, indices in enumerate(orders):
            example[index, :len(indices)] = indices
        example = torch.where(real_row, example + self.example_base[:, None], 0)
        lengths = torch.where(real_row, self.lengths[example], 0)  # [k, rows]
        batch = self._gather(example, lengths)
        selected, totals, corrupted = self._mask(step, batch, lengths, rows)
        tokens = lengths.sum(1).tolist()
        prepared = []
        for number in range(len(member_pieces_[0])):
            pieces = [pieces[number] for pieces in member_pieces_]
            if all(len(p) == 0 for p in pieces):
                continue
            stacked = self._piece(pieces, batch, corrupted, selected, lengths, rows)
            stacked["words"] = stacked_dropout_words([m.seed for m in self.members], step,
                                                     number, self.sites)
            prepared.append(stacked)
        return prepared, totals, tokens

    def _gather(self, example: torch.Tensor, lengths: torch.Tensor
                ) -> dict[str, torch.Tensor]:
        """Every member's batch as ``collate`` pads it, at the widest member's width
        ([k, rows, width] each, int32 until the pieces; a member's columns past its own
        width and its missing rows hold padding that is never selected nor used)."""
        width = int(lengths.max())
        column = torch.arange(width)
        inside = column[None, None, :] < lengths[..., None]
        start = self.starts[example]
        # outside a row: the padding token after the last one (PAD_ID, position 0, …)
        flat = torch.where(inside, start[..., None] + column, len(self.ids) - 1)
        batch = {"input_ids": self.ids[flat], "attention_mask": inside,
                 "position_ids": self.positions[flat], "token_type_ids": self.segments[flat],
                 "word_mask": self.words[flat], "languages": self.languages[example]}
        if self.any_attend:  # attend-padding: collate's attended padding
            attend = self.attend_padding[:, None, None]
            shown = attend & ~inside
            ids, positions = batch["input_ids"], batch["position_ids"]
            last = start + (lengths - 1).clamp(min=0)
            batch["input_ids"] = torch.where(shown, ids[..., :1] - CLS_ID + PAD_ID, ids)
            batch["position_ids"] = torch.where(shown, positions[..., :1] + column, positions)
            batch["token_type_ids"] = torch.where(shown, self.segments[last][..., None],
                                                  batch["token_type_ids"])
            batch["attention_mask"] = inside | attend
        return batch

    def _mask(self, step: int, batch: dict[str, torch.Tensor], lengths: torch.Tensor,
              rows: torch.Tensor) -> tuple[torch.Tensor, list[int], torch.Tensor]:
        """``mask_tokens`` of every member: the selected positions, their counts, and the
        corrupted ids. Each member draws from ``seeded_generator(seed, step, 1)`` what
        ``mask_tokens`` draws, in its order and shapes."""
        ids, word_mask = batch["input_ids"], batch["word_mask"]
        widths = lengths.max(1).values.tolist()
        generators = [seeded_generator(m.seed, step, 1) for m in self.members]
        uniform = torch.ones(ids.shape)  # above any mask_prob: never selected
        for index, generator in enumerate(generators):
            own_rows, own_width = int(rows[index]), widths[index]
            uniform[index, :own_rows, :own_width] = torch.rand((own_rows, own_width),
                                                               generator=generator)
        selected = (uniform < self.mask_prob) & word_mask
        for index in (~selected.flatten(1).any(1)).nonzero()[:, 0].tolist():
            first = word_mask[index].nonzero()[0]  # never an empty loss
            selected[index, first[0], first[1]] = True
        counts = selected.flatten(1).sum(1).tolist()
        labels = ids[selected].long()
        where = selected.nonzero()
        member_of, row_of = where[:, 0], where[:, 1]
        language = batch["languages"][member_of, row_of]
        choices, randoms, neighbours = [], [], []
        end = 0
        for member, generator, probs, n in zip(self.members, generators, self.probs, counts,
                                               strict=True):
            begin, end = end, end + n
            choices.append(torch.multinomial(probs, n, replacement=True, generator=generator))
            randoms.append(random_replacement_ids(member.encoder, language[begin:end],
                                                  generator))
            if probs[3] > 0:
                neighbours.append(knn_neighbours(labels[begin:end], member.encoder,
                                                  member.knn_table, generator))
            else:
                neighbours.append(labels[begin:end])
        choice = torch.cat(choices)
        replaced = torch.where(choice == 0, self.mask_ids[member_of, language], labels)
        replaced = torch.where(choice == 2, torch.cat(randoms), replaced)
        replaced = torch.where(choice == 3, torch.cat(neighbours), replaced)
        corrupted = ids.clone()
        corrupted[selected] = replaced.to(ids.dtype)
        return selected, counts, corrupted

    def _piece(self, pieces: Sequence[torch.Tensor], batch: dict[str, torch.Tensor],
               corrupted: torch.Tensor, selected: torch.Tensor, lengths: torch.Tensor,
               batch_rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """One gradient piece of every member (row positions of its batch, maybe none),
        padded and stacked as :func:`stack_pieces` does."""
        k = len(pieces)
        counts = torch.tensor([len(p) for p in pieces])
        rows = int(counts.max())
        row = torch.zeros(k, rows, dtype=torch.long)
        for index, piece in enumerate(pieces):
            row[index, :len(piece)] = piece
        real_row = torch.arange(rows)[None, :] < counts[:, None]
        own_width = torch.where(real_row, lengths.gather(1, row), 0).max(1).values  # [k]
        width = int(own_width.max())
        # one piece of the whole batch (the GPU's case): the batch itself, no gather
        whole = bool((counts == batch_rows).all()) and bool(
            ((row == torch.arange(rows)) | ~real_row).all())
        member = torch.arange(k)[:, None]

        def cut(source: torch.Tensor) -> torch.Tensor:
            return source[:, :rows, :width] if whole else source[member, row, :width]

        fills = {"input_ids": PAD_ID, "attention_mask": 0, "position_ids": 0,
                 "token_type_ids": 0}
        # outside a member's rows and width the batch already holds these fills, but for
        # missing rows of a gathered piece and attend-padding's attended padding
        exact = whole and not self.any_attend
        inside = real_row[..., None] & (torch.arange(width)[None, None, :]
                                        < own_width[:, None, None])
        out = {}
        for key, fill in fills.items():
            source = cut(corrupted if key == "input_ids" else batch[key])
            out[key] = (source if exact else torch.where(inside, source, fill)).long()
        chosen = cut(selected) if exact else cut(selected) & inside
        where = chosen.nonzero()
        owner, place = where[:, 0], where[:, 1] * width + where[:, 2]
        per_member = torch.bincount(owner, minlength=k)
        count = max(int(per_member.max()), 1)
        rank = torch.arange(len(owner)) - (torch.cumsum(per_member, 0) - per_member)[owner]
        out["positions"] = torch.zeros(k, count, dtype=torch.long)
        out["positions"][owner, rank] = place
        out["labels"] = torch.full((k, count), IGNORE, dtype=torch.long)
        out["labels"][owner, rank] = cut(batch["input_ids"])[chosen].long()
        return out


def linear_lr(member: Member, step: int, warmup_steps: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based): ``get_linear_schedule_with_
    warmup`` as LambdaLR evaluates it (the same Python floats); 0 after the member's end."""
    total = max(member.total_steps, 1)
    warmup = min(warmup_steps, total)
    if step < warmup:
        factor = float(step) / float(max(1, warmup))
    else:
        factor = max(0.0, float(total - step) / float(max(1, total - warmup)))
    return member.lr * factor


def no_decay(name: str) -> bool:
    """BERT's AdamW groups: no weight decay on biases and LayerNorm weights."""
    return name.endswith("bias") or "LayerNorm" in name


def check_members(runs: Sequence[RunConfig]) -> None:
    """Refuse, in one line, a stack of runs that do not share one architecture and one step.

    The registry decides first (:func:`multilab.lab.modifications.check_stack`); then the
    resolved sizes, batch shape and accumulation must agree (what the batched step shares).
    """
    mods.check_stack([run.modification for run in runs])
    first = runs[0]
    for run in runs[1:]:
        for what, mine, theirs in (
            ("model sizes", first.model, run.model),
            ("training settings", first.study.train, run.study.train),
            ("languages", first.study.languages, run.study.languages),
        ):
            if mine != theirs:
                raise UserError(
                    f"stack of {first.modification!r} s{first.seed} and {run.modification!r} "
                    f"s{run.seed}: their {what} differ (valid: runs of one architecture and "
                    "one training setup)")
    if not mods.trains_stacked(first.modification):
        raise UserError(f"modification {first.modification!r}: stacking trains plain "
                        "BertForMaskedLM members (valid: modifications without nsp and "
                        "sep-L1-<n>)")


def settings_of(run: RunConfig, encoder: InputEncoder) -> Settings:
    return Settings(run.model, encoder.total_size, encoder.languages, run.study.train)


def fresh_model(settings: Settings, seed: int) -> BertForMaskedLM:
    """A member's initial weights: exactly the single-model trainer's (``build_model``)."""
    return build_model(settings.model, settings.vocab_size, seed, settings.languages)


# --------------------------------------------------------------------------- the stack


class StackedAdamW:
    """AdamW over stacked parameters ([k, ...]), element by element torch's single-tensor
    AdamW (``torch.optim.AdamW``, foreach off), with one learning rate per member.

    Every member steps together, so the step count and bias corrections are one Python
    float for all. When all members share the learning rate of a step the update is
    torch's own arithmetic (Python scalars); otherwise the per-member rate is a [k] tensor
    and ``addcdiv``'s ``value * t1 / t2`` is spelled out in that order.
    """

    def __init__(self, params: dict[str, torch.Tensor], weight_decay: float, eps: float,
                 betas: tuple[float, float] = (0.9, 0.999)) -> None:
        self.params, self.weight_decay, self.eps, self.betas = params, weight_decay, eps, betas
        self.steps = 0
        self.exp_avg = {n: torch.zeros_like(p) for n, p in params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in params.items()}

    @torch.no_grad()
    def step(self, lrs: Sequence[float]) -> None:
        self.steps += 1
        beta1, beta2 = self.betas
        correction1 = 1 - beta1 ** self.steps
        correction2_sqrt = (1 - beta2 ** self.steps) ** 0.5
        shared = all(lr == lrs[0] for lr in lrs)
        for name, param in self.params.items():
            grad = param.grad
            decay = 0.0 if no_decay(name) else self.weight_decay
            view = (-1,) + (1,) * (param.dim() - 1)
            if decay:
                if shared:
                    param.mul_(1 - lrs[0] * decay)
                else:
                    param.mul_(torch.tensor([1 - lr * decay for lr in lrs],
                                            dtype=param.dtype, device=param.device).view(view))
            exp_avg, exp_avg_sq = self.exp_avg[name], self.exp_avg_sq[name]
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq.sqrt() / correction2_sqrt).add_(self.eps)
            if shared:
                param.addcdiv_(exp_avg, denom, value=-(lrs[0] / correction1))
            else:
                value = torch.tensor([-(lr / correction1) for lr in lrs], dtype=param.dtype,
                                     device=param.device).view(view)
                param.add_(value * exp_avg / denom)

    def zero_grad(self) -> None:
        for param in self.params.values():
            param.grad = None


@torch.no_grad()
def clip_per_member(params: dict[str, torch.Tensor], max_norm: float) -> torch.Tensor:
    """``clip_grad_norm_`` for each member: its gradients' global L2 norm, scaled down to
    ``max_norm`` (1e-6 guard and clamp as torch's). Returns the [k] norms."""
    grads = [p.grad for p in params.values() if p.grad is not None]
    norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), 2, dim=1) for g in grads])
    total = torch.linalg.vector_norm(norms, 2, dim=0)
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for grad in grads:
        grad.mul_(scale.view((-1,) + (1,) * (grad.dim() - 1)))
    return total


class StackedTrainer:
    """k members trained as one batched module (the stack of :class:`MaskedLMLoss`)."""

    def __init__(self, members: Sequence[Member], settings: Settings,
                 device: torch.device | str = "cpu",
                 models: Sequence[BertForMaskedLM] | None = None,
                 moments: Sequence[dict[str, dict[str, torch.Tensor]]] | None = None,
                 steps_done: int = 0) -> None:
        """``models``: the members' current weights (default: their initial ones);
        ``moments``: their AdamW moments (:meth:`member_moments`) after ``steps_done``
        optimizer steps, to continue a run (a resume, or members regrouped)."""
        self.members, self.settings = list(members), settings
        self.device = torch.device(device)
        models = list(models) if models is not None else [
            fresh_model(settings, m.seed) for m in self.members]
        losses = []
        for model in models:
            self.sites = install_counter_dropout(model)
            losses.append(MaskedLMLoss(model).to(self.device).train())
        params, buffers = torch.func.stack_module_state(losses)
        self.params = {n: p.detach().requires_grad_(True) for n, p in params.items()}
        self.buffers = buffers
        # the module whose code runs on the stacked tensors (its own weights unused; not on
        # the meta device: moving there unties BERT's tied decoder weight and bias)
        self.skeleton = copy.deepcopy(losses[0]).train()
        self.optimizer = StackedAdamW(self.params, settings.train.weight_decay,
                                      settings.train.adam_eps)
        if moments is not None:
            for key in ("exp_avg", "exp_avg_sq"):
                into = getattr(self.optimizer, key)
                for name in into:
                    into[name] = torch.stack([m[key][name[len(_PREFIX):]] for m in moments]
                                             ).to(self.device)
            self.optimizer.steps = steps_done
        #: each member's real tokens in the last :meth:`batch`
        self.tokens: list[int] = [0] * len(self.members)
        self.batcher = StackBatcher(self.members, settings, self.sites)
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None
        self._ahead: tuple[int, concurrent.futures.Future] | None = None
        self._batched = torch.func.vmap(self._one, randomness="error")

    def _one(self, params, buffers, *args):
        return torch.func.functional_call(self.skeleton, (params, buffers), args)

    def __call__(self, step: int, prefetch: bool = False) -> list[dict[str, float]]:
        """Optimizer step ``step`` (0-based) of every member; their rows (loss, lr, …).
        ``prefetch``: build step ``step + 1``'s batch in a worker thread meanwhile."""
        batch = self.batch(step)
        if prefetch:
            self.prefetch(step + 1)
        return self.update(step, batch)

    def prefetch(self, step: int) -> None:
        """Start building step ``step``'s CPU tensors in a worker thread, which
        :meth:`batch` of that step then takes: the batch's tensor work (most of it, the
        GIL released) overlaps the device's part of the step before. The batch is a
        function of the step alone, so it is the same integers either way."""
        if self._worker is None:
            self._worker = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="stack-batches")
        self._ahead = (step, self._worker.submit(self.batcher, step))

    def close(self) -> None:
        """End the prefetch worker (a prefetched batch not taken is dropped)."""
        if self._worker is not None:
            self._worker.shutdown(wait=True, cancel_futures=True)
            self._worker, self._ahead = None, None

    def batch(self, step: int) -> tuple[list[dict[str, torch.Tensor]], torch.Tensor]:
        """The CPU's part of a step: every member's batch and masks, padded and stacked
        piece by piece (on the device), with the dropout words; and the members' counts
        of selected positions. Built for all members at once (:class:`StackBatcher`), or
        taken from :meth:`prefetch`."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == step:
            prepared, totals, self.tokens = ahead[1].result()
        else:
            if ahead is not None:  # another step's: let it end (it moves the batch orders)
                concurrent.futures.wait([ahead[1]])
            prepared, totals, self.tokens = self.batcher(step)
        return ([{k: v.to(self.device) for k, v in piece.items()} for piece in prepared],
                torch.tensor([float(total) for total in totals], device=self.device))

    def batch_member_by_member(self, step: int
                               ) -> tuple[list[dict[str, torch.Tensor]], torch.Tensor]:
        """:meth:`batch` built one member after another (:func:`member_pieces`,
        :func:`stack_pieces`): the reference the vectorised batch must equal, and the
        "before" arm of benchmarks/bench_stacked.py."""
        per_member = [member_pieces(m, self.settings, step) for m in self.members]
        self.tokens = [tokens for _, _, tokens in per_member]
        totals = torch.tensor([float(total) for _, total, _ in per_member],
                              device=self.device)
        prepared = []
        for number in range(len(per_member[0][0])):
            pieces = [pieces[number] for pieces, _, _ in per_member]
            if all(p is None for p in pieces):
                continue
            stacked = {k: v.to(self.device) for k, v in stack_pieces(pieces).items()}
            stacked["words"] = torch.tensor(
                [dropout_words(m.seed, step, number, self.sites) for m in self.members],
                device=self.device)
            prepared.append(stacked)
        return prepared, totals

    def update(self, step: int, batch: tuple[list[dict[str, torch.Tensor]], torch.Tensor]
               ) -> list[dict[str, float]]:
        """The device's part of a step: forward and backward of every piece, clipping,
        the AdamW update."""
        pieces, totals = batch
        losses = torch.zeros(len(self.members), dtype=torch.float64, device=self.device)
        for piece in pieces:
            sums = self._batched(self.params, self.buffers, piece["words"], piece["input_ids"],
                                 piece["attention_mask"], piece["position_ids"],
                                 piece["token_type_ids"], piece["positions"], piece["labels"])
            (sums / totals).sum().backward()
            losses += sums.detach().double() / totals.double()
        clip_per_member(self.params, self.settings.max_grad_norm)
        lrs = [linear_lr(m, step, self.settings.train.warmup_steps) for m in self.members]
        self.optimizer.step(lrs)
        self.optimizer.zero_grad()
        return [{"step": step + 1, "loss": float(loss),
                 "lr": linear_lr(m, step + 1, self.settings.train.warmup_steps)}
                for m, loss in zip(self.members, losses.tolist(), strict=True)]

    def member_state(self, index: int) -> dict[str, torch.Tensor]:
        """Member ``index``'s parameters, named as ``BertForMaskedLM``'s (tied ones once)."""
        return {n[len(_PREFIX):]: p[index].detach().cpu() for n, p in self.params.items()}

    def member_moments(self, index: int) -> dict[str, dict[str, torch.Tensor]]:
        """Member ``index``'s AdamW moments (``exp_avg``, ``exp_avg_sq``), named as its
        parameters: with :attr:`StackedAdamW.steps`, its whole optimizer state."""
        return {key: {n[len(_PREFIX):]: t[index].detach().cpu()
                      for n, t in getattr(self.optimizer, key).items()}
                for key in ("exp_avg", "exp_avg_sq")}

    def unstack(self, index: int) -> BertForMaskedLM:
        """Member ``index`` as a plain ``BertForMaskedLM`` (``nn.Dropout``, default
        attention): what ``save_pretrained`` writes and evaluation loads."""
        return member_model(self.settings, self.members[index].seed, self.member_state(index))


def member_model(settings: Settings, seed: int, weights: dict[str, torch.Tensor]
                 ) -> BertForMaskedLM:
    """A plain ``BertForMaskedLM`` with a member's weights (a state dict, tied weights
    once or twice), its decoder tied to its word embeddings again."""
    model = fresh_model(settings, seed)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    if unexpected or set(missing) - tied:
        raise RuntimeError(f"unstacking: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model


class SoloTrainer:
    """One member alone: a plain module, ``torch.optim.AdamW`` with BERT's groups, its
    LambdaLR schedule and ``clip_grad_norm_`` (the single-model trainer's arithmetic), with
    the counter dropout a stack uses: the reference of the equivalence test. With
    ``counter_dropout=False`` it is the single-model path's step (global-generator dropout)
    for benchmarks."""

    def __init__(self, member: Member, settings: Settings, device: torch.device | str = "cpu",
                 counter_dropout: bool = True) -> None:
        self.member, self.settings = member, settings
        self.device = torch.device(device)
        model = fresh_model(settings, member.seed)
        self.counter = counter_dropout
        self.sites = install_counter_dropout(model) if counter_dropout else 0
        if not counter_dropout:
            model.config._attn_implementation = "eager"
        self.objective = MaskedLMLoss(model).to(self.device).train()
        named = list(self.objective.named_parameters())
        train = settings.train
        groups = [
            {"params": [p for n, p in named if not no_decay(n)],
             "weight_decay": train.weight_decay},
            {"params": [p for n, p in named if no_decay(n)], "weight_decay": 0.0},
        ]
        self.optimizer = torch.optim.AdamW(groups, lr=member.lr, eps=train.adam_eps)
        total = max(member.total_steps, 1)
        self.scheduler = get_linear_schedule_with_warmup(
            self.optimizer, min(train.warmup_steps, total), total)

    def __call__(self, step: int) -> dict[str, float]:
        return self.update(step, self.batch(step))

    def batch(self, step: int) -> tuple[list[tuple[torch.Tensor, ...]], int]:
        """The CPU's part of a step: the pieces (on the device) with their dropout words."""
        pieces, total, _ = member_pieces(self.member, self.settings, step)
        prepared = []
        for number, piece in enumerate(pieces):
            if piece is None:
                continue
            words = torch.tensor(dropout_words(self.member.seed, step, number, self.sites)
                                 if self.counter else [0], device=self.device)
            inputs = [piece.inputs[k] for k in ("input_ids", "attention_mask", "position_ids",
                                                "token_type_ids")]
            prepared.append(tuple(t.to(self.device) for t in (
                words, *inputs, piece.positions, piece.labels)))
        return prepared, total

    def update(self, step: int, batch: tuple[list[tuple[torch.Tensor, ...]], int]
               ) -> dict[str, float]:
        """The device's part: forward and backward of every piece, clip, AdamW, schedule."""
        pieces, total = batch
        if not self.counter:  # the single-model trainer's dropout seeding
            torch.manual_seed(mix_seed(self.member.seed, step, 0))
        loss = torch.zeros((), dtype=torch.float64, device=self.device)
        for piece in pieces:
            loss_sum = self.objective(*piece)
            (loss_sum / total).backward()
            loss += loss_sum.detach().double() / total
        torch.nn.utils.clip_grad_norm_(self.objective.parameters(), self.settings.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"step": step + 1, "loss": float(loss), "lr": self.scheduler.get_last_lr()[0]}

    def state(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().cpu() for n, p in self.objective.model.named_parameters()}

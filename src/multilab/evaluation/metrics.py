"""The paper's multilinguality and model-fit metrics (Dufter & Schütze 2020 §2.2, Appendix A.1),
vectorised.

Every function works on whole batches of hidden states so that evaluating one model on 10k
sentence pairs is a few hundred matrix products, not 10k Python loops. The straightforward
per-sentence definitions they are tested against are :mod:`multilab.evaluation.reference`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class AlignmentScore:
    precision: float
    recall: float
    f1: float


@dataclass(frozen=True)
class RetrievalScore:
    p1: float
    p5: float
    p10: float
    p1_forward: float
    p1_backward: float


def alignment_counts(
    english: torch.Tensor, fake: torch.Tensor, lengths: torch.Tensor, gold: torch.Tensor
) -> tuple[int, int, int]:
    """Argmax alignment of a batch of sentence pairs: (predicted, gold, correct) edge counts.

    ``english``/``fake`` are [B, L, D] wordpiece vectors without [CLS]/[SEP] (padding beyond
    ``lengths`` is ignored), ``gold[b, i]`` is the Fake-English index aligned to English word i.
    i–j is predicted iff j = argmax_l S[i, l] and i = argmax_l S[l, j] (mutual best match).
    """
    width = english.shape[1]
    positions = torch.arange(width, device=english.device)
    valid = positions[None, :] < lengths[:, None]  # [B, L]
    sim = F.normalize(english, dim=-1) @ F.normalize(fake, dim=-1).transpose(1, 2)
    pair_valid = valid[:, :, None] & valid[:, None, :]
    sim = sim.masked_fill(~pair_valid, -math.inf)
    best_fake = sim.argmax(dim=2)  # [B, L]: for English i, the best Fake j
    best_english = sim.argmax(dim=1)  # [B, L]: for Fake j, the best English i
    mutual = best_english.gather(1, best_fake) == positions[None, :]
    predicted = mutual & valid
    correct = predicted & (best_fake == gold)
    n_valid = int(valid.sum())
    return int(predicted.sum()), n_valid, int(correct.sum())


def alignment_score(counts: list[tuple[int, int, int]] | tuple[int, int, int]) -> AlignmentScore:
    """Precision, recall and F1 pooled over the corpus (sum the counts, then divide)."""
    if isinstance(counts, tuple):
        counts = [counts]
    n_pred = sum(c[0] for c in counts)
    n_gold = sum(c[1] for c in counts)
    n_correct = sum(c[2] for c in counts)
    precision = n_correct / n_pred if n_pred else 0.0
    recall = n_correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return AlignmentScore(precision, recall, f1)


def _topk_hits(
    queries: torch.Tensor, keys: torch.Tensor, ks: tuple[int, ...], block_size: int
) -> dict[int, int]:
    """How often query i finds key i among its top-k cosine neighbours (one matmul per block)."""
    hits = dict.fromkeys(ks, 0)
    kmax = min(max(ks), len(keys))
    for start in range(0, len(queries), block_size):
        block = queries[start : start + block_size]
        top = (block @ keys.T).topk(kmax, dim=1).indices
        target = torch.arange(start, start + len(block), device=queries.device)[:, None]
        found = top == target
        for k in ks:
            hits[k] += int(found[:, :k].any(dim=1).sum())
    return hits


def retrieval_score(
    english: torch.Tensor,
    fake: torch.Tensor,
    ks: tuple[int, ...] = (1, 5, 10),
    block_size: int = 4096,
) -> RetrievalScore:
    """Retrieval of row i of ``fake`` for row i of ``english`` by cosine, and back.

    Each P@k is the mean of both directions (the paper's ρ and τ are the P@1 of this).
    """
    if english.shape != fake.shape:
        raise ValueError(
            f"parallel retrieval needs equal shapes, got {tuple(english.shape)} and "
            f"{tuple(fake.shape)}"
        )
    a = F.normalize(english.float(), dim=-1)
    b = F.normalize(fake.float(), dim=-1)
    forward = _topk_hits(a, b, ks, block_size)
    backward = _topk_hits(b, a, ks, block_size)
    n = len(a)
    mean = {k: (forward[k] + backward[k]) / (2 * n) for k in ks}
    return RetrievalScore(
        p1=mean.get(1, float("nan")),
        p5=mean.get(5, float("nan")),
        p10=mean.get(10, float("nan")),
        p1_forward=forward[1] / n if 1 in ks else float("nan"),
        p1_backward=backward[1] / n if 1 in ks else float("nan"),
    )


def mean_pool(hidden: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
    """Sentence vectors: the mean of the token vectors selected by ``word_mask`` ([B, L])."""
    weights = word_mask.to(hidden.dtype)[..., None]
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


def multilinguality_score(rho0: float, rho8: float, tau0: float, tau8: float) -> float:
    """μ of the paper: the mean of retrieval and translation at layers 0 and 8."""
    return (rho0 + rho8 + tau0 + tau8) / 4


def masked_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[float, int]:
    """Summed negative log-likelihood (nats) of the true tokens at the masked positions."""
    return float(F.cross_entropy(logits, labels, reduction="sum")), int(labels.numel())


def perplexity(total_nll: float, count: int) -> float:
    """exp of the mean NLL; NaN when nothing was masked (rather than a misleading 1.0)."""
    return math.exp(total_nll / count) if count else float("nan")


#: Dufter & Schütze 2020 §3.2 on Figures 5 and 8: "In the range 90–128 (a rare sentence
#: length) the similarities look random": positions from here on are the rare ones.
RARE_POSITION = 90


def position_diagonal(positions: torch.Tensor, max_length: int) -> dict[str, float]:
    """Figures 5 and 8 of Dufter & Schütze 2020 as numbers, for a model with
    language-specific position embeddings (lang-pos: English ids ``0..max_length-1``,
    Fake-English ``max_length..2·max_length-1``).

    The figures show the cosine similarity of every English position embedding with every
    Fake-English one: a bright diagonal (position p of one language most like position p of
    the other) for model 1, none for model 9 (inverted Fake-English), noise from position 90
    on. Read as numbers: ``position.cos.same`` is the mean similarity of p with p,
    ``position.cos.other`` the mean over p ≠ q, ``position.diagonal`` their difference (0: no
    diagonal), and ``position.cos.same.frequent`` / ``.rare`` the diagonal's mean before and
    from position 90 (:data:`RARE_POSITION`; absent when ``max_length`` ≤ 90)."""
    if positions.shape[0] < 2 * max_length:
        raise ValueError(f"{positions.shape[0]} position embeddings, lang-pos needs "
                         f"{2 * max_length}")
    weights = positions.detach().float().cpu()
    english = F.normalize(weights[:max_length], dim=1)
    other = F.normalize(weights[max_length:2 * max_length], dim=1)
    similarity = english @ other.T
    same = similarity.diagonal()
    off = (similarity.sum() - same.sum()) / (max_length * (max_length - 1))
    out = {"position.cos.same": float(same.mean()), "position.cos.other": float(off),
           "position.diagonal": float(same.mean() - off)}
    if max_length > RARE_POSITION:
        out["position.cos.same.frequent"] = float(same[:RARE_POSITION].mean())
        out["position.cos.same.rare"] = float(same[RARE_POSITION:].mean())
    return out

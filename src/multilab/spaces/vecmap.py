"""Fully unsupervised VecMap (Artetxe et al., 2018, ACL) in torch, for the knn-replace spaces.

The paper (Dufter & Schütze 2020, §4 and A.3) maps two fastText spaces with the reference VecMap in
its ``--unsupervised`` mode. This module re-implements that recipe with matrix operations in
float32 (float64 for the final whitening) so the whole schedule, 400-550 iterations on the
1.7k-word Bible spaces, takes 30-40 CPU seconds on one core (the reference: ~200 s), or
runs on a GPU via ``device``:

1. normalisation: unit length, mean centring, unit length;
2. unsupervised initialisation: every word is described by its sorted similarity profile
   (rows of sqrt(X Xᵀ) = U S Uᵀ, sorted, normalised), and profiles are matched across
   languages by CSLS nearest neighbours in both directions;
3. self-learning: orthogonal Procrustes mapping on the current dictionary, then a new
   dictionary by CSLS (k=10) retrieval in both directions ("union") with stochastic
   dictionary induction (similarities dropped with probability 1 - keep_prob; keep_prob
   starts at 0.1 and doubles whenever the objective has not improved for 50 iterations);
4. once keep_prob has reached 1 without further improvement, the final dictionary is used
   for the robust mapping: whitening, orthogonal mapping, symmetric re-weighting (0.5) and
   de-whitening (source to source, target to target).

As in the reference implementation, steps 3 and 4 are split: the self-learning iterations use
the plain orthogonal mapping and the whitening / re-weighting / de-whitening refinement is
applied once, on the converged dictionary (the re-weighted mapping inside the loop makes the
dictionary collapse onto hub words).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from multilab.files import atomic_open
from multilab.progress import progress_bar, show_postfix

#: CSLS neighbourhood size of the reference ``--unsupervised`` mode.
CSLS_K = 10
#: Rows of a similarity block: 4096 x 4096 float32 = 64 MB, so the 2048-word spaces are one block.
DEFAULT_BLOCK_SIZE = 4096
#: Words used for the unsupervised initialisation (the reference's ``--unsupervised_vocab``).
INIT_VOCAB = 4000
STOCHASTIC_INITIAL = 0.1
STOCHASTIC_MULTIPLIER = 2.0
STOCHASTIC_INTERVAL = 50
#: Smallest objective gain that counts as an improvement (the reference's ``--threshold``).
IMPROVEMENT_THRESHOLD = 1e-6
REWEIGHT_POWER = 0.5
_EPS = 1e-12


@dataclass
class MappingResult:
    """Both spaces in the shared space (rows as in the input), and how the run went."""

    src_mapped: Tensor
    trg_mapped: Tensor
    iterations: int
    objective: float
    seconds: float


# --------------------------------------------------------------------------- normalisation


def unit_length(x: Tensor) -> Tensor:
    """Rows scaled to length 1; all-zero rows stay zero instead of becoming NaN."""
    return x / x.norm(dim=1, keepdim=True).clamp_min(_EPS)


def normalize_embeddings(x: Tensor) -> Tensor:
    """Unit length, mean centring, unit length: the ``--unsupervised`` normalisation.

    Centring removes the common direction every fastText space has, which would otherwise
    dominate cosine similarities; the second unit step restores cosine = dot product.
    """
    x = unit_length(x.float())
    x = x - x.mean(dim=0, keepdim=True)
    return unit_length(x)


# --------------------------------------------------------------------------- retrieval


def _topk_mean(sim: Tensor, k: int) -> Tensor:
    """Mean of each row's k largest similarities (the CSLS hubness penalty)."""
    k = min(k, sim.shape[1])
    return sim.topk(k, dim=1, sorted=False).values.mean(dim=1)


def _neighbourhood_density(queries: Tensor, keys: Tensor, k: int, block_size: int) -> Tensor:
    """For every query, the mean similarity to its k nearest keys, computed block-wise."""
    out = torch.empty(queries.shape[0], dtype=queries.dtype, device=queries.device)
    for start in range(0, queries.shape[0], block_size):
        stop = min(start + block_size, queries.shape[0])
        out[start:stop] = _topk_mean(queries[start:stop] @ keys.T, k)
    return out


def _csls_scores(src: Tensor, trg: Tensor, trg_density: Tensor) -> Tensor:
    """CSLS of every (source, target) pair up to the source's own constant: 2 cos - r_trg."""
    return 2 * (src @ trg.T) - trg_density


def csls_topk(
    src: Tensor, trg: Tensor, count: int, k: int = CSLS_K, block_size: int = DEFAULT_BLOCK_SIZE
) -> Tensor:
    """The ``count`` best target rows of every source row by CSLS, best first ([n_src, count]).

    CSLS(x, z) = 2 cos(x, z) - r_trg(z) - r_src(x); r_src(x) is constant per source row, so
    ranking by 2 sim - r_trg is exact. Similarities are plain dot products: pass unit-length
    rows for cosine. Memory stays at ``block_size`` rows of the similarity matrix.
    """
    trg_density = _neighbourhood_density(trg, src, k, block_size)
    count = min(count, trg.shape[0])
    out = torch.empty(src.shape[0], count, dtype=torch.long, device=src.device)
    for start in range(0, src.shape[0], block_size):
        stop = min(start + block_size, src.shape[0])
        out[start:stop] = _csls_scores(src[start:stop], trg, trg_density).topk(count, dim=1).indices
    return out


def nn_neighbours(src: Tensor, trg: Tensor, block_size: int = DEFAULT_BLOCK_SIZE) -> Tensor:
    """Index of the target row with the largest dot product, for every source row ([n_src])."""
    out = torch.empty(src.shape[0], dtype=torch.long, device=src.device)
    for start in range(0, src.shape[0], block_size):
        stop = min(start + block_size, src.shape[0])
        out[start:stop] = (src[start:stop] @ trg.T).argmax(dim=1)
    return out


def precision_at_1(
    src_mapped: Tensor, trg_mapped: Tensor, gold: Tensor, method: str = "nn"
) -> float:
    """Share of source words whose retrieved translation is the gold one.

    ``gold[i]`` is the target index of source word i (negative = no gold entry, skipped).
    Like the reference evaluation, rows are length-normalised first (cosine, not raw dot
    products, since the de-whitened spaces are no longer unit length); CSLS penalties are
    computed against the whole target and source vocabularies.
    """
    src, trg = unit_length(src_mapped.float()), unit_length(trg_mapped.float())
    gold = gold.to(src.device)
    rows = torch.nonzero(gold >= 0).flatten()
    if rows.numel() == 0:
        raise ValueError("precision_at_1: the gold dictionary is empty")
    if method == "nn":
        predicted = nn_neighbours(src[rows], trg)
    elif method == "csls":
        trg_density = _neighbourhood_density(trg, src, CSLS_K, DEFAULT_BLOCK_SIZE)
        predicted = _csls_scores(src[rows], trg, trg_density).argmax(dim=1)
    else:
        raise ValueError(f"unknown retrieval method {method!r}; valid: nn, csls")
    return (predicted == gold[rows]).float().mean().item()


# --------------------------------------------------------------------------- initialisation


def _similarity_profiles(x: Tensor) -> Tensor:
    """Rows of sqrt(X Xᵀ) sorted and normalised: a rotation-invariant description of each word.

    If the two spaces were isometric, a word and its translation would have the same
    similarity distribution to all other words, whatever the words' order; sorting removes
    the (unknown) order. sqrt(X Xᵀ) = U S Uᵀ comes from the thin SVD X = U S Vᵀ.
    """
    u, s, _ = torch.linalg.svd(x, full_matrices=False)
    profiles = (u * s) @ u.T
    return normalize_embeddings(profiles.sort(dim=1).values)


def _initial_dictionary(x: Tensor, z: Tensor, init_vocab: int) -> tuple[Tensor, Tensor]:
    """Seed dictionary from similarity profiles, CSLS matched in both directions (union)."""
    size = min(x.shape[0], z.shape[0], init_vocab)
    sim = _similarity_profiles(x[:size]) @ _similarity_profiles(z[:size]).T
    sim = sim - _topk_mean(sim, CSLS_K)[:, None] / 2 - _topk_mean(sim.T, CSLS_K)[None, :] / 2
    forward = torch.arange(size, device=x.device)
    src_indices = torch.cat([forward, sim.argmax(dim=0)])
    trg_indices = torch.cat([sim.argmax(dim=1), forward])
    return src_indices, trg_indices


# --------------------------------------------------------------------------- mappings


def _dictionary_covariance(x: Tensor, z: Tensor, src_indices: Tensor, trg_indices: Tensor
                           ) -> Tensor:
    """Zᵀ X over the dictionary pairs, i.e. z[trg]ᵀ x[src], with one (n x d x d) product.

    Summing each target word's paired source rows first halves the work of the union
    dictionary, in which every word appears twice.
    """
    paired = torch.zeros_like(z).index_add_(0, trg_indices, x[src_indices])
    return z.T @ paired


def _orthogonal_map(x: Tensor, z: Tensor, src_indices: Tensor, trg_indices: Tensor) -> Tensor:
    """W minimising ||X W - Z|| over the dictionary with W orthogonal (Procrustes: V Uᵀ)."""
    u, _, vt = torch.linalg.svd(_dictionary_covariance(x, z, src_indices, trg_indices))
    return vt.T @ u.T


def _whitening(m: Tensor) -> tuple[Tensor, Tensor]:
    """(MᵀM)^(-1/2) and its inverse (MᵀM)^(1/2), from one SVD (no matrix inversion)."""
    _, s, vt = torch.linalg.svd(m, full_matrices=False)
    s = s.clamp_min(torch.finfo(s.dtype).tiny)
    return vt.T @ torch.diag(1 / s) @ vt, vt.T @ torch.diag(s) @ vt


def _robust_map(
    x: Tensor, z: Tensor, src_indices: Tensor, trg_indices: Tensor
) -> tuple[Tensor, Tensor]:
    """Whitening, orthogonal mapping, symmetric re-weighting, de-whitening (src→src, trg→trg).

    Whitening makes the fit independent of each space's variance per direction; re-weighting
    by the singular values' square root stresses the directions both spaces agree on;
    de-whitening gives each space its own variance back.

    Computed in float64 and returned in float32: fastText spaces of a small corpus are
    nearly degenerate (singular values down to 1e-7 of the largest on the Bible spaces), and
    whitening in float32 amplifies rounding noise in those directions until P@1 halves
    (0.35 → 0.15 NN with the gold dictionary). All matrices are d x d or one pass over the
    words, so double precision costs well under a second.
    """
    x, z = x.double(), z.double()
    wx1, wx1_inv = _whitening(x[src_indices])
    wz1, wz1_inv = _whitening(z[trg_indices])
    xw, zw = x @ wx1, z @ wz1
    wx2, s, wz2_t = torch.linalg.svd(xw[src_indices].T @ zw[trg_indices])
    wz2 = wz2_t.T
    xw, zw = xw @ wx2, zw @ wz2
    xw = xw * s**REWEIGHT_POWER
    zw = zw * s**REWEIGHT_POWER
    xw = xw @ (wx2.T @ wx1_inv @ wx2)
    zw = zw @ (wz2.T @ wz1_inv @ wz2)
    return xw.float(), zw.float()


# --------------------------------------------------------------------------- self-learning


def _drop_mask(shape: tuple[int, int], keep_prob: float, generator: torch.Generator,
               device: torch.device) -> Tensor:
    """True with probability 1 - keep_prob, from 16-bit random integers (4 per 64-bit draw).

    Drawing one float per similarity costs three times as much and dominated the iteration
    time; 16 bits quantise keep_prob to 1/65536, far below any effect on the dictionary.
    """
    count = shape[0] * shape[1]
    draws = torch.randint(
        -(2**63), 2**63 - 1, ((count + 3) // 4,), dtype=torch.int64,
        generator=generator, device=device,
    )
    values = draws.view(torch.int16)[:count].view(shape)
    return values >= -(2**15) + round(keep_prob * 2**16)


def _dropout_(scores: Tensor, keep_prob: float, generator: torch.Generator) -> Tensor:
    """Zero each score with probability 1 - keep_prob, in place (stochastic induction).

    Dropped scores become 0, not -inf, exactly as in the reference implementation.
    """
    if keep_prob < 1.0:
        scores.masked_fill_(_drop_mask(tuple(scores.shape), keep_prob, generator, scores.device),
                            0.0)
    return scores


def _row_argmax(scores: Tensor) -> Tensor:
    """Index of each row's maximum (the first one on ties, like ``argmax``).

    ``max(dim=1).indices`` is about four times faster than ``argmax(dim=1)`` on the CPU
    (torch 2.13, 1732 x 1732 float32: 2 ms vs 8 ms), and it runs twice per iteration.
    """
    return scores.max(dim=1).indices


@dataclass
class _Induction:
    src_indices: Tensor
    trg_indices: Tensor
    objective: float


def _merge_topk(running: Tensor | None, block: Tensor, k: int) -> Tensor:
    """Running per-row top-k values, updated with a new block of columns."""
    block_top = block.topk(min(k, block.shape[1]), dim=1, sorted=False).values
    if running is None:
        return block_top
    merged = torch.cat([running, block_top], dim=1)
    return merged.topk(min(k, merged.shape[1]), dim=1, sorted=False).values


def _induce_dictionary(
    xw: Tensor, zw: Tensor, keep_prob: float, generator: torch.Generator, block_size: int
) -> _Induction:
    """New union dictionary by CSLS retrieval in both directions, with stochastic dropout.

    The objective is the mean best (plain) similarity of both directions. Two passes over
    blocks of ``block_size`` source rows: the first gathers the CSLS densities (top-k means)
    of both sides, whose maxima are also the best similarities; the second retrieves. With a
    single block (the 2048-word spaces) the similarity matrix is computed once per iteration.
    """
    n_src, n_trg, device = xw.shape[0], zw.shape[0], xw.device
    starts = range(0, n_src, block_size)
    single_block = n_src <= block_size
    src_top = torch.empty(n_src, min(CSLS_K, n_trg), device=device)
    trg_top: Tensor | None = None
    cached: tuple[Tensor, Tensor] | None = None
    for start in starts:
        stop = min(start + block_size, n_src)
        sim = xw[start:stop] @ zw.T
        sim_t = sim.T.contiguous()
        src_top[start:stop] = sim.topk(src_top.shape[1], dim=1, sorted=False).values
        trg_top = _merge_topk(trg_top, sim_t, CSLS_K)
        if single_block:
            cached = (sim, sim_t)
    assert trg_top is not None
    src_density, trg_density = src_top.mean(dim=1), trg_top.mean(dim=1)
    objective = (src_top.amax(dim=1).mean() + trg_top.amax(dim=1).mean()).item() / 2

    forward = torch.empty(n_src, dtype=torch.long, device=device)
    backward_score = torch.full((n_trg,), float("-inf"), device=device)
    backward = torch.zeros(n_trg, dtype=torch.long, device=device)
    for start in starts:
        stop = min(start + block_size, n_src)
        if cached is not None:
            sim, sim_t = cached
        else:
            sim = xw[start:stop] @ zw.T
            sim_t = sim.T.contiguous()
        # CSLS up to a per-row constant: sim - r_other / 2 (both blocks are ours to overwrite).
        sim_t.sub_(src_density[start:stop] / 2)
        _dropout_(sim_t, keep_prob, generator)
        if single_block:
            backward = _row_argmax(sim_t)
        else:
            block_best, block_arg = sim_t.max(dim=1)
            better = block_best > backward_score
            backward_score = torch.where(better, block_best, backward_score)
            backward = torch.where(better, block_arg + start, backward)
        sim.sub_(trg_density / 2)
        forward[start:stop] = _row_argmax(_dropout_(sim, keep_prob, generator))
    return _Induction(
        src_indices=torch.cat([torch.arange(n_src, device=device), backward]),
        trg_indices=torch.cat([forward, torch.arange(n_trg, device=device)]),
        objective=objective,
    )


def map_unsupervised(
    src: Tensor,
    trg: Tensor,
    seed: int = 0,
    max_iterations: int | None = None,
    device: str | torch.device = "cpu",
    progress: bool = True,
    block_size: int = DEFAULT_BLOCK_SIZE,
    init_vocab: int = INIT_VOCAB,
    threads: int | None = None,
    seed_dictionary: tuple[Tensor, Tensor] | None = None,
) -> MappingResult:
    """Map two embedding spaces into one without any dictionary (VecMap ``--unsupervised``).

    ``max_iterations`` caps self-learning (None = run until the stochastic schedule has
    converged, as the reference does); a capped run still ends with the robust refinement on
    its last dictionary. Same seed and device → same result (dropout draws come from one
    ``torch.Generator``). ``seed_dictionary`` (source rows, target rows) replaces the
    unsupervised initialisation: self-learning then starts from those pairs (VecMap's
    semi-supervised use). Returns float32 tensors on ``device``. ``threads`` sets torch's CPU
    threads for the run (restored afterwards): on a shared machine one thread is several
    times faster than two that wait for each other.
    """
    with _torch_threads(threads):
        return _map_unsupervised(
            src, trg, seed, max_iterations, torch.device(device), progress, block_size, init_vocab,
            seed_dictionary,
        )


@contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    """Temporarily set torch's intra-op CPU threads (None = leave them alone)."""
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _map_unsupervised(
    src: Tensor,
    trg: Tensor,
    seed: int,
    max_iterations: int | None,
    device: torch.device,
    progress: bool,
    block_size: int,
    init_vocab: int,
    seed_dictionary: tuple[Tensor, Tensor] | None = None,
) -> MappingResult:
    started = time.perf_counter()
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    x = normalize_embeddings(src.to(device))
    z = normalize_embeddings(trg.to(device))
    if seed_dictionary is None:
        src_indices, trg_indices = _initial_dictionary(x, z, init_vocab)
    else:
        src_indices, trg_indices = (rows.to(device) for rows in seed_dictionary)

    best_objective, objective = float("-inf"), float("nan")
    # a seeded start needs no stochastic exploration (the reference's semi-supervised mode)
    keep_prob = STOCHASTIC_INITIAL if seed_dictionary is None else 1.0
    last_improvement = 0
    iteration = 0
    # No total: the schedule decides when to stop (400-550 iterations on the Bible spaces).
    # `disable` only when asked: passed explicitly it would override TQDM_DISABLE=1 (tqdm reads
    # its environment defaults only for arguments left out)
    bar = progress_bar(desc="vecmap", unit="it", leave=False,
                       **({} if progress else {"disable": True}))
    while True:
        iteration += 1
        converged = False
        if iteration - last_improvement > STOCHASTIC_INTERVAL:
            converged = keep_prob >= 1.0
            keep_prob = min(1.0, STOCHASTIC_MULTIPLIER * keep_prob)
            last_improvement = iteration
        if converged or (max_iterations is not None and iteration > max_iterations):
            break
        w = _orthogonal_map(x, z, src_indices, trg_indices)
        induction = _induce_dictionary(x @ w, z, keep_prob, generator, block_size)
        src_indices, trg_indices = induction.src_indices, induction.trg_indices
        objective = induction.objective
        if objective - best_objective >= IMPROVEMENT_THRESHOLD:
            last_improvement = iteration
            best_objective = objective
        bar.update(1)
        show_postfix(bar, objective=f"{objective:.4f}", keep_prob=f"{keep_prob:.2f}")
    bar.close()
    xw, zw = _robust_map(x, z, src_indices, trg_indices)
    return MappingResult(
        src_mapped=xw,
        trg_mapped=zw,
        iterations=iteration - 1,
        objective=objective,
        seconds=time.perf_counter() - started,
    )


# --------------------------------------------------------------------------- .vec files


def read_vec(path: Path | str) -> tuple[list[str], Tensor]:
    """Words and float32 vectors of a word2vec text file ("n dim" header, "word v1 v2 ...")."""
    path = Path(path)
    with path.open(encoding="utf-8") as handle:
        header = handle.readline().split()
        if len(header) != 2:
            raise ValueError(f"{path}: first line must be 'count dim', got {header!r}")
        count, dim = int(header[0]), int(header[1])
        words: list[str] = []
        rows: list[list[float]] = []
        for line_number, line in enumerate(handle, start=2):
            parts = line.rstrip().split(" ")
            if len(parts) != dim + 1:
                raise ValueError(f"{path}:{line_number}: expected a word and {dim} numbers")
            words.append(parts[0])
            rows.append([float(v) for v in parts[1:]])
    if len(words) != count:
        raise ValueError(f"{path}: header says {count} words, file has {len(words)}")
    return words, torch.tensor(rows, dtype=torch.float32).reshape(count, dim)


def write_vec(path: Path | str, words: Sequence[str], vectors: Tensor) -> None:
    """Write a word2vec text file atomically (:func:`multilab.files.atomic_open`).

    A killed run therefore never leaves a truncated file that would later parse as a
    smaller vocabulary.
    """
    if len(words) != vectors.shape[0]:
        raise ValueError(f"{len(words)} words but {vectors.shape[0]} vectors")
    bad = next((w for w in words if not w or any(c.isspace() for c in w)), None)
    if bad is not None:
        raise ValueError(f"word {bad!r} is empty or contains whitespace")
    rows = vectors.detach().float().cpu().tolist()
    with atomic_open(Path(path)) as out:
        out.write(f"{len(words)} {vectors.shape[1]}\n")
        for word, row in zip(words, rows, strict=True):
            out.write(word + " " + " ".join(f"{v:.6g}" for v in row) + "\n")

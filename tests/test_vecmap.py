"""Our unsupervised VecMap: recovery of a hidden rotation + permutation, CSLS against a
brute-force reference, normalisation, .vec files, determinism."""

from __future__ import annotations

import math

import pytest
import torch

from multilab.spaces import vecmap

WORDS = 500
DIM = 40


def rotated_pair(noise: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clustered, anisotropic source space; target = permuted rotation + noise; gold map.

    Unsupervised initialisation needs structure (isotropic Gaussian clouds all have the
    same similarity profiles), hence clusters and a decaying variance per direction.
    """
    generator = torch.Generator().manual_seed(seed)
    scales = torch.logspace(0, -1.5, DIM)
    centres = torch.randn(20, DIM, generator=generator) * scales
    cluster = torch.randint(0, 20, (WORDS,), generator=generator)
    src = centres[cluster] + 0.3 * torch.randn(WORDS, DIM, generator=generator) * scales
    rotation, _ = torch.linalg.qr(torch.randn(DIM, DIM, generator=generator))
    permutation = torch.randperm(WORDS, generator=generator)
    noise_scale = noise * src.norm(dim=1).mean() / math.sqrt(DIM)
    trg = (src @ rotation)[permutation] + noise_scale * torch.randn(
        WORDS, DIM, generator=generator
    )
    return src, trg, torch.argsort(permutation)  # src[i] ↔ trg[gold[i]]


def brute_force_csls(src: torch.Tensor, trg: torch.Tensor, k: int) -> torch.Tensor:
    """CSLS matrix written out literally: 2 cos(x, z) - r_trg(z) - r_src(x)."""
    sim = src @ trg.T
    r_src = torch.stack([row.sort(descending=True).values[:k].mean() for row in sim])
    r_trg = torch.stack([col.sort(descending=True).values[:k].mean() for col in sim.T])
    return 2 * sim - r_trg[None, :] - r_src[:, None]


def test_unsupervised_mapping_recovers_rotation_and_permutation() -> None:
    src, trg, gold = rotated_pair(noise=0.12)
    x, z = vecmap.normalize_embeddings(src), vecmap.normalize_embeddings(trg)
    _, init_trg = vecmap._initial_dictionary(x, z, vecmap.INIT_VOCAB)
    init_accuracy = (init_trg[:WORDS] == gold).float().mean().item()
    assert init_accuracy < 0.93  # the seed dictionary alone is not enough here ...

    result = vecmap.map_unsupervised(src, trg, seed=0, max_iterations=30, progress=False,
                                     threads=1)
    # ... self-learning + the robust refinement recover the hidden map.
    assert vecmap.precision_at_1(result.src_mapped, result.trg_mapped, gold) >= 0.95
    assert vecmap.precision_at_1(result.src_mapped, result.trg_mapped, gold, "csls") >= 0.95
    assert result.iterations == 30
    assert result.src_mapped.shape == src.shape and result.trg_mapped.shape == trg.shape
    assert result.src_mapped.dtype == torch.float32
    assert result.seconds > 0 and math.isfinite(result.objective)


def test_a_seed_dictionary_is_where_the_mapping_starts() -> None:
    """With no self-learning (``max_iterations=0``) the mapping is fitted on the start alone:
    50 gold pairs recover the hidden rotation, 50 wrong pairs do not."""
    src, trg, gold = rotated_pair(noise=0.05)
    right = (torch.arange(50), gold[:50])
    wrong = (torch.arange(50), gold[torch.arange(50) + 100])

    def p1(seed_dictionary: tuple[torch.Tensor, torch.Tensor]) -> float:
        result = vecmap.map_unsupervised(src, trg, seed=0, max_iterations=0, progress=False,
                                         seed_dictionary=seed_dictionary)
        return vecmap.precision_at_1(result.src_mapped, result.trg_mapped, gold)

    assert p1(right) >= 0.95 and p1(wrong) < 0.1


def test_identical_spaces_map_to_the_identity() -> None:
    """Two copies of one space: the seed dictionary is already the identity, the converged
    self-learning keeps it, and both sides land on the same vectors.

    (Midway, stochastic induction drops 90% of the similarities, so the dictionary is
    briefly noisy; the schedule only stops after keep_prob 1 has converged.)
    """
    words = 150
    src = rotated_pair(noise=0.0, seed=2)[0][:words]
    identity = torch.arange(words)
    x = vecmap.normalize_embeddings(src)
    src_indices, trg_indices = vecmap._initial_dictionary(x, x, vecmap.INIT_VOCAB)
    assert torch.equal(src_indices, trg_indices)
    assert torch.equal(trg_indices[:words], identity)
    w = vecmap._orthogonal_map(x, x, identity, identity)
    assert torch.allclose(w, torch.eye(DIM), atol=1e-4)

    result = vecmap.map_unsupervised(src, src.clone(), seed=0, progress=False, threads=1)
    assert result.iterations >= 5 * vecmap.STOCHASTIC_INTERVAL  # the full schedule ran
    assert vecmap.precision_at_1(result.src_mapped, result.trg_mapped, identity) == 1.0
    assert vecmap.precision_at_1(result.src_mapped, result.trg_mapped, identity, "csls") == 1.0
    assert torch.allclose(result.src_mapped, result.trg_mapped, atol=1e-5)


def test_same_seed_same_mapping_and_threads_restored() -> None:
    src, trg, _ = rotated_pair(noise=0.2, seed=1)
    threads = torch.get_num_threads()
    first = vecmap.map_unsupervised(src, trg, seed=3, max_iterations=8, progress=False, threads=1)
    second = vecmap.map_unsupervised(src, trg, seed=3, max_iterations=8, progress=False, threads=1)
    assert torch.equal(first.src_mapped, second.src_mapped)
    assert torch.equal(first.trg_mapped, second.trg_mapped)
    assert first.objective == second.objective
    assert torch.get_num_threads() == threads


def test_dropout_draws_follow_the_seed() -> None:
    sim = torch.rand(64, 64)
    keep = 0.25
    first = vecmap._dropout_(sim.clone(), keep, torch.Generator().manual_seed(5))
    again = vecmap._dropout_(sim.clone(), keep, torch.Generator().manual_seed(5))
    other = vecmap._dropout_(sim.clone(), keep, torch.Generator().manual_seed(6))
    assert torch.equal(first, again) and not torch.equal(first, other)
    kept = (first != 0).float().mean().item()
    assert abs(kept - keep) < 0.05
    assert torch.equal(vecmap._dropout_(sim.clone(), 1.0, torch.Generator()), sim)


def test_normalisation_unit_centre_unit() -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(200, 16, generator=generator) * 5 + 3
    x[7] = 0
    normalised = vecmap.normalize_embeddings(x)
    assert not normalised.isnan().any()
    norms = normalised.norm(dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)
    # Centring removed the shared offset: the mean direction is small against unit rows.
    assert normalised.mean(dim=0).norm() < 0.2
    expected = vecmap.unit_length(x / x.norm(dim=1, keepdim=True).clamp_min(1e-12))
    expected = vecmap.unit_length(expected - expected.mean(dim=0))
    assert torch.allclose(normalised, expected, atol=1e-6)
    # Zero rows stay zero through the first step instead of becoming NaN.
    assert torch.equal(vecmap.unit_length(torch.zeros(2, 3)), torch.zeros(2, 3))


@pytest.mark.parametrize("block_size", [7, 4096])
def test_csls_matches_brute_force(block_size: int) -> None:
    generator = torch.Generator().manual_seed(1)
    src = vecmap.unit_length(torch.randn(53, 8, generator=generator))
    trg = vecmap.unit_length(torch.randn(41, 8, generator=generator))
    reference = brute_force_csls(src, trg, k=5)
    assert torch.equal(
        vecmap.csls_topk(src, trg, 1, k=5, block_size=block_size)[:, 0], reference.argmax(dim=1)
    )
    top3 = vecmap.csls_topk(src, trg, 3, k=5, block_size=block_size)
    assert torch.equal(top3, reference.topk(3, dim=1).indices)
    assert torch.equal(
        vecmap.nn_neighbours(src, trg, block_size=block_size), (src @ trg.T).argmax(dim=1)
    )


def test_blocked_induction_equals_single_block() -> None:
    generator = torch.Generator().manual_seed(2)
    xw = vecmap.unit_length(torch.randn(90, 12, generator=generator))
    zw = vecmap.unit_length(torch.randn(70, 12, generator=generator))
    whole = vecmap._induce_dictionary(xw, zw, 1.0, torch.Generator(), block_size=4096)
    blocked = vecmap._induce_dictionary(xw, zw, 1.0, torch.Generator(), block_size=16)
    assert torch.equal(whole.src_indices, blocked.src_indices)
    assert torch.equal(whole.trg_indices, blocked.trg_indices)
    assert whole.objective == pytest.approx(blocked.objective, abs=1e-6)
    # Forward half: CSLS neighbour of every source word; backward half: of every target word.
    assert torch.equal(whole.trg_indices[:90], vecmap.csls_topk(xw, zw, 1)[:, 0])
    assert torch.equal(whole.src_indices[90:], vecmap.csls_topk(zw, xw, 1)[:, 0])


def test_precision_at_1_skips_words_without_gold() -> None:
    vectors = torch.eye(4)
    gold = torch.tensor([0, 1, -1, 0])  # word 3's gold is wrong on purpose
    assert vecmap.precision_at_1(vectors, vectors, gold) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="valid: nn, csls"):
        vecmap.precision_at_1(vectors, vectors, gold, method="cosine")


def test_vec_round_trip_is_atomic(tmp_path) -> None:
    words = ["[PAD]", "the", "##s", "::Jesus", "é"]
    vectors = torch.randn(5, 7, generator=torch.Generator().manual_seed(4))
    path = tmp_path / "sub" / "space.vec"
    vecmap.write_vec(path, words, vectors)
    assert path.read_text(encoding="utf-8").splitlines()[0] == "5 7"
    read_words, read_vectors = vecmap.read_vec(path)
    assert read_words == words
    assert torch.allclose(read_vectors, vectors, rtol=1e-5, atol=1e-6)
    assert sorted(p.name for p in path.parent.iterdir()) == ["space.vec"]

    with pytest.raises(ValueError, match="whitespace"):
        vecmap.write_vec(path, ["a b", "c", "d", "e", "f"], vectors)
    assert vecmap.read_vec(path)[0] == words  # the old file is untouched, no temp files left
    assert sorted(p.name for p in path.parent.iterdir()) == ["space.vec"]


def test_read_vec_rejects_truncated_file(tmp_path) -> None:
    path = tmp_path / "broken.vec"
    path.write_text("3 2\na 1 2\nb 3 4\n", encoding="utf-8")
    with pytest.raises(ValueError, match="header says 3 words"):
        vecmap.read_vec(path)

"""knn-replace masking (Dufter & Schütze 2020 §4, A.3): proportions, uniform choice among the k
neighbours, the other language every time, specials, determinism, a wrong table."""

from __future__ import annotations

import pytest
import torch

from multilab.data.batches import mask_tokens, seeded_generator
from multilab.data.inputs import ENGLISH, FAKE, MASK_ID, UNK_ID, InputEncoder
from multilab.data.tokenizers import SPECIAL_TOKENS
from multilab.lab.modifications import resolve_recipe

V, MAX_LEN, K = 2048, 128, 5
N_SPECIAL = len(SPECIAL_TOKENS)


def neighbour_table(k: int = K) -> torch.Tensor:
    """[2V, k]: k distinct other-language neighbours per word (never the twin); specials → twin.

    Distinct columns let a test tell which neighbour was drawn; specials point to their twin
    as in :func:`multilab.spaces.fasttext_spaces.knn_table`.
    """
    ids = torch.arange(2 * V)
    english = ids % V
    offsets = torch.arange(1, k + 1) * 37
    words = N_SPECIAL + (english[:, None] - N_SPECIAL + offsets) % (V - N_SPECIAL)
    other = torch.where(ids < V, V, 0)[:, None]
    table = words + other
    twins = torch.cat([ids[:V] + V, ids[:V]])[:, None].expand(-1, k)
    is_special = (english < N_SPECIAL)[:, None].expand(-1, k)
    return torch.where(is_special, twins, table)


def masked(mod: str, table: torch.Tensor, seed: int = 7, rows: int = 1200,
           extra: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
    """Mask a large batch of random sentences of both languages; return (labels, new, langs)."""
    encoder = InputEncoder(resolve_recipe(mod), V, MAX_LEN)
    sentences = [torch.randint(N_SPECIAL, V, (40,), generator=seeded_generator(i))
                 for i in range(rows)] + (extra or [])
    languages = [i % 2 for i in range(len(sentences))]
    batch = encoder.batch(sentences, languages)
    out = mask_tokens(batch, encoder, 0.15, resolve_recipe(mod).replacement,
                      seeded_generator(seed), table)
    new = out.inputs["input_ids"][out.selected]
    language_of = batch.languages[out.selected.nonzero()[:, 0]]
    return out.labels, new, language_of


def test_replacement_proportions_and_uniform_neighbour() -> None:
    table = neighbour_table()
    labels, new, _ = masked("knn-replace", table)
    n = len(labels)
    assert n > 6000
    column = (table[labels] == new[:, None]).float()  # which neighbour (if any) was put in
    is_knn = column.any(dim=1)
    shares = {
        "mask": (new == MASK_ID).float().mean().item(),
        "keep": (new == labels).float().mean().item(),
        "knn": is_knn.float().mean().item(),
    }
    shares["random"] = 1 - sum(shares.values())
    # (0.5, 0.1, 0.1, 0.3); 4 standard deviations of a share over n draws is at most 0.027
    for name, expected in [("mask", 0.5), ("keep", 0.1), ("random", 0.1), ("knn", 0.3)]:
        assert abs(shares[name] - expected) < 0.03, (name, shares)
    # The neighbour is drawn uniformly among the k (each column 1/k of the knn draws).
    per_column = column[is_knn].mean(dim=0)
    assert torch.allclose(per_column, torch.full((K,), 1 / K), atol=0.04), per_column


@pytest.mark.parametrize("mod", ["knn-replace", "knn-replace;shift-special"])
def test_neighbours_come_from_the_other_language(mod: str) -> None:
    table = neighbour_table()
    labels, new, language = masked(mod, table)
    knn = (table[labels] == new[:, None]).any(dim=1) & (new != labels)
    assert knn.sum() > 1000
    # The table is indexed by the token as it stands in the input: English ids < V,
    # Fake-English ids >= V (shift-special moves only the specials, never the words).
    assert ((labels < V) == (language == ENGLISH)).all()
    assert (new[knn & (language == ENGLISH)] >= V).all()
    assert (new[knn & (language == FAKE)] < V).all()


def test_knn_with_k_1_gives_the_single_neighbour() -> None:
    table = neighbour_table(1)
    labels, new, _ = masked("knn-replace", table)
    knn = new == table[labels, 0]
    assert abs(knn.float().mean().item() - 0.3) < 0.03


@pytest.mark.parametrize(("mod", "expected_fake_unk"), [
    ("knn-replace", UNK_ID),                        # shared specials: [UNK] stays [UNK]
    ("knn-replace;shift-special", UNK_ID + V),      # own specials: [UNK] ↔ ::[UNK]
])
def test_special_token_neighbours_respect_shift_special(mod: str, expected_fake_unk: int
                                                        ) -> None:
    """An [UNK] in the text (rare) is never replaced by an id its setup does not use."""
    table = neighbour_table()
    unk_sentences = [torch.full((40,), UNK_ID)] * 200
    labels, new, language = masked(mod, table, rows=0, extra=unk_sentences)
    knn = new != labels
    knn &= new != MASK_ID
    knn &= new != MASK_ID + V
    english_unk = (language == ENGLISH) & (labels == UNK_ID)
    fake_unk = (language == FAKE) & (labels == expected_fake_unk)
    assert english_unk.any() and fake_unk.any()
    if mod == "knn-replace":
        # every knn draw of a shared [UNK] keeps it; only random draws change the token
        shares = (new[english_unk | fake_unk] == UNK_ID).float().mean().item()
        assert abs(shares - 0.4) < 0.05  # keep 0.1 + knn 0.3
        assert not ((new >= V) & (new < V + N_SPECIAL)).any()
    else:
        assert (new[english_unk] == UNK_ID + V).float().mean().item() == pytest.approx(
            0.3, abs=0.05)
        assert (new[fake_unk] == UNK_ID).float().mean().item() == pytest.approx(0.3, abs=0.05)


def test_knn_masking_is_deterministic_for_a_seed() -> None:
    table = neighbour_table()
    first = masked("knn-replace", table, seed=3, rows=100)[1]
    again = masked("knn-replace", table, seed=3, rows=100)[1]
    other = masked("knn-replace", table, seed=4, rows=100)[1]
    assert torch.equal(first, again)
    assert first.shape != other.shape or not torch.equal(first, other)


def test_missing_or_mismatched_table_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="needs a neighbour table"):
        masked("knn-replace", None, rows=4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"expected \[4096, k\]"):
        masked("knn-replace", neighbour_table()[:100], rows=4)
    # modifications without knn never look at the table
    labels, new, _ = masked("original", torch.zeros(3, 1, dtype=torch.long), rows=20)
    assert len(labels) == len(new)

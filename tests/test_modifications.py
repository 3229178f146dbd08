"""The registry: every paper ID resolves, combos compose, errors name the valid choices."""

from __future__ import annotations

import math

import pytest
import torch

from multilab.lab import modifications as mods


def test_every_paper_id_resolves_to_a_recipe() -> None:
    for pid, text in mods.PAPER_IDS.items():
        recipe = mods.resolve_recipe(pid)
        assert recipe == mods.resolve_recipe(text)
        assert math.isclose(sum(recipe.replacement), 1.0)
        assert mods.paper_id(text) == pid


def test_original_is_the_default_recipe() -> None:
    assert mods.resolve_recipe("original") == mods.Recipe()


def test_combo_composes_the_parts() -> None:
    recipe = mods.resolve_recipe("lang-pos;shift-special;no-random")
    assert recipe.language_positions and recipe.shift_special
    assert recipe.replacement == (0.8, 0.2, 0.0, 0.0)
    assert not recipe.invert_fake and recipe.parallel and recipe.model_size == "small"
    assert mods.resolve_recipe("8") == recipe
    # '+' is the path-safe spelling of the same combo, in any order for the paper ID
    assert mods.resolve_recipe("no-random+lang-pos+shift-special") == recipe
    assert mods.paper_id("no-random+lang-pos+shift-special") == "8"


def test_individual_effects() -> None:
    assert mods.resolve_recipe("inv-order").invert_fake
    no_parallel = mods.resolve_recipe("no-parallel")
    assert not no_parallel.parallel and no_parallel.epoch_factor == 2.0
    assert mods.resolve_recipe("overparam").model_size == "base"
    assert not mods.resolve_recipe("untrained").trained
    knn = mods.resolve_recipe("knn-replace")
    assert knn.replacement == (0.5, 0.1, 0.1, 0.3) and knn.needs_knn
    assert not mods.resolve_recipe("original").needs_knn


def test_unknown_modification_lists_valid_names() -> None:
    with pytest.raises(mods.ModificationError) as err:
        mods.resolve_recipe("lang-pos;bogus")
    message = str(err.value)
    assert "'bogus'" in message
    for name in mods.REGISTRY:
        assert name in message


def test_conflicting_parts_are_rejected() -> None:
    with pytest.raises(mods.ModificationError, match="replacement"):
        mods.resolve_recipe("no-random;knn-replace")
    with pytest.raises(mods.ModificationError, match="twice"):
        mods.resolve_recipe("lang-pos;lang-pos")
    with pytest.raises(mods.ModificationError, match="original"):
        mods.resolve_recipe("original;lang-pos")


def test_names_slugs_and_descriptions() -> None:
    assert mods.canonical_name("9") == "lang-pos;inv-order;shift-special;no-random"
    assert mods.slug("lang-pos;no-random") == "lang-pos+no-random"
    assert "position" in mods.describe("lang-pos")
    assert mods.paper_id("inv-order;lang-pos") is None


def test_seed_002_modifications_set_their_fields() -> None:
    assert mods.resolve_recipe("lang-id").language_sep
    assert mods.resolve_recipe("unigram-target").unigram_target
    assert mods.resolve_recipe("permute-0.25").permute == 0.25
    combo = mods.resolve_recipe("permute-0.5;lang-id")
    assert combo.permute == 0.5 and combo.language_sep
    assert mods.resolve_recipe("original").permute == 0.0


def test_permute_family_has_one_canonical_spelling() -> None:
    # one model, one folder, one MLflow name: 1.0 and 1 are the same p
    assert mods.canonical_name("permute-1.0") == "permute-1"
    assert mods.slug("lang-id;permute-0.50") == "lang-id+permute-0.5"
    assert mods.same_modification("permute-1", "permute-1.0")
    with pytest.raises(mods.ModificationError, match="twice"):
        mods.resolve_recipe("permute-1;permute-1.0")
    with pytest.raises(mods.ModificationError, match="permute"):
        mods.resolve_recipe("permute-0.5;permute-1")  # one field, two values: a conflict
    assert "p = 0.25" in mods.describe("permute-0.25")


@pytest.mark.parametrize(
    ("text", "says"),
    [("permute-1.5", "outside [0, 1]"), ("permute--1", "outside [0, 1]"),
     ("permute-x", "'x' is not a number"), ("permute-nan", "outside [0, 1]")],
)
def test_bad_permutation_amounts_fail_in_one_line(text: str, says: str) -> None:
    with pytest.raises(mods.ModificationError) as err:
        mods.resolve_recipe(text)
    message = str(err.value)
    assert says in message and "permute-<p> with 0 <= p <= 1" in message
    assert "\n" not in message


def test_valid_names_list_the_families() -> None:
    with pytest.raises(mods.ModificationError) as err:
        mods.resolve_recipe("permutation-0.5")
    assert "permute-<p>" in str(err.value) and "lang-id" in str(err.value)


def test_nsp_and_the_params_family() -> None:
    assert mods.resolve_recipe("nsp").next_sentence
    assert not mods.resolve_recipe("original").next_sentence
    assert mods.resolve_recipe("params-0.50;depth-4").size_factor == 0.5
    assert mods.canonical_name("params-2.0") == "params-2"
    assert "params-<p> with 0.05 <= p <= 20" in mods.valid_names()
    assert mods.resolve_recipe("window-20").window == 20
    with pytest.raises(mods.ModificationError, match="n = 0 is outside"):
        mods.resolve_recipe("window-0")


def test_depth_and_heads_families_are_integers() -> None:
    assert mods.resolve_recipe("depth-4").layers == 4
    assert mods.resolve_recipe("heads-2;depth-1").heads == 2
    assert mods.canonical_name("depth-04") == "depth-4"
    with pytest.raises(mods.ModificationError, match=r"'2\.5' is not an integer"):
        mods.resolve_recipe("depth-2.5")


def test_stacking_follows_from_what_a_modification_changes() -> None:
    """A modification stacks with original exactly when it changes no architecture field:
    an entry declares only its fields, never whether it stacks."""
    assert mods.lookup("no-random").stacks and mods.lookup("permute-0.5").stacks
    assert mods.lookup("sep-emb").stacks and mods.lookup("window-20").stacks
    for architecture in ("overparam", "untrained", "nsp", "depth-4", "heads-2", "sep-L1-3",
                         "params-0.5"):
        assert not mods.lookup(architecture).stacks, architecture
    assert mods.stackable_names().split(", ")[:2] == ["original", "lang-pos"]


def test_later_fields_are_every_field_the_first_fingerprints_lacked() -> None:
    """A new Recipe field is declared once: the fingerprint leaves it out at its default
    without a second list of defaults (the first fingerprints' fields are fixed)."""
    assert mods.LATER_FIELDS == {
        "permute": 0.0, "unigram_target": False, "language_sep": False, "layers": 0,
        "heads": 0, "size_factor": 0.0, "next_sentence": False, "window": 0,
        "random_in_language": False, "separate_layers": 0, "code_switch": False,
        "attend_padding": False}
    recipe = mods.Recipe()
    assert all(getattr(recipe, name) == default for name, default in mods.LATER_FIELDS.items())


def test_separate_embeddings_are_sep_embs_three_fields_together() -> None:
    """Downstream fine-tuning freezes a language's embeddings only under sep-emb's own
    positions, specials and in-language random replacements, not under each alone."""
    assert mods.resolve_recipe("sep-emb").separate_embeddings
    assert mods.resolve_recipe("sep-emb;sep-L1-3").separate_embeddings
    assert not mods.resolve_recipe("lang-pos;shift-special").separate_embeddings
    named = mods.names_setting("separate_layers", "random_in_language").split(", ")
    assert {"sep-emb", "sep-L1-<n>"} <= set(named) and "lang-pos" not in named


def test_mixed_stacks_are_refused_in_one_line() -> None:
    mods.check_stack(["original", "lang-pos;shift-special;no-random", "knn-replace",
                      "no-parallel", "window-20"])  # data, masking, positions: one stack
    mods.check_stack(["overparam", "lang-pos;overparam"])  # BERT-base rows together
    for mixed, named in ((["original", "overparam"], "overparam"),
                         (["no-random", "depth-4"], "depth-4"),
                         (["overparam", "nsp"], "nsp, overparam"),
                         (["original", "untrained"], "trains nothing"),
                         ([], "stack >= 1")):
        with pytest.raises(mods.ModificationError, match=named) as err:
            mods.check_stack(mixed)
        assert "\n" not in str(err.value)
    assert mods.stack_group("lang-pos;overparam") == ("overparam",)


def test_lang_random_keeps_random_replacements_inside_the_row_s_language() -> None:
    """lang-random changes masking alone: the shared positions, specials and embeddings stay
    (it stacks, fine-tuning freezes nothing), and a random replacement of an English row is
    an English id, where the original setup's comes from either language."""
    from multilab.data.batches import mask_tokens
    from multilab.data.inputs import InputEncoder, collate

    recipe = mods.resolve_recipe("lang-random")
    assert recipe == mods.Recipe(random_in_language=True)
    assert mods.lookup("lang-random").stacks and not recipe.separate_embeddings

    def random_ids(recipe: mods.Recipe) -> list[torch.Tensor]:
        encoder = InputEncoder(recipe, 20, 16, (0, 20), 40)
        batch = collate([encoder.encode(torch.arange(5, 19), language) for language in (0, 1)],
                        [0, 1])
        masked = mask_tokens(batch, encoder, 1.0, (0.0, 0.0, 1.0),
                             torch.Generator().manual_seed(0))
        return [masked.inputs["input_ids"][row][batch.word_mask[row]] for row in (0, 1)]

    english, fake = random_ids(recipe)
    assert bool((english < 20).all()) and bool((fake >= 20).all())
    english, fake = random_ids(mods.Recipe())
    assert bool((english >= 20).any()) and bool((fake < 20).any())

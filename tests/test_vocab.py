"""WordPiece vocabulary and Fake-English: sizes, specials, shift/unshift, the :: twins."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from multilab.data.tokenizers import SPECIAL_TOKENS
from multilab.data.vocab import to_fake
from tests.helpers import files_of_fresh_processes


def test_english_vocabulary(built_project: Path) -> None:
    tok = AutoTokenizer.from_pretrained(str(built_project / "artifacts/vocab/english"))
    assert len(tok) == 2048
    assert tok.convert_ids_to_tokens(list(range(5))) == list(SPECIAL_TOKENS)
    ids = tok("Jesus said to them")["input_ids"]
    assert ids[0] == tok.cls_token_id == 2 and ids[-1] == tok.sep_token_id == 3
    assert "Jesus" in tok.tokenize("Jesus said")  # cased: no lowercasing


def test_bilingual_vocabulary_has_the_fake_twins(built_project: Path) -> None:
    eng = AutoTokenizer.from_pretrained(str(built_project / "artifacts/vocab/english"))
    both = AutoTokenizer.from_pretrained(str(built_project / "artifacts/vocab/bilingual"))
    assert len(both) == 4096
    english = eng.convert_ids_to_tokens(list(range(2048)))
    fake = both.convert_ids_to_tokens(list(range(2048, 4096)))
    assert fake == ["::" + t for t in english]


def test_shift_round_trip_and_specials(built_project: Path) -> None:
    eng = AutoTokenizer.from_pretrained(str(built_project / "artifacts/vocab/english"))
    both = AutoTokenizer.from_pretrained(str(built_project / "artifacts/vocab/bilingual"))
    ids = torch.tensor(eng("He ate wild honey .")["input_ids"])
    fake = to_fake(ids, 2048)
    assert fake[0] == ids[0] and fake[-1] == ids[-1]  # shared [CLS]/[SEP]
    assert (fake[1:-1] == ids[1:-1] + 2048).all()
    shifted = to_fake(ids, 2048, shift_special=True)
    assert torch.equal(shifted, ids + 2048)  # [CLS] too: ::[CLS]
    tokens = both.convert_ids_to_tokens(fake[1:-1].tolist())
    assert all(t.startswith("::") for t in tokens)
    assert [t[2:] for t in tokens] == eng.convert_ids_to_tokens(ids[1:-1].tolist())


@pytest.mark.slow  # two fresh processes
def test_vocabulary_is_byte_identical_across_fresh_processes(
    built_project: Path, tmp_path: Path
) -> None:
    """tokenizers' WordPiece trainer numbers ``##`` pieces in hash-map order; two fresh
    processes with different hash seeds must still write the same vocabulary, byte for byte."""
    train = built_project / "artifacts/corpora/train.txt"
    script = (
        "import sys; from pathlib import Path; from multilab.data.corpus import read_lines; "
        "from multilab.data.vocab import build_vocab; "
        "build_vocab(read_lines(Path(sys.argv[1])), 2048, Path(sys.argv[2]))"
    )
    written = files_of_fresh_processes(script, [str(train)],
                                       [tmp_path / "vocab1", tmp_path / "vocab2"])
    assert written[0] == written[1]
    built = built_project / "artifacts/vocab/english/vocab.txt"
    assert written[0][Path("english/vocab.txt")] == built.read_bytes()


def test_a_stopped_build_leaves_no_vocabulary_behind(tmp_path: Path, monkeypatch) -> None:
    """A build that fails before its swap (here: transformers cannot be imported, as on a
    machine missing a package) leaves neither a staging folder nor a folder that a study
    runner would take for a built vocabulary (it rebuilds instead)."""
    import sys

    from multilab.data.layout import vocab_built
    from multilab.data.vocab import build_vocab

    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` fails
    vocab = tmp_path / "vocab"
    with pytest.raises(ImportError):
        build_vocab(["in the beginning was the word"] * 50, 64, vocab, unit="char")
    assert not vocab_built(vocab)
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".staging")]
    (vocab / ".bilingual.staging").mkdir(parents=True)  # one left by a killed build
    assert not vocab_built(vocab)

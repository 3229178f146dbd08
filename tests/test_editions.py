"""The edition table names what the DB holds: each corrected entry pinned by its own text.

An earlier table called ``2`` American Standard (it is King James 2000), ``p`` Urdu (Persian),
``f``/``g`` Spanish (Tagalog) and ``1`` Diodati (Nuova Diodati; ``d`` is the 1649 Diodati).
"""

from __future__ import annotations

import pytest

from multilab.data import bible
from multilab.lab.languages import EDITIONS

#: (code, ISO, verse id, a passage only that edition's language and wording has).
PINNED = [
    # KJV2000 modernises the KJV's -eth; the ASV reads "believeth on him ... eternal life"
    ("2", "en", "43.003.016", "whosoever believes in him should not perish, but have everlasting"),
    ("2", "en", "01.001.001", "In the beginning God created the heaven and the earth."),
    ("p", "fa", "01.001.001", "در ابتدا، خدا آسمانها و زمین را آفرید."),
    ("p", "fa", "43.003.016", "زیرا خدا جهان را اینقدر محبت نمود"),
    ("f", "tl", "01.001.001", "Nang pasimula ay nilikha ng Dios ang langit at ang lupa."),
    ("g", "tl", "01.001.001", "Noong simula nilikha ng Diyos ang langit at ang lupa."),
    ("1", "it", "43.003.016", "Poiché Dio ha tanto amato il mondo"),
    ("d", "it", "43.003.016", "Perciocchè Iddio ha tanto amato il mondo"),
    ("5", "fr", "01.001.001", "Au commencement Dieu créa les cieux et la terre."),
    ("e", "de", "43.003.016", "Denn also hat Gott die Welt geliebt"),
]

#: Letters Urdu writes and Persian does not (yeh barree, noon ghunna, tteh, ddal, rreh).
URDU_ONLY = set("ےںٹڈڑ")


def verse(code: str, vid: str) -> str:
    book = int(vid.split(".")[0])
    return dict(bible.read_verses(code, (book, book)))[vid]


@pytest.mark.parametrize(("code", "iso", "vid", "passage"), PINNED)
def test_corrected_edition_is_what_its_text_says(
    code: str, iso: str, vid: str, passage: str
) -> None:
    assert EDITIONS[code][0] == iso
    assert passage in verse(code, vid)


def test_persian_edition_has_no_urdu_letters() -> None:
    text = "".join(t for _, t in bible.read_verses("p", (43, 43)))
    assert not URDU_ONLY & set(text)
    assert "گ" in text and "پ" in text  # Persian letters beyond Arabic's


def test_table_covers_exactly_the_db_editions() -> None:
    import sqlite3

    with sqlite3.connect(f"file:{bible.bible_db_path()}?mode=ro", uri=True) as conn:
        codes = {row[0] for row in conn.execute("SELECT DISTINCT bbName FROM bible")}
    assert codes == set(EDITIONS)
    assert all(len(iso) == 2 and iso.islower() for iso, _ in EDITIONS.values())

"""Point labels of the PCA figure: words whose points (nearly) coincide stay readable."""

from __future__ import annotations

from itertools import combinations

from matplotlib.figure import Figure
from matplotlib.text import Text

from multilab.labels import Box, candidate_offsets, label_points, place


def _boxes(anchors, sizes, offsets) -> list[Box]:
    return [Box(x + dx - w / 2, y + dy - h / 2, x + dx + w / 2, y + dy + h / 2)
            for (x, y), (w, h), (dx, dy) in zip(anchors, sizes, offsets, strict=True)]


def test_labels_of_coinciding_points_do_not_overlap() -> None:
    anchors = [(100.0, 100.0)] * 4 + [(103.0, 101.0)]  # ::his and ::him, five times over
    sizes = [(24.0, 9.0)] * 5
    offsets = place(anchors, sizes)
    for a, b in combinations(_boxes(anchors, sizes, offsets), 2):
        assert a.overlap(b) == 0


def test_a_free_label_sits_beside_its_point_on_its_side() -> None:
    assert place([(0.0, 0.0)], [(20.0, 8.0)]) == [candidate_offsets(20.0, 8.0)[0]]
    (dx, dy), = place([(0.0, 0.0)], [(20.0, 8.0)], sides=[-1])
    assert dx < 0 and dy == 0


def test_labels_keep_off_the_markers() -> None:
    anchors, sizes = [(0.0, 0.0)], [(20.0, 8.0)]
    marker = Box(5.0, -4.0, 35.0, 4.0)  # a neighbour's marker where the label would go
    offsets = place(anchors, sizes, [marker])
    assert _boxes(anchors, sizes, offsets)[0].overlap(marker) == 0


def test_label_points_draws_non_overlapping_texts() -> None:
    figure = Figure(figsize=(4, 3), layout="constrained")
    axes = figure.subplots()
    points = [(0.0, 0.0), (0.001, 0.0), (0.0, 0.001), (1.0, 1.0)]
    axes.scatter(*zip(*points, strict=True))
    notes = label_points(axes, points, ["his", "him", "And", "the"], ["tab:blue"] * 4,
                         partners=[3, 3, 3, 0])
    figure.canvas.draw()  # annotations take their place when drawn
    renderer = figure.canvas.get_renderer()
    extents = [Text.get_window_extent(note, renderer) for note in notes]  # text, no leader
    assert [note.get_text() for note in notes] == ["his", "him", "And", "the"]
    for a, b in combinations(extents, 2):
        assert not a.overlaps(b)

"""Labels beside scatter points that neither overlap each other nor hide a point.

The PCA figure names 15 words and their Fake twins; frequent words often land within a few
pixels of each other (``his``/``him``, ``and``/``And``), and labels at a fixed offset then
print over each other. Each label takes the first free place in a ring of candidates around
its point, nearest first; one placed away from its point gets a thin leader line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Annotation

#: gap between a point and its label, and between stacked candidate rows (points)
GAP = 3.0
#: how many label heights a label may move up or down before it is put where it overlaps least
MAX_STEPS = 8
MARKER_SIZE = 6.0  # points: the side of the box a marker occupies
#: a faint white backing, so a line crossing a label does not strike its text through
BACKING = {"boxstyle": "square,pad=0.05", "facecolor": "white", "edgecolor": "none",
           "alpha": 0.75}


class Box(NamedTuple):
    """An axis-aligned box in points: left, bottom, right, top."""

    x0: float
    y0: float
    x1: float
    y1: float

    def overlap(self, other: Box) -> float:
        """The area both boxes cover (0 when they only touch)."""
        width = min(self.x1, other.x1) - max(self.x0, other.x0)
        height = min(self.y1, other.y1) - max(self.y0, other.y0)
        return width * height if width > 0 and height > 0 else 0.0


def candidate_offsets(width: float, height: float, side: int = 1) -> list[tuple[float, float]]:
    """Centre offsets (points) of a ``width`` × ``height`` label from its point, nearest first:
    beside it on ``side`` (1: right, -1: left), the other side, above, below, then rows further
    up and down on either side."""
    right, left = side * (width / 2 + GAP + 2), -side * (width / 2 + GAP + 2)
    above, below = height / 2 + GAP, -(height / 2 + GAP)
    offsets = [(right, 0.0), (left, 0.0), (0.0, above), (0.0, below),
               (right, above), (right, below), (left, above), (left, below)]
    for step in range(1, MAX_STEPS + 1):
        rise = step * (height + GAP / 2)
        offsets += [(right, rise), (right, -rise), (left, rise), (left, -rise)]
    return offsets


def place(anchors: Sequence[tuple[float, float]], sizes: Sequence[tuple[float, float]],
          obstacles: Sequence[Box] = (), sides: Sequence[int] | None = None
          ) -> list[tuple[float, float]]:
    """One centre offset per label (points, from its anchor) so that no two labels overlap
    and none covers an obstacle (the markers), where the candidates allow; otherwise the
    candidate that overlaps least. Labels are placed top to bottom, left to right, each
    first tried on its side (``sides``: 1 right, -1 left; right by default)."""
    order = sorted(range(len(anchors)), key=lambda i: (-anchors[i][1], anchors[i][0]))
    placed: list[Box] = []
    offsets: list[tuple[float, float]] = [(0.0, 0.0)] * len(anchors)
    for index in order:
        (x, y), (width, height) = anchors[index], sizes[index]
        best, best_cost = None, float("inf")
        side = sides[index] if sides is not None else 1
        for dx, dy in candidate_offsets(width, height, side):
            box = Box(x + dx - width / 2, y + dy - height / 2, x + dx + width / 2,
                      y + dy + height / 2)
            cost = sum(box.overlap(other) for other in (*placed, *obstacles))
            if cost < best_cost:
                best, best_cost = (dx, dy, box), cost
            if cost == 0:
                break
        assert best is not None  # the candidates are never empty
        offsets[index] = best[:2]
        placed.append(best[2])
    return offsets


def label_points(axes: Axes, points: Sequence[tuple[float, float]], texts: Sequence[str],
                 colours: Sequence[str], partners: Sequence[int] | None = None,
                 fontsize: float = 8) -> list[Annotation]:
    """Label each data point of ``axes`` without overlaps; a point joined by a line to
    another (``partners``: the index of each point's partner) is labelled away from the
    line first. Call it once everything else is drawn: it draws the figure to fix the
    layout and measure the texts, then freezes the layout (the labels stay out of it)."""
    figure = axes.get_figure()
    canvas = figure.canvas if isinstance(figure.canvas, FigureCanvasAgg) else FigureCanvasAgg(
        figure)
    canvas.draw()  # the layout engine places the axes: data -> display is final from here
    figure.set_layout_engine("none")
    renderer = canvas.get_renderer()
    to_points = 72 / figure.dpi
    anchors = [(x * to_points, y * to_points)
               for x, y in (axes.transData.transform(p) for p in points)]
    sizes = []
    for text in texts:
        probe = axes.text(0, 0, text, fontsize=fontsize)
        extent = probe.get_window_extent(renderer)
        sizes.append((extent.width * to_points, extent.height * to_points))
        probe.remove()
    half = MARKER_SIZE / 2
    markers = [Box(x - half, y - half, x + half, y + half) for x, y in anchors]
    sides = None if partners is None else [
        1 if anchors[i][0] >= anchors[partner][0] else -1 for i, partner in enumerate(partners)]
    annotations = []
    for point, text, colour, (dx, dy), (_, height) in zip(
            points, texts, colours, place(anchors, sizes, markers, sides), sizes, strict=True):
        moved = abs(dy) > height / 2 + GAP + 0.5  # beyond the first ring: show whose it is
        leader = {"arrowstyle": "-", "color": colour, "linewidth": 0.5, "alpha": 0.7,
                  "shrinkA": 0, "shrinkB": 3} if moved else None
        note = axes.annotate(text, point, xytext=(dx, dy), textcoords="offset points",
                             ha="center", va="center", fontsize=fontsize, color=colour,
                             arrowprops=leader, bbox=BACKING)
        note.set_in_layout(False)
        annotations.append(note)
    return annotations

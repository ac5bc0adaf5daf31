"""How well change points match human annotations, as the Turing change-point benchmark (TCPD,
van den Burg & Williams 2020, section 4) defines it: F1 with a margin, and segmentation covering.

Both compare one prediction with every annotator of a series. A change point is the 0-based
index of the first point of a new segment; 0 (the start of the series) counts as a change point
in every set, so a series nobody annotated is matched perfectly by a detector that reports none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

TCPD_MARGIN = 5
"""A prediction within 5 points of an annotation is a hit (TCPD's margin)."""


def true_positives(annotated: Iterable[int], predicted: Iterable[int],
                   margin: int = TCPD_MARGIN) -> set[int]:
    """The annotations matched by a prediction within ``margin`` points; each prediction
    matches at most one annotation (the closest, annotations taken in increasing order)."""
    free = set(predicted)
    matched = set()
    for location in sorted(set(annotated)):
        near = [(abs(location - p), p) for p in free if abs(location - p) <= margin]
        if near:
            free.remove(min(near)[1])
            matched.add(location)
    return matched


def f1_score(annotations: Mapping[str, Iterable[int]], predicted: Iterable[int],
             margin: int = TCPD_MARGIN) -> tuple[float, float, float]:
    """F1, precision and recall of ``predicted`` against every annotator.

    Precision counts the predictions that hit the union of all annotations; recall is each
    annotator's share of their own change points found, averaged over annotators (TCPD eq. 2-3).
    """
    marked = [set(locations) | {0} for locations in annotations.values()]
    guesses = set(predicted) | {0}
    precision = len(true_positives(set().union(*marked), guesses, margin)) / len(guesses)
    recall = sum(len(true_positives(m, guesses, margin)) / len(m) for m in marked) / len(marked)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return f1, precision, recall


def segments(changepoints: Iterable[int], points: int) -> list[tuple[int, int]]:
    """The half-open segments ``[start, stop)`` that change points cut ``range(points)`` into."""
    cuts = sorted({c for c in changepoints if 0 < c < points})
    return list(zip([0, *cuts], [*cuts, points], strict=True))


def cover(predicted: list[tuple[int, int]], truth: list[tuple[int, int]]) -> float:
    """Covering of the segmentation ``truth`` by ``predicted`` (Arbelaez et al. 2011, eq. 8):
    each true segment's best Jaccard overlap with a predicted one, weighted by its length."""
    total = 0.0
    for start, stop in truth:
        best = 0.0
        for p_start, p_stop in predicted:
            common = min(stop, p_stop) - max(start, p_start)
            if common > 0:
                best = max(best, common / (max(stop, p_stop) - min(start, p_start)))
        total += (stop - start) * best
    return total / truth[-1][1]


def covering(annotations: Mapping[str, Iterable[int]], predicted: Iterable[int],
             points: int) -> float:
    """Covering of each annotator's segmentation by the predicted one, averaged (TCPD eq. 1)."""
    mine = segments(predicted, points)
    scores = [cover(mine, segments(locations, points)) for locations in annotations.values()]
    return sum(scores) / len(scores)

"""F1 and covering as TCPD defines them, on the worked examples of its metrics' documentation."""

import pytest

from tracekit.detect.metrics import cover, covering, f1_score, segments, true_positives


def test_true_positives_count_each_prediction_once():
    assert true_positives({1, 10, 20, 23}, {3, 8, 20}) == {1, 10, 20}
    assert true_positives({1, 10, 20, 23}, {1, 3, 5, 8, 20}) == {1, 10, 20}
    assert true_positives(set(), {1, 2, 3}) == set()
    assert true_positives({1, 2, 3}, set()) == set()


def test_f1_against_several_annotators():
    assert f1_score({"1": [10, 20], "2": [11, 20], "3": [10], "4": [0, 5]}, [10, 20])[0] == 1.0
    assert f1_score({"1": [], "2": [10], "3": [50]}, [10])[0] == pytest.approx(10 / 11)
    assert f1_score({"1": [], "2": [10], "3": [50]}, [])[0] == pytest.approx(0.8)


def test_segments_ignore_the_start_and_points_beyond_the_end():
    assert segments([], 5) == [(0, 5)]
    assert segments([3, 5], 8) == [(0, 3), (3, 5), (5, 8)]
    assert segments([0, 4, 9], 6) == [(0, 4), (4, 6)]


def test_cover_of_one_segmentation_by_another():
    assert cover([(0, 3), (3, 5), (5, 6)], [(0, 3), (3, 6)]) == pytest.approx(5 / 6)
    assert cover([(0, 4), (4, 6)], [(0, 6)]) == pytest.approx(2 / 3)
    assert cover([(0, 6)], [(0, 1), (1, 2), (2, 3), (3, 6)]) == pytest.approx(1 / 3)


def test_covering_averages_over_annotators():
    assert covering({"1": [10, 20], "2": [10], "3": [0, 5]}, [10, 20], 45) == \
        pytest.approx(0.7962962962962963)
    assert covering({"1": [], "2": [10], "3": [40]}, [10], 45) == pytest.approx(0.7954144620811286)
    assert covering({"1": [], "2": [10], "3": [40]}, [], 45) == pytest.approx(0.8189300411522634)

"""The paired repeats behind a timing table's speed-up (repeat_times), and time_side_by_side's series."""

import pandas as pd
import pytest

from bab.core.timing import TIMES, repeat_times, time_side_by_side


def test_time_side_by_side_keeps_every_repeat():
    timings = time_side_by_side({"a": lambda: None, "b": lambda: sum(range(100))}, warmup=0, repeats=5)
    assert all(len(t.times_ms) == 5 and t.median_ms == sorted(t.times_ms)[2] for t in timings.values())


def test_repeat_times_pairs_the_baseline_with_a_config():
    table = pd.DataFrame({"ms": [2.0, 1.0]}, index=["dense", "fast"])
    table.attrs[TIMES] = {"dense": [2.0, 2.2, 1.9], "fast": [1.0, 1.1, 0.9]}
    assert repeat_times(table, "fast") == {"dense_ms": [2.0, 2.2, 1.9], "ms": [1.0, 1.1, 0.9]}
    assert repeat_times(table, "dense", baseline="fast") == {"dense_ms": [1.0, 1.1, 0.9], "ms": [2.0, 2.2, 1.9]}
    with pytest.raises(ValueError, match="no per-repeat times of 'slow'"):
        repeat_times(table, "slow")
    with pytest.raises(ValueError, match="keeps no per-repeat times"):
        repeat_times(pd.DataFrame({"ms": [1.0]}), "fast")


def test_side_by_side_timing_calls_back_after_every_round():
    from bab.core.timing import time_side_by_side

    rounds, calls = [], []
    timings = time_side_by_side({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, warmup=2,
                                repeats=3, on_round=rounds.append)
    assert rounds == [1, 2, 3, 4, 5]  # warm-up rounds counted too
    assert calls == ["a", "b"] * 5 and len(timings["a"].times_ms) == 3

"""The paired repeats behind a timing table's speed-up (repeat_times), and time_side_by_side's series."""

import pandas as pd
import pytest

from bab.core.timing import TIMES, Timing, repeat_times, speedup_columns, time_side_by_side


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


# ------------------------------------------------------------------------- repeats until an interval target


def test_repeats_refuse_what_cannot_be_timed():
    from bab.core.timing import Repeats

    for bad, message in [(dict(minimum=0), "repeats must be >= 1"),
                         (dict(minimum=5, maximum=20), "needs a target"),
                         (dict(minimum=5, target=2.0, maximum=20), r"in \(0, 1\)"),
                         (dict(minimum=1, target=0.05, maximum=20), "at least 2 repeats"),
                         (dict(minimum=5, target=0.05), "most repeats"),
                         (dict(minimum=5, target=0.05, maximum=4), "most repeats")]:
        with pytest.raises(ValueError, match=message):
            Repeats(**bad)
    assert Repeats.of(7) == Repeats(7) and Repeats.of(Repeats(3, 0.1, 9)) == Repeats(3, 0.1, 9)


def test_enough_repeats_stops_at_the_floor_when_the_ratio_is_exact():
    from bab.core.timing import Repeats, enough_repeats

    rule = Repeats(3, target=0.01, maximum=10)
    exact = {"dense": [10.0, 10.0], "fast": [5.0, 5.0]}
    assert not enough_repeats(exact, "dense", rule)  # below the floor, whatever the interval
    exact = {"dense": [10.0, 10.0, 10.0], "fast": [5.0, 5.0, 5.0]}  # every resample gives 2.0 exactly
    assert enough_repeats(exact, "dense", rule)
    assert enough_repeats(exact, "dense", Repeats(3)) and not enough_repeats(exact, "dense", Repeats(4))


def test_enough_repeats_goes_on_while_the_interval_is_wider_than_the_target():
    from bab.core.timing import Repeats, enough_repeats, relative_half_width

    # ratios 1.0 and 2.0 on alternate rounds: the bootstrap's medians of resampled pairs range over most of that
    noisy = {"dense": [10.0, 20.0, 10.0, 20.0], "fast": [10.0, 10.0, 10.0, 10.0]}
    width = relative_half_width(noisy["dense"], noisy["fast"])
    assert width > 0.1  # by hand: the median ratio is 1.5, resamples of all-10 dense give 1.0, of all-20 give 2.0
    assert not enough_repeats(noisy, "dense", Repeats(4, target=0.1, maximum=6))
    assert enough_repeats(noisy, "dense", Repeats(4, target=0.9, maximum=6))
    assert enough_repeats(noisy, "dense", Repeats(2, target=0.1, maximum=4))  # the ceiling ends it
    assert relative_half_width([10.0, 10.0, 10.0], [5.0, 5.0, 5.0]) == 0.0


class ScriptedClock:
    """A stand-in for time.perf_counter whose seconds pass only when a timed function says so: the stopping rule
    is then tested on known durations, whatever the machine's load does to real sleeps."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def spend(self, durations_ms: list[float]):
        remaining = iter(durations_ms * 10)

        def fn():
            self.now += next(remaining) / 1e3

        return fn


def test_time_side_by_side_times_until_the_target_or_the_ceiling(monkeypatch):
    from bab.core import timing
    from bab.core.timing import Repeats

    clock = ScriptedClock()
    monkeypatch.setattr(timing, "time", clock)
    # paired ratios 2.0, 2.2, 1.8, 2.0, 2.05, 1.95: known to within +-90% after 3 rounds, never to within 1e-9
    dense, half = [4.0, 4.4, 3.6, 4.2, 4.1, 3.9], [2.0, 2.0, 2.0, 2.1, 2.0, 2.0]

    def steady():
        return {"dense": clock.spend(dense), "half": clock.spend(half)}

    loose = time_side_by_side(steady(), warmup=0, repeats=Repeats(3, target=0.9, maximum=12))
    assert loose["dense"].times_ms == pytest.approx(dense[:3])
    assert loose["half"].times_ms == pytest.approx(half[:3])
    unreachable = time_side_by_side(steady(), warmup=0, repeats=Repeats(3, target=1e-9, maximum=6))
    assert [len(t.times_ms) for t in unreachable.values()] == [6, 6]
    assert unreachable["dense"].median_ms == pytest.approx(4.05)
    with pytest.raises(ValueError, match="baseline 'slow' is not among"):
        time_side_by_side(steady(), repeats=3, baseline="slow")


def test_repeats_describe_what_was_timed():
    from bab.core.timing import Repeats

    assert Repeats(20).describe(20) == "20 repeats"
    assert Repeats(5, 0.02, 60).describe([12, 7]) == "12 / 7 repeats (5 to 60, until each speed-up was within +-2%)"
    assert Repeats(5, 0.02, 60).rule() == "5 to 60 repeats, until each speed-up was within +-2%"


def test_speedup_columns_name_both_medians_and_the_paired_interval():
    # every repeat of the second variant took half the first's time: the speed-up is 2 in every resample
    timing = {"slow": Timing(12.0, [10.0, 12.0, 14.0]), "fast": Timing(6.0, [5.0, 6.0, 7.0])}
    assert speedup_columns(timing, "slow", "fast") == {
        "slow ms": 12.0, "fast ms": 6.0, "speed-up": 2.0, "speed-up low": 2.0, "speed-up high": 2.0, "repeats": 3}
    assert list(speedup_columns(timing, "slow", "fast", labels=("float32", "bfloat16")))[:2] == [
        "float32 ms", "bfloat16 ms"]

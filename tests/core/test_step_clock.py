"""The run-time estimate and the log-friendly progress lines of the training loop."""

import pytest

from bab.core import step_clock
from bab.core.step_clock import StepClock, about, clock


class FakeTime:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def fake_time(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(step_clock.time, "perf_counter", fake)
    return fake


def run(clock_, fake_time, steps, seconds_per_step, first_step_seconds=5.0):
    for step in steps:
        fake_time.now += first_step_seconds if step == clock_.start_step + 1 else seconds_per_step
        clock_.tick(step, loss=1.0 / step)


def test_the_estimate_leaves_out_the_first_step_and_times_the_next_ones(fake_time):
    lines = []
    c = StepClock("dense", total=100, progress=True, live=True, write=lines.append)
    run(c, fake_time, range(1, 101), seconds_per_step=0.75)
    # steps 2..4 took 0.75 s each; 100 steps at 0.75 s = 75 s (the slow first step does not count)
    assert c.seconds_per_step == pytest.approx(0.75)
    assert len(lines) == 1 and lines[0].startswith("dense: 100 steps, about 75 s on ")
    assert "(0.75 s a step, timed over steps 2-4)" in lines[0]


def test_short_steps_are_timed_until_two_seconds_have_passed(fake_time):
    lines = []
    c = StepClock("lm", total=1000, progress=True, live=True, write=lines.append)
    run(c, fake_time, range(1, 30), seconds_per_step=0.125)
    assert "timed over steps 2-17" in lines[0]  # 16 steps of 0.125 s reach the 2 s floor
    assert "1000 steps, about 2 min" in lines[0]


def test_without_a_live_bar_a_line_every_five_percent(fake_time):
    lines = []
    c = StepClock("hard", total=40, progress=True, live=False, write=lines.append)
    run(c, fake_time, range(1, 41), seconds_per_step=12.0)
    progress = [line for line in lines if "elapsed" in line]
    assert [line.split(" (")[0] for line in progress] == [f"hard: step {s}/40" for s in range(2, 41, 2)]
    assert progress[-1].startswith("hard: step 40/40 (100%), 7:53 elapsed, about 0:00 left, loss 0.025")
    assert not any("\r" in line for line in lines)


def test_fast_steps_print_at_most_a_line_each_ten_seconds_and_the_last_step(fake_time):
    lines = []
    c = StepClock("hard", total=200, progress=True, live=False, write=lines.append)
    run(c, fake_time, range(1, 201), seconds_per_step=0.125, first_step_seconds=0.125)
    progress = [line.split(" (")[0] for line in lines if "elapsed" in line]
    # 5% is 10 steps, 1.25 s: 10 s have passed at step 80, again at 160, and the last step always prints
    assert progress == ["hard: step 80/200", "hard: step 160/200", "hard: step 200/200"]


def test_a_resumed_run_estimates_what_is_left(fake_time):
    lines = []
    c = StepClock("dense", total=100, start_step=60, progress=True, live=True, write=lines.append)
    run(c, fake_time, range(61, 101), seconds_per_step=1.0)
    assert lines[0].startswith("dense: 40 steps left of 100, about 40 s")


def test_quiet_prints_nothing(fake_time):
    lines = []
    c = StepClock("dense", total=10, progress=False, live=False, write=lines.append)
    run(c, fake_time, range(1, 11), seconds_per_step=1.0)
    assert lines == [] and c.seconds_per_step == pytest.approx(1.0)


@pytest.mark.parametrize("seconds, said", [(0.2, "about 1 s"), (40, "about 40 s"), (540, "about 9 min"),
                                           (3 * 3600 + 600, "about 3.2 h")])
def test_durations_read_as_a_person_says_them(seconds, said):
    assert about(seconds) == said


def test_clock_format():
    assert clock(89) == "1:29" and clock(3600 + 61) == "1:01:01"


def test_a_fit_plan_estimates_every_stage_from_the_first_timed_one(fake_time):
    lines = []
    with step_clock.fit_plan("fit", [("dense", 100), ("budgeted", 50), ("hard_adapt", 50)], write=lines.append):
        c = StepClock("dense", total=100, progress=True, live=True, write=lines.append)
        run(c, fake_time, range(1, 101), seconds_per_step=1.0)  # the first step: 5 s, then 1 s a step
        later = StepClock("budgeted", total=50, progress=True, live=True, write=lines.append)
        run(later, fake_time, range(1, 51), seconds_per_step=1.0)
    plan_lines = [line for line in lines if line.startswith("fit:")]
    # at step 4 of dense: 8 s have passed, 196 steps of the plan are left at 1 s each
    assert plan_lines[0].startswith("fit: about 3 min in all on ")
    assert "(200 training steps in 3 stages at this stage's pace)" in plan_lines[0]
    assert plan_lines[1] == "fit: took 2:38 (estimated at about 3 min)"  # 104 s + 54 s
    assert len(plan_lines) == 2  # a later stage does not estimate the plan again


def test_a_plan_whose_first_stages_were_cached_counts_only_what_is_left(fake_time):
    lines = []
    with step_clock.fit_plan("fit", [("dense", 100), ("budgeted", 50)], write=lines.append) as plan:
        c = StepClock("budgeted", total=50, progress=False, live=True, write=lines.append)
        run(c, fake_time, range(1, 51), seconds_per_step=1.0)
    assert plan.estimate == pytest.approx(8.0 + 46.0)  # dense was cached: only budgeted's 50 steps count
    assert lines == ["fit: took 0:54 (estimated at about 54 s)"]


def test_a_plan_counts_its_other_passes_and_takes_in_an_inner_fit(fake_time):
    """A command's plan (its sweep's and timing's passes) takes in the stages and validation passes of the fit
    inside it, and estimates all of them: 600 examples forward at a sixth of a 1 s step of batch 4 = 25 s."""
    lines = []
    with step_clock.fit_plan("fit heads", [], write=lines.append, passes=400, batch_size=4) as plan:
        with step_clock.fit_plan("fit", [("dense", 100)], write=lines.append, passes=200, batch_size=4) as inner:
            assert inner is plan and plan.stages == [("dense", 100)] and plan.passes == 600
            c = StepClock("dense", total=100, progress=True, live=True, write=lines.append)
            run(c, fake_time, range(1, 101), seconds_per_step=1.0)
    assert plan.estimate == pytest.approx(8.0 + 96.0 + 25.0)
    assert "and about 0:25 for 600 examples of other passes" in [x for x in lines if x.startswith("fit heads:")][0]
    assert [x for x in lines if x.startswith("fit")][-1].startswith("fit heads: took ")
    assert not [x for x in lines if x.startswith("fit: took")]  # the inner fit reports through the outer plan


def test_a_clock_of_passes_says_passes(fake_time):
    lines = []
    c = StepClock("gate start (ablation)", total=73, progress=True, live=True, write=lines.append, unit="pass")
    run(c, fake_time, range(1, 10), seconds_per_step=1.0)
    assert lines[0].startswith("gate start (ablation): 73 passes, about ") and "timed over passes 2-4" in lines[0]

"""How long a training run will take, said early, and progress a log file can hold.

The training loop (``bab.core.training.run_training``) ticks a ``StepClock`` after every optimizer step. After
the first few steps it prints one estimate of the whole run, timed on those steps (the very first step is left
out: it pays for allocations and lazy initialisation):

    dense: 240 steps, about 3 min on 2 threads (0.74 s a step, timed over steps 2-4)

A fit of several stages (dense, then budgeted, then hard adaptation) runs inside a ``fit_plan``: the first stage
to time its steps also estimates the whole fit at its pace, and the plan says at the end how long it took:

    fit: about 8 min in all on 2 threads (340 training steps in 3 stages at this stage's pace, and about 2:40
    for 41,000 examples of other passes (ranking, validation, sweep, timing))
    fit: took 8:26 (estimated at about 8 min)

The other passes (the gate start's ranking of heads, validation, a command's sweep and timing) are counted in
examples run forward, each at about a sixth of a training step's time per example (``FORWARD_SHARE``).

Where no progress bar can redraw in place (stdout or stderr is a file), it also prints a plain line every 5% of
the run (at most one each 10 s, and the last step) instead of a bar's carriage returns:

    dense: step 120/240 (50%), 1:29 elapsed, about 1:29 left, loss 0.412
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import time
from dataclasses import dataclass

from tqdm.auto import tqdm

from bab.core.threads import describe_threads

WARMUP_STEPS = 1  # the first step is not timed
TIMED_STEPS = 3  # then the estimate is made over this many steps ...
MIN_TIMED_SECONDS = 2.0  # ... or more, until they took at least this long
LINE_EVERY = 0.05  # a progress line every 5% of the run, when no bar redraws in place ...
LINE_SECONDS = 10.0  # ... and at least this long after the previous one (a short run prints its last step only)


def about(seconds: float) -> str:
    """A duration as a person says it: "about 40 s", "about 9 min", "about 1.6 h"."""
    if seconds < 90:
        return f"about {max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"


def clock(seconds: float) -> str:
    """m:ss, or h:mm:ss from an hour."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


# A forward pass without gradients, per example, over a training step's time per example. Measured on a
# `fit heads` of MiniLM (length 128, 2 threads): ranking the heads took 1.55 s a pass of 128 examples, a training
# step 1.28 s for 16 examples, a ratio of 0.16. The textbook third (a backward costs twice a forward) leaves out
# the optimizer, dropout and the larger, no-grad evaluation batches, and overestimated that fit by half.
FORWARD_SHARE = 1 / 6


@dataclass
class FitPlan:
    """The training steps of a fit's stages, in order: (objective name, steps), and the examples its other passes
    run through the model (``passes``: gate-start ranking, validation, sweep, latency), forward only."""

    label: str
    stages: list[tuple[str, int]]
    started: float
    estimate: float | None = None  # seconds for the whole fit, once a stage has timed its steps
    passes: int = 0
    batch_size: int = 1  # of the training steps, to turn a step's time into a forward pass's per example

    def pass_seconds(self, seconds_per_step: float) -> float:
        """The other passes' seconds at a training step's pace: a forward pass without gradients costs about a
        sixth of a training step per example (``FORWARD_SHARE``)."""
        return self.passes * seconds_per_step * FORWARD_SHARE / max(1, self.batch_size)

    def steps_from(self, stage: str) -> tuple[int, int] | None:
        """(steps, stages) from ``stage`` to the end of the plan; None for a stage the plan does not name."""
        names = [name for name, _ in self.stages]
        if stage not in names:
            return None
        rest = self.stages[names.index(stage):]
        return sum(steps for _, steps in rest), len(rest)


_PLAN: contextvars.ContextVar[FitPlan | None] = contextvars.ContextVar("bab_fit_plan", default=None)


def steps_per_epoch(examples: int, batch_size: int) -> int:
    """Optimizer steps in one epoch of ``examples`` in global batches of ``batch_size`` (the last one short)."""
    return math.ceil(examples / batch_size)


@contextlib.contextmanager
def fit_plan(label: str, stages: list[tuple[str, int]], progress: bool = True, write=None, passes: int = 0,
             batch_size: int = 1):
    """Run a fit's stages inside: the first stage that times its steps estimates the whole fit, its other passes
    (``passes`` examples forward, e.g. validation) included (stages found in the run cache take no time and are
    left out), and the end says how long the fit took against that. Inside an active plan (a command that fits,
    then sweeps and times) the stages and passes join that plan, which reports once, for the whole."""
    outer = _PLAN.get()
    if outer is not None:
        outer.stages += [(name, int(steps)) for name, steps in stages]
        outer.passes += passes
        outer.batch_size = batch_size if outer.batch_size == 1 else outer.batch_size
        yield outer
        return
    plan = FitPlan(label, [(name, int(steps)) for name, steps in stages], time.perf_counter(), passes=passes,
                   batch_size=batch_size)
    token = _PLAN.set(plan)
    try:
        yield plan
    finally:
        _PLAN.reset(token)
    if progress:
        estimated = (f" (estimated at {about(plan.estimate)})" if plan.estimate is not None
                     else " (every stage cached)")
        (write or tqdm.write)(f"{label}: took {clock(time.perf_counter() - plan.started)}{estimated}")


class StepClock:
    """Times the steps of one run (``total`` steps, starting at ``start_step`` when resumed).

    ``progress``: print at all; ``live``: a bar redraws in place (then only the estimate is printed, above
    the bar). ``write``: where lines go (default ``tqdm.write``, which keeps a live bar intact)."""

    def __init__(self, label: str, total: int, start_step: int = 0, progress: bool = True, live: bool = True,
                 write=None, unit: str = "step"):
        self.label, self.total, self.start_step, self.unit = label, total, start_step, unit
        self.progress, self.live = progress, live
        self.write = write or tqdm.write
        self.started = self.last_line = time.perf_counter()
        self.timing_from: tuple[int, float] | None = None  # (step, time) where the timed steps begin
        self.seconds_per_step: float | None = None
        every = max(1, round(total * LINE_EVERY))
        self.next_line = (start_step // every + 1) * every
        self.every = every

    def tick(self, step: int, loss: float | None = None) -> None:
        """Step ``step`` (counted from 1 over the whole run) has finished."""
        now = time.perf_counter()
        done_here = step - self.start_step
        if done_here == WARMUP_STEPS:
            self.timing_from = (step, now)
        elif self.seconds_per_step is None and self.timing_from is not None:
            first_step, first_time = self.timing_from
            timed, seconds = step - first_step, now - first_time
            if timed >= TIMED_STEPS and seconds >= MIN_TIMED_SECONDS or step == self.total:
                self.seconds_per_step = seconds / timed
                if self.progress:
                    self.write(self.estimate_line(first_step + 1, step))
                self.estimate_plan(step, now)
        if self.progress and not self.live and step >= self.next_line and (
                now - self.last_line >= LINE_SECONDS or step == self.total):
            self.write(self.progress_line(step, now, loss))
            self.last_line = now
            while self.next_line <= step:
                self.next_line += self.every

    def estimate_plan(self, step: int, now: float) -> None:
        """The first stage of a ``fit_plan`` to time its steps estimates the whole fit at its own pace."""
        plan = _PLAN.get()
        if plan is None or plan.estimate is not None:
            return
        left = plan.steps_from(self.label)
        if left is None:
            return
        steps, stages = left
        steps_left = steps - step  # the steps of this stage done so far are behind us
        others = plan.pass_seconds(self.seconds_per_step)
        plan.estimate = (now - plan.started) + steps_left * self.seconds_per_step + others
        if self.progress:
            passes = (f", and about {clock(others)} for {plan.passes:,} examples of other passes (ranking, "
                      f"validation, sweep, timing)") if plan.passes else ""
            self.write(f"{plan.label}: {about(plan.estimate)} in all on {describe_threads()} "
                       f"({steps} training steps in {stages} stage{'s' if stages != 1 else ''} at this stage's "
                       f"pace{passes})")

    def remaining_seconds(self, step: int) -> float | None:
        if self.seconds_per_step is None:
            return None
        return (self.total - step) * self.seconds_per_step

    def estimate_line(self, first: int, last: int) -> str:
        left = self.total - self.start_step
        resumed = f" left of {self.total}" if self.start_step else ""
        unit = self.unit
        units = unit + ("es" if unit.endswith("s") else "s")
        article = "an" if unit[0] in "aeiou" else "a"
        timed = f"{unit} {first}" if first == last else f"{units} {first}-{last}"
        return (f"{self.label}: {left} {units}{resumed}, {about(left * self.seconds_per_step)} on "
                f"{describe_threads()} ({self.seconds_per_step:.3g} s {article} {unit}, timed over {timed})")

    def progress_line(self, step: int, now: float, loss: float | None) -> str:
        line = (f"{self.label}: {self.unit} {step}/{self.total} ({100 * step / self.total:.0f}%), "
                f"{clock(now - self.started)} elapsed")
        remaining = self.remaining_seconds(step)
        if remaining is not None:
            line += f", about {clock(remaining)} left"
        if loss is not None:
            line += f", loss {loss:.3f}"
        return line

"""The zero-shot claim computed from hand-built points (bab.experiments.pretrained_context)."""

import pytest

from bab.experiments.pretrained_context import claim_verdict, zero_shot_held

DENSE = {"cloze": {"ci_low": 40.0, "ci_high": 60.0}, "topic": {"ci_low": 30.0, "ci_high": 50.0}}


def point(weights, gamma, task, accuracy, pruned):
    return {"weights": weights, "gamma": gamma, "task": task, "accuracy": accuracy, "fraction_pruned": pruned}


POINTS = [point("fine-tuned", 1, "cloze", 41, 0.5), point("fine-tuned", 1, "topic", 45, 0.5),
          point("fine-tuned", 3, "cloze", 39, 0.7), point("fine-tuned", 3, "topic", 45, 0.7),  # cloze just outside
          point("fine-tuned", 10, "cloze", 40, 0.85), point("fine-tuned", 10, "topic", 50, 0.85),  # on the bounds
          point("frozen", 1, "cloze", 20, 0.3), point("frozen", 1, "topic", 20, 0.3)]


def test_held_marks_each_model_and_names_the_tasks_outside():
    held = {(h["weights"], h["gamma"]): h for h in zero_shot_held(POINTS, DENSE)}
    assert held["fine-tuned", 1]["held"] and held["fine-tuned", 10]["held"]  # the interval's ends count as inside
    assert not held["fine-tuned", 3]["held"] and held["fine-tuned", 3]["outside"] == {"cloze": 39}
    assert held["frozen", 1]["outside"] == {"cloze": 20, "topic": 20}


def test_verdict_takes_the_largest_fraction_that_holds_and_the_smallest_that_breaks():
    held = zero_shot_held(POINTS, DENSE)
    v = claim_verdict(held, "fine-tuned", target=0.8)
    assert (v["held_at"], v["gamma"], v["breaks_at"], v["breaks_on"]) == (0.85, 10, 0.7, {"cloze": 39})
    assert v["target_holds"]
    assert not claim_verdict(held, "fine-tuned", target=0.95)["target_holds"]
    frozen = claim_verdict(held, "frozen")
    assert frozen["held_at"] is None and frozen["breaks_at"] == 0.3 and not frozen["target_holds"]


def test_unknown_weights_or_task_is_refused():
    with pytest.raises(ValueError, match="no zero-shot rows for weights 'pretrained'"):
        claim_verdict(zero_shot_held(POINTS, DENSE), "pretrained")
    with pytest.raises(ValueError, match="no dense accuracy"):
        zero_shot_held([point("frozen", 1, "ending", 50, 0.2)], DENSE)

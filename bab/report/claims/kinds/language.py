"""Kinds of claim on a language model's quality: perplexity held against a dense reference (``PerplexityHeld``),
zero-shot accuracy held (``ZeroShotHeld``), perplexity that never falls as pruning rises (``Monotone``) and learned
pruning below static masks' perplexity (``BeatsStatic``); the last two judge each step by ``_perplexity_part``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from bab.experiments.methods import Method
from bab.report.claims.evidence import Evidence, _exact
from bab.report.claims.kinds.base import Claim
from bab.report.claims.verdicts import (
    EPSILON,
    Region,
    Row,
    Verdict,
    _from_parts,
    _not_run,
    _value,
    dense_of,
    judged,
    rows_of,
)


@dataclass(frozen=True)
class PerplexityHeld(Claim):
    """Perplexity at the row over its dense reference's, against ``region``. ``references``: the dense rows to
    divide by, the first one present taken (a dense fine-tune of the same protocol before the untouched pretrained
    model: a fine-tune also adapts to the training text, which would read as a gain from pruning); by default the
    experiment's dense row."""

    row: Row = None
    region: Region = None
    references: tuple[Row, ...] = ()

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        references = self.references or (dense_of(self.row.method),)
        found = self.row.find(rows)
        reference = next((r for r in references if _value(r.find(rows), "perplexity") is not None), references[-1])
        dense = reference.find(rows)
        if _value(found, "perplexity") is None or _value(dense, "perplexity") is None:
            return _not_run(*[r for r, f in ((self.row, found), (reference, dense))
                              if _value(f, "perplexity") is None])
        ratio = _value(found, "perplexity") / _value(dense, "perplexity")
        kept = _value(found, "cost")
        at = "" if kept is None else f" with {1 - kept:.0%} of the context pruned"
        evidence = evidence or Evidence()
        interval = evidence.perplexity_ratio(found, dense) or _exact(ratio, evidence.no_interval(
            [found, dense], "window_nll", "per-window log-likelihoods"))
        return judged(self.region, interval, None, f"perplexity {ratio:.3f}x {reference.label()}{at}", ".3f")


@dataclass(frozen=True)
class ZeroShotHeld(Claim):
    """Zero-shot accuracy is held at ``target`` of the context pruned: for a fine-tuned pruned model within
    ``target`` +- ``window`` pruned, every task's accuracy minus the dense reference's (the dense fine-tune of the
    same protocol where there is one, else the untouched model) lies in ``region``. A claim with parts, one per
    task. When no fine-tuned model lands in the window: judged on the nearest one with ``nearest_otherwise`` (said
    so), else "not run" (what would decide it: a gamma or a budget-conditioned model that does). Every other pruned
    model's differences are listed beside the verdict."""

    method: Method = None
    target: float = 0.8
    window: float = 0.03
    region: Region = None
    weights: str = "fine-tuned"
    references: tuple[str, ...] = ("dense fine-tuned", "pretrained")
    pruned: Method | None = None  # the pruned models' rows when not ``method``'s gamma rows: told apart by budget
    # judge the model nearest ``target`` when none lands inside the window (said so in the line), never "not run"
    # while pruned models exist
    nearest_otherwise: bool = False

    def _candidates(self, rows) -> dict[str, list[dict]]:
        """{model label: its task rows} of the pruned models judged."""
        found = {}
        for row in rows:
            if row.get("accuracy") is None or row.get("experiment") != self.method.experiment:
                continue
            if self.pruned is not None and row.get("method") == self.pruned.name:
                found.setdefault(f"b={row['budget']:g}", []).append(row)
            elif (self.pruned is None and row.get("method") == self.method.name and row["settings"]["gamma"] != 0
                  and row["settings"]["weights"] == self.weights):
                found.setdefault(f"gamma={row['settings']['gamma']:g}", []).append(row)
        return found

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        by_weights = {}
        for row in rows_of(self.method, rows, "accuracy"):
            if row["settings"]["gamma"] == 0:
                by_weights.setdefault(row["settings"]["weights"], {})[row["settings"]["task"]] = row
        reference_weights = next((w for w in self.references if w in by_weights), None)
        candidates = self._candidates(rows)
        what = self.weights if self.pruned is None else self.pruned.name
        if reference_weights is None or not candidates:
            return _not_run(Row(self.pruned, None, (("task", "any"),)) if self.pruned is not None else
                            Row(self.method, None, (("task", "any"), ("weights", self.weights), ("gamma", "any"))))
        pruned_at = {label: 1 - float(models[0]["cost"]) for label, models in candidates.items()}
        inside = {label: f for label, f in pruned_at.items() if abs(f - self.target) <= self.window + EPSILON}
        if not inside and not self.nearest_otherwise:
            return Verdict("not run", None, self.target,
                           f"no {what} model lands at {self.target:.0%} +- {self.window * 100:.0f} points pruned "
                           f"(those run: {', '.join(f'{f:.0%}' for f in sorted(pruned_at.values()))}); a gamma or a "
                           f"budget-conditioned model that lands there would decide it")
        pool = inside or pruned_at
        label = min(pool, key=lambda name: abs(pool[name] - self.target))
        reference = by_weights[reference_weights]
        judged_models = {name: self._tasks(models, reference, reference_weights, evidence)
                         for name, models in candidates.items()}
        parts = judged_models[label]
        if not parts:
            return _not_run(Row(self.method, None, (("task", "any"), ("weights", reference_weights), ("gamma", 0))))
        where = (f"{label}, {pruned_at[label]:.0%} pruned: " if inside else
                 f"no model lands at {self.target:.0%} +- {self.window * 100:.0f} points pruned; judged on the "
                 f"nearest, {label}, {pruned_at[label]:.0%} pruned: ")
        verdict = _from_parts(parts, parts[0][1].region, where)
        others = [f"{name} ({pruned_at[name]:.0%} pruned): " + ", ".join(f"{task} {v.ours:+.1f}" for task, v in found)
                  for name, found in sorted(judged_models.items(), key=lambda item: pruned_at[item[0]])
                  if name != label and found]
        return replace(verdict, why=verdict.why + ("; every other model, points against the dense reference: "
                                                   + "; ".join(others) if others else ""),
                       seeds=min(len(row.get("seeds") or [0]) for row in candidates[label]))

    def _tasks(self, models, reference, reference_weights, evidence):
        """(task, Verdict) of one pruned model's task rows against the dense reference's."""
        parts, evidence = [], evidence or Evidence()
        for row in sorted(models, key=lambda r: r["settings"]["task"]):
            task = row["settings"]["task"]
            if task not in reference:
                continue
            dense = reference[task]
            interval = evidence.row_difference(row, dense) or _exact(
                float(row["accuracy"]) - float(dense["accuracy"]),
                evidence.no_interval([row, dense], "correct", "the per-item outcomes"))
            parts.append((task, judged(self.region, interval, None, f"{task} {interval.text()} points against the "
                                       f"{reference_weights} model")))
        return parts


@dataclass(frozen=True)
class Monotone(Claim):
    """As the method prunes more, its perplexity never falls: over ``method``'s rows (settings told apart by
    ``setting``, e.g. the gamma of each specialist), sorted by fraction kept, each step to the next row that prunes
    more is a part, judged by its perplexity ratio (more pruned / less pruned) on the same held-out windows,
    bootstrapped over the windows where both rows kept them (a point estimate where not). The parts are listed
    lowest ratio first, so the claim's number is the step nearest to falling."""

    method: Method = None

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        evidence = evidence or Evidence()
        mine = sorted(rows_of(self.method, rows, "cost", "perplexity"), key=lambda r: -float(r["cost"]))
        if len(mine) < 3:
            return _not_run(Row(self.method, None, (("gamma", "any"),)))
        region = Region(low=1.0, reason="'perplexity rises smoothly with sparsity': a step to more pruning does not "
                                        "lower perplexity")
        parts = []
        for before, after in sorted(zip(mine, mine[1:], strict=False),
                                    key=lambda p: float(p[1]["perplexity"]) / float(p[0]["perplexity"])):
            line = f"perplexity {float(before['perplexity']):.2f} to {float(after['perplexity']):.2f}"
            parts.append((f"{1 - float(before['cost']):.0%} to {1 - float(after['cost']):.0%} pruned",
                          _perplexity_part(region, after, before, evidence, line)))
        held = sum(v.status == "reproduced" for _, v in parts)
        return _from_parts(parts, region=f"every step: perplexity ratio {region.text('.3f')}",
                           prefix=f"{held} of {len(parts)} steps to more pruning do not lower perplexity, the "
                                  f"lowest ratio first: ")


def _perplexity_part(region: Region, row: dict, reference: dict, evidence: Evidence, line: str) -> Verdict:
    """``row``'s perplexity over ``reference``'s against ``region``: bootstrapped over the held-out windows both rows
    kept, a point estimate where they did not."""
    ratio = float(row["perplexity"]) / float(reference["perplexity"])
    interval = evidence.perplexity_ratio(row, reference) or _exact(
        ratio, evidence.no_interval([row, reference], "window_nll", "per-window log-likelihoods"))
    return judged(region, interval, None, f"{line}, ratio {ratio:.3f}", ".3f")


@dataclass(frozen=True)
class BeatsStatic(Claim):
    """Learned pruning beats static masks at equal sparsity: for each gamma, the learned specialist's perplexity is
    below that of every static mask kind built to prune as much (``static``'s rows, settings ``kind`` and
    ``gamma``). A claim with parts, one per (kind, gamma), each judged by the perplexity ratio learned / static on
    the same held-out windows, bootstrapped over the windows where both rows kept them (a point estimate where
    not). The parts are listed closest first, so the claim's number is the part nearest to failing."""

    method: Method = None
    static: Method = None

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        evidence = evidence or Evidence()
        learned = {r["settings"]["gamma"]: r for r in rows_of(self.method, rows, "perplexity")}
        pairs = [(r, learned[r["settings"]["gamma"]]) for r in rows_of(self.static, rows, "perplexity")
                 if r["settings"]["gamma"] in learned]
        if not pairs:
            return _not_run(Row(self.static, None, (("kind", "any"), ("gamma", "any"))))
        region = Region(high=1.0, strict=True,
                        reason="'learned pruning beats static masks': the sign, learned perplexity below the mask's")
        parts = []
        for static, mine in sorted(pairs, key=lambda p: -float(p[1]["perplexity"]) / float(p[0]["perplexity"])):
            kind, gamma = static["settings"]["kind"], static["settings"]["gamma"]
            line = f"perplexity {float(mine['perplexity']):.2f} vs {float(static['perplexity']):.2f}"
            parts.append((f"{kind} at gamma={gamma:g}", _perplexity_part(region, mine, static, evidence, line)))
        held = sum(v.status == "reproduced" for _, v in parts)
        return _from_parts(parts, region=f"every part: learned / static perplexity {region.text('.3f')}",
                           prefix=f"{held} of {len(parts)} (mask kind, gamma) parts hold, the closest first: ")

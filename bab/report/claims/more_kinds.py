"""The other kinds of claim: statistics, counts, orders, zero-shot accuracy, beating static baselines."""

from __future__ import annotations

from dataclasses import dataclass, replace

from bab.core import statistics
from bab.core.statistics import Interval
from bab.experiments.methods import Method
from bab.report.claims.evidence import Evidence, _exact
from bab.report.claims.kinds import Claim, margin
from bab.report.claims.verdicts import (
    EPSILON,
    Region,
    Row,
    Verdict,
    _from_parts,
    _not_run,
    _same_budget,
    _value,
    judged,
    rows_of,
)


@dataclass(frozen=True)
class Statistic(Claim):
    """A method's one number (its ``value``), ours against the paper's, against ``region``. ``not_comparable``:
    why our number cannot test the claim; ``not_informative``: why its outcome cannot tell anything about the method
    (e.g. arithmetic on the architecture, which any correct count reproduces)."""

    row: Row = None
    region: Region | None = None
    not_comparable: str = ""
    not_informative: str = ""
    beside: tuple[Row, ...] = ()  # rows of ours shown in the verdict's line, not judged

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        ours = _value(self.row.find(rows), "value")
        if ours is None:
            return _not_run(self.row)
        theirs = self.row.paper()["value"]
        shown = [f"{r.label()}: {_value(r.find(rows), 'value'):.3g}" for r in self.beside
                 if _value(r.find(rows), "value") is not None]
        line = f"{ours:.3g} vs the paper's {theirs:.3g}" + (f" ({'; '.join(shown)})" if shown else "")
        for status, reason in (("not comparable", self.not_comparable), ("not informative", self.not_informative)):
            if reason:
                return Verdict(status, ours, theirs, f"{line}: {reason}")
        return judged(self.region, _exact(ours, "exact: counted, not sampled"), theirs, line, ".3g")


@dataclass(frozen=True)
class BeatsOverSeeds(Claim):
    """``better``'s accuracy minus the mean of ``worse``'s per-seed models (a per-seed method: rows told apart by a
    ``seed`` setting, at ``better``'s budget), against ``region``. Both sides are trained at several seeds and not
    paired seed by seed, so the interval resamples each side's seeds (``statistics.group_difference``)."""

    better: Row = None
    worse: Method = None
    region: Region = None

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        evidence = evidence or Evidence()
        found = self.better.find(rows)
        worse = [row for row in rows_of(self.worse, rows, "accuracy")
                 if _same_budget(row.get("budget"), self.better.budget)]
        if _value(found, "accuracy") is None or not worse:
            return _not_run(*([self.better] if _value(found, "accuracy") is None else []),
                            *([] if worse else [Row(self.worse, self.better.budget, (("seed", "any"),))]))
        by_seed = evidence.per_seed([self.better])
        better = [matched[0] for matched in by_seed.values()] if by_seed else [found]
        sizes = [evidence.examples(row) for row in better + worse]
        if None in sizes:
            return _not_run(self.better)
        n = min(sizes)

        def error(row):
            p = float(row["accuracy"]) / 100
            return 100 * (max(p * (1 - p), 0.25 / n) / n) ** 0.5

        interval = statistics.group_difference([float(r["accuracy"]) for r in better], [error(r) for r in better],
                                               [float(r["accuracy"]) for r in worse], [error(r) for r in worse], n)
        scratch = ", ".join(f"seed {r['settings']['seed']}: {float(r['accuracy']):.1f}" for r in worse)
        return judged(self.region, interval, None, f"{self.better.label()} minus the mean of {self.worse.name} "
                      f"({scratch}): {interval.text()} points")


@dataclass(frozen=True)
class FollowsSetting(Claim):
    """``method``'s rows sorted by their setting ``by`` (e.g. gamma, or "budget"): each step to the next larger one
    moves ``column`` as ``region`` asks of the difference next - previous (e.g. the fraction kept falls: < 0). A
    part per step, each judged over the training seeds where the notebook ran several (each seed's own difference,
    seeds resampled), exact for one model; the parts are listed closest to failing first."""

    method: Method = None
    by: str = "gamma"
    column: str = "cost"
    region: Region = None

    def _setting(self, row: dict) -> float:
        return float(row["budget"] if self.by == "budget" else row["settings"][self.by])

    def _steps(self, rows) -> list[tuple[dict, dict]]:
        mine = sorted(rows_of(self.method, rows, self.column), key=self._setting)
        return list(zip(mine, mine[1:], strict=False))

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        evidence = evidence or Evidence()
        steps = self._steps(rows)
        if len(steps) < 2:
            return _not_run(Row(self.method, None, ((self.by, "any"),)))
        per_seed = [self._steps(seed_rows) for runs in evidence.seed_rows.values() for seed_rows in runs.values()]
        per_seed = [s for s in per_seed if len(s) == len(steps)]
        parts = []
        for i, (before, after) in enumerate(steps):
            value = float(after[self.column]) - float(before[self.column])
            if len(per_seed) > 1:
                differences = [float(s[i][1][self.column]) - float(s[i][0][self.column]) for s in per_seed]
                interval = replace(statistics.seed_differences(differences, [0.0] * len(differences), 0),
                                   covers=f"{len(differences)} seeds; the {self.column} is counted, not sampled")
            else:
                interval = _exact(value, f"1 training seed; the {self.column} is counted, not sampled (exact)")
            line = (f"{self.column} {float(before[self.column]):.3f} to {float(after[self.column]):.3f}")
            parts.append((f"{self.by} {self._setting(before):g} to {self._setting(after):g}",
                          judged(self.region, interval, None, line, "+.3f")))
        parts.sort(key=lambda part: -part[1].ours if self.region.high is not None else part[1].ours)
        held = sum(v.status == "reproduced" for _, v in parts)
        verdict = _from_parts(parts, region=f"every step: {self.column} difference {self.region.text('+.3f')}",
                              prefix=f"{held} of {len(parts)} steps to a larger {self.by} move the {self.column} as "
                                     f"claimed, the closest first: ")
        # the claim is about every step: one step the other way is enough to fail it
        return replace(verdict, status="not reproduced") if verdict.status == "partly" else verdict


@dataclass(frozen=True)
class KindsFirst(Claim):
    """``first`` kinds of tokens lose a larger share of their pairs than ``other`` on every held-out text of
    ``method``'s rows (settings ``kind``, ``text``). A claim with parts, one per (text, kind), each judged by the
    difference in share pruned (points) on the same windows, bootstrapped over the windows where the rows kept each
    window's counts (a point estimate where not); the parts are listed smallest difference first."""

    method: Method = None
    first: tuple[str, ...] = ("punctuation", "stop word")
    other: str = "other"

    def _difference(self, row: dict, other: dict, evidence: Evidence):
        matched = evidence.matched_outcomes([row, other], "window_pruned")
        pairs = evidence.matched_outcomes([row, other], "window_pairs")
        if matched is None or pairs is None or matched[0].shape[-1] < 2 or not evidence.same_seeds(
                [row, other], matched):
            return _exact(float(row["value"]) - float(other["value"]),
                          evidence.no_interval([row, other], "window_pruned", "per-window counts"))
        return statistics.share_difference(matched[0], pairs[0], matched[1], pairs[1])

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        evidence = evidence or Evidence()
        found = {(row["settings"]["text"], row["settings"]["kind"]): row
                 for row in rows_of(self.method, rows, "value")}
        texts = sorted({text for text, _ in found})
        if not texts:
            return _not_run(Row(self.method, None, (("kind", "any"), ("text", "any"))))
        tests = [(text, kind) for text in texts for kind in self.first]
        missing = [(text, kind) for text, kind in tests + [(t, self.other) for t in texts] if (text, kind) not in found]
        if missing:
            return _not_run(*[Row(self.method, None, (("kind", kind), ("text", text))) for text, kind in missing])
        region = Region(low=0.0, strict=True, reason=f"'dropped first': a larger share of the kind's pairs pruned than "
                                                     f"of {self.other} tokens'")
        parts = []
        for text, kind in tests:
            mine, other = found[text, kind], found[text, self.other]
            parts.append((f"{text}: {kind}", judged(region, self._difference(mine, other, evidence), None,
                                                    f"{float(mine['value']):.1f}% vs {self.other} "
                                                    f"{float(other['value']):.1f}% pruned", "+.2f")))
        parts.sort(key=lambda part: part[1].ours)
        held = sum(v.status == "reproduced" for _, v in parts)
        return _from_parts(parts, region=f"every part: kind minus {self.other}, points {region.text()}",
                           prefix=f"{held} of {len(parts)} (text, kind) parts pruned more than {self.other} tokens, "
                                  f"the smallest difference first: ")

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
                                                   + "; ".join(others) if others else ""))

    def _tasks(self, models, reference, reference_weights, evidence):
        """(task, Verdict) of one pruned model's task rows against the dense reference's."""
        parts = []
        for row in sorted(models, key=lambda r: r["settings"]["task"]):
            task = row["settings"]["task"]
            if task not in reference:
                continue
            dense = reference[task]
            interval = (evidence or Evidence()).paired((("row", 1), ("dense", -1)), [row, dense]) or \
                statistics.unpaired_difference(float(row["accuracy"]), int(row["accuracy_n"]),
                                               float(dense["accuracy"]), int(dense["accuracy_n"]))
            parts.append((task, judged(self.region, interval, None, f"{task} {interval.text()} points against the "
                                       f"{reference_weights} model")))
        return parts


@dataclass(frozen=True)
class NotYet(Claim):
    """A claim no row of this package measures; ``reason`` says what is missing."""

    reason: str = ""

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        return Verdict("not run", None, None, self.reason)


@dataclass(frozen=True)
class Dominates(Claim):
    """A frontier dominates a baseline's points: for each of ``points`` (e.g. EViT at two token keep rates), the most
    accurate row of ``frontier`` (e.g. Sparsifiner's keep-rate sweep) at no more cost, minus the point's accuracy,
    lies in ``region``. A claim with parts, one per point, each judged by its interval."""

    frontier: Method = None
    points: tuple[Row, ...] = ()
    region: Region = None

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        curve = [r for r in rows_of(self.frontier, rows, "accuracy", "cost") if not r.get("settings")]
        missing = [p for p in self.points if _value(p.find(rows), "accuracy") is None]
        if missing or not curve:
            return _not_run(*missing, *([] if curve else [Row(self.frontier, None)]))
        parts = []
        for point in self.points:
            found = point.find(rows)
            cheaper = [r for r in curve if float(r["cost"]) <= float(found["cost"]) + EPSILON]
            if not cheaper:
                parts.append((point.label(), Verdict("not reproduced", None, None, f"no {self.frontier.name} row "
                                                     f"costs at most {point.label()}'s {found['cost']:.3f}")))
                continue
            best = max(cheaper, key=lambda r: float(r["accuracy"]))
            part = margin(self.id, self.paper, "", "", better=Row(self.frontier, best["budget"]), worse=point,
                          region=self.region)
            parts.append((f"{point.label()} vs {self.frontier.name} @{best['budget']:g}", part.judge(rows, evidence)))
        return _from_parts(parts, self.region.text())


@dataclass(frozen=True)
class Counted(Claim):
    """sum(coefficient x column) over ``terms`` ((Row, coefficient) pairs), a number counted rather than sampled
    (MHSA FLOPs, MACs removed, soft costs), against ``region``: exact for one model; where the notebook ran at
    several seeds, each seed's models count their own and the interval carries the seeds' spread."""

    terms: tuple = ()
    column: str = "cost"
    region: Region = None
    not_informative: str = ""

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        found = [_value(p.find(rows), self.column) for p, _ in self.terms]
        if None in found:
            return _not_run(*[p for (p, _), v in zip(self.terms, found, strict=True) if v is None])
        ours = sum(c * v for (_, c), v in zip(self.terms, found, strict=True))
        try:
            theirs = sum(c * float(p.paper()[self.column]) for p, c in self.terms)
        except (KeyError, TypeError):
            theirs = None
        shown = ", ".join(f"{p.label()}: {v:.3f}" for (p, _), v in zip(self.terms, found, strict=True))
        by_seed = (evidence or Evidence()).per_seed([p for p, _ in self.terms], self.column)
        if by_seed:  # each seed's model counts its own number: the interval carries the seeds' spread
            values = [sum(c * float(m[self.column]) for (_, c), m in zip(self.terms, matched, strict=True))
                      for matched in by_seed.values()]
            spread = statistics.seed_differences(values, [0.0] * len(values), 0)
            interval = Interval(ours, min(spread.low, ours), max(spread.high, ours),
                                f"{len(values)} seeds; each counted, not sampled")
        else:
            interval = _exact(ours, "exact: counted, not sampled")
        verdict = judged(self.region, interval, theirs, f"{shown}" + ("" if theirs is None else f" (paper "
                                                                                               f"{theirs:.3f})"), ".3f")
        if self.not_informative:
            return replace(verdict, status="not informative", why=f"{verdict.why}; {self.not_informative}")
        return verdict


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

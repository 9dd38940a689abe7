"""Notebook 05's analyses: choosing the predictor preset on validation, whether the 50-token gaps carry over to 197
tokens, and the two recipe ablations (what closes the gap to dense; head gates that commit)."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from bab.experiments.pipelines.vit import ViTStudy
from bab.experiments.pipelines.vit_profile import PREDICTOR_PRESETS, PresetChoice, ViTProfile, paper_text_connectivity
from bab.heads.evaluate import evaluate as evaluate_heads
from bab.sparsifiner.evaluate import evaluate_vit
from bab.sparsifiner.recipe import RECIPE


def pick_preset(table: pd.DataFrame) -> tuple[str, str]:
    """(the preset, why) from ``preset_validation``'s table: the highest mean "vs dense" over the keep rates; a tie
    keeps the earlier row (the profile's own predictor comes first)."""
    if table.empty:
        raise ValueError("pick_preset needs at least one preset's validation row")
    means = table["mean vs dense"]
    chosen = str(means.idxmax())  # the first of equal maxima
    others = [name for name in table.index if name != chosen]
    if not others:
        return chosen, f"{chosen!r} is the only preset"
    runner_up = max(others, key=lambda name: means[name])
    rates = ", ".join(column.removeprefix("vs dense @") for column in table.columns if column.startswith("vs dense @"))
    said = (f"mean validation accuracy against dense over keep rates {rates}: {chosen!r} {means[chosen]:+.2f}, "
            f"{runner_up!r} {means[runner_up]:+.2f} points")
    margin = means[chosen] - means[runner_up]
    if margin == 0:
        return chosen, f"{said}; a tie keeps the earlier preset, {chosen!r}"
    return chosen, f"{said}; {chosen!r} is higher by {margin:.2f}"


def preset_validation(studies: dict[str, ViTStudy], keep_rates, split: str = "val",
                      attention: str = "masked") -> pd.DataFrame:
    """One row per preset (``{name: study}``, in order): the dense model's accuracy on ``split``, phase 2's at each
    keep rate, each in points against that dense model ("vs dense @rate"), and their mean ("mean vs dense")."""
    if not keep_rates:
        raise ValueError("preset_validation needs at least one keep rate")
    rows = {}
    for name, study in studies.items():
        table = study.retention(keep_rates, split, attention)  # the dense row first, then the keep rates in order
        row = {"dense": float(table.accuracy.iloc[0])}
        for rate, accuracy in zip(keep_rates, table.accuracy.iloc[1:], strict=True):
            row[f"@{rate:g}"] = float(accuracy)
        for rate in keep_rates:
            row[f"vs dense @{rate:g}"] = row[f"@{rate:g}"] - row["dense"]
        row["mean vs dense"] = sum(row[f"vs dense @{rate:g}"] for rate in keep_rates) / len(keep_rates)
        rows[name] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("preset")


def choose_predictor_preset(study: ViTStudy, keep_rates=None, presets=PREDICTOR_PRESETS) -> PresetChoice:
    """Train (through the run cache) every preset's phase 1 and phase 2 from ``study``'s dense teacher and choose on
    validation (``pick_preset``) at ``keep_rates`` (default: the profile's report keep rates)."""
    keep_rates = tuple(keep_rates or study.profile.report_keep_rates)
    table = preset_validation({name: study.preset_study(name) for name in presets}, keep_rates)
    chosen, reason = pick_preset(table)
    return PresetChoice(table, chosen, reason)


def token_count_control(profile: ViTProfile) -> ViTProfile:
    """``profile.variant_197``'s recipe (data sizes, epochs) with ``profile``'s 50-token model and predictor: the
    like-for-like reference of the 197-token variant, where only the token count and the predictor's size differ."""
    variant = profile.variant_197
    if variant is None:
        raise ValueError(f"profile {profile.name!r} has no variant_197 to compare with")
    return replace(variant, name=f"{profile.name}, 50 tokens, the 197-token recipe", model=profile.model,
                   connectivity=profile.connectivity)


def two_standard_errors(accuracy: float, n: int) -> float:
    """Two binomial standard errors, in points, of an accuracy (%) measured on ``n`` images."""
    if n < 1 or not 0 <= accuracy <= 100:
        raise ValueError(f"need n >= 1 images and an accuracy in [0, 100] %, got {n} and {accuracy}")
    p = accuracy / 100
    return 200 * math.sqrt(p * (1 - p) / n)


def carry_over(gaps_50: dict[float, float], gaps_197: dict[float, float], tolerance: float) -> dict[float, str]:
    """Per keep rate, whether the 50-token loss against dense (points, ``gaps_50``) carries over to 197 tokens
    (``gaps_197``): "carries over" when the two differ by at most ``tolerance`` points, else "smaller loss at 197
    tokens" or "larger loss at 197 tokens"."""
    if set(gaps_50) != set(gaps_197):
        raise ValueError(f"the two sweeps must have the same keep rates, got {sorted(gaps_50)} and {sorted(gaps_197)}")
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0 points, got {tolerance}")
    verdicts = {}
    for rate in gaps_50:
        difference = gaps_197[rate] - gaps_50[rate]
        verdicts[rate] = ("carries over" if abs(difference) <= tolerance else
                          "smaller loss at 197 tokens" if difference > 0 else "larger loss at 197 tokens")
    return verdicts


def gaps_against_dense(table: pd.DataFrame) -> dict[float, float]:
    """{keep rate: points against dense} of ``ViTStudy.retention``'s table (its dense row left out)."""
    sparse = table[table.keep_rate.notna()]
    return {float(rate): float(gap) for rate, gap in zip(sparse.keep_rate, sparse["vs dense"], strict=True)}


def carry_over_sentence(verdicts: dict[float, str]) -> str:
    """One sentence from ``carry_over``'s verdicts: where the 50-token result carries over, and where sparse attention
    loses less or more at 197 tokens."""
    def rates(verdict):
        return ", ".join(f"{rate:g}" for rate, said in verdicts.items() if said == verdict)

    kept, smaller = rates("carries over"), rates("smaller loss at 197 tokens")
    larger = rates("larger loss at 197 tokens")
    if not (smaller or larger):
        return "The 50-token result carries over to 197 tokens at every keep rate"
    parts = [f"The 50-token result carries over to 197 tokens at keep {kept}" if kept else
             "The 50-token result does not carry over to 197 tokens"]
    if smaller:
        parts.append(f"at keep {smaller} sparse attention loses less at 197 tokens")
    if larger:
        parts.append(f"at keep {larger} it loses more at 197 tokens")
    return "; ".join(parts)


# ----------------------------------------------------------------------------- what closes the gap to dense


def predictor_ablation_variants(profile: ViTProfile) -> dict[str, ViTProfile]:
    """The recipe variants of the keep-rate gap (docs/sparsifiner.md): predictor semantics, phase-2 length,
    one checkpoint for every keep rate vs one per keep rate."""
    paper_text = replace(profile, connectivity=paper_text_connectivity(profile.connectivity))
    official = replace(profile, connectivity=RECIPE.connectivity.replace(
        n_down=profile.connectivity.n_down, tau=profile.connectivity.tau, up_prune=profile.connectivity.up_prune))

    def epochs(p, n):
        return replace(p, phase2=replace(p.phase2, epochs=n))

    def trained_at(p, rate):
        return replace(p, phase2=replace(p.phase2, keep_rates=(rate,)))

    return {
        "paper-text semantics, phase 2: 4 epochs": epochs(paper_text, 4),
        "paper-text semantics, phase 2: 8 epochs": epochs(paper_text, 8),
        "paper-text semantics, 4 epochs, trained at keep 0.25 only": trained_at(epochs(paper_text, 4), 0.25),
        "paper-text semantics, 4 epochs, trained at keep 0.1 only": trained_at(epochs(paper_text, 4), 0.1),
        "official semantics, phase 2: 4 epochs": epochs(official, 4),
        "official semantics, phase 2: 8 epochs": epochs(official, 8),
    }


def predictor_ablation(profile: ViTProfile, keep_rates=(0.25, 0.1), progress: bool = False) -> pd.DataFrame:
    """Validation and test accuracy at ``keep_rates``, in points against dense, for every variant (each trained
    through the run cache). Choose on validation; test is reported beside it.

        python -c "from bab.experiments.vit import *; print(predictor_ablation(VIT['quick']).round(2))"
    """
    rows = []
    for name, variant in predictor_ablation_variants(profile).items():
        study = ViTStudy(variant, progress=progress)
        dense, _, _ = study.dense()
        model, _, _ = study.sparsifiner()
        row = {"variant": name}
        for split in ("val", "test"):
            dense_accuracy = evaluate_vit(dense, study.splits()[split])["accuracy"]
            for rate in keep_rates:
                accuracy = evaluate_vit(model, study.splits()[split], attention="masked", keep_rate=rate)["accuracy"]
                row[f"{split} @{rate} vs dense"] = accuracy - dense_accuracy
        rows.append(row)
    return pd.DataFrame(rows).set_index("variant")


# ----------------------------------------------------------------------------- head gates that commit


def head_gate_variants(profile: ViTProfile) -> dict[str, ViTProfile]:
    """The head-gate recipes of docs/sparsifiner.md ("Head gates that commit"): how the gates start."""
    def init(how, sharpness=4.0):  # the soft and hard phases at 3 epochs each, as before the recipe
        return replace(profile, heads=replace(profile.heads, epochs=3,
                                              gate_start=replace(profile.heads.gate_start, how=how,
                                                                 sharpness=sharpness)))

    return {
        "flat gates (before)": init("flat"),
        "nested by one-at-a-time ablation, slope 4": init("ablation"),
        "nested by greedy elimination, slope 4": init("elimination"),
        "nested by greedy elimination, slope 8": init("elimination", 8.0),
        "nested by greedy elimination, slope 4, 6 epochs soft + 6 hard": replace(
            init("elimination"), heads=replace(init("elimination").heads, epochs=6)),
    }


def head_gate_ablation(profile: ViTProfile, budgets=(0.25, 0.5, 0.75, 1.0), progress: bool = False) -> pd.DataFrame:
    """Per recipe and split: soft accuracy and soft cost, hard top-k accuracy before and after the hard
    adaptation at every budget, and the gate spread (std across heads at b = 0.5). Every model through
    the run cache. Choose on validation; test beside it.

        python -c "from bab.experiments.vit import *; print(head_gate_ablation(VIT['quick']).round(2))"
    """
    rows = []
    for name, variant in head_gate_variants(profile).items():
        study = ViTStudy(variant, progress=progress)
        dense, _, _ = study.dense()
        soft, _, _ = study.budgeted_heads()
        hard, _, _ = study.budgeted_heads_hard(select=False)  # the adaptation itself, kept or not
        for split in ("val", "test"):
            data = study.splits()[split]
            row = {"recipe": name, "split": split, "dense": evaluate_vit(dense, data)["accuracy"],
                   "gate std @0.5": float(soft.gates(0.5).detach().std())}
            for b in budgets:
                row[f"soft @{b}"] = evaluate_heads(soft, data, budget=b, mode="soft")["accuracy"]
                row[f"soft cost @{b}"] = float(soft.gates(b).detach().mean())
                row[f"hard before @{b}"] = evaluate_heads(soft, data, budget=b, mode="hard")["accuracy"]
                row[f"hard @{b}"] = evaluate_heads(hard, data, budget=b, mode="hard")["accuracy"]
            rows.append(row)
    return pd.DataFrame(rows).set_index(["recipe", "split"])

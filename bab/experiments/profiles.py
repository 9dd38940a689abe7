"""The smoke / quick / record / paper profiles of every notebook, found by experiment name.

- ``smoke``: what CI and nbval run; 2.5-7.5 min a notebook on one thread with the instruction sets pinned
  (docs/testing.md, "Measured").
- ``quick``: the default of ``run_all.sh``; one seed, sizes where the papers' claims show; 9.5-40 min a notebook
  on one thread, 66 min for the report with two at once (README, "Run time at quick").
- ``record``: the profile of the committed record, built one (notebook, seed) run at a time: every notebook at
  seeds 7, 13 and 21, each run (its trainings from an empty run cache and its build together) sized to at most an
  hour on one core (estimated 30-45 min, docs/record.md). The papers' protocols where they fit; elsewhere the largest
  scale that does, each profile naming every reduction against the paper it reproduces (``reductions``), and every
  row a registered claim reads computed.
- ``paper``: the papers' protocols (sizes, epochs, seeds). Hours on CPU.

Each profile lives in its notebook's folder (``bab.experiments.synthetic.SYNTHETIC``, ...), with the reason
for every value the papers do not publish (model width, lambdas, learning rates, temperature);
the notebooks print the profile they ran.
"""

from __future__ import annotations

import importlib

from bab.experiments.registry import NOTEBOOKS

PROFILE_NAMES = ("smoke", "quick", "record", "paper")

# experiment -> (module, attribute) holding its {profile name: profile}, from the notebooks' registry. Looked up on
# first use, so asking for the synthetic profile does not import transformers for the BERT studies.
EXPERIMENTS = {experiment: (notebook.module, attribute)
               for notebook in NOTEBOOKS for experiment, attribute in notebook.profiles}


def profiles_of(experiment: str) -> dict:
    """{profile name: profile} of ``experiment``."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {experiment!r}; known: {sorted(EXPERIMENTS)}")
    module, attribute = EXPERIMENTS[experiment]
    return getattr(importlib.import_module(module), attribute)


def get_profile(experiment: str, profile: str):
    """The settings of ``experiment`` (e.g. "synthetic") at ``profile`` (smoke, quick, record or paper)."""
    profiles = profiles_of(experiment)
    if profile not in PROFILE_NAMES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {PROFILE_NAMES}")
    return profiles[profile]


def held_out_size(experiment: str, profile: str) -> int | None:
    """How many examples ``experiment``'s accuracies are measured on at ``profile`` (its held-out split: the
    synthetic task's validation set, the others' test sets), for rows that do not carry their own count; None for
    an experiment measured otherwise (perplexity) or an unknown profile."""
    if profile not in PROFILE_NAMES:
        return None
    if experiment == "vit_sparsifiner_197":
        variant = get_profile("vit_sparsifiner", profile).variant_197
        return None if variant is None else variant.num_test
    if experiment not in EXPERIMENTS:
        return None
    settings = get_profile(experiment, profile)
    if experiment == "synthetic":
        return settings.data.num_val
    return getattr(settings, "num_test", None)

"""The record's lanes and where each stands.

Every notebook runs at each seed of its ``record`` profile (``report_seeds``), one lane each, listed seed by seed
(all notebooks at the first seed, then at the second ...) so that a partial record covers every claim early. A lane
is ``landed`` (its ``lanes/<stem>.json`` in the record folder, fingerprints equal to now's), ``stale`` (landed,
fingerprints since changed: ``record next`` runs it again) or ``not run yet``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bab.experiments.registry import NOTEBOOKS, Notebook
from bab.report.results.contract import read_json
from bab.report.results.seeds import notebook_seeds, seed_stem

RECORD_PROFILE = "record"
RECORD_FOLDER = Path("reports") / RECORD_PROFILE
LANES = "lanes"  # the record folder's subfolder of lane records, lanes/<stem>.json
LANDED, STALE, NOT_RUN = "landed", "stale", "not run yet"
LANE_LIMIT_SECONDS = 3600  # a lane finishes within an hour on one core


@dataclass(frozen=True)
class Lane:
    """One notebook at one seed of the record profile."""

    notebook: Notebook
    seed: int

    @property
    def stem(self) -> str:
        """The name its page, notebook, results and records are saved under (``02_ag_news_custom-seed7``)."""
        return seed_stem(self.notebook.stem, self.seed)

    @property
    def label(self) -> str:
        return f"{self.notebook.number} seed {self.seed}"


@dataclass
class LaneState:
    lane: Lane
    state: str  # LANDED, STALE or NOT_RUN
    record: dict = field(default_factory=dict)  # lanes/<stem>.json as landed ({} when not)
    changed: list = field(default_factory=list)  # the fingerprints that differ now (stale)

    def as_dict(self) -> dict:
        """What the front page shows of the lane."""
        record = self.record
        return {"stem": self.lane.stem, "notebook": self.lane.notebook.stem, "number": self.lane.notebook.number,
                "seed": self.lane.seed, "label": self.lane.label, "state": self.state, "changed": self.changed,
                **{key: record.get(key)
                   for key in ("commit", "seconds", "cpu_seconds", "cached_seconds", "machine", "finished_at",
                               "threads")}}


def record_lanes(profile: str = RECORD_PROFILE, notebooks=NOTEBOOKS) -> list[Lane]:
    """Every lane of ``profile``, seed by seed. Raises ValueError for a notebook the profile runs at one seed: the
    record takes several of every notebook."""
    seeds = {}
    for notebook in notebooks:
        seeds[notebook] = notebook_seeds(notebook.stem, profile)
        if not seeds[notebook]:
            raise ValueError(f"profile {profile!r} runs {notebook.stem} at one seed; the record runs every notebook "
                             f"at several (its profile's report_seeds)")
    width = max(len(s) for s in seeds.values())
    return [Lane(notebook, s[i]) for i in range(width) for notebook, s in seeds.items() if i < len(s)]


def lane_states(folder: Path, fingerprints_now, lanes: list[Lane]) -> list[LaneState]:
    """Where each of ``lanes`` stands in the record ``folder``; ``fingerprints_now(notebook)`` gives the lane's
    fingerprints at this checkout (``bab.report.lanes.fingerprints.lane_fingerprints``)."""
    from bab.report.lanes.fingerprints import differences

    now, states = {}, []
    for lane in lanes:
        record = read_json(Path(folder) / LANES / f"{lane.stem}.json")
        if not record:
            states.append(LaneState(lane, NOT_RUN))
            continue
        record.setdefault("cached_seconds", cached_seconds(folder, lane))  # landed before it was recorded
        if lane.notebook.stem not in now:
            now[lane.notebook.stem] = fingerprints_now(lane.notebook)
        changed = differences(record.get("fingerprints") or {}, now[lane.notebook.stem])
        states.append(LaneState(lane, STALE if changed else LANDED, record, changed))
    return states


def cached_seconds(folder: Path, lane: Lane) -> float | None:
    """The seconds that the models and measurements ``lane`` took from the run cache cost the earlier process that
    made them, from its rows in ``folder`` (0 for a lane that made everything itself; None without its rows): part
    of the lane's cost that its own clocks do not show."""
    from bab.report.runner.timings import own_clocks

    total = sum(own_clocks(Path(folder) / "results" / f"{lane.stem}.json", cached=True).values())
    return None if total != total else round(total, 2)  # NaN: no readable results file


def next_lanes(states: list[LaneState], count: int) -> list[Lane]:
    """The first ``count`` lanes to run: those not run yet and the stale ones, in plan order."""
    return [s.lane for s in states if s.state != LANDED][:count]


def experiment_notebooks(notebooks=NOTEBOOKS) -> dict[str, str]:
    """{experiment: notebook stem}: each notebook's experiments, and the variants named after one (an experiment
    ``vit_sparsifiner_197`` is notebook 05's, whose experiment is ``vit_sparsifiner``)."""
    return {experiment: notebook.stem for notebook in notebooks for experiment, _ in notebook.profiles}


def notebook_of(experiment: str, owners: dict[str, str]) -> str | None:
    if experiment in owners:
        return owners[experiment]
    prefixes = [name for name in owners if experiment.startswith(f"{name}_")]
    return owners[max(prefixes, key=len)] if prefixes else None


def waiting_for(notebooks, states: list[LaneState]) -> list[str]:
    """Labels of the lanes not landed of ``notebooks`` (stems): what a claim whose rows they write waits for."""
    return [s.lane.label for s in states if s.state != LANDED and s.lane.notebook.stem in set(notebooks)]

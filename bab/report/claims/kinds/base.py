"""The base of every kind of claim: ``Claim``, where a paper makes a claim, its sentence, whose recipe it tests,
the rows it reads and the setup shown beside its verdict."""

from __future__ import annotations

from dataclasses import dataclass

from bab.experiments.methods import Method
from bab.report.claims.evidence import Evidence
from bab.report.claims.verdicts import PAPERS, RECIPES, Row, Verdict


@dataclass(frozen=True)
class Claim:
    """One headline claim: where the paper makes it, the sentence, the metric compared, whose recipe it tests and
    the setting that differs from the paper's (one column on the front page)."""

    id: str
    paper: str  # one of PAPERS
    where: str  # table, figure or section
    statement: str
    metric: str  # what the numbers in the verdict are, in words
    setup: str = ""  # how the recipe differs from the paper's, when it matters for the verdict
    # a method whose row's note says how the rows were trained, where that depends on the profile (the decoder
    # study freezes its weights at quick and fine-tunes them at paper): appended to ``setup``
    protocol_from: Method | None = None
    recipe: str = "paper"  # one of RECIPES
    setting: str = ""  # the model, data or hardware that differs from the paper's

    def __post_init__(self):
        if self.recipe not in RECIPES:
            raise ValueError(f"claim {self.id}: recipe must be one of {RECIPES}, got {self.recipe!r}")
        if self.paper not in PAPERS:
            raise ValueError(f"claim {self.id}: paper must be one of {PAPERS}, got {self.paper!r}")

    def judge(self, rows, evidence: Evidence | None = None) -> Verdict:
        raise NotImplementedError

    def experiments(self) -> set[str]:
        """The experiments whose rows this claim reads (every Row and Method among its fields)."""
        found = set()

        def visit(item):
            if isinstance(item, tuple):  # (Row, coefficient) terms, (name, Claim) parts, tuples of rows
                for inner in item:
                    visit(inner)
            elif isinstance(item, Row):
                found.add(item.method.experiment)
            elif isinstance(item, Method):
                found.add(item.experiment)
            elif isinstance(item, Claim):
                found.update(item.experiments())

        for value in vars(self).values():
            visit(value)
        return found

    def setup_for(self, rows) -> str:
        """``setup``, with the note of ``protocol_from``'s first row among ``rows`` that has one appended."""
        notes = [row["note"] for row in rows if self.protocol_from is not None and row.get("note")
                 and row.get("experiment") == self.protocol_from.experiment
                 and row.get("method") == self.protocol_from.name]
        return "; ".join(part for part in (self.setup, notes[0] if notes else "") if part)

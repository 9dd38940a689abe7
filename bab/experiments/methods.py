"""The methods a study's result rows may name, declared as typed ids.

Each notebook's package declares a ``MethodSet`` per experiment (``SYNTHETIC_METHODS``, ...), and its notebook
builds rows from those ``Method`` objects (``Study.result_row(METHODS.dense, ...)``). The results contract
(``bab.report.results.contract``) rejects a row whose method is not declared for its experiment, whose budget does not
fit the method, or whose settings are not the declared ones; the claims (``bab.report.claims``) and the papers'
rows (``bab.report.results.paper``) point at the same objects. So a renamed method fails loudly where it is used, never
as an empty cell in a silent join.

A method's *settings* are the values that tell its rows apart beyond the budget (the gamma of a context-pruning
specialist, the token keep rate of EViT + Sparsifiner). They are typed values in the row, never parts of the
method's name.
"""

from __future__ import annotations

import importlib
import math
import numbers
from dataclasses import dataclass
from functools import cache

from bab.experiments.registry import MODULES

# What a method saves compute on: one marker per mechanism on the report's single cost axis.
MECHANISMS = ("none", "heads", "context tokens", "connections", "tokens", "tokens + connections", "low rank")
# Which budgets a method's rows carry: "dense" 1.0 only; "fraction" a number in (0, 1]; "none" no budget.
BUDGET_KINDS = ("dense", "fraction", "none")
# Where the method comes from: a paper's own method, a baseline a paper compares with, or this package's.
ORIGINS = ("paper", "baseline", "ours")


@dataclass(frozen=True)
class Method:
    """One kind of result row of an experiment.

    ``name`` is the text the row's ``method`` column holds and tables show; ``settings`` names the values every
    row of the method carries in its ``settings`` (numbers, text or booleans) and that tell its rows apart.
    """

    experiment: str
    name: str
    mechanism: str
    budget: str = "fraction"
    origin: str = "paper"
    settings: tuple[str, ...] = ()
    value: str = ""  # what the row's ``value`` column holds, for a method measured by one number that is not an
    # accuracy or a cost (a rank correlation, a share of MACs); "" when its rows carry none

    def __post_init__(self):
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"Method {self.name!r}: mechanism must be one of {MECHANISMS}, got {self.mechanism!r}")
        if self.budget not in BUDGET_KINDS:
            raise ValueError(f"Method {self.name!r}: budget must be one of {BUDGET_KINDS}, got {self.budget!r}")
        if self.origin not in ORIGINS:
            raise ValueError(f"Method {self.name!r}: origin must be one of {ORIGINS}, got {self.origin!r}")

    def check_budget(self, budget) -> float | None:
        """``budget`` as the method's rows hold it; ValueError when it does not fit the method."""
        where = f"method {self.name!r} of {self.experiment!r}"
        if self.budget == "none":
            if budget is not None:
                raise ValueError(f"{where} takes no budget (its rows are told apart by {list(self.settings)}), "
                                 f"got {budget!r}; pass budget=None")
            return None
        if budget is None or isinstance(budget, bool) or not isinstance(budget, numbers.Real) \
                or not math.isfinite(float(budget)):
            raise ValueError(f"{where} needs a budget in (0, 1], got {budget!r}")
        budget = round(float(budget), 4)
        if self.budget == "dense" and budget != 1.0:
            raise ValueError(f"{where} is the dense reference: its budget is 1.0, got {budget}")
        if not 0.0 < budget <= 1.0:
            raise ValueError(f"{where} needs a budget in (0, 1], got {budget}")
        return budget

    def check_settings(self, settings) -> dict:
        """``settings`` as a plain dict; ValueError unless its keys are exactly the declared ones."""
        settings = dict(settings or {})
        if set(settings) != set(self.settings):
            raise ValueError(f"method {self.name!r} of {self.experiment!r} takes the settings "
                             f"{sorted(self.settings)}, got {sorted(settings)}")
        clean = {}
        for key in self.settings:
            value = settings[key]
            if isinstance(value, bool | str):
                clean[key] = value
            elif isinstance(value, numbers.Integral):
                clean[key] = int(value)
            elif isinstance(value, numbers.Real) and math.isfinite(float(value)):
                clean[key] = round(float(value), 6)
            else:
                raise ValueError(f"method {self.name!r}: setting {key!r} must be a finite number, text or "
                                 f"bool, got {value!r}")
        return clean


class MethodSet:
    """The declared methods of one experiment, by attribute (``METHODS.dense``) or by name (``METHODS["dense"]``)."""

    def __init__(self, experiment: str, **methods: Method):
        for attribute, method in methods.items():
            if method.experiment != experiment:
                raise ValueError(f"MethodSet {experiment!r}: {attribute} belongs to {method.experiment!r}")
        names = [m.name for m in methods.values()]
        if len(set(names)) != len(names):
            raise ValueError(f"MethodSet {experiment!r}: method names repeat: {names}")
        self.experiment = experiment
        self._by_attribute = dict(methods)
        self._by_name = {m.name: m for m in methods.values()}

    def __getattr__(self, attribute: str) -> Method:
        try:
            return self.__dict__["_by_attribute"][attribute]
        except KeyError:
            raise AttributeError(f"experiment {self.__dict__.get('experiment')!r} declares no method "
                                 f"{attribute!r}; declared: {sorted(self.__dict__['_by_attribute'])}") from None

    def __getitem__(self, name: str) -> Method:
        if name not in self._by_name:
            raise KeyError(f"experiment {self.experiment!r} declares no method {name!r}; declared: "
                           f"{sorted(self._by_name)}")
        return self._by_name[name]

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __iter__(self):
        return iter(self._by_name.values())

    def __repr__(self) -> str:
        return f"MethodSet({self.experiment!r}: {', '.join(self._by_name)})"


def settings_text(settings: dict | None) -> str:
    """The canonical text of a row's settings ("gamma=0.03, kind=strided"; "" for none): part of the key the
    report joins our rows and the papers' on."""
    return ", ".join(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
                     for key, value in sorted((settings or {}).items()))


def methods(experiment: str, *declared: tuple) -> MethodSet:
    """A MethodSet from rows ``(attribute, name, mechanism, budget kind, origin[, settings[, value]])``."""
    return MethodSet(experiment, **{attribute: Method(experiment, name, *rest) for attribute, name, *rest in declared})


# The modules that declare method sets (``METHOD_SETS``): the notebooks' packages (bab.experiments.registry),
# imported on first use.
DECLARING_MODULES = MODULES


# A cached lookup, not a register: the method sets are declared as constants in code, so the result is a pure
# function of the code and no run, row or import fills it.
@cache
def registry() -> dict[str, MethodSet]:
    """{experiment: MethodSet} over every declaring module."""
    found = {}
    for module in DECLARING_MODULES:
        for method_set in importlib.import_module(module).METHOD_SETS:
            if method_set.experiment in found:
                raise ValueError(f"experiment {method_set.experiment!r} declared twice (second in {module})")
            found[method_set.experiment] = method_set
    return found


def method_of(experiment: str, name: str) -> Method:
    """The declared method ``name`` of ``experiment``; ValueError naming what is declared when there is none."""
    sets = registry()
    if experiment not in sets:
        raise ValueError(f"unknown experiment {experiment!r}; experiments that declare methods: {sorted(sets)}")
    if name not in sets[experiment]:
        raise ValueError(f"experiment {experiment!r} declares no method {name!r}; declared: "
                         f"{[m.name for m in sets[experiment]]}")
    return sets[experiment][name]

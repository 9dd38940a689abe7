"""The kinds of claim, one module per what they judge: ``base`` holds ``Claim``, the base of every kind; ``accuracy``
accuracy held, lost or beaten (``Accuracy`` with its builders ``retention`` and ``margin``, ``Parts``,
``SeedCollapse``, ``BeatsOverSeeds``, ``Dominates``); ``cost`` cost, speed and memory (``CostTracks``, ``Speed``,
``MemoryFollowsPruning``); ``language`` a language model's quality (``PerplexityHeld``, ``ZeroShotHeld``,
``Monotone``, ``BeatsStatic``); ``numbers`` single numbers, counts and orders (``Statistic``, ``Counted``,
``FollowsSetting``, ``KindsFirst``, ``NotYet``). Every kind is re-exported here.
"""

from __future__ import annotations

from bab.report.claims.kinds.accuracy import (
    Accuracy,
    BeatsOverSeeds,
    Dominates,
    Parts,
    SeedCollapse,
    margin,
    retention,
)
from bab.report.claims.kinds.base import Claim
from bab.report.claims.kinds.cost import CostTracks, MemoryFollowsPruning, Speed
from bab.report.claims.kinds.language import BeatsStatic, Monotone, PerplexityHeld, ZeroShotHeld
from bab.report.claims.kinds.numbers import Counted, FollowsSetting, KindsFirst, NotYet, Statistic

__all__ = ["Accuracy", "BeatsOverSeeds", "BeatsStatic", "Claim", "CostTracks", "Counted", "Dominates", "FollowsSetting",
           "KindsFirst", "MemoryFollowsPruning", "Monotone", "NotYet", "Parts", "PerplexityHeld", "SeedCollapse",
           "Speed", "Statistic", "ZeroShotHeld", "margin", "retention"]

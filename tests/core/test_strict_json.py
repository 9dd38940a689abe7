"""Strict JSON: every non-finite number becomes null, and the result parses with a reader that rejects NaN."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from bab.core import strict_json


def strict_loads(text):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_become_null_wherever_they_are():
    record = {"loss": float("nan"), "ratio": float("inf"), "rows": [1.5, float("-inf"), (np.float32("nan"), 2)],
              "tensor": torch.tensor([1.0, float("nan")]), "scalar": np.float64(0.25), "missing": pd.NA,
              "nested": {"a": np.array([np.inf, 3.0])}, "text": "NaN stays a string"}
    assert strict_loads(strict_json.dumps(record)) == {
        "loss": None, "ratio": None, "rows": [1.5, None, [None, 2]], "tensor": [1.0, None], "scalar": 0.25,
        "missing": None, "nested": {"a": [None, 3.0]}, "text": "NaN stays a string"}


def test_what_default_converts_is_made_finite_too():
    class Odd:
        pass

    assert strict_loads(strict_json.dumps({"x": Odd()}, default=lambda value: float("nan"))) == {"x": None}
    with pytest.raises(TypeError):  # no default: an unknown object fails as in json.dumps
        strict_json.dumps({"x": Odd()})


def test_a_nan_that_slips_past_the_conversion_fails_loudly(monkeypatch):
    monkeypatch.setattr(strict_json, "finite", lambda value: value)
    with pytest.raises(ValueError, match="not JSON compliant"):
        strict_json.dumps({"loss": float("nan")})

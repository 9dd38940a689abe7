"""PruningConfig refuses wrong types and ranges with one line naming the field and a valid example, before any module
is built; valid values (ints where floats are expected, numpy scalars) are taken as they are."""

import math

import numpy as np
import pytest

from bab.context.interaction import ContextInteraction, PruningConfig

BAD = [
    (dict(r=2.5), "r"), (dict(r=True), "r"), (dict(r="8"), "r"), (dict(r=0), "r"), (dict(r=-3), "r"),
    (dict(r=None), "r"),
    (dict(init_std=-1), "init_std"), (dict(init_std=0), "init_std"), (dict(init_std=math.nan), "init_std"),
    (dict(init_std=math.inf), "init_std"), (dict(init_std="0.02"), "init_std"), (dict(init_std=True), "init_std"),
    (dict(init_bias=math.nan), "init_bias"), (dict(init_bias=-math.inf), "init_bias"),
    (dict(init_bias="4"), "init_bias"), (dict(init_bias=False), "init_bias"), (dict(init_bias=None), "init_bias"),
    (dict(init_sensitivity=0.0), "init_sensitivity"), (dict(init_sensitivity=math.nan), "init_sensitivity"),
    (dict(irreversible=1), "irreversible"), (dict(irreversible="yes"), "irreversible"),
    (dict(budget_conditioned=None), "budget_conditioned"), (dict(propagate_in_depth=0), "propagate_in_depth"),
    (dict(interaction_bias="False"), "interaction_bias"),
]


@pytest.mark.parametrize(("overrides", "field"), BAD, ids=[f"{k}={v!r}" for (o, _) in BAD for k, v in o.items()])
def test_bad_values_raise_one_clear_line_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=rf"^PruningConfig\.{field} must be") as error:
        PruningConfig(**overrides)
    assert "\n" not in str(error.value) and repr(overrides[field]) in str(error.value)


def test_the_official_values_refuse_bad_overrides_too():
    with pytest.raises(ValueError, match="PruningConfig.r"):
        PruningConfig.official(r=1.5)


def test_valid_values_are_kept_as_given_and_build_the_module():
    config = PruningConfig(r=np.int64(4), init_bias=2, init_std=np.float32(0.1), init_sensitivity=0.5,
                           budget_conditioned=True)
    assert config.r == 4 and config.init_bias == 2 and type(config.init_bias) is int  # not converted: run keys stay
    interaction = ContextInteraction(8, config)
    assert interaction.query.weight.shape == (4, 8) and float(interaction.bias) == 2.0
    assert PruningConfig() == PruningConfig(r=64, init_bias=4.0, init_std=0.02)

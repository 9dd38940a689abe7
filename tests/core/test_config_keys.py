"""Run keys are a config's difference from its first defaults (bab.core.runs.config_difference): an option added
with a default keeps every cached run's key, a changed default changes the keys of the runs that use it."""

import dataclasses
import json

import pytest
import torch

from bab.core import runs
from bab.core.runs import RunCache, canonical, config_difference, config_key, current_defaults, first_defaults


@dataclasses.dataclass(frozen=True)
class Widget:
    width: int = 4
    rate: float = 0.1


@dataclasses.dataclass(frozen=True)
class WidgetWithAnOption:  # Widget after an option was added with the default that computes what Widget computed
    width: int = 4
    rate: float = 0.1
    shape: str = "square"


@dataclasses.dataclass(frozen=True)
class WidgetWithANewDefault:  # Widget after its rate's default was changed
    width: int = 4
    rate: float = 0.2


@dataclasses.dataclass(frozen=True)
class Machine:
    name: str  # no default: always keyed
    widget: Widget | None = None
    sizes: tuple[int, ...] = (1, 2)


RECORD = {"Widget": {"width": 4, "rate": 0.1}, "Machine": {"widget": None, "sizes": [1, 2]}}


def _as(cls, instance):
    """``instance``'s class renamed to ``cls``'s, as a later version of the same config class would be."""
    renamed = type(cls.__name__, (type(instance),), {})
    return renamed(**dataclasses.asdict(instance))


def keyed(config, record):
    """The run key of ``config`` under the first-defaults record ``record``."""
    return config_key({"model": config_difference(config, record)})


def test_the_difference_leaves_out_the_fields_at_their_first_defaults():
    assert config_difference(Widget(), RECORD) == {}
    assert config_difference(Widget(width=8), RECORD) == {"width": 8}
    assert config_difference(Machine("m"), RECORD) == {"name": "m"}
    assert config_difference(Machine("m", widget=Widget(), sizes=(3,)), RECORD) == {
        "name": "m", "widget": {}, "sizes": [3]}  # a nested config at its defaults is still there, unlike None
    assert config_difference(Machine("m", widget=Widget(rate=0.5)), RECORD) == {"name": "m", "widget": {"rate": 0.5}}


def test_an_option_added_with_its_default_keeps_the_key_and_a_changed_default_changes_it():
    before = keyed(Widget(), RECORD)
    with_option = {**RECORD, "WidgetWithAnOption": {**RECORD["Widget"], "shape": "square"}}
    assert keyed(WidgetWithAnOption(), with_option) == before
    assert keyed(WidgetWithAnOption(shape="round"), with_option) != before
    new_default = {**RECORD, "WidgetWithANewDefault": RECORD["Widget"]}  # the record keeps the first default
    assert keyed(WidgetWithANewDefault(), new_default) != before
    assert keyed(WidgetWithANewDefault(rate=0.1), new_default) == before


def test_a_cached_run_is_served_after_an_option_is_added_and_retrained_after_a_default_changes(tmp_path,
                                                                                                 monkeypatch):
    cache = RunCache(tmp_path)
    model = torch.nn.Linear(2, 2)
    record = {"Widget": RECORD["Widget"]}
    monkeypatch.setattr(runs, "first_defaults", lambda: record)
    cache.save("run", {"model": Widget()}, model, {"accuracy": 1.0})
    # the same class, later: an option added at the default that computes what it computed before
    record["Widget"] = {**RECORD["Widget"], "shape": "square"}
    assert cache.load("run", {"model": _as(Widget, WidgetWithAnOption())}, torch.nn.Linear(2, 2)) is not None
    # later still: rate's default changed, the first default stays recorded
    assert cache.load("run", {"model": _as(Widget, WidgetWithANewDefault())}, torch.nn.Linear(2, 2)) is None


def test_an_unrecorded_config_or_field_raises_saying_what_to_record():
    with pytest.raises(KeyError, match="WidgetWithAnOption has no first defaults recorded"):
        config_difference(WidgetWithAnOption(), RECORD)
    with pytest.raises(KeyError, match=r"Widget\.shape has no first default recorded.*\"square\""):
        config_difference(_as(Widget, WidgetWithAnOption()), RECORD)
    with pytest.raises(ValueError, match="plain data"):
        canonical({"model": object()})


def keyed_classes():
    """The config classes the studies key runs by."""
    from bab.context.interaction import PruningConfig
    from bab.context.train import LMTrainConfig
    from bab.data.lm import LMDataConfig
    from bab.data.synthetic import SyntheticConfig
    from bab.heads.encoder import EncoderConfig
    from bab.heads.hf_encoder import HFEncoderConfig
    from bab.heads.train import GateStart, HardAdaptation, TrainConfig
    from bab.sparsifiner.predictor import ConnectivityConfig
    from bab.sparsifiner.train import ViTTrainConfig
    from bab.sparsifiner.vit import ViTClassifierConfig
    return {cls.__name__: cls for cls in (SyntheticConfig, LMDataConfig, EncoderConfig, HFEncoderConfig, TrainConfig,
                                          GateStart, HardAdaptation, ConnectivityConfig, ViTClassifierConfig,
                                          ViTTrainConfig, PruningConfig, LMTrainConfig)}


# Defaults changed in the code since their first value was recorded ("Class.field": (first, now)): runs at the new
# value have new keys. Adding an entry here is the reviewer's signal that those runs retrain.
CHANGED_DEFAULTS = {}


def test_the_packaged_record_covers_every_config_a_study_keys_runs_by():
    record = first_defaults()
    assert sorted(record) == sorted(keyed_classes())
    assert json.loads(json.dumps(record)) == record  # plain JSON, what the differences are compared with
    for name, cls in keyed_classes().items():
        # every defaulted field recorded (a missing one would raise at the first run keyed by it)
        assert set(record[name]) == set(current_defaults(cls)), name


def test_the_defaults_are_pinned_to_the_record_but_for_the_changes_declared():
    changed = {f"{name}.{field}": (first, current_defaults(keyed_classes()[name])[field])
               for name, fields in first_defaults().items() for field, first in fields.items()
               if current_defaults(keyed_classes()[name])[field] != first}
    assert changed == CHANGED_DEFAULTS

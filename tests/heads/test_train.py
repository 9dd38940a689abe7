"""The training loop and its objectives, on tiny models (a few seconds in all)."""

import copy
import math
import types
from dataclasses import replace

import pytest
import torch
from torch.utils.data import TensorDataset

from bab.core.warm_start import warm_start
from bab.heads.encoder import EncoderClassifier, EncoderConfig
from bab.heads.train import GateStart, HardAdaptation, TrainConfig, initialise_gates_, parameter_groups, train


def tiny(gates=None, seed=0):
    torch.manual_seed(seed)
    return EncoderClassifier(EncoderConfig(vocab_size=12, num_classes=2, max_len=8, d_model=16, num_heads=4,
                                           num_layers=2, d_ff=32, gates=gates))


def toy_data(n=256, seed=0):
    # label = whether token 5 occurs anywhere: learnable in a few epochs
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 12, (n, 8), generator=g)
    ids[:, 0] = 1
    return TensorDataset(ids, (ids == 5).any(1).long())


def test_dense_training_lowers_the_loss_and_is_deterministic():
    data = toy_data()
    config = TrainConfig(objective="dense", epochs=4, batch_size=32, lr=3e-3, seed=1)
    a, b = tiny(), tiny()
    ra = train(a, data, config, progress=False)
    rb = train(b, data, config, progress=False)
    assert ra.history[-1]["loss"] < ra.history[0]["loss"]
    assert [r["loss"] for r in ra.history] == [r["loss"] for r in rb.history]
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_budgeted_training_pulls_cost_towards_the_budget():
    model = tiny("budget")
    with torch.no_grad():
        model.gates.theta.fill_(3.0)  # start far over budget: C(0.3) ~ 0.9
    before = model.gates(0.3).detach().mean().item()
    config = TrainConfig(objective="budgeted", epochs=4, batch_size=32, lambda_cost=0.5, lambda_viol=20.0, gate_lr=0.3)
    history = train(model, toy_data(), config, progress=False).history
    assert model.gates(0.3).detach().mean().item() < before - 0.2
    assert all(0 < row["cost"] <= 1 for row in history)


def test_static_objective_trains_toward_its_fixed_budget():
    model = tiny("static")
    config = TrainConfig(objective="static", budget=0.25, epochs=4, batch_size=32, lambda_cost=0.5, lambda_viol=20.0,
                         gate_lr=0.3)
    train(model, toy_data(), config, progress=False)
    assert model.gates().detach().mean().item() < 0.45  # started at 0.5


def test_hard_adaptation_updates_weights_and_leaves_the_teacher_alone():
    teacher = tiny("budget", seed=3)
    student = copy.deepcopy(teacher)
    teacher_state = copy.deepcopy(teacher.state_dict())
    config = TrainConfig(objective="hard_adapt", epochs=1, batch_size=64, lr=1e-3)
    train(student, toy_data(), config, teacher=teacher, progress=False)
    for name, value in teacher.state_dict().items():
        assert torch.equal(value, teacher_state[name]), name
    after = student.state_dict()
    assert any(not torch.equal(after[name], teacher_state[name]) for name in teacher_state)


def test_warm_start_copies_dense_weights_and_keeps_gates():
    dense, gated = tiny(), tiny("budget", seed=5)
    gates_before = gated.gates.theta.detach().clone()
    warm_start(gated, dense)
    assert torch.equal(gated.layers[0].attn.qkv.weight, dense.layers[0].attn.qkv.weight)
    assert torch.equal(gated.gates.theta, gates_before)
    with pytest.raises(ValueError, match=r"differ beyond the new modules \(`gates`\)"):
        warm_start(EncoderClassifier(EncoderConfig(vocab_size=12, num_classes=3, max_len=8, d_model=16, num_heads=4,
                                                   num_layers=1, d_ff=32, gates="budget")), dense)


def test_gates_get_their_own_learning_rate_without_weight_decay():
    groups = parameter_groups(tiny("budget"), TrainConfig(objective="budgeted", lr=1e-3, gate_lr=1e-2))
    assert len(groups) == 2
    assert groups[1]["lr"] == 1e-2 and groups[1]["weight_decay"] == 0.0
    assert len(groups[1]["params"]) == 2  # theta and raw sensitivity


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(objective="sgd"), "objective must be one of"),
        (dict(objective="static"), "needs budget"),
        (dict(objective="static", budget=1.5), r"\(0, 1\]"),
        (dict(objective="dense", budget=0.5), "only for objective='static' or 'hard_adapt'"),
        (dict(epochs=0), "epochs"),
        (dict(lr=-1.0), "lr"),
        (dict(budget_min=0.0), r"\(0, 1\]"),
        (dict(objective="hard_adapt", gate_start=GateStart("elimination")),
         r"gate_start=GateStart\(how='elimination'\) initialises.*starts from its parent's gates"),
        (dict(objective="hard_adapt", budget_choices=()), "non-empty tuple"),
        (dict(objective="hard_adapt", budget_choices=(0.5, 1.5)), r"\(0, 1\]"),
        (dict(objective="hard_adapt", budget=0.5, budget_choices=(0.5,)), "not both"),
    ],
)
def test_malformed_train_configs_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


@pytest.mark.parametrize(
    "config, kwargs, message",
    [
        (HardAdaptation, dict(kd_teacher="bert"), "kd_teacher must be one of"),
        (HardAdaptation, dict(min_per_layer=-1), "min_per_layer"),
        (GateStart, dict(how="importance"), "GateStart.how must be one of"),
        (GateStart, dict(how="ablation", examples=0), "examples >= 1"),
        (GateStart, dict(how="ablation", sharpness=0.0), "sharpness > 0"),
    ],
)
def test_malformed_nested_configs_raise(config, kwargs, message):
    with pytest.raises(ValueError, match=message):
        config(**kwargs)


def test_a_nested_option_given_flat_raises_with_the_new_spelling():
    with pytest.raises(TypeError, match=r"gate_start=GateStart\(how='elimination'\)"):
        TrainConfig(objective="budgeted", gate_start="elimination")
    with pytest.raises(TypeError, match=r"adaptation=HardAdaptation\(\.\.\.\)"):
        TrainConfig(objective="hard_adapt", adaptation={"kd_beta": 0.5})


def test_objective_and_model_mismatch_raise():
    with pytest.raises(ValueError, match="needs a model with gates"):
        train(tiny(), toy_data(), TrainConfig(objective="budgeted"), progress=False)
    with pytest.raises(ValueError, match="teacher"):
        train(tiny("budget"), toy_data(), TrainConfig(objective="hard_adapt"), progress=False)
    with pytest.raises(ValueError, match="gates='static'"):
        train(tiny("budget"), toy_data(), TrainConfig(objective="static", budget=0.5), progress=False)


def test_selection_restores_the_best_epoch():
    data = toy_data()
    scores = iter([0.5, 0.9, 0.1])
    snapshots = []

    def select(model):
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return next(scores)

    model = tiny()
    result = train(model, data, TrainConfig(objective="dense", epochs=3, batch_size=64), progress=False, select=select)
    assert result.selected_epoch == 2
    assert [row["selection"] for row in result.history] == [0.5, 0.9, 0.1]
    for name, value in model.state_dict().items():
        assert torch.equal(value, snapshots[1][name]), name


def test_frozen_controller_keeps_gates_and_adapts_weights():
    teacher = tiny("budget", seed=3)
    student = copy.deepcopy(teacher)
    gates_before = copy.deepcopy(student.gates.state_dict())
    config = TrainConfig(objective="hard_adapt", epochs=1, batch_size=64, lr=1e-3,
                         adaptation=HardAdaptation(freeze_gates=True))
    train(student, toy_data(), config, teacher=teacher, progress=False)
    for name, value in student.gates.state_dict().items():
        assert torch.equal(value, gates_before[name]), name
    assert not torch.equal(student.head.weight, teacher.head.weight)


def test_recovery_distils_from_the_dense_teacher():
    teacher, student = tiny(seed=4), tiny(seed=5)
    with pytest.raises(ValueError, match="needs teacher"):
        train(student, toy_data(), TrainConfig(objective="recovery"), progress=False)
    before = copy.deepcopy(student.state_dict())
    result = train(student, toy_data(), TrainConfig(objective="recovery", epochs=2, batch_size=32, lr=3e-3),
                   teacher=teacher, progress=False)
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    assert any(not torch.equal(student.state_dict()[k], before[k]) for k in before)


def test_warmup_schedules_follow_their_formulas():
    from bab.core.training import warmup_cosine, warmup_linear_decay

    def multipliers(make, total, warmup):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        scheduler = make(optimizer, total, warmup)
        return [scheduler.lr_lambdas[0](s) for s in range(total)]

    linear = multipliers(warmup_linear_decay, 10, 2)
    assert linear[:3] == [0.5, 1.0, 8 / 9] and linear[-1] == 1 / 9  # warm up to the peak, then decay linearly
    cosine = multipliers(warmup_cosine, 10, 2)
    assert cosine == [min((s + 1) / 2, 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / 10))) for s in range(10)]
    assert cosine[0] == 0.5 and cosine[1] > cosine[5] > cosine[9] > 0.1  # cosine decay towards 10%


def test_run_cache_key_names_each_field_away_from_its_first_default():
    from bab.core.runs import config_difference

    assert config_difference(TrainConfig(objective="budgeted", lambda_cost=0.05)) == {"objective": "budgeted",
                                                                                      "lambda_cost": 0.05}
    nested = config_difference(TrainConfig(objective="budgeted", gate_start=GateStart("elimination"),
                                           budget_choices=(0.5,)))
    assert nested == {"objective": "budgeted", "gate_start": {"how": "elimination"}, "budget_choices": [0.5]}
    hard = config_difference(TrainConfig(objective="hard_adapt", adaptation=HardAdaptation(kd_beta=0.9)))
    assert hard == {"objective": "hard_adapt", "adaptation": {"kd_beta": 0.9}}
    assert config_difference(TrainConfig()) == {}  # nested configs at their defaults leave no trace


def test_hard_adaptation_keeps_the_unadapted_checkpoint_when_validation_does_not_improve():
    teacher = tiny("budget", seed=3)
    student = copy.deepcopy(teacher)
    before = copy.deepcopy(student.state_dict())
    config = TrainConfig(objective="hard_adapt", epochs=2, batch_size=64, lr=1e-2)
    result = train(student, toy_data(), config, teacher=teacher, progress=False, select=lambda model: 50.0)
    assert result.selected_epoch == 0  # a tie: the earlier candidate, the unadapted one, wins
    assert [row["epoch"] for row in result.history] == [0, 1, 2]
    for name, value in student.state_dict().items():
        assert torch.equal(value, before[name]), name
    # without keep_unadapted the best adapted epoch is kept
    student = copy.deepcopy(teacher)
    result = train(student, toy_data(), replace(config, adaptation=replace(config.adaptation, keep_unadapted=False)),
                   teacher=teacher, progress=False, select=lambda model: 50.0)
    assert result.selected_epoch == 1 and not torch.equal(student.head.weight, teacher.head.weight)


class RecordingTeacher(torch.nn.Module):
    """A teacher that records the mode and budget of every call and returns fixed logits. The list is shared
    with the frozen copy the trainer makes."""

    def __init__(self):
        super().__init__()
        self.calls = []
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, budget=None, mode="dense"):
        self.calls.append((mode, budget))
        return types.SimpleNamespace(logits=torch.zeros(len(input_ids), 2))

    def __deepcopy__(self, memo):
        twin = RecordingTeacher()
        twin.calls = self.calls
        return twin


@pytest.mark.parametrize("kd_teacher, expected_mode", [("soft", "soft"), ("dense", "dense")])
def test_distillation_teacher_runs_in_the_mode_the_config_names(kd_teacher, expected_mode):
    teacher = RecordingTeacher()
    config = TrainConfig(objective="hard_adapt", epochs=1, batch_size=64,
                         adaptation=HardAdaptation(kd_teacher=kd_teacher))
    train(tiny("budget"), toy_data(), config, teacher=teacher, progress=False)
    assert teacher.calls and all(mode == expected_mode for mode, _ in teacher.calls)
    if kd_teacher == "dense":
        assert all(budget is None for _, budget in teacher.calls)


def test_budget_choices_draw_every_budget_from_the_given_values():
    teacher = RecordingTeacher()
    config = TrainConfig(objective="hard_adapt", epochs=3, batch_size=16, budget_choices=(0.25, 0.75))
    train(tiny("budget"), toy_data(), config, teacher=teacher, progress=False)
    budgets = [budget for _, budget in teacher.calls]
    assert set(budgets) == {0.25, 0.75}  # 48 draws: both values appear, nothing else does


def test_hard_adaptation_with_a_floor_trains_and_evaluates_with_it():
    teacher = tiny("budget", seed=3)
    with torch.no_grad():  # layer 1's gates far below layer 0's: the global top-k at 0.25 empties layer 1
        teacher.gates.theta[0].fill_(4.0)
        teacher.gates.theta[1].fill_(-4.0)
    student = copy.deepcopy(teacher)
    seen = []
    student.register_forward_hook(lambda module, args, out: seen.append(out.head_mask.detach().round()))
    config = TrainConfig(objective="hard_adapt", epochs=1, batch_size=128, budget=0.25,
                         adaptation=HardAdaptation(min_per_layer=1, freeze_gates=True))
    train(student, toy_data(), config, teacher=teacher, progress=False)
    assert student.min_per_layer == 1
    assert seen and all(bool((mask.sum(1) >= 1).all()) for mask in seen)
    assert student.head_mask_for(0.25).sum(1).tolist() == [1.0, 1.0]  # k = 2 of 8: the best head of each layer
    assert teacher.head_mask_for(0.25).sum(1).tolist() == [2.0, 0.0]


def ablation_importance_written_out(model, ids, labels) -> torch.Tensor:
    """[2, 4]: the loss increase when each head alone is masked, a loop over heads with an explicit hard forward."""
    def loss(mask):
        with torch.no_grad():
            return torch.nn.functional.cross_entropy(model(ids, mode="hard", head_mask=mask).logits, labels).item()

    full = loss(torch.ones(2, 4))
    expected = torch.zeros(2, 4)
    for layer in range(2):
        for head in range(4):
            mask = torch.ones(2, 4)
            mask[layer, head] = 0
            expected[layer, head] = loss(mask) - full
    return expected


def test_nested_gate_start_orders_heads_by_the_masked_loss_written_out():
    # GateStart("ablation"): the importance is the loss increase when each head alone is masked; the nested gates
    # open in that order
    model = tiny("budget", seed=1)
    data = toy_data(n=64)
    expected = ablation_importance_written_out(model, *data.tensors)
    importance = initialise_gates_(model, data, TrainConfig(objective="budgeted",
                                                            gate_start=GateStart("ablation", examples=64)))
    torch.testing.assert_close(importance, expected, atol=1e-5, rtol=0)
    order = torch.argsort(expected.flatten(), descending=True)
    gates = model.gates(0.5).detach().flatten()
    assert torch.equal(torch.argsort(gates, descending=True), order)


def test_ranked_on_changes_only_how_many_examples_the_gate_start_scores_heads_on():
    config = TrainConfig(objective="budgeted", lambda_cost=0.1, two_sided=True,
                         gate_start=GateStart("ablation", sharpness=3.0, examples=64))
    fewer = config.ranked_on(16)
    assert fewer.gate_start == GateStart("ablation", sharpness=3.0, examples=16)
    assert {**vars(fewer), "gate_start": None} == {**vars(config), "gate_start": None}
    model = tiny("budget", seed=1)
    ids, labels = toy_data(n=64).tensors
    expected = ablation_importance_written_out(model, ids[:16], labels[:16])  # the first 16 examples only
    torch.testing.assert_close(initialise_gates_(model, toy_data(n=64), fewer), expected, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="examples >= 1"):
        config.ranked_on(0)


def test_random_nested_start_spreads_the_gates_and_is_seeded():
    a, b = tiny("budget"), tiny("budget")
    config = TrainConfig(objective="budgeted", gate_start=GateStart("random"), seed=5)
    initialise_gates_(a, toy_data(), config)
    initialise_gates_(b, toy_data(), config)
    assert torch.equal(a.gates(0.5), b.gates(0.5))
    assert a.gates(0.5).std().item() > 0.3  # flat gates: ~0.003


def test_head_importance_is_scored_once_for_the_same_weights_and_examples(monkeypatch):
    import bab.heads.train as train_module

    calls = []
    real = train_module.head_ablation_importance
    monkeypatch.setattr(train_module, "head_ablation_importance",
                        lambda *args: calls.append(1) or real(*args))
    monkeypatch.setattr(train_module, "_IMPORTANCE_MEMO", {})
    config = TrainConfig(objective="budgeted", gate_start=GateStart("ablation", examples=32))
    first, second = tiny("budget", seed=1), tiny("budget", seed=1)
    a = initialise_gates_(first, toy_data(), config)
    b = initialise_gates_(second, toy_data(), config)  # same weights, same examples: served from the memo
    assert len(calls) == 1 and torch.equal(a, b)
    other = tiny("budget", seed=2)
    initialise_gates_(other, toy_data(), config)  # other weights: scored again
    assert len(calls) == 2

"""The training loop and its objectives, on tiny models (a few seconds in all)."""

import copy
import math

import pytest
import torch
from torch.utils.data import TensorDataset

from bab.heads.encoder import EncoderClassifier, EncoderConfig
from bab.heads.train import TrainConfig, parameter_groups, train, warm_start


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
    with pytest.raises(ValueError, match="differ beyond the gates"):
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
    ],
)
def test_malformed_train_configs_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


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
    config = TrainConfig(objective="hard_adapt", epochs=1, batch_size=64, lr=1e-3, freeze_gates=True)
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

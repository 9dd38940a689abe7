"""state_digest: a SHA-256 of a model's state, remembered while the state is unchanged, recomputed when it changes."""

import hashlib
from types import SimpleNamespace

import pytest
import torch

import bab.core.digest as digest_module
from bab.core.digest import state_digest


def written_out(model: torch.nn.Module) -> str:
    """The digest by hand: names in sorted order, each with its shape and dtype, then its raw bytes."""
    digest = hashlib.sha256()
    for name in sorted(model.state_dict()):
        tensor = model.state_dict()[name]
        digest.update(f"{name} {tuple(tensor.shape)} {tensor.dtype}".encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        self.register_buffer("scale", torch.ones(2))

    def forward(self, x):
        return self.linear(x) * self.scale


@pytest.fixture
def hashes(monkeypatch):
    """How many times state_digest hashed a state (not read it back)."""
    calls = []
    counting = SimpleNamespace(sha256=lambda *a: calls.append(1) or hashlib.sha256(*a))
    monkeypatch.setattr(digest_module, "hashlib", counting)  # the module's name only: written_out's stays real
    return calls


def test_the_weights_digest_sees_every_value_name_and_dtype():
    model = torch.nn.Linear(3, 2)
    before = state_digest(model)
    assert state_digest(model) == before == written_out(model)
    copy = torch.nn.Linear(3, 2)
    copy.load_state_dict(model.state_dict())
    assert state_digest(copy) == before  # the same weights in another object
    with torch.no_grad():
        copy.bias[1] += 1e-7
    assert state_digest(copy) != before
    assert state_digest(model.to(torch.float64)) != before


def test_an_unchanged_model_is_hashed_once(hashes):
    model = Net()
    first = state_digest(model)
    assert [state_digest(model) for _ in range(3)] == [first] * 3
    assert len(hashes) == 1


def change_in_place(model):
    with torch.no_grad():
        model.linear.weight[0, 0] += 1.0


def change_by_optimizer(model):
    model.linear.weight.grad = torch.ones_like(model.linear.weight)
    torch.optim.SGD(model.parameters(), lr=0.1).step()


def change_by_loading(model):
    other = Net()
    other.scale.fill_(3.0)
    model.load_state_dict(other.state_dict())


def change_data(model):
    model.linear.bias.data = model.linear.bias.data + 1.0


def change_data_twice_back_to_the_same_shape(model):
    model.linear.weight.data = torch.zeros(1)
    model.linear.weight.data = torch.full((2, 3), 5.0)


def replace_parameter(model):
    model.linear.weight = torch.nn.Parameter(torch.full((2, 3), 2.0))


def replace_buffer(model):
    model.scale = torch.full((2,), 4.0)


def change_dtype(model):
    model.to(torch.float64)


def change_in_inference_mode(model):
    with torch.inference_mode():
        model.scale.mul_(2.0)


@pytest.mark.parametrize("change", [change_in_place, change_by_optimizer, change_by_loading, change_data,
                                    change_data_twice_back_to_the_same_shape, replace_parameter, replace_buffer,
                                    change_dtype, change_in_inference_mode])
def test_every_way_of_changing_the_state_gives_the_new_states_digest(change):
    model = Net()
    before = state_digest(model)
    change(model)
    after = state_digest(model)
    assert after == written_out(model) != before


def test_a_model_with_inference_tensors_is_hashed_every_time_and_right(hashes):
    with torch.inference_mode():
        model = Net()  # its parameters are inference tensors: they keep no version counter
    first = state_digest(model)
    with torch.inference_mode():
        model.linear.weight.add_(1.0)
    assert state_digest(model) == written_out(model) != first
    assert len(hashes) == 2


def test_a_remembered_digest_does_not_keep_its_model_alive():
    import gc
    import weakref

    model = Net()
    state_digest(model)
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None

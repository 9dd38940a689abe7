import pytest
import torch

from bab.data.synthetic import CLS, FIRST_VALUE, MARK, SyntheticConfig, build_synthetic, describe_example


@pytest.mark.parametrize("num_filler", [8, 0])
def test_examples_follow_the_task_definition(num_filler):
    config = SyntheticConfig(num_train=512, num_val=64, num_filler=num_filler, seed=3)
    train, _ = build_synthetic(config)
    ids, labels = train.tensors
    assert ids.shape == (512, 64)
    assert torch.all(ids[:, 0] == CLS)
    assert torch.all((ids == MARK).sum(1) == 2)
    for row, label in zip(ids, labels, strict=True):
        first, second = torch.nonzero(row == MARK).flatten().tolist()
        assert second >= first + 2 and second + 1 < len(row)
        v1, v2 = row[first + 1].item(), row[second + 1].item()
        assert FIRST_VALUE <= v1 < FIRST_VALUE + config.num_values
        assert (v1 == v2) == bool(label)
    if num_filler:  # values appear only after the markers
        is_value = (ids >= FIRST_VALUE) & (ids < FIRST_VALUE + config.num_values)
        assert torch.all(is_value.sum(1) == 2)
    assert 0.4 < labels.float().mean() < 0.6


def test_same_seed_same_data_and_different_seed_different_data():
    a = build_synthetic(SyntheticConfig(num_train=64, num_val=16, seed=1))
    b = build_synthetic(SyntheticConfig(num_train=64, num_val=16, seed=1))
    c = build_synthetic(SyntheticConfig(num_train=64, num_val=16, seed=2))
    assert torch.equal(a[0].tensors[0], b[0].tensors[0])
    assert not torch.equal(a[0].tensors[0], c[0].tensors[0])
    assert not torch.equal(a[0].tensors[0][:16], a[1].tensors[0])  # validation is not a copy of train


@pytest.mark.parametrize("kwargs", [dict(seq_len=4), dict(num_values=1), dict(num_train=0), dict(num_filler=-1)])
def test_bad_configs_raise(kwargs):
    with pytest.raises(ValueError, match="SyntheticConfig|at least one"):
        SyntheticConfig(**kwargs)


def test_describe_example_marks_the_values():
    config = SyntheticConfig(num_train=4, num_val=1)
    ids, label = build_synthetic(config)[0][0]
    text = describe_example(ids, label, config)
    assert text.startswith(f"label {int(label)}: C")
    assert text.count("^[") == 2

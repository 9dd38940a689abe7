"""bfloat16 training (``OptimizerConfig.precision``): the loop's forward passes run under bfloat16 autocast, the
weights and optimiser stay float32, float32 stays the default that keeps every cached run's key, and a bad value
says what is allowed."""

import dataclasses
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

import bab.core.precision as precision
from bab.context.train import LMTrainConfig
from bab.core.runs import config_key
from bab.heads.encoder import EncoderClassifier, EncoderConfig
from bab.heads.train import HeadsObjective, TrainConfig, train
from bab.sparsifiner.train import ViTTrainConfig


def encoder():
    torch.manual_seed(0)
    return EncoderClassifier(EncoderConfig(vocab_size=12, num_classes=2, max_len=8, d_model=16, num_heads=4,
                                           num_layers=2, d_ff=32))


def texts(n=64):
    ids = torch.randint(1, 12, (n, 8), generator=torch.Generator().manual_seed(0))
    return TensorDataset(ids, (ids == 5).any(1).long())


def recorded_dtypes(monkeypatch, config):
    """Train a tiny encoder under ``config``; the dtype of the logits of every training step's forward pass."""
    seen = []
    original = HeadsObjective.step

    def recording(self, model, teacher, batch, rng, step):
        seen.append(model(batch[0]).logits.dtype)
        return original(self, model, teacher, batch, rng, step)

    monkeypatch.setattr(HeadsObjective, "step", recording)
    model = encoder()
    train(model, texts(), config, progress=False)
    return model, seen


@pytest.mark.filterwarnings("ignore:precision='bfloat16'")
def test_bfloat16_steps_run_under_autocast_and_keep_float32_weights(monkeypatch):
    model, seen = recorded_dtypes(monkeypatch, TrainConfig(epochs=2, batch_size=16, precision="bfloat16"))
    assert seen == [torch.bfloat16] * 8
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    with torch.no_grad():  # and outside the loop the model is a float32 model again
        assert model(texts().tensors[0]).logits.dtype == torch.float32


def test_float32_steps_run_without_autocast(monkeypatch):
    _, seen = recorded_dtypes(monkeypatch, TrainConfig(epochs=2, batch_size=16))
    assert seen == [torch.float32] * 8


@pytest.mark.filterwarnings("ignore:precision='bfloat16'")
def test_bfloat16_trains_weights_close_to_float32_but_not_equal():
    """The same run in both precisions: it learns (the loss falls) and lands near the float32 weights, which it
    cannot reproduce bit for bit (hence its own cache key)."""
    data = texts(256)
    trained = {}
    for name in precision.PRECISIONS:
        model = encoder()
        result = train(model, data, TrainConfig(epochs=6, batch_size=32, lr=3e-3, precision=name), progress=False)
        trained[name] = (model, [row["loss"] for row in result.history])
    (full, full_losses), (half, half_losses) = trained["float32"], trained["bfloat16"]
    assert half_losses[-1] < 0.8 * half_losses[0]
    assert abs(half_losses[-1] - full_losses[-1]) < 0.1 * full_losses[0]
    differences = [(a - b).abs().max().item() for a, b in zip(full.parameters(), half.parameters(), strict=True)]
    assert 0 < max(differences) < 0.1


@pytest.mark.parametrize("config_class", [TrainConfig, LMTrainConfig, ViTTrainConfig])
def test_float32_keeps_the_run_keys_bfloat16_has_its_own(config_class):
    base = config_class()
    assert config_key(base) == config_key(dataclasses.replace(base, precision="float32"))
    assert config_key(dataclasses.replace(base, precision="bfloat16")) != config_key(base)


@pytest.mark.parametrize("config_class", [TrainConfig, LMTrainConfig, ViTTrainConfig])
def test_an_unknown_precision_names_the_choices(config_class):
    with pytest.raises(ValueError, match=rf"{config_class.__name__}\.precision must be one of .*float32.*bfloat16"):
        config_class(precision="float16")


@pytest.mark.parametrize("config_class", [TrainConfig, LMTrainConfig, ViTTrainConfig])
def test_the_environment_sets_the_default_precision_a_named_one_wins(config_class, monkeypatch):
    monkeypatch.setenv("BAB_PRECISION", "bfloat16")
    assert config_class().precision == "bfloat16"
    assert config_class(precision="float32").precision == "float32"
    # keyed as a config that names bfloat16: a run trained under the variable is found without it, and the other way
    assert config_key(config_class()) == config_key(dataclasses.replace(config_class(), precision="bfloat16"))
    monkeypatch.setenv("BAB_PRECISION", " ")
    assert config_class().precision == "float32"
    monkeypatch.delenv("BAB_PRECISION")
    assert config_class().precision == "float32"
    assert config_key(config_class()) != config_key(config_class(precision="bfloat16"))


def test_a_bad_precision_in_the_environment_names_the_variable_and_the_choices(monkeypatch):
    monkeypatch.setenv("BAB_PRECISION", "fp16")
    with pytest.raises(ValueError, match=r"\$BAB_PRECISION must be one of .*float32.*bfloat16.*'fp16'"):
        TrainConfig()


def test_emulated_bfloat16_warns_native_does_not(monkeypatch):
    monkeypatch.setattr(precision, "native_bfloat16", lambda device_type="cpu": False)
    with pytest.warns(UserWarning, match="emulates"):
        precision.warn_if_emulated("bfloat16", "cpu")
    monkeypatch.setattr(precision, "native_bfloat16", lambda device_type="cpu": True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        precision.warn_if_emulated("bfloat16", "cpu")
        precision.warn_if_emulated("float32", "cpu")


def test_the_bench_gives_a_speed_up_with_its_interval_and_both_losses():
    model = encoder()
    ids, labels = texts(32).tensors

    def loss_of(m):
        return F.cross_entropy(m(ids).logits, labels)

    table = precision.precision_step_bench({"tiny": (model, loss_of)}, warmup=1, repeats=3)
    row = table.iloc[0]
    assert row["repeats"] == 3 and row["speed-up low"] <= row["speed-up"] <= row["speed-up high"]
    assert row["speed-up"] == pytest.approx(row["float32 ms"] / row["bfloat16 ms"])
    with torch.no_grad():
        assert row["float32 loss"] == pytest.approx(float(loss_of(model)))
    assert row["bfloat16 loss"] == pytest.approx(row["float32 loss"], rel=0.05)


def test_the_bench_command_times_a_chosen_notebook(capsys):
    from bab.__main__ import main

    assert main(["bench", "precision", "--only", "01", "--warmup", "0", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert "01 custom encoder, synthetic task" in out and "speed-up" in out and "02 custom encoder" not in out


def test_the_bench_command_names_the_notebooks_it_knows(capsys):
    from bab.__main__ import main

    assert main(["bench", "precision", "--only", "04"]) == 2
    assert "--only takes notebooks among 01, 02, 03, 05, 06, 07" in capsys.readouterr().err


def _context_pruning_run(precision_name):
    from transformers import GPT2Config, GPT2LMHeadModel

    from bab.context.attach import attach
    from bab.context.interaction import PruningConfig
    from bab.context.train import train_lm

    torch.manual_seed(0)
    model = attach(GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=2, n_head=2,
                                              bos_token_id=None, eos_token_id=None)), PruningConfig(r=4))
    stream = torch.randint(0, 50, (2000,), generator=torch.Generator().manual_seed(3))
    config = LMTrainConfig(objective="context_pruning", steps=6, batch_size=4, context=16, gamma=0.5,
                           precision=precision_name)
    return model, train_lm(model, stream, config, progress=False, log_every=3)


def _sparsifiner_run(precision_name):
    from bab.sparsifiner.predictor import ConnectivityConfig
    from bab.sparsifiner.train import train_vit
    from bab.sparsifiner.vit import ViTClassifierConfig, build_vit

    config = ViTClassifierConfig(image_size=8, patch_size=2, hidden_size=16, num_layers=2, num_heads=2,
                                 intermediate_size=32)
    torch.manual_seed(0)
    teacher = build_vit(config)
    model = build_vit(dataclasses.replace(config, connectivity=ConnectivityConfig(n_down=8)))
    model.load_state_dict(teacher.state_dict(), strict=False)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 1, 8, 8, generator=g), torch.randint(0, 10, (32,), generator=g))
    train_config = ViTTrainConfig(objective="joint", epochs=1, batch_size=16, keep_rates=(0.25, 0.5),
                                  precision=precision_name)
    return model, train_vit(model, data, train_config, teacher=teacher, progress=False)


def _heads_run(precision_name):
    model = encoder()
    config = TrainConfig(epochs=1, batch_size=16, precision=precision_name)
    return model, train(model, texts(), config, progress=False)


@pytest.mark.filterwarnings("ignore:precision='bfloat16'")
@pytest.mark.parametrize("run", [_heads_run, _context_pruning_run, _sparsifiner_run])
def test_every_methods_objective_trains_in_bfloat16(run):
    """The pruning paths (log I added to the attention mask, the predictor's top-k mask) under autocast: finite
    losses, float32 weights, and other weights than float32 training gives."""
    full, full_result = run("float32")
    half, half_result = run("bfloat16")
    assert all(math.isfinite(row["loss"]) for row in half_result.history)
    assert {p.dtype for p in half.parameters()} == {torch.float32}
    assert any(not torch.equal(a, b) for a, b in zip(full.parameters(), half.parameters(), strict=True))

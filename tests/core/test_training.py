"""The one training loop: a run interrupted in the middle resumes to exactly the uninterrupted run.

Each method's objective is run three ways on a tiny model: in one sitting; killed from inside the loop
at a step in the middle (an exception, or SIGTERM, after a checkpoint every few steps) and resumed by the
same call; and, as a check that the comparison can fail, with the warm-up shifted by one step.
"""

import copy
import os
import random
import signal
from functools import partial

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel

import bab.core.training as training
from bab.context.attach import attach
from bab.context.interaction import PruningConfig
from bab.context.train import LMObjective, LMTrainConfig, train_lm
from bab.core.checkpoints import Checkpointer
from bab.core.runs import RunCache
from bab.heads.encoder import EncoderClassifier, EncoderConfig
from bab.heads.train import HeadsObjective, TrainConfig, train
from bab.sparsifiner.predictor import ConnectivityConfig
from bab.sparsifiner.train import ViTObjective, ViTTrainConfig, train_vit
from bab.sparsifiner.vit import ViTClassifierConfig, build_vit


class Crash(RuntimeError):
    pass


def encoder(gates=None):
    torch.manual_seed(0)
    return EncoderClassifier(EncoderConfig(vocab_size=12, num_classes=2, max_len=8, d_model=16, num_heads=4,
                                           num_layers=2, d_ff=32, gates=gates, dropout=0.1))


def texts(padded=False, n=48):
    """``n`` texts of 8 tokens; ``padded``: each cut to a random length 2-8 and right-padded with 0."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 12, (n, 8), generator=g)
    if padded:
        ids = ids.masked_fill(torch.arange(8) >= torch.randint(2, 9, (n, 1), generator=g), 0)
    return TensorDataset(ids, (ids == 5).any(1).long())


def decoder():
    torch.manual_seed(0)
    return attach(GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=2, n_head=2,
                                             bos_token_id=None, eos_token_id=None)),
                  PruningConfig(r=4, budget_conditioned=True))


STREAM = torch.randint(0, 50, (2000,), generator=torch.Generator().manual_seed(3))


def vit(**extra):
    torch.manual_seed(0)
    return build_vit(ViTClassifierConfig(image_size=8, patch_size=2, hidden_size=16, num_layers=2, num_heads=2,
                                         intermediate_size=32, dropout=0.1, **extra))


def images():
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(48, 1, 8, 8, generator=g), torch.randint(0, 10, (48,), generator=g))


def heads_run(checkpoint=None, group_by_length=False):
    """Hard adaptation with distillation, per-epoch validation selection and the unadapted candidate:
    3 batches an epoch, 3 epochs (``group_by_length``: padded texts in length-grouped batches)."""
    soft = encoder("budget")
    model = copy.deepcopy(soft)
    val = texts(padded=group_by_length)

    def score(m):
        with torch.no_grad():
            return float((m(val.tensors[0], budget=0.5, mode="hard").logits.argmax(-1) == val.tensors[1]).sum())

    config = TrainConfig(objective="hard_adapt", epochs=3, batch_size=16, seed=4, group_by_length=group_by_length)
    return model, train(model, texts(padded=group_by_length), config, teacher=soft, progress=False, select=score,
                        checkpoint=checkpoint)


def lm_run(checkpoint=None):
    """The budget-conditioned context-pruning objective: 14 sampled steps, a row every 4."""
    model = decoder()
    config = LMTrainConfig(objective="budget_context", steps=14, batch_size=4, context=16, lambda_viol=20.0,
                           two_sided=True, seed=3)
    return model, train_lm(model, STREAM, config, progress=False, log_every=4, checkpoint=checkpoint)


def vit_run(checkpoint=None):
    """Sparsifiner's phase 2 (keep rate drawn per batch, distilled from a teacher): 3 batches an epoch, 3 epochs."""
    teacher, model = vit(), vit(connectivity=ConnectivityConfig(n_down=8))
    model.load_state_dict(teacher.state_dict(), strict=False)
    config = ViTTrainConfig(objective="joint", epochs=3, batch_size=16, keep_rates=(0.25, 0.5), seed=3)
    return model, train_vit(model, images(), config, teacher=teacher, progress=False, checkpoint=checkpoint)


METHODS = {"heads": (heads_run, HeadsObjective, 9), "heads_grouped": (partial(heads_run, group_by_length=True),
                                                                     HeadsObjective, 9),
           "lm": (lm_run, LMObjective, 14),
           "vit": (vit_run, ViTObjective, 9)}


def finished_state(run, checkpoint=None):
    model, result = run(checkpoint)
    return {"weights": model.state_dict(), "history": result.history, "selected": result.selected_epoch,
            "torch": torch.get_rng_state(), "python": random.getstate(), "numpy": repr(np.random.get_state()),
            "resumed_at": result.resumed_at}


def assert_same_run(a, b):
    assert a["weights"].keys() == b["weights"].keys()
    assert all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"])
    assert a["history"] == b["history"]
    assert a["selected"] == b["selected"]
    assert torch.equal(a["torch"], b["torch"]) and a["python"] == b["python"] and a["numpy"] == b["numpy"]


def crash_at(monkeypatch, objective, step_to_fail: int, how):
    """Make ``objective.step`` fail at the 0-based optimizer step ``step_to_fail``."""
    original = objective.step

    def failing(self, model, teacher, batch, rng, step):
        if step == step_to_fail:
            how()
        return original(self, model, teacher, batch, rng, step)

    monkeypatch.setattr(objective, "step", failing)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("fail_at", [5, 7])  # checkpoints every 2 steps: the last mid-epoch, or at an epoch's end
def test_a_run_killed_in_the_middle_resumes_to_the_uninterrupted_run(method, fail_at, tmp_path, monkeypatch):
    run, objective, total = METHODS[method]
    reference = finished_state(run)
    checkpoint = Checkpointer(tmp_path / "partial" / "checkpoint.pt", every_steps=2)
    with monkeypatch.context() as patch:
        crash_at(patch, objective, fail_at, lambda: (_ for _ in ()).throw(Crash("killed")))
        with pytest.raises(Crash):
            run(checkpoint)
    saved = checkpoint.load()
    assert saved["position"].step == fail_at // 2 * 2  # the last multiple of every_steps before the failure
    torch.manual_seed(999)  # the resumed process starts from other random states: the checkpoint restores them
    random.seed(999)
    resumed = finished_state(run, checkpoint)
    assert resumed["resumed_at"] == fail_at // 2 * 2 and reference["resumed_at"] is None
    assert_same_run(resumed, reference)
    assert total > fail_at


@pytest.mark.parametrize("method", METHODS)
def test_sigterm_writes_a_checkpoint_at_the_step_and_stops(method, tmp_path, monkeypatch):
    run, objective, _ = METHODS[method]
    reference = finished_state(run)
    checkpoint = Checkpointer(tmp_path / "checkpoint.pt", every_seconds=3600)  # only the signal writes one
    with monkeypatch.context() as patch:
        crash_at(patch, objective, 5, lambda: os.kill(os.getpid(), signal.SIGTERM))
        with pytest.raises(SystemExit) as stopped:
            run(checkpoint)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert checkpoint.load()["position"].step == 6  # the step under way finished first: nothing is lost
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the loop's handler is gone again
    assert_same_run(finished_state(run, checkpoint), reference)


@pytest.mark.parametrize("method", METHODS)
def test_the_comparison_sees_a_warmup_shifted_by_one_step(method, monkeypatch):
    run, _, _ = METHODS[method]
    reference = finished_state(run)
    monkeypatch.setattr(training, "warmup_steps", lambda fraction, total: max(1, int(fraction * total)) + 1)
    with pytest.raises(AssertionError):
        assert_same_run(finished_state(run), reference)


@pytest.mark.parametrize("method", ["heads", "lm", "vit"])
def test_a_trained_model_keeps_no_gradients(method):
    # a notebook keeping a dozen fine-tuned decoders kept a dozen decoders' worth of stale gradients beside them
    model, _ = METHODS[method][0]()
    assert any(p.requires_grad for p in model.parameters())
    assert all(p.grad is None for p in model.parameters())


def test_a_checkpoint_of_another_loop_version_is_not_resumed(tmp_path):
    checkpoint = Checkpointer(tmp_path / "c.pt")
    checkpoint.save({"position": None})
    assert checkpoint.load() is not None
    torch.save({"format": 0}, checkpoint.path)
    assert checkpoint.load() is None


def test_the_run_cache_resumes_then_clears_the_partial_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BAB_CHECKPOINT_SECONDS", "1e-9")  # a checkpoint after every step
    cache, config = RunCache(tmp_path), {"method": "lm"}

    def fit(model, checkpoint):
        result = train_lm(model, STREAM, LMTrainConfig(objective="lm", steps=6, batch_size=2, context=16, seed=1),
                          progress=False, log_every=3, checkpoint=checkpoint)
        return {"history": result.history}

    with monkeypatch.context() as patch:
        crash_at(patch, LMObjective, 4, lambda: (_ for _ in ()).throw(Crash("killed")))
        with pytest.raises(Crash):
            cache.get_or_train("gpt2-dense", config, decoder(), fit)
    partial = cache.checkpointer("gpt2-dense", config).path
    assert partial.exists() and partial.parent.parent == tmp_path / "partial"
    metrics = cache.get_or_train("gpt2-dense", config, decoder(), fit)
    assert "resuming gpt2-dense (lm) at step 4/6" in capsys.readouterr().err
    assert metrics["cached"] is False and not partial.parent.exists()
    assert metrics["history"] == fit(decoder(), None)["history"]


@pytest.mark.parametrize("method", METHODS)
def test_the_first_checkpoint_comes_after_first_seconds_then_every_seconds(method, tmp_path, monkeypatch):
    """A run killed in its first minutes resumes: the first write waits ``first_seconds``, the later ones
    ``every_seconds`` (a clock that moves 10 s a step: first_seconds 25 -> the first write after step 3, then
    every_seconds 1000 -> none more)."""
    run, objective, _ = METHODS[method]
    now = [0.0]
    monkeypatch.setattr(training.time, "perf_counter", lambda: now[0])
    saved_at = []
    checkpoint = Checkpointer(tmp_path / "checkpoint.pt", every_seconds=1000, first_seconds=25)
    original = Checkpointer.save

    def save(self, state):
        saved_at.append(state["position"].step)
        original(self, state)

    with monkeypatch.context() as patch:
        patch.setattr(Checkpointer, "save", save)
        crash_at(patch, objective, 0, lambda: now.__setitem__(0, now[0] + 10))
        crash_at(patch, objective, 1, lambda: now.__setitem__(0, now[0] + 10))
        crash_at(patch, objective, 2, lambda: now.__setitem__(0, now[0] + 10))
        run(checkpoint)
    assert saved_at == [3]


def test_bad_checkpoint_settings_raise(tmp_path):
    with pytest.raises(ValueError, match="every_steps must be >= 1"):
        Checkpointer(tmp_path / "c.pt", every_steps=0)
    with pytest.raises(ValueError, match="must be > 0"):
        Checkpointer(tmp_path / "c.pt", every_seconds=0)


def test_no_progress_bar_is_drawn_into_a_log_file(capsys):
    assert not training.live_output()  # pytest captures stderr: what a log file sees
    lm_model = decoder()
    train_lm(lm_model, STREAM, LMTrainConfig(objective="lm", steps=4, batch_size=2, context=16), progress=True,
             log_every=2)
    out = capsys.readouterr()
    assert "\r" not in out.err and "\r" not in out.out
    assert out.out.count("step=") == 2  # the history rows are the progress a log shows


def test_each_process_keeps_its_own_checkpoint_and_clear_removes_them_all(tmp_path):
    checkpoint = Checkpointer(tmp_path / "run" / "checkpoint.pt")
    assert checkpoint.for_process(0, 1) is checkpoint
    ranks = [checkpoint.for_process(i, 2) for i in range(2)]
    assert [c.path.name for c in ranks] == ["checkpoint.process0of2.pt", "checkpoint.process1of2.pt"]
    for i, c in enumerate(ranks):
        c.save({"rank": i})
    assert [c.load()["rank"] for c in ranks] == [0, 1]
    checkpoint.clear()
    assert not (tmp_path / "run").exists()


def batches_seen(group_by_length: bool, epochs: int = 2) -> list[torch.Tensor]:
    """The input batches a heads run trains on, recorded from inside the objective's step."""
    seen = []
    original = HeadsObjective.step

    def recording(self, model, teacher, batch, rng, step):
        seen.append(batch[0].clone())
        return original(self, model, teacher, batch, rng, step)

    HeadsObjective.step = recording
    try:
        config = TrainConfig(objective="dense", epochs=epochs, batch_size=4, seed=1, group_by_length=group_by_length)
        train(encoder(), texts(padded=True, n=192), config, progress=False)
    finally:
        HeadsObjective.step = original
    return seen


def test_length_grouped_batches_cover_every_text_once_an_epoch_and_pad_less():
    data = texts(padded=True, n=192).tensors[0]
    lengths = data.ne(0).sum(1)
    per_epoch = len(data) // 4
    padded_tokens = {}
    for grouped in (False, True):
        batches = batches_seen(grouped)
        assert len(batches) == 2 * per_epoch
        for epoch in range(2):  # each epoch is a permutation of the 48 texts: compare the sorted rows
            rows = torch.cat(batches[epoch * per_epoch:(epoch + 1) * per_epoch])
            assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, data.tolist()))
        # tokens a trimmed batch computes: its size times its longest text
        padded_tokens[grouped] = sum(len(b) * int(b.ne(0).sum(1).max()) for b in batches)
        # each mega-batch (12 batches of 4 here) is sorted by length, so a batch spans at most two lengths
        spans = [int(b.ne(0).sum(1).max() - b.ne(0).sum(1).min()) for b in batches]
        if grouped:
            assert max(spans) <= 1, spans
    assert padded_tokens[True] < 0.8 * padded_tokens[False]
    assert padded_tokens[True] >= 2 * int(lengths.sum())  # two epochs cannot compute fewer than the real tokens
    assert not torch.equal(torch.cat(batches_seen(True, epochs=1)), torch.cat(batches_seen(True, epochs=2)[per_epoch:]))


def test_grouping_by_length_needs_a_pad_id():
    with pytest.raises(ValueError, match="pad_id"):
        HeadsObjective(TrainConfig(group_by_length=True), texts(padded=True))


@pytest.mark.parametrize("bad, message", [
    (dict(batch_size=0), "batch_size must be an integer >= 1"),
    (dict(lr=0.0), "lr must be > 0"),
    (dict(grad_clip=-1.0), "grad_clip must be >= 0"),
    (dict(warmup_fraction=1.0), r"warmup_fraction must lie in \[0, 1\)"),
])
def test_every_methods_training_config_checks_the_shared_optimizer_settings_once(bad, message):
    from bab.context.train import LMTrainConfig
    from bab.core.training import OptimizerConfig
    from bab.heads.train import TrainConfig
    from bab.sparsifiner.train import ViTTrainConfig

    for config in (TrainConfig, ViTTrainConfig, LMTrainConfig):
        assert issubclass(config, OptimizerConfig)
        with pytest.raises(ValueError, match=f"{config.__name__}.*{message}"):
            config(**bad)
    # each keeps its recipe's defaults
    assert (TrainConfig().batch_size, ViTTrainConfig().batch_size, LMTrainConfig().batch_size) == (64, 128, 16)
    assert (ViTTrainConfig().weight_decay, ViTTrainConfig().warmup_fraction) == (0.05, 0.1)

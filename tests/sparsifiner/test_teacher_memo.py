"""The teacher's outputs kept across epochs (``TeacherMemo``): phase 2, Sparsif-EViT and Linformer train bit for
bit as when the teacher runs on every batch, the teacher runs once per training image, and an image's outputs do
not depend on the other images of its batch (what makes the memo exact)."""

import random

import pytest
import torch
from torch.utils.data import TensorDataset

from bab.sparsifiner import train as vit_train
from bab.sparsifiner.predictor import ConnectivityConfig
from bab.sparsifiner.train import TeacherMemo, ViTTrainConfig, memoises_teacher, train_vit
from bab.sparsifiner.vit import ViTClassifierConfig, build_vit, vit_forward

TINY = dict(image_size=8, patch_size=2, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32)  # 17 tokens


def tiny(**extra):
    torch.manual_seed(0)
    return build_vit(ViTClassifierConfig(**TINY, **extra))


def toy_data(n=40):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g))


def student_and_teacher(**extra):
    teacher = tiny().eval()
    student = tiny(**extra)
    student.load_state_dict(teacher.state_dict(), strict=False)
    return student, teacher


def trained(config, memo: bool, monkeypatch, **extra):
    """(final weights, history, the teacher's batch sizes) of ``config`` from the same start, with or without the
    memo."""
    student, teacher = student_and_teacher(**extra)
    calls = []
    with monkeypatch.context() as patch:
        patch.setattr(vit_train, "memoises_teacher", lambda c: memo and memoises_teacher(c))
        # the loop distils from a frozen copy of the teacher: count the copy's forwards through the class
        patch.setattr(type(teacher), "forward", counted(type(teacher).forward, calls))
        result = train_vit(student, toy_data(), config, teacher=teacher, progress=False)
    return student.state_dict(), result.history, calls


def counted(forward, calls):
    """``forward``, appending the batch size of each call on a model with every weight frozen (the teacher)."""
    def wrapper(self, *args, **kwargs):
        if not any(p.requires_grad for p in self.parameters()):
            calls.append(args[0].shape[0] if args else kwargs["pixel_values"].shape[0])
        return forward(self, *args, **kwargs)
    return wrapper


CONFIGS = {
    "phase 2": (ViTTrainConfig(objective="joint", epochs=3, batch_size=16, keep_rates=(0.25, 0.5)),
                dict(connectivity=ConnectivityConfig(n_down=4))),
    "Sparsif-EViT": (ViTTrainConfig(objective="joint", epochs=2, batch_size=16, keep_rates=(0.5,), token_keep=0.5,
                                    prune_layers=(0,)), dict(connectivity=ConnectivityConfig(n_down=4))),
    "Linformer": (ViTTrainConfig(objective="linformer", epochs=2, batch_size=16), dict(linformer_len=5)),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_training_with_the_memo_is_the_same_bit_for_bit(name, monkeypatch):
    config, extra = CONFIGS[name]
    assert memoises_teacher(config)
    weights, history, calls = trained(config, True, monkeypatch, **extra)
    reference, reference_history, reference_calls = trained(config, False, monkeypatch, **extra)
    assert weights.keys() == reference.keys()
    assert all(torch.equal(weights[k], reference[k]) for k in weights)
    assert history == reference_history
    # the teacher ran on each of the 40 images once, in the first epoch, instead of once an epoch
    assert sum(calls) == 40 and sum(reference_calls) == 40 * config.epochs


def test_the_memo_holds_each_images_outputs_from_the_batch_that_first_held_it():
    teacher = tiny().eval()
    pixels = toy_data(37).tensors[0]
    memo = TeacherMemo(37)
    order = torch.randperm(37, generator=torch.Generator().manual_seed(1))
    batches = [order[start:start + 16] for start in range(0, 37, 16)]
    for index in batches:  # the first epoch fills the memo, in shuffled batches
        memo(teacher, pixels[index], index)
    assert bool(memo.known.all())
    with torch.no_grad():
        for index in batches:
            out = vit_forward(teacher, pixels[index])
            assert torch.equal(memo.logits[index], out.logits) and torch.equal(memo.tokens[index], out.tokens)
    # a later epoch's batch reads them back without running the teacher
    memo.logits[order[:4]] += 1.0
    logits, _ = memo(None, pixels[order[:4]], order[:4])
    with torch.no_grad():
        torch.testing.assert_close(logits, vit_forward(teacher, pixels[order[:4]]).logits + 1.0)


def test_an_image_gets_the_same_teacher_outputs_in_a_batch_of_another_make_up():
    """What makes the memo exact: the outputs of the images of a shuffled batch of training size are the rows
    of the same images in other batches of that size (checked here at notebook 05's batch of 128 and its last
    batch; a batch of one image may take another kernel)."""
    from bab.sparsifiner.training_bench import phase2_models

    _, teacher = phase2_models(50)
    g = torch.Generator().manual_seed(0)
    pixels = torch.randn(272, 1, 28, 28, generator=g)
    memo = TeacherMemo(272)
    for start in range(0, 272, 128):
        memo(teacher, pixels[start:start + 128], torch.arange(start, min(start + 128, 272)))
    shuffled = torch.randperm(272, generator=g)[:128]
    with torch.no_grad():
        out = vit_forward(teacher, pixels[shuffled])
    assert torch.equal(out.logits, memo.logits[shuffled]) and torch.equal(out.tokens, memo.tokens[shuffled])


def test_what_the_memo_does_not_cover():
    assert not memoises_teacher(ViTTrainConfig(objective="joint", epochs=1))  # nothing to reuse
    assert not memoises_teacher(ViTTrainConfig(objective="dense", epochs=4))  # no teacher
    assert not memoises_teacher(ViTTrainConfig(objective="predictor", epochs=4))  # distils attention
    # distils the teacher's attention rows too, which the memo does not hold
    assert not memoises_teacher(ViTTrainConfig(objective="joint", epochs=4, joint_predictor=True))


def test_a_target_with_the_joint_predictor_is_refused():
    student, teacher = student_and_teacher(connectivity=ConnectivityConfig(n_down=4))
    config = ViTTrainConfig(objective="joint", joint_predictor=True)
    pixels, labels = toy_data(4).tensors
    target = (torch.zeros(4, 10), torch.zeros(4, 17, 16))
    with pytest.raises(ValueError, match="leave target at None"):
        vit_train._step(student, teacher, pixels, labels, config, random.Random(0), target=target)

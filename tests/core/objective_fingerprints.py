"""Fingerprints of every training objective: tiny runs whose final state dicts, history and RNG states must be
``torch.equal`` before and after a change that should not alter training (a refactor of the loop, say).

    python tests/core/objective_fingerprints.py save after.pt
    PYTHONPATH=<a checkout of an older commit> python tests/core/objective_fingerprints.py save before.pt
    python tests/core/objective_fingerprints.py compare before.pt after.pt

It calls only the three methods' entry points (``train``, ``train_lm``, ``train_vit``), with arguments every
version since the layout by method accepts; one thread, dropout on. The lm runs build bab's own GPT-2 where a version
has it and transformers' GPT-2 with context pruning attached where not: across that change their fingerprints differ
(another model class, initialised and named otherwise), so compare the lm runs only between versions on the same side.
"""

import copy
import random
import sys

import numpy as np
import torch
from torch.utils.data import TensorDataset


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": repr(random.getstate()), "numpy": repr(np.random.get_state())}


def heads_config(gate_start: dict | None = None, **options):
    """``TrainConfig(**options)`` as the version at hand spells it: the gate start (``gate_start``: a dict of
    ``GateStart``'s fields) and the hard adaptation's options nested in ``GateStart`` / ``HardAdaptation``, or flat
    as before (``gate_start`` or, older, ``gate_init``, with ``<that name>_examples`` ...)."""
    from bab.heads import train as heads_train

    fields = heads_train.TrainConfig.__dataclass_fields__
    if "adaptation" in fields:
        adaptation = {k: options.pop(k) for k in list(options) if k in heads_train.HardAdaptation.__dataclass_fields__}
        if adaptation:
            options["adaptation"] = heads_train.HardAdaptation(**adaptation)
        if gate_start is not None:
            options["gate_start"] = heads_train.GateStart(**gate_start)
    elif gate_start is not None:
        start = "gate_start" if "gate_start" in fields else "gate_init"  # the older name
        options.update({start if k == "how" else f"{start}_{k}": v for k, v in gate_start.items()})
    return heads_train.TrainConfig(**options)


def heads_runs(record) -> None:
    from bab.heads.encoder import EncoderClassifier, EncoderConfig
    from bab.heads.train import TrainConfig, train

    def encoder(gates=None):
        torch.manual_seed(0)
        return EncoderClassifier(EncoderConfig(vocab_size=12, num_classes=2, max_len=8, d_model=16, num_heads=4,
                                               num_layers=2, d_ff=32, gates=gates, dropout=0.1))

    ids = torch.randint(1, 12, (96, 8), generator=torch.Generator().manual_seed(0))
    ids[:, 0] = 1
    data = TensorDataset(ids, (ids == 5).any(1).long())
    val_ids, val_labels = ids[:32], (ids[:32] == 5).any(1).long()

    def accuracy(**mode):
        def score(model):
            model.eval()
            with torch.no_grad():
                return float((model(val_ids, **mode).logits.argmax(-1) == val_labels).float().mean())
        return score

    dense = encoder()
    record("heads-dense", dense, train(dense, data, TrainConfig(objective="dense", epochs=3, batch_size=16, lr=3e-3,
                                                                seed=1), progress=False, select=accuracy(mode="dense")))
    soft = encoder("budget")
    soft.load_state_dict(dense.state_dict(), strict=False)
    config = heads_config(objective="budgeted", epochs=2, batch_size=16, lambda_cost=0.5, lambda_viol=20.0, seed=2,
                          two_sided=True, gate_start=dict(how="ablation", examples=32))
    record("heads-budgeted", soft, train(soft, data, config, progress=False))
    static = encoder("static")
    static.load_state_dict(dense.state_dict(), strict=False)
    record("heads-static", static, train(static, data, TrainConfig(objective="static", budget=0.5, epochs=2,
                                                                   batch_size=16, lambda_cost=0.5, lambda_viol=20.0,
                                                                   seed=3), progress=False))
    hard = copy.deepcopy(soft)
    record("heads-hard", hard, train(hard, data, TrainConfig(objective="hard_adapt", epochs=2, batch_size=16, seed=4),
                                     teacher=soft, progress=False, select=accuracy(budget=0.5, mode="hard")))
    frozen = copy.deepcopy(soft)
    config = heads_config(objective="hard_adapt", epochs=1, batch_size=16, seed=4, kd_teacher="dense",
                          budget_choices=(0.25, 0.5), min_per_layer=1, freeze_gates=True)
    record("heads-hard-dense-kd", frozen, train(frozen, data, config, teacher=dense, progress=False))
    recovered = encoder()
    record("heads-recovery", recovered, train(recovered, data, TrainConfig(objective="recovery", epochs=2,
                                                                           batch_size=16, seed=5),
                                              teacher=dense, progress=False))


def lm_runs(record) -> None:
    from bab.context.interaction import PruningConfig
    from bab.context.train import LMTrainConfig, train_lm

    stream = torch.randint(0, 50, (2000,), generator=torch.Generator().manual_seed(3))

    def decoder(pruning=None):
        torch.manual_seed(0)
        try:  # versions with bab's own GPT-2 (before context pruning attached to transformers' decoders)
            from bab.context.gpt2 import GPT2LM, GPT2Config
        except ImportError:
            from transformers import GPT2Config, GPT2LMHeadModel

            from bab.context.attach import attach

            model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=2, n_head=2,
                                                bos_token_id=None, eos_token_id=None))
            return model if pruning is None else attach(model, pruning)
        return GPT2LM(GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=2, n_head=2, pruning=pruning))

    runs = {"lm-lm": (None, dict(objective="lm", steps=12, seed=1)),
            "lm-pruning": (PruningConfig(r=4), dict(objective="context_pruning", steps=12, gamma=0.5, seed=2)),
            "lm-pruning-frozen": (PruningConfig(r=4), dict(objective="context_pruning", steps=8, gamma=0.5, seed=2,
                                                           freeze_pretrained=True)),
            "lm-budget": (PruningConfig(r=4, budget_conditioned=True),
                          dict(objective="budget_context", steps=12, lambda_viol=20.0, two_sided=True, seed=3))}
    for name, (pruning, options) in runs.items():
        model = decoder(pruning)
        config = LMTrainConfig(batch_size=4, context=16, **options)
        record(name, model, train_lm(model, stream, config, progress=False, log_every=5))


def vit_runs(record) -> None:
    from bab.sparsifiner.predictor import ConnectivityConfig
    from bab.sparsifiner.train import ViTTrainConfig, train_vit
    from bab.sparsifiner.vit import ViTClassifierConfig, build_vit

    def vit(**extra):
        torch.manual_seed(0)
        return build_vit(ViTClassifierConfig(image_size=8, patch_size=2, hidden_size=16, num_layers=2,
                                             num_heads=2, intermediate_size=32, dropout=0.1, **extra))

    g = torch.Generator().manual_seed(0)
    images = TensorDataset(torch.randn(48, 1, 8, 8, generator=g), torch.randint(0, 10, (48,), generator=g))
    dense = vit()
    record("vit-dense", dense, train_vit(dense, images, ViTTrainConfig(objective="dense", epochs=2, batch_size=16,
                                                                       seed=1), progress=False))
    phase1 = vit(connectivity=ConnectivityConfig(n_down=8))
    phase1.load_state_dict(dense.state_dict(), strict=False)
    config = ViTTrainConfig(objective="predictor", epochs=2, batch_size=16, lr=1e-2, lambda_spa=0.1, seed=2)
    record("vit-predictor", phase1, train_vit(phase1, images, config, progress=False))
    phase2 = copy.deepcopy(phase1)
    config = ViTTrainConfig(objective="joint", epochs=2, batch_size=16, keep_rates=(0.25, 0.5), seed=3)
    record("vit-joint", phase2, train_vit(phase2, images, config, teacher=dense, progress=False))
    linformer = vit(linformer_len=4)
    linformer.load_state_dict(dense.state_dict(), strict=False)
    config = ViTTrainConfig(objective="linformer", epochs=2, batch_size=16, seed=4)
    record("vit-linformer", linformer, train_vit(linformer, images, config, teacher=dense, progress=False))
    vit_head_runs(record, vit, dense, images)


def vit_head_runs(record, vit, dense, images) -> None:
    """Budgeted heads on the ViT, by the heads method's loop (where a version has it: ``GatedHFClassifier`` takes
    ViTs)."""
    from bab.heads.hf_encoder import GatedHFClassifier
    from bab.heads.train import TrainConfig, train

    gated = GatedHFClassifier.from_hf(vit(), "vit", gates="budget", gate_init_logit=2.0)
    gated.hf.load_state_dict(dense.state_dict())
    config = TrainConfig(objective="budgeted", epochs=2, batch_size=16, lambda_cost=0.5, lambda_viol=20.0, seed=5)
    record("vit-budgeted", gated, train(gated, images, config, progress=False))
    hard = copy.deepcopy(gated)
    teacher = GatedHFClassifier.from_hf(copy.deepcopy(dense), "vit", gates=None)
    config = heads_config(objective="hard_adapt", epochs=2, batch_size=16, kd_teacher="dense", seed=6)
    record("vit-heads-hard", hard, train(hard, images, config, teacher=teacher, progress=False))


def save(path: str) -> None:
    torch.set_num_threads(1)
    out = {}

    def record(name, model, result):
        out[name] = {"state": {k: v.clone() for k, v in model.state_dict().items()}, "history": result.history,
                     "selected_epoch": result.selected_epoch, "rng": rng_state()}

    for runs in (heads_runs, lm_runs, vit_runs):
        runs(record)
    torch.save(out, path)
    print(f"{len(out)} runs saved to {path}")


def compare(before_path: str, after_path: str) -> int:
    before, after = (torch.load(p, weights_only=False) for p in (before_path, after_path))
    differ = 0
    for name, a in before.items():
        b = after[name]
        state = a["state"].keys() == b["state"].keys() and all(torch.equal(a["state"][k], b["state"][k])
                                                               for k in a["state"])
        history, selected = a["history"] == b["history"], a["selected_epoch"] == b["selected_epoch"]
        rng = torch.equal(a["rng"]["torch"], b["rng"]["torch"]) and all(a["rng"][k] == b["rng"][k]
                                                                        for k in ("python", "numpy"))
        differ += not (state and history and selected and rng)
        print(f"{name:22s} state {state} history {history} rng {rng} selected {selected}")
    print(f"{len(before) - differ} equal, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["save"] and len(sys.argv) == 3:
        save(sys.argv[2])
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)

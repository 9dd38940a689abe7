"""Tiny runs of the three methods' objectives through the one loop, for the one-vs-two-process test.

``python tests/core/loop_runs.py OUT.json`` (or under ``accelerate launch``) trains each and, on the main
process, writes every run's history and a digest of its final weights. Dropout is off: two processes draw
other dropout masks than one.
"""

import json
import sys

import torch
from torch.utils.data import TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel

from bab.context.attach import attach
from bab.context.interaction import PruningConfig
from bab.context.train import LMTrainConfig, train_lm
from bab.core.training import distributed_state
from bab.heads.encoder import EncoderClassifier, EncoderConfig
from bab.heads.train import TrainConfig, train
from bab.sparsifiner.train import ViTTrainConfig, train_vit
from bab.sparsifiner.vit import ViTClassifierConfig, build_vit


def heads():
    torch.manual_seed(0)
    model = EncoderClassifier(EncoderConfig(vocab_size=12, num_classes=2, max_len=8, d_model=16, num_heads=4,
                                            num_layers=2, d_ff=32, gates="budget", dropout=0.0))
    ids = torch.randint(1, 12, (64, 8), generator=torch.Generator().manual_seed(0))
    data = TensorDataset(ids, (ids == 5).any(1).long())
    config = TrainConfig(objective="budgeted", epochs=2, batch_size=16, lambda_cost=0.5, lambda_viol=20.0, seed=2)
    return model, train(model, data, config, progress=False)


def lm():
    torch.manual_seed(0)
    model = attach(GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=2, n_head=2,
                                              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None,
                                              eos_token_id=None)), PruningConfig(r=4))
    stream = torch.randint(0, 50, (2000,), generator=torch.Generator().manual_seed(3))
    config = LMTrainConfig(objective="context_pruning", steps=8, batch_size=4, context=16, gamma=0.5, seed=2)
    return model, train_lm(model, stream, config, progress=False, log_every=4)


def vit():
    torch.manual_seed(0)
    model = build_vit(ViTClassifierConfig(image_size=8, patch_size=2, hidden_size=16, num_layers=2, num_heads=2,
                                          intermediate_size=32, dropout=0.0))
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 1, 8, 8, generator=g), torch.randint(0, 10, (64,), generator=g))
    return model, train_vit(model, data, ViTTrainConfig(objective="dense", epochs=2, batch_size=16, seed=1),
                            progress=False)


if __name__ == "__main__":
    torch.set_num_threads(1)
    runs = {}
    for name, run in {"heads": heads, "lm": lm, "vit": vit}.items():
        model, result = run()
        runs[name] = {"history": result.history,
                      "weights": {k: v.double().sum().item() for k, v in model.state_dict().items()}}
    state = distributed_state()
    if state.is_main_process:
        with open(sys.argv[1], "w") as out:
            json.dump({"processes": state.num_processes, "runs": runs}, out)
    # leave the process group together and explicitly: a gloo group left to the interpreter's exit can abort
    state.wait_for_everyone()
    state.destroy_process_group()

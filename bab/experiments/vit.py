"""Notebook 05's study: a small ViT on Fashion-MNIST, Sparsifiner, and its baselines on one cost axis.

Every trained model goes through the run cache, keyed by its whole lineage (data, model, training,
and the run it started from), so the notebook re-runs in seconds once its models exist:

    dense teacher -> Sparsifiner phase 1 (predictor) -> phase 2 (joint)
                  -> Linformer at the same budget (warm start, same recipe as phase 2)
                  -> budgeted head gates (warm start, Eq. 5) -> hard top-k heads (straight-through)
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.flop_counter import FlopCounterMode

from bab.data.images import image_splits, load_fashion_mnist
from bab.models.sparsifiner import num_connections
from bab.models.vit import ViTClassifier, ViTClassifierConfig
from bab.runs import RunCache
from bab.train import seed_everything
from bab.train_vit import train_vit


@cache
def _cached_splits(num_train: int, num_val: int, num_test: int, seed: int, path: str | None):
    return image_splits(load_fashion_mnist(path), num_train, num_val, num_test, seed)


@torch.no_grad()
def evaluate_vit(model, data: Dataset, batch_size: int = 500, **forward) -> dict:
    """Accuracy (%), mean loss and MHSA cost (multiply-adds per example and fraction of dense) on ``data``."""
    model.eval()
    correct, loss_sum, seen, macs = 0, 0.0, 0, 0.0
    for pixels, labels in DataLoader(data, batch_size=batch_size):
        out = model(pixels, **forward)
        loss_sum += F.cross_entropy(out.logits, labels, reduction="sum").item()
        correct += (out.logits.argmax(-1) == labels).sum().item()
        seen += labels.numel()
        macs += out.mhsa_macs * labels.numel()
    macs /= seen
    return {"accuracy": 100.0 * correct / seen, "loss": loss_sum / seen, "mhsa_macs": macs,
            "cost": macs / model.dense_mhsa_macs()}


@torch.no_grad()
def attention_core_flops(model, pixels: torch.Tensor, **forward) -> dict:
    """FlopCounterMode on one forward: total FLOPs, and the attention-core FLOPs (everything but the
    q/k/v/o projections, MLPs, patch embedding and classifier) per example. FlopCounterMode counts
    matrix products only (2 FLOPs per multiply-add) and sees the dense up-projection and the full
    masked scores as they are computed, unlike the analytic count."""
    model.eval()
    with FlopCounterMode(display=False) as counter:  # return_internals: explicit matmuls, which it can count
        model(pixels, return_internals=True, **forward)
    total = counter.get_total_flops()
    counts = counter.get_flop_counts()
    outside = 0
    for name, per_op in counts.items():
        # module-level entries: projections, MLP, patch embedding and classifier are not attention-core work
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2", "projection", "classifier"):
            outside += sum(per_op.values())
    return {"total_flops": total / len(pixels), "attention_flops": (total - outside) / len(pixels)}


class ViTStudy:
    experiment = "vit_sparsifiner"

    def __init__(self, profile, cache: RunCache | None = None, progress: bool = True, data_path=None):
        self.profile = profile
        self.cache = cache if cache is not None else RunCache()
        self.progress = progress
        self.data_path = data_path

    # -- data and shapes --------------------------------------------------------------------

    def splits(self) -> dict:
        p = self.profile
        return _cached_splits(p.num_train, p.num_val, p.num_test, p.seed,
                              None if self.data_path is None else str(self.data_path))

    def data_lineage(self) -> dict:
        p = self.profile
        return {"dataset": "fashion_mnist", "num_train": p.num_train, "num_val": p.num_val, "num_test": p.num_test,
                "seed": p.seed}

    def model_config(self, **extra) -> ViTClassifierConfig:
        return ViTClassifierConfig(**self.profile.model, **extra)

    def sparsifiner_config(self) -> ViTClassifierConfig:
        p = self.profile
        return self.model_config(predictor=True, n_down=p.n_down, tau=p.tau, up_prune=p.up_prune)

    def linformer_len(self) -> int:
        """Linformer's projection length = the Sparsifiner budget k at the comparison keep rate (Table 4)."""
        return num_connections(self.profile.linformer_keep_rate, self.model_config().num_tokens)

    # -- training through the cache ---------------------------------------------------------

    def _train_cached(self, name, model_config, train_config, parent=None, init=None, teacher=None):
        lineage = {"experiment": self.experiment, "data": self.data_lineage(), "model": model_config.to_dict(),
                   "train": train_config.to_dict(), "parent": parent}
        seed_everything(train_config.seed)
        model = ViTClassifier(model_config)

        def fit(model):
            if init is not None:
                missing, unexpected = model.load_state_dict(init.state_dict(), strict=False)
                if unexpected:
                    raise ValueError(f"warm start from a model with weights this one lacks: {unexpected}")
            result = train_vit(model, self.splits()["train"], train_config, teacher=teacher, progress=self.progress)
            return {"history": result.history, "train_seconds": result.seconds}

        metrics = self.cache.get_or_train(f"{self.experiment}-{name}", lineage, model, fit)
        model.eval()
        return model, metrics, lineage

    def dense(self):
        return self._train_cached("dense", self.model_config(), replace(self.profile.dense, seed=self.profile.seed))

    def predictor(self):
        """Phase 1: predictors trained on the frozen dense backbone (attention distillation)."""
        dense, _, dense_lineage = self.dense()
        config = replace(self.profile.phase1, seed=self.profile.seed)
        return self._train_cached("phase1", self.sparsifiner_config(), config, parent=dense_lineage, init=dense)

    def sparsifiner(self):
        """Phase 2: backbone and (frozen) predictors under sparse attention, distilled from the dense teacher."""
        dense, _, _ = self.dense()
        phase1, _, phase1_lineage = self.predictor()
        config = replace(self.profile.phase2, seed=self.profile.seed)
        return self._train_cached("phase2", self.sparsifiner_config(), config, parent=phase1_lineage, init=phase1,
                                  teacher=dense)

    def linformer(self):
        dense, _, dense_lineage = self.dense()
        config = replace(self.profile.phase2, objective="linformer", seed=self.profile.seed)
        return self._train_cached("linformer", self.model_config(linformer_len=self.linformer_len()), config,
                                  parent=dense_lineage, init=dense, teacher=dense)

    def budgeted_heads(self):
        dense, _, dense_lineage = self.dense()
        config = replace(self.profile.heads, seed=self.profile.seed)
        return self._train_cached("heads", self.model_config(gates="budget"), config, parent=dense_lineage,
                                  init=dense)

    def budgeted_heads_hard(self):
        """The soft budgeted-head checkpoint adapted to hard top-k heads (straight-through, KL to the teacher)."""
        dense, _, _ = self.dense()
        soft, _, soft_lineage = self.budgeted_heads()
        config = replace(self.profile.heads, objective="heads_hard", seed=self.profile.seed)
        return self._train_cached("heads-hard", self.model_config(gates="budget"), config, parent=soft_lineage,
                                  init=soft, teacher=dense)

    # -- evaluation -------------------------------------------------------------------------

    def keep_rate_sweep(self, model, keep_rates, split: str = "test", attention: str = "masked") -> pd.DataFrame:
        """Accuracy and analytic MHSA cost at each keep rate (one checkpoint). ``masked`` is numerically
        equal to ``sparse`` (tested) and faster at these short sequences; the notebook checks it on a batch."""
        rows = []
        for rate in keep_rates:
            stats = evaluate_vit(model, self.splits()[split], attention=attention, keep_rate=rate)
            rows.append({"keep_rate": rate, "connections": num_connections(rate, model.config.num_tokens), **stats})
        return pd.DataFrame(rows)

    def result_row(self, method: str, budget: float, stats: dict, speedup: float | None = None, note: str = ""):
        row = {"experiment": self.experiment, "method": method, "budget": round(float(budget), 4),
               "cost": None if stats.get("cost") is None else float(stats["cost"]),
               "accuracy": None if stats.get("accuracy") is None else float(stats["accuracy"]),
               "speedup": None if speedup is None else float(speedup)}
        if note:
            row["note"] = note
        return row


def basis_sparsity(model) -> float:
    """Fraction of W_up entries pruned to zero (the paper: about 90% after phase 1)."""
    total = pruned = 0
    for predictor in model.predictors:
        basis = predictor.sparse_basis(model.config.num_tokens)
        total += basis.numel()
        pruned += int((basis == 0).sum())
    return pruned / total


@torch.no_grad()
def coefficient_sparsity(model, pixels: torch.Tensor) -> float:
    """Fraction of the low-rank coefficients A_down at or below tau (the paper: 87% with n_down 32, tau 0.05)."""
    out = model(pixels, attention="dense", with_predictor=True)
    coeff = torch.cat([layer["coefficients"].flatten() for layer in out.layers])
    return float((coeff == 0).float().mean())


def topk_exact(model, pixels: torch.Tensor, keep_rate: float) -> bool:
    """Every query of every layer and head keeps exactly ceil(keep_rate * n) distinct keys."""
    with torch.no_grad():
        out = model(pixels, attention="sparse", keep_rate=keep_rate, return_internals=True)
    k = num_connections(keep_rate, model.config.num_tokens)
    for layer in out.layers:
        index = layer["index"]
        distinct = torch.sort(index, dim=-1).values.diff(dim=-1).ne(0).all()
        if index.shape[-1] != k or not bool(distinct):
            return False
    return True


def mhsa_cost_table(model, keep_rates, pixels: torch.Tensor) -> pd.DataFrame:
    """Per keep rate: analytic MHSA multiply-adds (paper convention), FlopCounterMode FLOPs of the attention
    core per example (sparse path run with the gather kernel, whose bmm FlopCounterMode can count; it does
    not see the CSR kernel), and both as fractions of dense."""
    dense_flops = attention_core_flops(model, pixels, attention="dense")
    dense_macs = model.dense_mhsa_macs()
    rows = []
    for rate in keep_rates:
        with torch.no_grad():
            out = model(pixels, attention="sparse", keep_rate=rate)
        flops = attention_core_flops(model, pixels, attention="sparse", keep_rate=rate, sparse_kernel="gather")
        rows.append({"keep_rate": rate, "connections": num_connections(rate, model.config.num_tokens),
                     "MHSA MMACs (analytic)": out.mhsa_macs / 1e6, "analytic fraction": out.mhsa_macs / dense_macs,
                     "attention MFLOPs (FlopCounterMode)": flops["attention_flops"] / 1e6,
                     "counted fraction": flops["attention_flops"] / dense_flops["attention_flops"]})
    return pd.DataFrame(rows)



@torch.no_grad()
def attention_maps(model, image: torch.Tensor, query: int, keep_rate: float, layers, heads) -> dict:
    """For one image [1, C, H, W] and query token: {(layer, head): [n]} rows of the connectivity mask, the
    sparse attention (Sparsifiner path at ``keep_rate``) and the full attention (the same model, dense path),
    plus the sparse coefficients [n, n_down] and basis [n_down, n] of every layer (head ``heads[0]``)."""
    model.eval()
    sparse = model(image, attention="sparse", keep_rate=keep_rate, return_internals=True)
    full = model(image, attention="dense", return_internals=True)
    out = {"mask": {}, "sparse": {}, "full": {}, "coefficients": {}, "basis": {}}
    n = model.config.num_tokens
    for layer in layers:
        info = sparse.layers[layer]
        for head in heads:
            mask = torch.zeros(n, dtype=torch.bool)
            mask[info["index"][0, head, query]] = True
            out["mask"][(layer, head)] = mask.float().numpy()
            out["sparse"][(layer, head)] = info["probs"][0, head, query].numpy()
            out["full"][(layer, head)] = full.layers[layer]["probs"][0, head, query].numpy()
        out["coefficients"][f"layer {layer}, head {heads[0]}"] = info["coefficients"][0, heads[0]].numpy()
        out["basis"][layer] = model.predictors[layer].sparse_basis(n)[heads[0]].numpy()
    return out

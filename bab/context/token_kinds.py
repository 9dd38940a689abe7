"""Which kinds of tokens does context pruning drop? Punctuation, stop words, others (the paper's analysis).

A token j counts as pruned for query k when I_kj = 0 (hard decisions). Per kind we report the
share of its (k > j, layer) pairs that are pruned, and its share of all tokens, so a kind that is
dropped more often than the average stands out.
"""

from __future__ import annotations

import string

import pandas as pd
import torch

from bab.context.lm import lm_forward

# A short English stop-word list (function words: articles, pronouns, auxiliaries, prepositions,
# conjunctions). Chosen once here so the breakdown does not depend on an extra package.
STOP_WORDS = frozenset("""
a an the and or but nor so yet if then than that this these those there here of in on at to for from by with
about as into onto over under up down out off through between after before during without within upon
i me my mine we us our ours you your yours he him his she her hers it its they them their theirs
is am are was were be been being have has had having do does did will would shall should can could may might
must not no all any both each few more most other some such only own same too very just
what which who whom whose when where why how again further once also
""".split())

KINDS = ("punctuation", "stop word", "other")


def token_kind(text: str) -> str:
    word = text.strip()
    if word and all(ch in string.punctuation or ch in "“”‘’—–" for ch in word):
        return "punctuation"
    if word.lower() in STOP_WORDS:
        return "stop word"
    return "other"


@torch.no_grad()
def token_kind_breakdown(model, ids: torch.Tensor, tokenizer, budget: float | None = None) -> pd.DataFrame:
    """ids [N, T] -> one row per kind: tokens, share of tokens, pairs, fraction of its pairs pruned.

    ``attrs["windows"]``: {kind: {"window_pruned": [N], "window_pairs": [N]}}, each window's pruned and all pairs of
    the kind, so two kinds can be compared window by window (``bab.core.statistics.share_difference``)."""
    out = lm_forward(model, ids, budget=budget, return_log_keep=True)
    T = ids.shape[1]
    below = torch.ones(T, T, dtype=torch.bool).tril(-1)  # pairs (k, j) with k > j
    pruned = torch.zeros(ids.shape, dtype=torch.float64)
    for log_keep in out.log_keep:  # [N, T(k), T(j)]
        pruned += ((log_keep == float("-inf")) & below).sum(dim=1).double()
    pairs_per_token = below.sum(dim=0).double() * len(out.log_keep)  # [T]: later queries x layers
    kinds = [[token_kind(s) for s in tokenizer.token_strings(row.tolist())] for row in ids]
    rows, windows = [], {}
    for kind in KINDS:
        mask = torch.tensor([[k == kind for k in row] for row in kinds])
        window_pairs = (pairs_per_token[None].expand_as(pruned) * mask).sum(dim=1)  # [N]
        window_pruned = (pruned * mask).sum(dim=1)  # [N]
        pairs = window_pairs.sum().item()
        share = window_pruned.sum().item() / pairs if pairs else float("nan")
        rows.append({"kind": kind, "tokens": int(mask.sum()), "token share": mask.float().mean().item(),
                     "pairs": pairs, "fraction pruned": share})
        windows[kind] = {"window_pruned": window_pruned.tolist(), "window_pairs": window_pairs.tolist()}
    table = pd.DataFrame(rows).set_index("kind")
    table.attrs["windows"] = windows
    total = pairs_per_token.sum().item() * ids.shape[0]
    table.attrs["overall fraction pruned"] = pruned.sum().item() / total
    return table

"""Token kinds of the dropped-token analysis, and the notebook-06 figures (they draw what they are given)."""

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import tiny_decoders  # noqa: E402
import torch  # noqa: E402

from bab.context import plots as plots_context  # noqa: E402
from bab.context.attach import context_state, set_alpha  # noqa: E402
from bab.context.interaction import HARD, PruningConfig  # noqa: E402
from bab.context.token_kinds import token_kind, token_kind_breakdown  # noqa: E402


class CharTokenizer:
    """Token i is the i-th string of a fixed table (enough for the breakdown)."""

    table = [",", ".", " the", " of", " Darcy", " Elizabeth", "!", " and", " walked", " garden"]

    def token_strings(self, ids):
        return [self.table[i] for i in ids]


def test_token_kind():
    assert token_kind(",") == "punctuation" and token_kind(" —") == "punctuation" and token_kind("?!") == "punctuation"
    assert token_kind(" The") == "stop word" and token_kind("of") == "stop word"
    assert token_kind(" Darcy") == "other" and token_kind(" 1813") == "other"


def test_breakdown_counts_pairs_and_matches_the_overall_fraction():
    torch.manual_seed(0)
    model = tiny_decoders.tiny_gpt2(PruningConfig(r=4, init_std=0.5, init_bias=1.0), vocab_size=10)
    ids = torch.randint(0, 10, (3, 20))
    table = token_kind_breakdown(model, ids, CharTokenizer())
    assert table["tokens"].sum() == ids.numel()
    assert table["pairs"].sum() == 3 * 2 * (20 * 19 / 2)  # rows x layers x pairs k > j
    overall = (table["fraction pruned"] * table["pairs"]).sum() / table["pairs"].sum()
    assert abs(overall - table.attrs["overall fraction pruned"]) < 1e-9
    with torch.no_grad():  # the model's own forward, hard decisions: the mean kept share of the pairs k > j
        set_alpha(model, HARD)
        model(ids, use_cache=False)
        keep = context_state(model).keep_mass().item()
    assert 0.05 < 1 - keep < 0.95  # some pairs pruned, some kept: the comparison can fail
    assert abs(table.attrs["overall fraction pruned"] - (1 - keep)) < 1e-5


def test_each_window_s_counts_are_those_of_the_window_alone():
    torch.manual_seed(1)
    model = tiny_decoders.tiny_gpt2(PruningConfig(r=4, init_std=0.5, init_bias=1.0), vocab_size=10)
    ids = torch.randint(0, 10, (3, 20))
    windows = token_kind_breakdown(model, ids, CharTokenizer()).attrs["windows"]
    for n in range(len(ids)):
        alone = token_kind_breakdown(model, ids[n: n + 1], CharTokenizer())
        for kind, row in alone.iterrows():
            assert windows[kind]["window_pairs"][n] == row["pairs"]
            if row["pairs"]:
                assert abs(windows[kind]["window_pruned"][n] / row["pairs"] - row["fraction pruned"]) < 1e-12


def test_figures_are_drawn():
    pareto = pd.DataFrame({"gamma": [0.01, 0.1], "fraction_pruned": [0.5, 0.8], "perplexity": [100.0, 110.0]})
    budgeted = pd.DataFrame({"budget": [0.2, 0.5], "fraction_pruned": [0.7, 0.55], "perplexity": [104.0, 101.0]})
    fig = plots_context.perplexity_pareto(pareto, 99.0, budgeted)
    assert len(fig.axes[0].lines) == 3  # specialists, budget-conditioned, dense line
    times = torch.tensor([[-1, 3, 5, -1], [2, -1, -1, -1]])
    fig = plots_context.dropped_token_view(["a", "b", "c", "d"], times)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["a", "b", "c", "d"]
    table = plots_context.dropped_token_table(["a", "b", "c", "d"], times)
    assert table.loc["b", "layer 0"] == "dropped at 3" and table.loc["a", "layer 0"] == "kept"
    kinds = pd.DataFrame({"token share": [0.1, 0.4, 0.5], "fraction pruned": [0.9, 0.8, 0.6]},
                         index=["punctuation", "stop word", "other"])
    assert len(plots_context.token_kind_plot(kinds).axes[0].patches) == 6

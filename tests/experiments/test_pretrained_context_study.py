"""Notebook 07's orchestration on a tiny saved Llama and tiny texts: every step runs, the cache is reused,
a frozen fine-tune changes only the interactions, and the static baselines hit the fraction they were asked."""

from dataclasses import replace

import pandas as pd
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from bab.context.attach import interactions, is_attached, token_drop_times
from bab.context.train import LMTrainConfig
from bab.core.runs import RunCache, run_of
from bab.data.lm import END_OF_TEXT, LMDataConfig, build_tokenizer, load_lm_data
from bab.experiments.pretrained_context import PretrainedContextProfile, PretrainedContextStudy

AUSTEN = [f"On day {i}, Elizabeth walked to Netherfield, and Mr. Darcy said nothing of the weather."
          for i in range(300)]
WIKI = [f"The river {i} flows north through the valley and joins the sea near the old harbour." for i in range(300)]


@pytest.fixture
def tiny_study(tmp_path, monkeypatch):
    folder = tmp_path / "lm"
    folder.mkdir()
    (folder / "austen.txt").write_text("\n".join(AUSTEN) + "\n")
    (folder / "wiki.txt").write_text("\n".join(WIKI) + "\n")
    monkeypatch.setenv("BAB_DATA_DIR", str(tmp_path))
    # a "pretrained" decoder: a tiny random Llama saved with a byte-level BPE tokenizer that has <|endoftext|>
    bpe = build_tokenizer("bpe", AUSTEN + WIKI, vocab_size=300).tokenizer
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=END_OF_TEXT)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=bpe.get_vocab_size(), hidden_size=16, intermediate_size=24,
                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=4,
                                max_position_embeddings=128)
    decoder = tmp_path / "decoder"
    LlamaForCausalLM(config).eval().save_pretrained(decoder)
    tokenizer.save_pretrained(decoder)
    train = LMTrainConfig(objective="context_pruning", steps=3, batch_size=2, context=32, pruning_lr=1e-2,
                          freeze_pretrained=True)
    profile = PretrainedContextProfile(
        name="tiny", data=LMDataConfig(files=("austen.txt",), tokenizer="pretrained", block_lines=20),
        finetune=train, budgeted=replace(train, objective="budget_context"), gammas=(1.0,), source=str(decoder),
        r=8, eval_context=32, eval_windows=2, budgets=(0.2, 0.6), equality_tokens=16, view_tokens=16,
        token_kind_windows=2)
    return lambda: PretrainedContextStudy(profile, cache=RunCache(tmp_path / "runs"), progress=False)


def test_every_step_runs_and_the_cache_is_reused(tiny_study):
    study = tiny_study()
    equality = study.logit_equality()
    assert equality["max_abs_diff"] < 1e-4 and equality["same_argmax"] and equality["tokens"] == 16
    dense, _ = study.dense()
    before = {k: v.clone() for k, v in dense.state_dict().items()}
    model, metrics = study.pruned(1.0)
    assert metrics["cached"] is False
    # frozen fine-tune: the pretrained weights are the loaded ones, only the interactions were trained
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    assert all(torch.equal(v, dense.state_dict()[k]) for k, v in before.items())  # the dense model is untouched
    for text in ("austen", "wiki"):
        result = study.evaluate(model, text=text)
        assert 0.0 <= result["fraction_pruned"] <= 1.0 and result["windows"] == 2
    assert study.evaluate(dense, prune=False, text="wiki")["fraction_pruned"] == 0.0
    budget_model, _ = study.budget_conditioned()
    assert study.evaluate(budget_model, budget=0.2)["windows"] == 2
    kinds = study.token_kinds(model)
    assert set(kinds.index) == {"punctuation", "stop word", "other"}
    assert token_drop_times(model, study.passage()).shape == (2, 1, 16)
    table = study.throughput(prompt_len=32, new_tokens=4, batch=2, repeats=1, warmup=0)
    # the profile's bench_gammas default: the largest gamma; dense with the in-place and the dynamic cache
    assert list(table.index) == ["dense", "dense, DynamicCache", "gamma=1"]
    assert table.loc["dense", "decode_limit"] == 1.0 and table.loc["dense", "throughput_ratio"] == 1.0
    # a second study loads the fine-tunes from the cache: same interactions, nothing trained
    again = tiny_study()
    cached, metrics = again.pruned(1.0)
    assert metrics["cached"] is True
    assert all(torch.equal(cached.state_dict()[k], v) for k, v in after.items())
    assert again.budget_conditioned()[1]["cached"]
    # result rows can name the run behind each decoder, though with frozen weights the cache holds the
    # interactions alone: the fine-tuned decoder names its run and seed, the pretrained one none
    assert run_of(cached) == run_of(model) and run_of(cached)["run"].startswith(study.experiment)
    assert run_of(cached)["seed"] == study.profile.finetune.seed
    assert run_of(dense) == {"run": None, "seed": None}


def test_the_cache_holds_only_the_interactions_of_a_frozen_fine_tune(tiny_study, tmp_path):
    from safetensors.torch import load_file

    tiny_study().pruned(1.0)
    [stored] = list((tmp_path / "runs").glob("*/model.safetensors"))
    names = list(load_file(stored))
    assert names and all(name.startswith("layers.") for name in names)
    assert {name.split(".", 2)[2] for name in names} == {"query.weight", "query.bias", "key.weight", "key.bias",
                                                         "bias"}


def test_static_baselines_reach_the_requested_sparsity_on_both_texts(tiny_study):
    study = tiny_study()
    dense, _ = study.dense()
    table = study.static_baselines(dense, {"austen": 0.5, "wiki": 0.8})
    assert list(zip(table.text, table.kind, strict=True)) == [("austen", "local"), ("austen", "strided"),
                                                              ("wiki", "local"), ("wiki", "strided")]
    # at 32 tokens a window moves the fraction pruned by at most ~1/16 per step; strides are coarser
    local = table[table.kind == "local"]
    assert ((local.fraction_pruned - local.target).abs() < 0.05).all()
    # a window of w tokens at length T prunes sum_{d >= w} (T - d) of the T (T - 1) / 2 pairs (hand count)
    w, T = int(local.iloc[0]["size"]), 32
    expected = sum(T - d for d in range(w, T)) / (T * (T - 1) / 2)
    assert local.iloc[0].fraction_pruned == pytest.approx(expected, abs=1e-6)
    # each row is the dense model under the matched pattern (static_mask), evaluated directly
    from bab.context.evaluate import evaluate_lm
    from bab.context.static_masks import static_mask

    for r in table.itertuples():
        direct = evaluate_lm(dense, study.eval_ids(r.text), T, prune=False, max_windows=2,
                             attn_mask=static_mask(r.kind, T, r.target))
        assert r.perplexity == pytest.approx(direct["perplexity"], rel=1e-6)
        # the windows behind it, for the static row's interval over windows (itertuples is how rows are built)
        assert r.window_nll == pytest.approx(direct["window_nll"], rel=1e-6) and r.window_tokens == [T, T]
    # a cached mask must be named, and a name needs its mask
    with pytest.raises(ValueError, match="no attn_mask was passed"):
        study.evaluate(dense, prune=False, mask_name="local 4")


def test_pretrained_tokenizer_must_be_passed_and_texts_are_named(tiny_study):
    with pytest.raises(ValueError, match="pass tokenizer=... exactly when"):
        load_lm_data(LMDataConfig(tokenizer="pretrained"))
    with pytest.raises(ValueError, match="text must be one of"):
        tiny_study().eval_ids("shakespeare")


def test_full_fine_tune_its_frozen_twin_and_the_official_initial_values(tiny_study):
    study = tiny_study()
    with pytest.raises(ValueError, match="no frozen twin"):
        study.pruned(1.0, frozen=True)
    frozen_train = study.profile.finetune
    profile = replace(study.profile, finetune=replace(frozen_train, freeze_pretrained=False,
                                                      sparsity_normalisation="official"),
                      frozen_finetune=replace(frozen_train, sparsity_normalisation="official"),
                      interaction_init="official")
    record = PretrainedContextStudy(profile, cache=study.cache, progress=False)
    dense, _ = record.dense()
    full, _ = record.pruned(1.0)
    twin, twin_metrics = record.pruned(1.0, frozen=True)
    pretrained = {k: v for k, v in dense.state_dict().items()}
    changed = [k for k, v in pretrained.items() if not torch.equal(full.state_dict()[k], v)]
    assert changed  # the full fine-tune moves the pretrained weights
    assert all(torch.equal(twin.state_dict()[k], v) for k, v in pretrained.items())  # the twin does not
    assert run_of(twin)["run"] != run_of(full)["run"] and twin_metrics["cached"] is False
    # the official initial values: no bias terms in the interaction query/key projections
    interaction = interactions(full)[0]
    assert interaction.query.bias is None and interaction.key.bias is None
    # the ablation against the profile's initial values is its own run with bias terms
    ours, _ = record.pruned(1.0, interaction_init="ours")
    assert interactions(ours)[0].query.bias is not None
    assert run_of(ours)["run"] not in (run_of(full)["run"], run_of(twin)["run"])
    with pytest.raises(ValueError, match="frozen_finetune must have freeze_pretrained=True"):
        replace(profile, frozen_finetune=profile.finetune)
    # the like-for-like dense reference: the same fine-tune without interactions
    dense_ft, _ = record.dense_fine_tuned()
    assert not is_attached(dense_ft)
    assert any(not torch.equal(dense_ft.state_dict()[k], v) for k, v in pretrained.items())
    assert run_of(dense_ft)["run"] not in (run_of(full)["run"], run_of(twin)["run"])
    with pytest.raises(ValueError, match="nothing to fine-tune"):
        study.dense_fine_tuned()


def test_evaluations_run_ahead_of_the_notebook_and_are_read_back_not_recomputed(tiny_study, monkeypatch, tmp_path):
    import bab.experiments.pipelines.decoder as decoder_study
    import bab.experiments.pretrained_context as pretrained_context

    # the zero-shot scorers are tested in tests/context; here a stand-in scorer counts how often it runs
    scored = []

    def score(model, tokenizer, items, *args, prune, **kwargs):
        scored.append(prune)
        return {"accuracy": 0.5, "ci_low": 0.2, "ci_high": 0.8, "n": 4}

    def cloze(model, tokenizer, items, batch_size, budget, prune, policy=None):
        return score(model, tokenizer, items, prune=prune)

    def choice(model, tokenizer, items, budget, prune, **kwargs):
        return score(model, tokenizer, items, prune=prune)

    monkeypatch.setattr(pretrained_context.zero_shot, "score_cloze", cloze)
    monkeypatch.setattr(pretrained_context.zero_shot, "score_choice", choice)
    study = tiny_study()
    monkeypatch.setattr(study, "zero_shot_items", lambda: {"cloze": [], "ending": [], "topic": []})
    model, _ = study.pruned(1.0)
    dense, _ = study.dense()
    ahead = {"pruned": study.evaluations(model), "dense": study.evaluations(dense, prune=False)}
    assert set(ahead["pruned"]["texts"]) == {"austen", "wiki"} and len(scored) == 6
    assert ahead["dense"]["texts"]["wiki"]["fraction_pruned"] == 0.0 and scored[3:] == [False] * 3
    assert len(list((tmp_path / "runs" / "measurements").glob("*.json"))) == 2 * (2 + 1)

    # the notebook's own calls in a later process: every one is read back, nothing evaluated or scored again
    def never(*args, **kwargs):
        raise AssertionError("a stored measurement was computed again")

    monkeypatch.setattr(decoder_study, "evaluate_lm", never)
    again = tiny_study()
    model, _ = again.pruned(1.0)
    dense, _ = again.dense()
    assert {text: again.evaluate(model, text=text) for text in again.texts} == ahead["pruned"]["texts"]
    assert again.evaluate(dense, prune=False, text="wiki") == ahead["dense"]["texts"]["wiki"]
    assert again.zero_shot(model) == ahead["pruned"]["zero_shot"] and len(scored) == 6
    # what no stored measurement covers is computed: another budget, or a static mask built in the session
    with pytest.raises(AssertionError, match="computed again"):
        again.evaluate(model, budget=0.5)
    with pytest.raises(AssertionError, match="computed again"):
        again.evaluate(dense, prune=False, attn_mask=torch.ones(32, 32, dtype=torch.bool))


def test_the_evaluate_command_stores_what_the_notebook_reads_and_never_trains(tiny_study, monkeypatch, tmp_path,
                                                                               capsys):
    import bab.experiments.pipelines.decoder as decoder_study
    import bab.experiments.pretrained_context as pretrained_context
    import bab.experiments.profiles as profiles
    from bab.__main__ import main

    cloze = {"accuracy": 0.25, "ci_low": 0.1, "ci_high": 0.5, "n": 4, "target_perplexity": 9.0}
    choice = {"accuracy": 0.75, "ci_low": 0.5, "ci_high": 0.9, "n": 4, "chance": 0.25}
    monkeypatch.setattr(pretrained_context.zero_shot, "score_cloze", lambda *a, **k: cloze)
    monkeypatch.setattr(pretrained_context.zero_shot, "score_choice", lambda *a, **k: choice)
    no_items = {"cloze": [], "ending": [], "topic": []}
    monkeypatch.setattr(PretrainedContextStudy, "zero_shot_items", lambda self: no_items)
    study = tiny_study()
    monkeypatch.setattr(profiles, "get_profile", lambda experiment, name: study.profile)
    monkeypatch.setenv("BAB_CACHE_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("BAB_THREADS", str(torch.get_num_threads()))  # the command sets it: leave it as it is
    command = ["evaluate", "07", "--profile", "smoke", "gamma-1"]
    assert main(command) == 2  # not trained: the command says so instead of training
    assert "not trained yet" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    model, _ = study.pruned(1.0)
    assert main(command) == 0
    out = capsys.readouterr().out
    assert "austen: perplexity" in out and "wiki: perplexity" in out and "cloze: accuracy 0.250 [0.100, 0.500]" in out
    monkeypatch.setattr(decoder_study, "evaluate_lm", lambda *a, **k: pytest.fail("a stored measurement recomputed"))
    again = tiny_study()
    assert again.evaluate(model, text="wiki")["windows"] == 2  # read back, as the notebook's call would be
    fractions = {text: again.evaluate(model, text=text)["fraction_pruned"] for text in again.texts}
    assert len(again.static_baselines(again.dense()[0], fractions)) == 4  # the static baselines too
    assert main(["evaluate", "07", "--profile", "smoke", "dense-frozen"]) == 2
    err = capsys.readouterr().err
    # the steps of this profile, whose specialists are frozen already: no dense fine-tune and no twins
    assert "no step 'dense-frozen'" in err and "choose among pretrained, budgeted, gamma-1" in err


def test_eviction_steps_compare_with_learned_pruning_at_the_same_fraction_kept(tiny_study, monkeypatch):
    from bab.context.zero_shot import ChoiceItem, ClozeItem
    from bab.experiments.pretrained_context import eviction_comparison

    items = {"cloze": [ClozeItem(AUSTEN[i], "Darcy") for i in range(3)],
             "ending": [ChoiceItem(AUSTEN[i], (" He left.", " The river flows north.", " It rained."), 0)
                        for i in range(3)],
             "topic": [ChoiceItem(WIKI[i] + " This article is about", (" rivers", " dances"), 0) for i in range(3)]}
    monkeypatch.setattr(PretrainedContextStudy, "zero_shot_items", lambda self: items)
    study = tiny_study()
    dense, _ = study.dense()
    model, _ = study.pruned(1.0)
    policies = study.eviction_policies(0.5)
    assert list(policies) == ["StreamingLLM", "TOVA", "H2O"]
    table = study.eviction_table(dense, policies)
    assert len(table) == 3 * len(study.texts)
    # a policy keeping half of the tokens seen prunes about half of the (query, earlier token) pairs
    assert ((table.fraction_pruned > 0.3) & (table.fraction_pruned < 0.6)).all()
    assert (table["perplexity / dense"] > 0).all()
    again = study.evaluate_evicting(dense, policies["TOVA"], "austen")  # served by the run cache, same windows
    assert again["window_nll"] == table[(table.policy == "TOVA") & (table.text == "austen")].iloc[0]["window_nll"]
    zero_shot = study.eviction_zero_shot(policies)
    assert set(zero_shot.task) == {"cloze", "ending", "topic"} and set(zero_shot.policy) == set(policies)
    bench = study.throughput({"gamma=1": model, **policies}, prompt_len=32, new_tokens=4, batch=1, repeats=1,
                             warmup=0)
    assert list(bench.index) == ["dense", "dense, DynamicCache", "gamma=1", "StreamingLLM", "TOVA", "H2O"]
    assert (bench.loc[list(policies)].memory_ratio > 1).all()  # every evicting cache ends smaller than dense's
    learned = pd.DataFrame([{"gamma": 1.0, "text": t, **study.evaluate(model, text=t)} for t in study.texts])
    dense_eval = {t: study.evaluate(dense, prune=False, text=t) for t in study.texts}
    learned_zero_shot = pd.DataFrame([{"task": t, "accuracy": 100 * r["accuracy"]}
                                      for t, r in study.zero_shot(model).items()])
    side = eviction_comparison(learned, dense_eval, learned_zero_shot, study.zero_shot(dense, prune=False), table,
                               zero_shot, bench, 1.0)
    assert list(side.index) == ["dense", "context pruning, gamma=1", "StreamingLLM", "TOVA", "H2O"]
    assert side.loc["TOVA", "perplexity (wiki)"] == table[(table.policy == "TOVA") & (table.text == "wiki")].iloc[0][
        "perplexity"]
    assert side.loc["H2O", "topic %"] == pytest.approx(
        100 * zero_shot[(zero_shot.policy == "H2O") & (zero_shot.task == "topic")].iloc[0]["accuracy"])
    rows = study.eviction_rows(table[table.text == "austen"], 0.5) + study.eviction_zero_shot_rows(zero_shot, 0.5)
    assert len(rows) == 3 + 9 and all(r["budget"] == 0.5 for r in rows)


def test_static_masks_fine_tuned_with_the_full_fine_tune_s_recipe_and_untouched_where_weights_are_frozen(tiny_study):
    """Where the profile fine-tunes the whole decoder, each matched static mask is fine-tuned under its mask with the
    dense fine-tune's recipe (the specialists' steps and data, the plain loss); where the specialists train only their
    interactions, a static mask has nothing to train and its row is the pretrained decoder under the mask."""
    import json

    from bab.context.evaluate import evaluate_lm
    from bab.context.static_masks import local_window_mask, pruned_fraction, strided_mask

    study = tiny_study()  # frozen weights: the untouched decoder
    dense, _ = study.dense()
    table, models = study.static_fine_tuned_baselines({1.0: 0.5})
    assert set(table.fine_tuned) == {False} and all(m is dense for m in models.values())
    untouched = study.static_baselines(dense, {"austen": 0.5, "wiki": 0.5})
    assert list(table.perplexity) == list(untouched.sort_values(["kind", "text"]).perplexity)
    rows = study.static_fine_tuned_rows(table[table.text == "austen"], models)
    assert all("nothing to fine-tune" in r["note"] and "runs" not in r for r in rows)

    frozen_train = study.profile.finetune
    full = replace(study.profile, finetune=replace(frozen_train, freeze_pretrained=False,
                                                   sparsity_normalisation="official"),
                   frozen_finetune=frozen_train)
    record = PretrainedContextStudy(full, cache=study.cache, progress=False)
    table, models = record.static_fine_tuned_baselines({1.0: 0.5, 3.0: 0.8})
    T = record.eval_context
    assert table.fine_tuned.all() and len(table) == 2 * 2 * 2  # (gamma, kind, text)
    dense_ft, _ = record.dense_fine_tuned()
    pretrained = dense.state_dict()

    def stored(model):
        return json.loads((record.cache.root / run_of(model)["run"] / "config.json").read_text())["config"]

    for r in table.itertuples():
        model = models[r.kind, r.gamma]
        mask = local_window_mask(T, r.size) if r.kind == "local" else strided_mask(T, r.size)
        assert r.fraction_pruned == pytest.approx(pruned_fraction(mask), abs=1e-9)
        direct = evaluate_lm(model, record.eval_ids(r.text), T, prune=False, max_windows=2, attn_mask=mask)
        assert r.perplexity == pytest.approx(direct["perplexity"], rel=1e-6)
        assert any(not torch.equal(v, pretrained[k]) for k, v in model.state_dict().items())
        # the dense fine-tune's run but for the mask: same decoder, data and training config
        config = stored(model)
        assert config.pop("static_mask") == {"kind": r.kind, "size": r.size}
        assert config == stored(dense_ft)
    assert stored(dense_ft)["train"]["steps"] == full.finetune.steps
    rows = record.static_fine_tuned_rows(table[table.text == "austen"], models)
    assert [r["settings"] for r in rows] == [{"kind": k, "gamma": g} for g in (1.0, 3.0) for k in ("local", "strided")]
    assert all(r["runs"] == [run_of(models[r["settings"]["kind"], r["settings"]["gamma"]])["run"]] for r in rows)

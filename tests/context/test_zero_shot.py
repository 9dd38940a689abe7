"""The zero-shot tasks: items by their stated rules on hand-written text, scores against a loop written out here."""

import math

import pytest
import tiny_decoders
import torch
import torch.nn.functional as F

from bab.context import zero_shot as zs
from bab.context.attach import context_state, set_alpha, set_pruning
from bab.context.interaction import HARD, PruningConfig
from bab.context.lm import continuation_hidden_states, hidden_states
from bab.data.lm import build_tokenizer

STORY = [
    "Anne walked to the garden. The garden was quiet in the morning. She sat by the old wall and read her letter. "
    "It came from her brother in town. He wrote that he would visit soon. She folded it and looked at the garden.",
    "Mr. Elliot arrived at noon. Everyone in the house was glad to see him. He spoke of the journey and the rain. "
    "Anne listened and said little. Later they walked together to the gate.",
]


def test_wilson_interval_by_hand():
    # p = 0.8, n = 10, z = 1.96: centre (0.8 + 0.19208) / 1.38416, half 1.96 sqrt(0.016 + 0.009604) / 1.38416
    low, high = zs.wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert zs.wilson_interval(0, 5)[0] == 0.0 and zs.wilson_interval(5, 5)[1] == 1.0
    with pytest.raises(ValueError, match="correct <= n"):
        zs.wilson_interval(3, 2)


def test_sentences_do_not_end_after_titles():
    assert zs.sentences("Mr. Elliot came. Mrs. Smith left! Was it Dr. Shirley?") == [
        "Mr. Elliot came.", "Mrs. Smith left!", "Was it Dr. Shirley?"]


def test_cloze_items_follow_the_rule():
    items = zs.cloze_items(STORY, zs.ZeroShotConfig(context_words=(5, 60)))
    # "garden" ends sentence 6 and occurs earlier, not in its own sentence: an item. "town" and "soon" never occur
    # earlier; "morning" / "letter" neither; "wall" ... "letter" no. "Anne" is capitalised, but is not a last word.
    targets = [it.target for it in items]
    assert "garden" in targets
    for it in items:
        own = it.context.rsplit(".", 1)[-1].lower()
        assert it.target.lower() not in own.split()  # not in its own sentence
        assert it.target.lower() in it.context.lower()  # but earlier in the passage
        assert it.target.lower() not in {"the", "her", "him"}
    # "gate" is never said before its sentence: no item
    assert "gate" not in targets
    # the passage is capped at context_words[1] words, whole sentences
    short = zs.cloze_items(STORY, zs.ZeroShotConfig(context_words=(5, 12)))
    assert all(len(it.context.split()) + 1 <= 12 for it in short)


def test_ending_items_hold_the_true_sentence_at_the_label():
    paragraphs = STORY * 3  # distractors come from other paragraphs
    config = zs.ZeroShotConfig(context_words=(5, 60), ending_words=(3, 20), choices=3, seed=1)
    items = zs.ending_items(paragraphs, config)
    assert items
    sents = [s for p in paragraphs for s in zs.sentences(p)]
    for it in items:
        assert len(it.choices) == 3 and len(set(it.choices)) == 3
        true = it.choices[it.label].strip()
        # the true ending is the sentence that follows the passage's last sentence in the text
        last = zs.sentences(it.context)[-1]
        assert any(sents[i] == last and sents[i + 1] == true for i in range(len(sents) - 1))
    assert zs.ending_items(paragraphs, config) == items  # seeded: the same items again
    labels = {it.label for it in items}
    assert len(labels) > 1  # the true ending's place is drawn, not always first


def test_topic_items():
    items = zs.topic_items(["Stocks fell today on Wall Street", "The team won the cup"], [2, 1],
                           ["world", "sports", "business"])
    assert items[0].choices == (" world", " sports", " business") and items[0].label == 2
    assert items[1].context.endswith("\nThis article is about")
    with pytest.raises(ValueError, match="labels"):
        zs.topic_items(["a"], [0, 1], ["x", "y"])


@pytest.fixture(scope="module")
def tiny():
    tokenizer = build_tokenizer("bpe", STORY * 20, vocab_size=300)
    torch.manual_seed(0)
    model = tiny_decoders.tiny_gpt2(PruningConfig(r=8, init_std=0.5, init_bias=0.2), vocab_size=tokenizer.vocab_size,
                                    n_positions=256, n_embd=32)
    return model, tokenizer


def _own_forward(model, ids, prune, hidden=False):
    """transformers' own forward of the whole sequence (not bab.context.lm, which the scorers run through), pruning
    set on or off, hard decisions: logits [B, T, V], or the last hidden states [B, T, d] with ``hidden``."""
    set_alpha(model, HARD)
    set_pruning(model, prune)
    try:
        with torch.no_grad():
            if hidden:
                return model.transformer(ids, use_cache=False).last_hidden_state
            return model(ids, use_cache=False).logits
    finally:
        set_pruning(model, True)


def _loop_logprobs(model, tokenizer, context, continuation, prune):
    """One unpadded sequence at a time: the continuation tokens' log-probabilities and greedy flags."""
    ctx = [tokenizer.eot_id] + tokenizer.encode(context)
    cont = tokenizer.encode(continuation)
    with torch.no_grad():
        logits = _own_forward(model, torch.tensor([ctx + cont]), prune)[0]
    total, greedy = 0.0, True
    for i, token in enumerate(cont):
        row = F.log_softmax(logits[len(ctx) - 1 + i], dim=-1)
        total += row[token].item()
        greedy = greedy and int(row.argmax()) == token
    return total, greedy


@pytest.mark.parametrize("prune", [False, True])
def test_padded_batches_and_shared_contexts_score_as_one_sequence_at_a_time(tiny, prune):
    model, tokenizer = tiny
    items = zs.ending_items(STORY * 3, zs.ZeroShotConfig(context_words=(5, 60), ending_words=(3, 20), choices=3))
    result = zs.score_choice(model, tokenizer, items, prune=prune)
    outcomes = []
    for it in items:
        per_char = [_loop_logprobs(model, tokenizer, it.context, c, prune)[0] / len(c) for c in it.choices]
        outcomes.append(per_char.index(max(per_char)) == it.label)
    correct = sum(outcomes)
    assert result["n"] == len(items) and result["accuracy"] == correct / len(items)
    assert result["outcomes"] == outcomes  # item by item, in item order
    assert result["ci_low"] <= result["accuracy"] <= result["ci_high"]
    assert result["chance"] == pytest.approx(1 / 3)
    totals = zs.score_choice(model, tokenizer, items, prune=prune, score="sum")
    correct = 0
    for it in items:
        sums = [_loop_logprobs(model, tokenizer, it.context, c, prune)[0] for c in it.choices]
        correct += int(sums.index(max(sums)) == it.label)
    assert totals["accuracy"] == correct / len(items)

    cloze = [zs.ClozeItem(" ".join(STORY[0].split()[:k]), STORY[0].split()[k].strip(".")) for k in (8, 15, 21)]
    scored = zs.score_cloze(model, tokenizer, cloze, batch_size=2, prune=prune)
    loops = [_loop_logprobs(model, tokenizer, it.context, f" {it.target}", prune) for it in cloze]
    assert scored["accuracy"] == sum(g for _, g in loops) / len(cloze)
    assert scored["outcomes"] == [bool(g) for _, g in loops]
    assert scored["target_perplexity"] == pytest.approx(math.exp(-sum(lp for lp, _ in loops) / len(cloze)), rel=1e-4)


@pytest.mark.parametrize("prune", [False, True])
def test_the_shared_prefix_path_equals_the_full_sequence_for_every_choice(tiny, prune):
    """continuation_hidden_states (the prefix run once into a cache, then every right-padded choice) against the
    full forward of each prefix + choice alone, at the positions that predict the choice's tokens; hidden_states of
    the padded batch of full sequences against the same forward."""
    model, tokenizer = tiny
    items = zs.ending_items(STORY * 3, zs.ZeroShotConfig(context_words=(5, 60), ending_words=(3, 20), choices=3))
    dropped_in_prefix, padded_rows = False, False
    for it in items[:3]:
        ctx = [tokenizer.eot_id] + tokenizer.encode(it.context)
        conts = [tokenizer.encode(c) for c in it.choices]
        padded_rows |= len({len(c) for c in conts}) > 1
        padded = torch.zeros(len(conts), max(map(len, conts)), dtype=torch.long)
        for row, cont in enumerate(conts):
            padded[row, :len(cont)] = torch.tensor(cont)
        h = continuation_hidden_states(model, torch.tensor([ctx]), padded, prune=prune)
        assert h.shape == (len(conts), 1 + padded.shape[1], 32)
        C = len(ctx)
        for row, cont in enumerate(conts):
            full = _own_forward(model, torch.tensor([ctx + cont]), prune, hidden=True)[0]  # [C + L, d]
            assert (h[row, :1 + len(cont)] - full[C - 1:]).abs().max() < 1e-5, (it.context, row)
            if prune:  # not vacuous: the choice's tokens attend without some prefix tokens
                dropped_in_prefix |= bool((context_state(model).effective[0][0, C:, :C] == -math.inf).any())
            seq = torch.tensor([ctx + cont + [0] * 3])  # right padding after the sequence leaves it unchanged
            with torch.no_grad():
                alone = hidden_states(model, seq, prune=prune)[0, :C + len(cont)]
            assert (alone - full).abs().max() < 1e-5
    assert padded_rows  # some choices were right-padded
    assert dropped_in_prefix == prune


def test_the_shared_prefix_path_needs_irreversible_drops():
    model = tiny_decoders.tiny_gpt2(PruningConfig(r=4, irreversible=False))
    with pytest.raises(ValueError, match="irreversible"):
        continuation_hidden_states(model, torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5], [6, 0]]))


def test_pruning_changes_scores_so_the_check_above_can_fail(tiny):
    model, tokenizer = tiny
    context, cont = STORY[0][:200], " garden"
    assert _loop_logprobs(model, tokenizer, context, cont, True)[0] != pytest.approx(
        _loop_logprobs(model, tokenizer, context, cont, False)[0], abs=1e-4)


def test_empty_tasks_and_bad_configs_are_refused(tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="no cloze items"):
        zs.score_cloze(model, tokenizer, [])
    with pytest.raises(ValueError, match="context_words"):
        zs.ZeroShotConfig(context_words=(10, 5))
    with pytest.raises(ValueError, match="choices"):
        zs.ZeroShotConfig(choices=1)
    with pytest.raises(ValueError, match="per_character"):
        zs.score_choice(model, tokenizer, [zs.ChoiceItem("a", (" b", " c"), 0)], score="mean")

"""Zero-shot tasks built offline from held-out text, scored by a decoder's log-likelihood (docs/context-pruning.md).

The paper measures zero-shot accuracy on LAMBADA, HellaSwag, PIQA and WinoGrande. None can be downloaded here,
so this module builds tasks of the same kinds, deterministically, from text the fine-tunes never trained on (the
held-out paragraphs of ``bab.data.lm``; SmolLM2's own pretraining corpus may hold the same books, which we
cannot rule out). Items are chosen by stated rules on the text alone, never by a model:

- ``cloze_items`` (LAMBADA-style): a passage ending at a sentence end; the target is the sentence's last word.
  Kept only when the target is a content word (alphabetic, at least ``min_target_chars`` letters, not a stop
  word) that occurs earlier in the passage but not in the target's own sentence, so the last sentence alone
  does not give it away and the passage does. Scored (``score_cloze``) as LAMBADA is for GPT-2: correct when
  every target token is the model's greedy choice given the passage; and the target's perplexity,
  exp(mean over items of -log p(target | passage)).
- ``ending_items`` (HellaSwag-style): a passage ending at a sentence end, its true next sentence and
  ``choices - 1`` sentences of similar length drawn (seeded) from other held-out paragraphs of the same text.
- ``topic_items`` (zero-shot topic choice): a news article (its first ``context_words[1]`` words) followed by
  "This article is about", and the topic names as choices.

``score_choice`` picks the choice with the highest log-likelihood per character of the choice (HellaSwag's
length-normalised accuracy, "acc_norm") for the endings, and the highest total log-likelihood for the topics
(their names are fixed, not free text of varying length; per character, SmolLM2 scored 24% on 80 articles, at
chance, and 58% by the total). Every item starts with the tokenizer's end-of-text token, the
paragraph separator the decoder saw in fine-tuning. Batches are right-padded: a causal decoder's logits at a
position depend only on the tokens up to it, and so do its pruning decisions (a token is dropped by later
tokens only), so padding never changes a score. For the same reason the choices of an item share one run of their
context (``bab.context.lm.continuation_hidden_states``): it is computed once, not once per choice, which halves
the ending task's compute and cuts the topic task's (a long article, choices of a word or two) about fourfold.

Each score comes with ``n`` and a 95% Wilson interval (``wilson_interval``).

With a training-free eviction ``policy`` (bab.context.eviction) on a plain decoder, every item's context is the
prompt: it runs in one call, the policy evicts from the cache, and the target or each choice is scored after it
(so the cloze goes through ``continuation_hidden_states`` item by item too).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bab.context.lm import check_length, continuation_hidden_states, hidden_states, output_head
from bab.context.token_kinds import STOP_WORDS
from bab.core.outcomes import unit_ids

# A sentence ends at . ! ? and any closing quotes, except after the titles Mr. Mrs. Ms. Dr. St.
SENTENCE_END = re.compile(r"(?<!\bMr\.)(?<!\bMrs\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)(?<=[.!?])[\"'\u201d\u2019)]*\s+")
WORD = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True)
class ZeroShotConfig:
    """How many items per task and the rules that pick them."""

    items: int = 200  # per task (fewer where the text has fewer that pass the rules)
    seed: int = 0
    context_words: tuple[int, int] = (30, 150)  # a passage's words before the target / the ending: (min, max)
    ending_words: tuple[int, int] = (6, 40)  # words of a candidate ending (true or drawn)
    min_target_chars: int = 3
    choices: int = 4
    batch_size: int = 8  # cloze passages per forward (a choice item's choices are one batch after its context)

    def __post_init__(self):
        if self.items < 1 or self.batch_size < 1:
            raise ValueError(f"items and batch_size must be >= 1, got {self.items} and {self.batch_size}")
        if self.choices < 2:
            raise ValueError(f"a choice task needs >= 2 choices, got {self.choices}")
        for name in ("context_words", "ending_words"):
            low, high = getattr(self, name)
            if not 1 <= low <= high:
                raise ValueError(f"{name} must be (min, max) with 1 <= min <= max, got {(low, high)}")


@dataclass(frozen=True)
class ClozeItem:
    context: str  # the passage up to the target, without the space before it
    target: str  # the last word


@dataclass(frozen=True)
class ChoiceItem:
    context: str
    choices: tuple[str, ...]  # each begins with the space (or newline) that joins it to the context
    label: int  # the index of the true choice


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% (z = 1.96) Wilson score interval of a proportion correct / n."""
    if n < 1 or not 0 <= correct <= n:
        raise ValueError(f"need 0 <= correct <= n and n >= 1, got correct={correct}, n={n}")
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def sentences(paragraph: str) -> list[str]:
    return [s.strip() for s in SENTENCE_END.split(paragraph.strip()) if s.strip()]


def _sentences_of(paragraphs: list[str]) -> list[tuple[int, str]]:
    """Every sentence of the text in order, with the index of its paragraph."""
    return [(p, sentence) for p, paragraph in enumerate(paragraphs) for sentence in sentences(paragraph)]


def _preceding(sents: list[tuple[int, str]], i: int, max_words: int) -> tuple[str, int]:
    """The whole sentences just before sentence i that fit in ``max_words`` words (a newline between paragraphs,
    as in the text), and their word count."""
    parts, words, p_next = [], 0, sents[i][0]
    for p, sentence in reversed(sents[:i]):
        n = len(sentence.split())
        if words + n > max_words:
            break
        parts.append(sentence + ("\n" if p != p_next else " "))
        words, p_next = words + n, p
    return "".join(reversed(parts)).rstrip(), words


def _passages(paragraphs: list[str], config: ZeroShotConfig):
    """(paragraph index, preceding text, sentence) for every sentence that continues its paragraph and has at least
    context_words[0] words of whole sentences before it within context_words[1] words (earlier paragraphs too)."""
    sents = _sentences_of(paragraphs)
    for i in range(1, len(sents)):
        if sents[i - 1][0] != sents[i][0]:
            continue  # a sentence that opens a paragraph would join its passage with a newline, its rivals not
        before, words = _preceding(sents, i, config.context_words[1])
        if words >= config.context_words[0]:
            yield sents[i][0], before, sents[i][1]


def _sample(items: list, config: ZeroShotConfig) -> list:
    """At most ``config.items`` of ``items``, a seeded choice that keeps their order."""
    if len(items) <= config.items:
        return items
    keep = sorted(random.Random(config.seed).sample(range(len(items)), config.items))
    return [items[i] for i in keep]


def cloze_items(paragraphs: list[str], config: ZeroShotConfig = ZeroShotConfig()) -> list[ClozeItem]:
    """LAMBADA-style items from ``paragraphs`` (held-out text), by the rule of the module docstring."""
    items = []
    sents = _sentences_of(paragraphs)
    for i in range(1, len(sents)):
        words = sents[i][1].split()
        last = WORD.fullmatch(words[-1].rstrip(".!?\"'\u201d\u2019);:,")) if words else None
        if last is None or len(words) < 2:
            continue
        target = last.group(0)
        if len(target) < config.min_target_chars or target.lower() in STOP_WORDS:
            continue
        prefix = " ".join(words[:-1])  # the target's own sentence before it
        # the passage keeps at most context_words[1] words, the target's sentence included
        before, count = _preceding(sents, i, config.context_words[1] - len(words) + 1)
        if count < config.context_words[0]:
            continue
        own_sentence = {w.lower() for w in WORD.findall(prefix)}
        if target.lower() in own_sentence or target.lower() not in {w.lower() for w in WORD.findall(before)}:
            continue
        joiner = " " if sents[i - 1][0] == sents[i][0] else "\n"
        items.append(ClozeItem(f"{before}{joiner}{prefix}", target))
    return _sample(items, config)


def ending_items(paragraphs: list[str], config: ZeroShotConfig = ZeroShotConfig()) -> list[ChoiceItem]:
    """HellaSwag-style items: the true next sentence among sentences of similar length from other paragraphs."""
    low, high = config.ending_words
    by_length: dict[int, list[tuple[int, str]]] = {}  # candidate endings by word count: (paragraph, sentence)
    for p, paragraph in enumerate(paragraphs):
        for sentence in sentences(paragraph):
            if low <= len(sentence.split()) <= high:
                by_length.setdefault(len(sentence.split()), []).append((p, sentence))
    rng = random.Random(config.seed)
    items = []
    for p, before, true in _passages(paragraphs, config):
        n = len(true.split())
        if not low <= n <= high:
            continue
        spread = max(2, n // 3)  # "similar length": within a third of the true ending's words (at least 2)
        similar = list(dict.fromkeys(  # distinct sentences, in text order
            s for m in range(n - spread, n + spread + 1) for q, s in by_length.get(m, ()) if q != p and s != true))
        if len(similar) < config.choices - 1:
            continue
        endings = rng.sample(similar, config.choices - 1)
        label = rng.randrange(config.choices)
        endings.insert(label, true)
        items.append(ChoiceItem(before, tuple(f" {e}" for e in endings), label))
    return _sample(items, config)


def topic_items(texts: list[str], labels: list[int], topics: list[str],
                config: ZeroShotConfig = ZeroShotConfig()) -> list[ChoiceItem]:
    """Zero-shot topic choice: "<article>\\nThis article is about" and the topic names as choices."""
    if len(texts) != len(labels):
        raise ValueError(f"{len(texts)} texts but {len(labels)} labels")
    if len(topics) < 2:
        raise ValueError(f"need at least 2 topics, got {topics}")
    items = []
    for text, label in zip(texts, labels, strict=True):
        context = f"{' '.join(text.split()[: config.context_words[1]])}\nThis article is about"
        items.append(ChoiceItem(context, tuple(f" {t}" for t in topics), int(label)))
    return _sample(items, config)


# ------------------------------------------------------------------------------------------------- scoring


def _continuation_logprobs(model, tokenizer, pairs: list[tuple[str, str]], batch_size: int, budget, prune: bool,
                           policy=None):
    """For each (context, continuation): the log-probabilities of the continuation's tokens [len] and whether each
    was the greedy choice, from one forward of <eot> context continuation (right-padded batches, longest first),
    the output projection applied at the continuation's positions only. With an eviction ``policy``: the context
    first, then the continuation after what the policy kept."""
    encoded = []
    for context, continuation in pairs:
        ctx = [tokenizer.eot_id] + tokenizer.encode(context)
        cont = tokenizer.encode(continuation)
        if not cont:
            raise ValueError(f"continuation {continuation!r} encodes to no tokens")
        encoded.append((ctx, cont))
    longest = max(len(c) + len(t) for c, t in encoded)
    check_length(model, longest)
    if policy is not None:
        return [_scored(_after_context(model, ctx, [cont], policy)[0], cont) for ctx, cont in encoded]
    order = sorted(range(len(encoded)), key=lambda i: -(len(encoded[i][0]) + len(encoded[i][1])))
    results = [None] * len(encoded)
    device = next(model.parameters()).device
    for start in range(0, len(order), batch_size):
        chunk = order[start: start + batch_size]
        T = max(len(encoded[i][0]) + len(encoded[i][1]) for i in chunk)
        ids = torch.full((len(chunk), T), tokenizer.eot_id, dtype=torch.long)
        for row, i in enumerate(chunk):
            seq = encoded[i][0] + encoded[i][1]
            ids[row, : len(seq)] = torch.tensor(seq)
        with torch.no_grad():
            h = hidden_states(model, ids.to(device), budget=budget, prune=prune)
            head = output_head(model)
            for row, i in enumerate(chunk):
                ctx, cont = encoded[i]
                positions = torch.arange(len(ctx) - 1, len(ctx) + len(cont) - 1)  # the states that predict cont
                results[i] = _scored(F.log_softmax(head(h[row, positions]).float(), dim=-1), cont)  # only where scored
    return results


def _after_context(model, context: list[int], continuations: list[list[int]], policy=None, budget=None,
                   prune: bool = True, pad_id: int = 0) -> list[torch.Tensor]:
    """The log-probabilities [len, V] at each continuation's tokens, after one run of ``context`` shared by them."""
    device = next(model.parameters()).device
    ids = torch.full((len(continuations), max(map(len, continuations))), pad_id, dtype=torch.long)
    for row, tokens in enumerate(continuations):
        ids[row, : len(tokens)] = torch.tensor(tokens)
    with torch.no_grad():
        h = continuation_hidden_states(model, torch.tensor([context], device=device), ids.to(device), budget=budget,
                                       prune=prune, policy=policy)
        head = output_head(model)
        return [F.log_softmax(head(h[row, : len(tokens)]).float(), dim=-1) for row, tokens in enumerate(continuations)]


def _scored(log_probs: torch.Tensor, tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probability of each target token, whether it was the greedy choice), on the CPU."""
    target = torch.tensor(tokens, device=log_probs.device)
    return log_probs.gather(-1, target[:, None])[:, 0].cpu(), (log_probs.argmax(-1) == target).cpu()


def _accuracy(outcomes: list[bool], texts: list[str]) -> dict:
    """Accuracy, its 95% interval and n of per-item ``outcomes``, which stay in the result (in item order) so two
    models scored on the same items can be compared item by item, with each item's fingerprint (``unit_ids``,
    from the item's ``texts``)."""
    correct, n = sum(outcomes), len(outcomes)
    low, high = wilson_interval(correct, n)
    return {"accuracy": correct / n, "ci_low": low, "ci_high": high, "n": n, "outcomes": [bool(o) for o in outcomes],
            "unit_ids": unit_ids(texts).tolist()}


def score_cloze(model, tokenizer, items: list[ClozeItem], batch_size: int = 8, budget: float | None = None,
                prune: bool = True, policy=None) -> dict:
    """Last-word accuracy (every target token the greedy choice), its 95% interval, and the target's perplexity."""
    if not items:
        raise ValueError("no cloze items: the text gave none that pass the rules (use more text or looser rules)")
    scored = _continuation_logprobs(model, tokenizer, [(it.context, f" {it.target}") for it in items], batch_size,
                                    budget, prune, policy)
    outcomes = [bool(greedy.all()) for _, greedy in scored]
    nll = sum(-float(lp.sum()) for lp, _ in scored) / len(items)
    texts = [f"{it.context}\x1f{it.target}" for it in items]
    return {**_accuracy(outcomes, texts), "target_perplexity": math.exp(nll)}


CHOICE_SCORES = ("per_character", "sum")


def _choice_logprobs(model, tokenizer, item: ChoiceItem, budget, prune: bool, policy=None) -> list[torch.Tensor]:
    """The log-probabilities of each choice's tokens [len], from one run of <eot> context and the choices after it
    as a batch (``continuation_hidden_states``: the context's states computed once, not once per choice), the
    output projection applied at the choices' positions only."""
    encoded = [tokenizer.encode(choice) for choice in item.choices]
    for choice, tokens in zip(item.choices, encoded, strict=True):
        if not tokens:
            raise ValueError(f"choice {choice!r} encodes to no tokens")
    context = [tokenizer.eot_id] + tokenizer.encode(item.context)
    log_probs = _after_context(model, context, encoded, policy, budget, prune, pad_id=tokenizer.eot_id)
    return [_scored(lp, tokens)[0] for lp, tokens in zip(log_probs, encoded, strict=True)]


def score_choice(model, tokenizer, items: list[ChoiceItem], budget: float | None = None, prune: bool = True,
                 score: str = "per_character", policy=None) -> dict:
    """Accuracy of the choice with the highest log-likelihood (``score``: "per_character", HellaSwag's
    length-normalised one, or "sum", the plain total), and its 95% interval. An item's choices run as one batch
    after its context, which runs once (``_choice_logprobs``)."""
    if score not in CHOICE_SCORES:
        raise ValueError(f"score must be one of {CHOICE_SCORES}, got {score!r}")
    if not items:
        raise ValueError("no choice items: the text gave none that pass the rules (use more text or looser rules)")
    outcomes = []
    for it in items:
        log_probs = _choice_logprobs(model, tokenizer, it, budget, prune, policy)
        totals = [float(lp.sum()) / (len(choice) if score == "per_character" else 1)
                  for lp, choice in zip(log_probs, it.choices, strict=True)]
        outcomes.append(max(range(len(totals)), key=totals.__getitem__) == it.label)
    texts = ["\x1f".join([it.context, *it.choices, str(it.label)]) for it in items]
    return {**_accuracy(outcomes, texts), "chance": sum(1 / len(it.choices) for it in items) / len(items)}

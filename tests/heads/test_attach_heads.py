"""Head gates attached to transformers' own encoders and ViTs (bab.heads.attach), on random-initialised configs."""

import copy
import math

import pytest
import torch
from transformers import (
    AutoModelForImageClassification,
    AutoModelForSequenceClassification,
    BertConfig,
    BertForSequenceClassification,
    DeiTConfig,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    GPT2Config,
    GPT2LMHeadModel,
    RobertaConfig,
    ViTConfig,
)

from bab.core.training import Objective, OptimizerConfig, SampledBatches, run_training
from bab.heads.attach import (
    CONFIG_KEY,
    attach,
    detach,
    head_state,
    is_attached,
    last_cost,
    load_attached,
    output_projections,
    set_budget,
    set_dense,
    set_head_mask,
)
from bab.heads.gates import hard_topk_mask
from bab.heads.hf_encoder import GatedHFClassifier, classifier_from_config, load_classifier, resolve_encoder_source
from bab.heads.hf_pruning import prune_heads

VOCAB, LAYERS, HEADS, WIDTH = 97, 3, 4, 32
# initializer_range 0.2 (transformers' default 0.02 leaves the logits near 0, where removing a head barely shows)


def _text(config_class, **extra):
    def build(attn):
        config = config_class(vocab_size=VOCAB, num_labels=3, max_position_embeddings=64, initializer_range=0.2,
                              **extra)
        return AutoModelForSequenceClassification.from_config(config, attn_implementation=attn)
    return build


def _image(config_class, architecture):
    def build(attn):
        config = config_class(image_size=16, patch_size=4, num_channels=3, hidden_size=WIDTH,
                              num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=64, num_labels=3,
                              initializer_range=0.2, architectures=[architecture])
        return AutoModelForImageClassification.from_config(config, attn_implementation=attn)
    return build


BUILDERS = {
    "bert": _text(BertConfig, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  intermediate_size=64),
    "roberta": _text(RobertaConfig, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                     intermediate_size=64, pad_token_id=1),
    "distilbert": _text(DistilBertConfig, dim=WIDTH, n_layers=LAYERS, n_heads=HEADS, hidden_dim=64),
    "vit": _image(ViTConfig, "ViTForImageClassification"),
    "deit": _image(DeiTConfig, "DeiTForImageClassification"),  # DeiT's auto class needs the architecture named
}
KINDS = list(BUILDERS)


def plain(kind, attn="sdpa", seed=0):
    torch.manual_seed(seed)
    return BUILDERS[kind](attn).eval()


def gated(kind, attn="sdpa", gates="budget", seed=0):
    """(the plain model, an attached copy of it with distinct gates, so that top-k is a real choice)."""
    model = plain(kind, attn, seed)
    attached = attach(copy.deepcopy(model), gates=gates)
    if gates is not None:
        with torch.no_grad():
            attached.head_gates.theta.copy_(torch.randn(LAYERS, HEADS, generator=torch.Generator().manual_seed(5)))
    return model, attached


def inputs(kind):
    g = torch.Generator().manual_seed(1)
    if kind in ("vit", "deit"):
        return {"pixel_values": torch.randn(3, 3, 16, 16, generator=g)}
    ids = torch.randint(5, VOCAB, (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # right padding
    return {"input_ids": ids, "attention_mask": mask}


def logits(model, kind):
    with torch.no_grad():
        return model(**inputs(kind)).logits


@pytest.mark.parametrize("kind", KINDS)
def test_open_gates_and_a_full_mask_give_the_plain_model(kind):
    model, attached = gated(kind)
    reference = logits(model, kind)
    assert torch.allclose(logits(attached, kind), reference, atol=1e-5)  # dense: the hooks change nothing
    set_head_mask(attached, torch.ones(LAYERS, HEADS))
    assert torch.allclose(logits(attached, kind), reference, atol=1e-5)
    with torch.no_grad():
        attached.head_gates.theta.fill_(100.0)  # sigmoid(100) is 1.0 in float32: every gate fully open
    set_budget(attached, 0.5)
    assert torch.allclose(logits(attached, kind), reference, atol=1e-5)
    assert head_state(attached).soft_gates.eq(1).all()


@pytest.mark.parametrize("kind", KINDS)
def test_a_masked_head_equals_zeroing_its_columns_of_the_output_projection(kind):
    model, attached = gated(kind)
    layer, head = 1, 2
    mask = torch.ones(LAYERS, HEADS)
    mask[layer, head] = 0
    set_head_mask(attached, mask)
    out, head_dim = output_projections(model)[layer]
    with torch.no_grad():
        out.weight[:, head * head_dim:(head + 1) * head_dim] = 0  # the reference, written out on the plain model
    masked = logits(attached, kind)
    assert torch.allclose(masked, logits(model, kind), atol=1e-5)
    set_dense(attached)
    assert not torch.allclose(masked, logits(attached, kind), atol=1e-4)  # the mask really removed something


@pytest.mark.parametrize("kind", KINDS)
def test_soft_cost_is_the_mean_gate_and_trains_the_gates(kind):
    _, attached = gated(kind)
    set_budget(attached, 0.3)
    out = attached(**inputs(kind)).logits
    state = head_state(attached)
    gates = attached.head_gates(0.3)
    assert torch.allclose(state.soft_gates, gates) and state.weights is state.soft_gates
    assert torch.allclose(last_cost(attached), gates.mean())
    (out.square().mean() + last_cost(attached)).backward()
    for name in ("theta", "raw_sensitivity"):
        grad = getattr(attached.head_gates, name).grad
        assert grad is not None and grad.abs().sum() > 0, name


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("budget", [0.2, 0.5, 0.75])
def test_hard_mode_keeps_the_top_k_heads(kind, budget):
    _, attached = gated(kind)
    set_budget(attached, budget, mode="hard")
    hard = attached(**inputs(kind)).logits
    weights = head_state(attached).weights
    k = math.ceil(budget * LAYERS * HEADS)
    assert int(weights.detach().round().sum()) == k
    assert float(last_cost(attached)) == pytest.approx(k / (LAYERS * HEADS))
    hard.square().mean().backward()  # straight-through: the binary mask's gradient reaches the soft gates
    assert attached.head_gates.theta.grad.abs().sum() > 0
    set_head_mask(attached, hard_topk_mask(attached.head_gates(budget), budget))
    assert torch.allclose(logits(attached, kind), hard.detach(), atol=1e-6)


def test_a_per_layer_floor_keeps_a_head_in_every_layer():
    _, attached = gated("bert")
    with torch.no_grad():
        attached.head_gates.theta[0] = -20.0  # layer 0's gates the lowest: the global top-k empties it
    set_budget(attached, 0.25, mode="hard")
    logits(attached, "bert")
    assert head_state(attached).weights[0].sum() == 0
    set_budget(attached, 0.25, mode="hard", min_per_layer=1)
    logits(attached, "bert")
    assert (head_state(attached).weights.sum(1) >= 1).all()


@pytest.mark.parametrize("kind", KINDS)
def test_eager_and_sdpa_attention_agree(kind):
    results = []
    for attn in ("eager", "sdpa"):
        _, attached = gated(kind, attn)
        assert attached.config._attn_implementation == attn
        set_budget(attached, 0.4)
        soft = logits(attached, kind)
        set_budget(attached, 0.4, mode="hard")
        results.append((soft, logits(attached, kind)))
    (soft_eager, hard_eager), (soft_sdpa, hard_sdpa) = results
    assert torch.allclose(soft_eager, soft_sdpa, atol=1e-5)
    assert torch.allclose(hard_eager, hard_sdpa, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_save_and_load_attached_give_identical_logits(kind, tmp_path):
    _, attached = gated(kind)
    attached.save_pretrained(tmp_path)
    again = load_attached(type(attached), str(tmp_path)).eval()
    assert torch.equal(again.head_gates.theta, attached.head_gates.theta)
    for model in (attached, again):
        set_budget(model, 0.4)
    assert torch.equal(logits(again, kind), logits(attached, kind))
    for model in (attached, again):
        set_budget(model, 0.4, mode="hard")
    assert torch.equal(logits(again, kind), logits(attached, kind))


def test_static_gates_and_mask_only_models_round_trip(tmp_path):
    for gates, folder in (("static", tmp_path / "static"), (None, tmp_path / "masks")):
        _, attached = gated("distilbert", gates=gates)
        attached.save_pretrained(folder)
        again = load_attached(DistilBertForSequenceClassification, str(folder)).eval()
        assert getattr(again.config, CONFIG_KEY)["gates"] == gates
        if gates is None:
            assert not hasattr(again, "head_gates")
            with pytest.raises(ValueError, match="has no gates"):
                set_budget(again, 0.5)
        else:
            set_budget(attached, 0.5)
            set_budget(again, 0.5)
            assert torch.equal(logits(again, "distilbert"), logits(attached, "distilbert"))


def test_load_attached_needs_an_attached_checkpoint(tmp_path):
    plain("bert").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="holds no 'bab_head_gates'"):
        load_attached(BertForSequenceClassification, str(tmp_path))


def test_attaching_twice_and_unsupported_models_raise():
    _, attached = gated("bert")
    with pytest.raises(ValueError, match="already attached"):
        attach(attached)
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=WIDTH, n_layer=2, n_head=HEADS, n_positions=32))
    with pytest.raises(ValueError, match=r"BERT, RoBERTa, DistilBERT, ViT and DeiT.*'gpt2'"):
        attach(gpt2)
    with pytest.raises(ValueError, match="no head gates attached"):
        set_budget(gpt2, 0.5)


def test_bad_settings_fail_before_the_forward():
    _, attached = gated("bert")
    with pytest.raises(ValueError, match="budget must lie in"):
        set_budget(attached, 1.5)
    with pytest.raises(ValueError, match="mode must be one of"):
        set_budget(attached, 0.5, mode="skip")
    with pytest.raises(ValueError, match="head_mask must have shape"):
        set_head_mask(attached, torch.ones(LAYERS, HEADS + 1))
    with pytest.raises(ValueError, match="binary"):
        set_head_mask(attached, torch.full((LAYERS, HEADS), 0.5))
    assert head_state(attached).mode == "dense"  # a refused setting leaves the last good one


def test_detach_gives_back_the_plain_model_even_on_a_copy():
    model, attached = gated("bert")
    twin = copy.deepcopy(attached)
    set_budget(attached, 0.3)
    set_budget(twin, 0.3)
    assert head_state(twin) is not head_state(attached)  # a copy has a state of its own
    assert torch.equal(logits(twin, "bert"), logits(attached, "bert"))
    detach(twin)
    assert not is_attached(twin) and not hasattr(twin, "head_gates") and not hasattr(twin.config, CONFIG_KEY)
    assert set(twin.state_dict()) == set(model.state_dict())
    assert torch.allclose(logits(twin, "bert"), logits(model, "bert"), atol=1e-6)
    assert not torch.allclose(logits(attached, "bert"), logits(model, "bert"), atol=1e-4)  # the original still gated


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_a_structurally_pruned_attached_model_gates_the_heads_it_kept(kind):
    _, attached = gated(kind)
    mask = hard_topk_mask(attached.head_gates(0.5), 0.5)
    mask[:, 0] = 1  # structural pruning never empties a layer
    pruned = copy.deepcopy(attached)
    prune_heads(pruned, mask)
    set_head_mask(attached, mask)
    assert torch.allclose(logits(pruned, kind), logits(attached, kind), atol=1e-5)
    set_head_mask(pruned, mask)  # a mask over the original heads: the kept ones are all 1
    assert torch.allclose(logits(pruned, kind), logits(attached, kind), atol=1e-5)
    with torch.no_grad():  # soft gates: the reference shuts the pruned heads' gates (sigmoid(-1e4) is 0)
        attached.head_gates.theta.masked_fill_(mask == 0, -1e4)
    set_budget(attached, 0.7)
    set_budget(pruned, 0.7)
    assert torch.allclose(logits(pruned, kind), logits(attached, kind), atol=1e-5)


def test_the_gated_classifier_keeps_its_state_dict_and_a_plain_transformers_config():
    torch.manual_seed(0)
    hf = classifier_from_config(BertConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS,
                                           num_attention_heads=HEADS, intermediate_size=64, num_labels=3))
    plain_keys = ["hf." + key for key in hf.state_dict()]
    model = GatedHFClassifier.from_hf(hf, "random", gates="budget")
    assert list(model.state_dict()) == plain_keys + ["gates.theta", "gates.raw_sensitivity"]
    assert not hasattr(hf.config, CONFIG_KEY) and is_attached(hf)
    # two classifiers sharing one transformers model (a copy of it, too) each gate it with their own gates
    other = GatedHFClassifier(hf, model.config)
    ids = inputs("bert")["input_ids"]
    with torch.no_grad():
        other.gates.theta.fill_(-100.0)
        mine, theirs = model(ids, 0.5, "soft").logits, other(ids, 0.5, "soft").logits
    assert not torch.allclose(mine, theirs, atol=1e-4)
    assert head_state(hf).mode == "dense"  # each call's settings are put back after it


def test_the_packaged_minilm_takes_the_gates():
    try:
        resolve_encoder_source()
    except OSError as error:
        pytest.skip(f"the packaged encoder is not installed: {error}")
    hf, _ = load_classifier(num_labels=2)
    hf.eval()
    ids = torch.randint(1000, 2000, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        reference = hf(input_ids=ids).logits
        attach(hf)
        set_head_mask(hf, torch.ones(hf.config.num_hidden_layers, hf.config.num_attention_heads))
        assert torch.allclose(hf(input_ids=ids).logits, reference, atol=1e-5)
        set_budget(hf, 0.25, mode="hard")
        hf(input_ids=ids)
    assert int(head_state(hf).weights.sum()) == math.ceil(0.25 * 6 * 12)


def test_a_model_copies_after_a_training_forward():
    _, attached = gated("bert")
    set_budget(attached, 0.5)
    attached(**inputs("bert")).logits.sum().backward()  # the state now holds tensors with autograd history
    twin = copy.deepcopy(attached)
    assert head_state(twin).cost is None and head_state(twin).gates is twin.head_gates
    assert torch.equal(logits(twin, "bert"), logits(attached, "bert"))


class _GateCostObjective(Objective):
    """Train only the attached gates, on the soft cost at one budget alone: the cost must fall."""

    def parameter_groups(self, model):
        return [{"params": list(model.head_gates.parameters())}]

    def step(self, model, teacher, batch, rng, step):
        ids, mask = batch
        model(input_ids=ids, attention_mask=mask)
        cost = last_cost(model)
        return cost, {"cost": cost.item(), "steps": 1}

    def row(self, sums, epoch, step):
        return {"step": step, "cost": sums["cost"] / sums["steps"]}


def test_the_training_loop_trains_the_attached_gates():
    _, attached = gated("bert")
    set_budget(attached, 0.5)
    before = head_state(attached).gates(0.5).mean().item()
    weights = attached.bert.embeddings.word_embeddings.weight.clone()
    def batch(generator):
        return tuple(inputs("bert").values())

    config = OptimizerConfig(seed=0, lr=0.1, weight_decay=0.0, warmup_fraction=0.1, grad_clip=1.0)
    result = run_training(attached, _GateCostObjective(config, SampledBatches(batch, steps=8, log_every=8)),
                          progress=False)
    assert result.history[-1]["cost"] < before
    assert head_state(attached).gates(0.5).mean().item() < before
    assert torch.equal(attached.bert.embeddings.word_embeddings.weight, weights)  # only the gates learnt


def test_the_gates_compose_with_a_registered_attention_implementation():
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    calls = []

    def counted_sdpa(module, *args, **kwargs):  # stands in for another method's attention
        calls.append(module)
        return sdpa_attention_forward(module, *args, **kwargs)

    AttentionInterface.register("bab_test_counted_sdpa", counted_sdpa)
    _, attached = gated("vit")
    set_budget(attached, 0.4, mode="hard")
    reference = logits(attached, "vit")
    attached.set_attn_implementation("bab_test_counted_sdpa")
    assert torch.allclose(logits(attached, "vit"), reference, atol=1e-5)
    assert len(calls) == LAYERS

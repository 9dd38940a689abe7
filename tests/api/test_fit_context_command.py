"""`python -m bab fit context`: a text file in, one folder of results out (as `fit heads`), on a tiny random Llama
saved as a local folder."""

import json
import math
import random

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from bab.__main__ import main

VOCAB = 40


def word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, **{f"w{i}": i for i in range(1, VOCAB)}}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def words(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randint(1, VOCAB - 1)}" for _ in range(n))


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("BAB_CACHE_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("BAB_THREADS", "1")
    folder = tmp_path / "tiny-llama"
    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=4,
                                      max_position_embeddings=64)).eval()
    hf.save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    (tmp_path / "train.txt").write_text(words(2000, 1))
    (tmp_path / "test.txt").write_text(words(200, 2))
    return folder, hf, tmp_path


def run(folder, tmp_path, out, *extra):
    return main(["fit", "context", "--model", str(folder), "--train", str(tmp_path / "train.txt"), "--test",
                 str(tmp_path / "test.txt"), "--out", str(out), "--steps", "40", "--context", "16", "--r", "4",
                 "--batch-size", "4", "--gamma", "5", "--lr", "1e-3", "--pruning-lr", "0.1", "--quiet", *extra])


def test_fit_context_writes_every_artefact_and_the_model_reloads(files, capsys):
    from transformers import AutoModelForCausalLM

    from bab.context.attach import load_attached
    from bab.context.evaluate import evaluate_lm

    folder, hf, tmp_path = files
    out = tmp_path / "out"
    assert run(folder, tmp_path, out) == 0
    printed = capsys.readouterr().out
    assert "held-out perplexity" in printed and f"wrote {out}/" in printed
    assert sorted(p.name for p in out.iterdir()) == ["evaluation.csv", "metrics.json", "model", "sample.txt",
                                                     "summary.html"]
    metrics = json.loads((out / "metrics.json").read_text())
    given, off, on = metrics["evaluation"]
    assert [r["model"] for r in (given, off, on)] == ["as given", "fitted, pruning off", "fitted, pruning on"]
    # the decoder as given: transformers' own perplexity over the same windows, written out here
    ids = torch.tensor(word_tokenizer()(words(200, 2))["input_ids"])
    nll = 0.0
    with torch.no_grad():
        for w in range((len(ids) - 1) // 16):
            chunk = ids[w * 16: w * 16 + 17]
            nll += F.cross_entropy(hf(chunk[None, :-1]).logits[0], chunk[1:], reduction="sum").item()
    assert given["perplexity"] == pytest.approx(math.exp(nll / (16 * given["windows"])), rel=1e-4)
    assert given["ratio_to_given"] == pytest.approx(1.0) and given["fraction_pruned"] == 0.0
    assert on["fraction_pruned"] > 0 and on["ratio_to_fitted_dense_low"] <= on["ratio_to_fitted_dense"] <= \
        on["ratio_to_fitted_dense_high"]
    # the saved decoder, reloaded with its interaction modules, gives the pruned perplexity again
    model = load_attached(AutoModelForCausalLM, str(out / "model")).eval()
    again = evaluate_lm(model, ids, 16, prune=True)
    assert again["perplexity"] == pytest.approx(on["perplexity"], rel=1e-5)
    assert (out / "sample.txt").read_text().count("---") == 1


def test_bad_inputs_exit_2_before_training(files, capsys):
    folder, _, tmp_path = files
    (tmp_path / "short.txt").write_text(words(5, 3))
    assert main(["fit", "context", "--model", str(folder), "--train", str(tmp_path / "train.txt"), "--test",
                 str(tmp_path / "short.txt"), "--out", str(tmp_path / "out"), "--context", "16", "--quiet"]) == 2
    assert "too few for one window" in capsys.readouterr().err
    assert main(["fit", "context", "--model", str(folder), "--train", str(tmp_path / "nowhere.txt"), "--test",
                 str(tmp_path / "test.txt"), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "is not a file" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("keep me")
    assert run(folder, tmp_path, tmp_path / "full") == 2
    assert "is not empty" in capsys.readouterr().err and (tmp_path / "full" / "mine.txt").exists()
    assert not (tmp_path / "out").exists()

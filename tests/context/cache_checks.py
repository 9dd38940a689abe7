"""A cache verdict both decoders' tests share (GPT-2 and the Llama family)."""

import math

import torch


def assert_prefill_cache_holds_what_the_last_prompt_token_sees(model, prompt: torch.Tensor) -> None:
    """After prefill, each layer's live cached positions are exactly the tokens the last prompt query still
    sees in the full hard forward (log keep > -inf)."""
    batch, length = prompt.shape
    cache = model.new_cache(batch, length, prune=True)
    model.prefill(prompt, cache)
    with torch.no_grad():
        out = model(prompt, return_log_keep=True)
    for layer_cache, log_keep in zip(cache.layers, out.log_keep, strict=True):
        for row in range(batch):
            alive = set(torch.nonzero(log_keep[row, -1] > -math.inf).flatten().tolist())
            assert set(layer_cache.positions[row][layer_cache.valid[row]].tolist()) == alive

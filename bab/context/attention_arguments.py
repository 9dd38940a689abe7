"""Which decoders context pruning can serve exactly: the attention modules of a transformers causal LM and the
arguments each passes to its attention function, read from its ``forward`` and evaluated on the module.

``bab.context.attach`` accepts a decoder only if every argument is honoured by the "bab_context" attention
(``HONOURED``), changes nothing it computes (``INERT``) or holds nothing; any other (logit soft-capping, attention
sinks, a position bias, ...) is refused with the reason (``check_argument``).
"""

from __future__ import annotations

import torch
from torch import nn

IMPLEMENTATION = "bab_context"  # the attention implementation context pruning registers


def decoder_attentions(model: nn.Module) -> list[nn.Module]:
    """The attention module of every decoder layer, in order (GPT-2: ``transformer.h[i].attn``; Llama, Qwen2,
    Mistral: ``model.layers[i].self_attn``)."""
    base = getattr(model, "base_model", model)
    blocks = getattr(base, "layers", None)
    if blocks is None:
        blocks = getattr(base, "h", None)
    if blocks is None:
        raise ValueError(f"cannot find the decoder layers of {type(model).__name__} (looked for base_model.layers and "
                         "base_model.h)")
    attentions = []
    for i, block in enumerate(blocks):
        attention = getattr(block, "self_attn", None) or getattr(block, "attn", None)
        if attention is None or getattr(attention, "layer_idx", None) != i:
            raise ValueError(f"layer {i} of {type(model).__name__} has no self-attention module (self_attn or attn) "
                             "with layer_idx set")
        attentions.append(attention)
    return attentions


# Arguments of the attention call that "bab_context" honours as transformers' SDPA attention does: dropout and
# scaling go to SDPA; a sliding window is built by transformers into the mask "bab_context" adds log I to (SDPA
# ignores the argument too).
HONOURED = frozenset({"dropout", "scaling", "sliding_window"})
# Arguments that reach the attention through **kwargs and change nothing it computes.
INERT = frozenset({"position_ids", "cache_position", "use_cache", "past_key_values", "output_attentions",
                   "output_hidden_states", "output_router_logits", "return_dict", "position_embeddings", "layer_idx",
                   "is_causal"})
# Why an argument that holds a value is refused (others: "an argument the attention does not compute").
REFUSED_BECAUSE = {
    "softcap": "attention logit soft-capping (tanh(s / c) * c before the softmax)",
    "s_aux": "attention sinks (a learned logit per head that takes softmax mass)",
    "sinks": "attention sinks (a learned logit per head that takes softmax mass)",
    "position_bias": "a position bias added to the attention logits",
    "head_mask": "a head mask",
}


def check_argument(attention: nn.Module, argument: str, value) -> None:
    if argument in HONOURED or argument in INERT and argument != "is_causal":
        return
    if argument == "is_causal" and value in (None, True):
        return
    if value is None:
        return
    why = REFUSED_BECAUSE.get(argument, "an argument the bab_context attention does not compute")
    raise ValueError(f"{type(attention).__name__} passes {argument}={_short(value)} to its attention: {why}, which "
                     f"the {IMPLEMENTATION!r} attention would silently drop; context pruning refuses this model")


def _short(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"<tensor {tuple(value.shape)}>"
    return repr(value)


_UNKNOWN = object()


def attention_calls(cls: type) -> list:
    """The ``attention_interface(...)`` calls in ``cls.forward``'s source (ast.Call nodes)."""
    import ast
    import inspect
    import textwrap

    try:
        source = textwrap.dedent(inspect.getsource(cls.forward))
    except (OSError, TypeError):
        return []
    return [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name) and node.func.id == "attention_interface"]


def check_attention_call(attention: nn.Module) -> None:
    calls = attention_calls(type(attention))
    if not calls:
        raise ValueError(f"{type(attention).__name__}.forward does not call transformers' attention interface "
                         f"(attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(...)) in a form attach can "
                         "read, so it cannot tell which arguments the attention gets")
    for call in calls:
        if len(call.args) != 5:  # module, query, key, value, attention_mask
            raise ValueError(f"{type(attention).__name__} calls its attention with {len(call.args)} positional "
                             "arguments; attach knows the five of transformers' attention functions")


def call_arguments(attention: nn.Module) -> dict:
    """{argument: value} of the keyword arguments the module's attention call names, each evaluated on the module
    where it is ``self.<attribute>...``, a constant, or a conditional expression (both branches must agree on being
    None); ``_UNKNOWN`` otherwise (refused unless honoured)."""
    import ast

    def evaluate(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Attribute):
            base = attention if isinstance(node.value, ast.Name) and node.value.id == "self" else evaluate(node.value)
            return _UNKNOWN if base is _UNKNOWN else getattr(base, node.attr, _UNKNOWN)
        if isinstance(node, ast.IfExp):
            both = evaluate(node.body), evaluate(node.orelse)
            return None if both == (None, None) else _UNKNOWN
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                and len(node.args) == 3 and isinstance(node.args[1], ast.Constant):
            base = evaluate(node.args[0])
            return _UNKNOWN if base is _UNKNOWN else getattr(base, node.args[1].value, evaluate(node.args[2]))
        return _UNKNOWN

    arguments = {}
    for call in attention_calls(type(attention)):
        for keyword in call.keywords:
            if keyword.arg is not None:  # **kwargs: checked at every call by the attention itself
                arguments[keyword.arg] = evaluate(keyword.value)
    return {k: ("<unreadable>" if v is _UNKNOWN else v) for k, v in arguments.items()}


def window(attention: nn.Module) -> int | None:
    """The sliding window the module passes to its attention (transformers builds the same into the mask), or None."""
    window = call_arguments(attention).get("sliding_window")
    return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


def pretrained_modules(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if hasattr(type(m), "set_attn_implementation")]


def refuse_attention_change(attn_implementation, *args, **kwargs) -> None:
    """Takes the place of ``set_attn_implementation`` on an attached model."""
    if attn_implementation == IMPLEMENTATION:
        return
    raise ValueError(f"context pruning is attached: the attention must stay {IMPLEMENTATION!r} (with "
                     f"{attn_implementation!r} a PrunedCache would drop tokens the attention no longer hides); call "
                     "bab.context.attach.detach(model) first")

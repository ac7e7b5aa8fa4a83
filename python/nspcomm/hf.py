"""nspcomm's nested attention in Hugging Face transformers models.

    import nspcomm.hf
    nspcomm.hf.register()                                  # attn_implementation "nspcomm"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="nspcomm")
    attn = nspcomm.hf.attention(model.config, tree, layout)      # one per round
    ids, pos = nspcomm.hf.inputs(layout, batch_tokens)
    logits = model(input_ids=ids, position_ids=pos, use_cache=False,
                   nsp_attention=attn).logits[0]
    logits = logits[:layout.local_tokens]                   # drop the padding row, if any

The model runs on this rank's rows of a packed batch (batch size 1, the
layout's token order, each row's position in its own sequence as
position_ids, so RoPE is right); every attention layer calls
nspcomm.torch.nested_attention with the NestedAttention passed as the
`nsp_attention` keyword, which transformers hands down to the attention
function. No attention mask is built: the layout knows the sequences.

A rank that holds no tokens in a round must still make every collective
call, but a transformers model cannot run on zero tokens: inputs() gives it
one padding row (token 0 at position 0), the attention treats rows beyond
the layout's T_local as padding (output 0, no exchange), and the caller
drops the padding row's logits (keeping the graph: add 0 * logits.sum() to
the loss so the backward reaches every layer's attention).
"""

import torch

from .torch import NestedAttention, nested_attention

NAME = "nspcomm"

__all__ = ["NAME", "register", "attention_forward", "attention", "inputs", "planner_model"]


def register(name=NAME):
    """Register attention_forward with transformers' AttentionInterface under
    `name` (then attn_implementation=name). Returns the name."""
    from transformers import AttentionInterface
    AttentionInterface.register(name, attention_forward)
    return name


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                      sliding_window=None, nsp_attention=None, **kwargs):
    """transformers' attention function: query [1, n_q, T, D], key, value
    [1, n_kv, T, D] -> ([1, T, n_q, D], None). T >= the layout's T_local;
    rows beyond it are padding (see the module doc). attention_mask is not
    read (None, as transformers gives a custom implementation)."""
    attn = nsp_attention
    if not isinstance(attn, NestedAttention):
        raise ValueError("nspcomm attention: pass nsp_attention=nspcomm.hf.attention(config, tree, "
                         "layout) to the model's forward (got %r)" % type(attn).__name__)
    if query.shape[0] != 1:
        raise ValueError("nspcomm attention: a packed batch has one row, not %d (the layout's "
                         "tokens in one sequence dimension)" % query.shape[0])
    if dropout:
        raise NotImplementedError("nspcomm attention: attention dropout %g (train with 0)"
                                  % dropout)
    if sliding_window is not None:
        raise NotImplementedError("nspcomm attention: sliding-window layers (window %s)"
                                  % sliding_window)
    if scaling is not None and abs(scaling - attn.scale) > 1e-6 * abs(attn.scale):
        raise ValueError("nspcomm attention: the layer scales scores by %g, the NestedAttention "
                         "by %g (nspcomm.hf.attention reads the config's head_dim)"
                         % (scaling, attn.scale))
    T = attn.layout.local_tokens
    if query.shape[2] < T:
        raise ValueError("nspcomm attention: %d rows, the layout has %d" % (query.shape[2], T))
    q, k, v = (x[0, :, :T].transpose(0, 1).contiguous() for x in (query, key, value))
    o = nested_attention(q, k, v, attn)                       # [T, n_q, D]
    pad = query.shape[2] - T
    if pad:
        o = torch.cat([o, o.new_zeros((pad,) + tuple(o.shape[1:]))])
    return o.unsqueeze(0), None


def _head_dim(config):
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def attention(config, tree, layout, **kw):
    """The NestedAttention of a transformers config's attention layers for
    one round: its heads, head_dim, and the score scale head_dim ** -0.5
    (what Llama-, Qwen- and Mistral-style layers use). kw: NestedAttention's."""
    return NestedAttention(tree, layout, config.num_attention_heads,
                           config.num_key_value_heads, _head_dim(config), **kw)


def inputs(layout, tokens):
    """(input_ids [1, T], position_ids [1, T]) of this rank's rows of the
    batch `tokens` ([sum of the plan's lengths], the plan's sequences
    concatenated); one padding row (token 0, position 0) when the rank holds
    no tokens in this round."""
    if layout.local_tokens == 0:
        z = torch.zeros((1, 1), dtype=torch.long)
        return z, z.clone()
    return tokens.index_select(0, layout.token_index())[None], layout.position_ids()[None]


def planner_model(config, params, name=None):
    """The planner's model (a dict with a model file's keys, docs/reference/files.md)
    of a transformers config: layers, hidden size, heads, head_dim, the
    active FFN width per token (experts per token times the expert width
    for MoE), experts, and `params` (the model's parameter count)."""
    experts = int(getattr(config, "num_experts", 0) or 0)
    topk = int(getattr(config, "num_experts_per_tok", 0) or 0) if experts else 0
    ffn = topk * config.moe_intermediate_size if experts else config.intermediate_size
    return {"name": name or getattr(config, "model_type", "hf-model"),
            "layers": config.num_hidden_layers, "hidden": config.hidden_size,
            "q_heads": config.num_attention_heads, "kv_heads": config.num_key_value_heads,
            "head_dim": _head_dim(config), "ffn": float(ffn), "experts": experts, "topk": topk,
            "params": float(params)}

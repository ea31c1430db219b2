"""Function-preserving widening of a small Llama into a wider one (Net2WiderNet-style growth).

Why: the `wide` preset (hidden 1024, GQA 16/4, MLP 2816) has LLM proportions where
communication cares, but pretraining it from scratch until it knows the arithmetic task costs
about half an hour of CPU per base on two cores (docs/wide.md). Growth starts it from a
narrow teacher of the same depth that learns the task in about a minute, embedded exactly in
the wide shapes, then trains every weight of the wide model (`task.teacher_steps` steps), so
the new dimensions are used by the model it post-trains, not left at zero.

The embedding (Chen et al. 2016, Net2Net; Wang et al. 2023, LiGO, grow language models the
same way), for a Llama with RMSNorm, rotary attention, GQA and a SwiGLU MLP:

- the residual stream is zero-padded: embeddings, lm_head and every projection read and write
  only the first d of D dimensions. RMSNorm divides by the RMS over all D dimensions, which is
  sqrt(d/D) of the RMS over the d live ones, so its weight is multiplied by sqrt(d/D) (exact up
  to the epsilon inside the square root);
- source query head h of kv group g becomes target head g * (H'/K') + (h mod H/K); the other
  target heads of each group get zero queries and zero output columns (they attend uniformly
  and write nothing);
- head dimension d_h -> d_h' (a multiple): rotary pairs (j, j + d_h/2) turn at frequency
  theta^(-2j/d_h), which the target turns at index j * d_h'/d_h, so source dimension j goes to
  (j mod d_h/2) * d_h'/d_h + (d_h'/2 if j >= d_h/2); queries are multiplied by
  sqrt(d_h'/d_h) because the target scales scores by 1/sqrt(d_h'); values keep dimensions
  0..d_h-1;
- the MLP's extra units have zero gate, up and down weights (silu(0) * 0 = 0).

With ``noise`` = 0 the grown model computes the source's logits (to float rounding and the
RMSNorm epsilon; tests/tasks/test_grow.py). ``noise`` > 0 adds N(0, noise^2) to every new
(padded) weight entry, drawn from a seeded CPU generator (the same bits on every machine):
without it the extra MLP units and the muted heads would have exactly zero gradient forever.
"""
from __future__ import annotations

import math

import torch


def shape_problem(src: tuple[int, int, int, int], dst: tuple[int, int, int, int]) -> str | None:
    """Why a Llama of (hidden, MLP, heads, kv heads) ``src`` cannot be widened into ``dst``, or None.
    The one rule for ``widen`` and for the config check before launch (``cache.grow_source``)."""
    (d, f, h, kv), (d2, f2, h2, kv2) = src, dst
    if d2 < d or f2 < f:
        return f"hidden {d} -> {d2}, MLP {f} -> {f2} must not shrink"
    if kv2 < kv or h2 // kv2 < h // kv:
        return f"heads {h}/{kv} -> {h2}/{kv2}: the target needs at least as many kv heads and query heads per kv head"
    if (d // h) % 2 or (d2 // h2) % (d // h):
        return f"head dimension {d // h} -> {d2 // h2}: the target must be a multiple of an even source"
    return None


def _dims(config) -> tuple[int, int, int, int]:
    return config.hidden_size, config.intermediate_size, config.num_attention_heads, config.num_key_value_heads


def _rope_map(d_src: int, d_dst: int) -> torch.Tensor:
    half, k = d_src // 2, d_dst // d_src
    j = torch.arange(d_src)
    return (j % half) * k + (j >= half).long() * (d_dst // 2)


def _heads(src, dst) -> tuple[torch.Tensor, torch.Tensor]:
    """Target index of each source query head and each source kv head."""
    h, kv = src.num_attention_heads, src.num_key_value_heads
    h2, kv2 = dst.num_attention_heads, dst.num_key_value_heads
    q = torch.tensor([(i // (h // kv)) * (h2 // kv2) + i % (h // kv) for i in range(h)])
    return q, torch.arange(kv)


def _index(heads: torch.Tensor, dims: torch.Tensor, d_dst: int) -> torch.Tensor:
    """Flat target rows of (source head, source dim) pairs, in the source's row order."""
    return (heads[:, None] * d_dst + dims[None, :]).reshape(-1)


@torch.no_grad()
def widen(source, target, noise: float = 0.0, seed: int = 0):
    """Write ``source`` (a LlamaForCausalLM) into ``target`` (a wider one of the same depth and
    vocabulary), in place, and return ``target``. See the module doc for the mapping."""
    s, t = source.config, target.config
    if s.num_hidden_layers != t.num_hidden_layers or s.vocab_size != t.vocab_size:
        raise ValueError(f"grow: depth {s.num_hidden_layers} -> {t.num_hidden_layers} and vocabulary "
                         f"{s.vocab_size} -> {t.vocab_size} must match")
    problem = shape_problem(_dims(s), _dims(t))
    if problem:
        raise ValueError(f"grow: {problem}")
    d, d2 = s.hidden_size, t.hidden_size
    hd, hd2 = d // s.num_attention_heads, d2 // t.num_attention_heads
    rope = _rope_map(hd, hd2)
    qh, kvh = _heads(s, t)
    q_rows, kv_rows = _index(qh, rope, hd2), _index(kvh, rope, hd2)
    v_rows, o_cols = _index(kvh, torch.arange(hd), hd2), _index(qh, torch.arange(hd), hd2)
    live, mlp = torch.arange(d), torch.arange(s.intermediate_size)
    norm = math.sqrt(d / d2)
    gen = torch.Generator().manual_seed(seed)

    def put(dst: torch.Tensor, src: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor | None, scale: float = 1.0):
        """Noise (or zeros) everywhere, then the source's entries where they go."""
        out = torch.randn(dst.shape, generator=gen) * noise if noise > 0 else torch.zeros(dst.shape)
        if cols is None:
            out[rows] = src.float() * scale
        else:
            out[rows[:, None], cols[None, :]] = src.float() * scale
        dst.copy_(out.to(dst.dtype))

    def put_norm(dst: torch.Tensor, src: torch.Tensor):
        dst.fill_(norm)
        dst[live] = src * norm

    sm, tm = source.model, target.model
    put(tm.embed_tokens.weight.T, sm.embed_tokens.weight.T, live, None)
    put(target.lm_head.weight.T, source.lm_head.weight.T, live, None)
    for a, b in zip(sm.layers, tm.layers):
        for n in ("input_layernorm", "post_attention_layernorm"):
            put_norm(getattr(b, n).weight, getattr(a, n).weight)
        put(b.self_attn.q_proj.weight, a.self_attn.q_proj.weight, q_rows, live, math.sqrt(hd2 / hd))
        put(b.self_attn.k_proj.weight, a.self_attn.k_proj.weight, kv_rows, live)
        put(b.self_attn.v_proj.weight, a.self_attn.v_proj.weight, v_rows, live)
        put(b.self_attn.o_proj.weight, a.self_attn.o_proj.weight, live, o_cols)
        put(b.mlp.gate_proj.weight, a.mlp.gate_proj.weight, mlp, live)
        put(b.mlp.up_proj.weight, a.mlp.up_proj.weight, mlp, live)
        put(b.mlp.down_proj.weight, a.mlp.down_proj.weight, live, mlp)
    put_norm(tm.norm.weight, sm.norm.weight)
    return target

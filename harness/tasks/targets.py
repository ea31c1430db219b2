"""LoRA target modules by architecture, resolved and checked before launch (no weights loaded).

``model.targets`` is a list of module-name suffixes (peft's rule: the last name component,
e.g. ``q_proj``), or one of two keywords, given as a one-element list:

- ``[all-linear]``: every ``nn.Linear`` and transformers ``Conv1D`` layer except the output
  projection (``get_output_embeddings()``, e.g. ``lm_head``), as peft's ``"all-linear"``.
  The default of ``model=hf``: on Llama/Qwen2/Mistral it is the seven projections
  (q,k,v,o,gate,up,down), on GPT-2 ``c_attn, c_proj, c_fc`` (Conv1D), on GPT-NeoX
  ``query_key_value, dense, dense_h_to_4h, dense_4h_to_h``, on Phi ``q_proj, k_proj, v_proj,
  dense, fc1, fc2``.
- ``[auto]``: peft's own per-architecture default for the model's ``model_type``
  (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``; Llama: q_proj, v_proj only).

A layer is adaptable when it is an ``nn.Linear`` or a transformers ``Conv1D`` (GPT-2's
projections, weight stored as in x out), both of which peft's LoRA supports. A named target
that matches no adaptable layer is an error (``check_model``), so a typo never silently
trains fewer matrices than asked.

``check_model(model_cfg)`` builds the model skeleton on the meta device (for ``model=hf``
from ``config.json`` via AutoConfig; for tiny/small/wide from the size fields), so it costs
the transformers import and no weight bytes; validation calls it before any namespace or
process exists.
"""
from __future__ import annotations

from typing import Any, Mapping

from torch import nn

from harness.errors import ConfigError
from harness.tasks.layers import KEYWORDS, adaptable_layers, layer_shape, resolve_targets

__all__ = ["KEYWORDS", "adaptable_layers", "layer_shape", "resolve_targets", "skeleton", "check_model"]

# the layer rules (what is adaptable, which layers model.targets selects) live in harness.tasks.layers


def skeleton(model_cfg: Mapping, vocab_size: int | None = None) -> nn.Module:
    """The model of ``model_cfg`` on the meta device: shapes and module names, no weight bytes.

    ``model=hf``: AutoConfig of ``model.path`` (local config.json only; a GGUF file's from its
    metadata, harness.tasks.gguf_cache.config_of, so planning dequantizes nothing). Otherwise the
    Llama config of the size fields (``vocab_size``: the synthetic tokenizer's by default).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from harness.tasks.gguf_cache import config_of, is_gguf
    from harness.tasks.models import hf_dir, llama_config
    from harness.tasks.plans import model_plan

    cfg = model_plan(model_cfg)
    if cfg.name == "hf" and is_gguf(cfg.path):
        config = config_of(str(cfg.path))
    elif cfg.name == "hf":
        path = hf_dir(cfg)
        try:
            config = AutoConfig.from_pretrained(str(path), local_files_only=True)
        except (ValueError, OSError, KeyError) as err:
            raise ConfigError(f"model.path: {str(path)!r} has a config.json transformers cannot read "
                              f"({str(err).splitlines()[0]})") from None
    else:
        if vocab_size is None:
            from harness.tasks.tokenizer import CHARS, SPECIALS
            vocab_size = len(SPECIALS) + len(CHARS)
        config = llama_config(cfg, vocab_size)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def check_model(model_cfg: Mapping, ranks: Mapping[str, Any] | None = None) -> list[str]:
    """Check ``model.targets`` (and the ranks) against the model's skeleton; return the resolved
    target suffixes. ``ranks``: config key -> LoRA rank to check against the smallest adapted
    dimension (default ``{"model.rank": model.rank}``). One-line ConfigError on failure."""
    from harness.tasks.models import LORA_INITS, model_dtype
    from harness.tasks.plans import model_plan

    cfg = model_plan(model_cfg)
    model_dtype(cfg)                          # model.dtype: one of DTYPES
    init = cfg.lora_init
    if init not in LORA_INITS:
        raise ConfigError(f"model.lora_init: {init!r} is not allowed; choose one of {', '.join(LORA_INITS)}")
    model = skeleton(cfg)
    chosen = resolve_targets(model, cfg.targets)
    layers = {n: s for n, s in adaptable_layers(model).items() if n.split(".")[-1] in chosen}
    name, (d_in, d_out) = min(layers.items(), key=lambda kv: min(kv[1]))
    limit = min(d_in, d_out)
    for key, r in (ranks if ranks is not None else {"model.rank": cfg.rank}).items():
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise ConfigError(f"{key}: {r!r} is not a rank; it must be an integer >= 1")
        if r > limit:
            raise ConfigError(f"{key}: {r} is larger than the smallest dimension ({limit}) of the adapted layer "
                              f"{name} ({d_in} -> {d_out}); choose 1..{limit}")
    return chosen

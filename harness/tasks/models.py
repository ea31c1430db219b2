"""Models: small Llama-style causal LMs built from a config, local HF models, peft LoRA.

``model.name`` selects the source: ``tiny`` / ``small`` (or any other name) build a fresh
``LlamaForCausalLM`` from the size fields of the model config (conf/model/*.yaml), with
weights drawn from ``model.init_seed``; ``hf`` loads ``model.path``, a local Hugging Face
directory (config.json + weights + tokenizer, e.g. written by ``save_pretrained``) or a GGUF
file, which stands for the folder it is materialised into once (harness.tasks.gguf_cache).
Nothing is downloaded: HF_HUB_OFFLINE=1 and ``local_files_only=True``.

LoRA conventions (peft): scale = alpha / r, ``alpha=None`` means alpha = r (scale 1) for
every module, also with per-module ranks. ``init="default"``: A kaiming-uniform, B = 0 (the
adapter starts as the identity); ``"gaussian"``: A ~ N(0, 1/r^2) (std 1/r, peft's
convention), B = 0; ``"zeros"``: A = B = 0, for methods that set A themselves.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from harness.tasks.plans import model_plan  # noqa: E402
from harness.tasks.tokenizer import Tokenizer  # noqa: E402
from harness.errors import ConfigError  # noqa: E402

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
LORA_INITS = ("default", "gaussian", "zeros")


def plain(cfg: Any) -> dict:
    """A config section (DictConfig, dataclass or mapping) as a plain dict."""
    if cfg is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf
        if isinstance(cfg, DictConfig):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover
        pass
    if hasattr(cfg, "__dataclass_fields__"):
        from dataclasses import asdict
        return asdict(cfg)
    return dict(cfg)


def model_dtype(model_cfg: Any) -> torch.dtype:
    name = str(model_plan(model_cfg).dtype)
    if name not in DTYPES:
        raise ConfigError(f"model.dtype: {name!r} is not allowed; choose one of {', '.join(DTYPES)}")
    return DTYPES[name]


def hf_key(model_cfg: Any, kind: str = "student") -> str:
    """The ``model.*`` key that locates the ``kind`` base of ``model=hf``: ``path``, or
    ``teacher_path`` for the teacher when it is set."""
    return "teacher_path" if kind == "teacher" and model_plan(model_cfg).teacher_path else "path"


def hf_dir(model_cfg: Any, key: str = "path", progress: bool = False) -> Path:
    """``model.<key>`` as an existing local HF model directory, or a ConfigError naming it.

    A GGUF file (``*.gguf`` or ``pkg://PACKAGE/FILE.gguf``) stands for the cache folder it is
    materialised into (harness.tasks.gguf_cache; materialised first when it is not there yet)."""
    value = getattr(model_plan(model_cfg), key)
    from harness.tasks.gguf_cache import is_gguf, materialise

    if is_gguf(value):
        return materialise(str(value), f"model.{key}", progress=progress).path
    path = Path(str(value)) if value else None
    if path is None or not (path / "config.json").is_file():
        raise ConfigError(f"model.{key}: {value!r} is not a local Hugging Face model directory (a folder "
                          "with config.json, e.g. written by save_pretrained) nor a .gguf file; nothing is downloaded")
    return path


def load_dir(path: str | Path, dtype: torch.dtype = torch.float32):
    """``AutoModelForCausalLM.from_pretrained(path, local_files_only=True)`` in ``dtype``."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=dtype)


def build_tokenizer(model_cfg: Any, source=None) -> Tokenizer:
    """The synthetic vocabulary, or ``model.path``'s tokenizer when ``model.name == "hf"``: from the
    student's folder that ``source`` (the plan's ModelSource) names when given, without resolving
    the config again."""
    cfg = model_plan(model_cfg)
    if cfg.name == "hf":
        planned = Path(source.of("student").path) if source is not None else None
        if planned is not None and (planned / "config.json").is_file():
            return Tokenizer.from_pretrained(planned)
        from harness.tasks.gguf_cache import is_gguf, tokenizer_of

        if is_gguf(cfg.path):                        # the plan's check: from the file, nothing dequantized
            return tokenizer_of(str(cfg.path))
        return Tokenizer.from_pretrained(hf_dir(cfg))
    return Tokenizer.synthetic()


def llama_config(model_cfg: Any, vocab_size: int):
    """The ``LlamaConfig`` of a preset's size fields (tiny/small/wide); ConfigError on a bad size.

    ``vocab_size`` is the tokenizer's (``model.vocab_size`` > 0 overrides it, e.g. to pad)."""
    from transformers import LlamaConfig

    cfg = model_plan(model_cfg)
    for key in ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "max_positions"):
        value = getattr(cfg, key)
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"model.{key}: {value!r} must be a positive integer")
    if cfg.hidden_size % cfg.num_heads or cfg.num_heads % cfg.num_kv_heads:
        raise ConfigError(f"model.num_heads / model.num_kv_heads: {cfg.num_heads} / {cfg.num_kv_heads} "
                          f"must divide model.hidden_size ({cfg.hidden_size}) / model.num_heads")
    vocab = int(cfg.vocab_size) or int(vocab_size)
    if vocab < vocab_size:
        raise ConfigError(f"model.vocab_size: {vocab} is smaller than the tokenizer's {vocab_size}")
    return LlamaConfig(
        vocab_size=vocab, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads, max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=False, attention_dropout=0.0, pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )


def build_model(model_cfg: Any, vocab_size: int):
    """A fresh small Llama-style causal LM (seeded by ``model.init_seed``), or, for
    ``name=hf``, the local model at ``model.path``. Returned on the CPU, in ``model.dtype``.

    ``vocab_size`` is the tokenizer's (``model.vocab_size`` > 0 overrides it, e.g. to pad).
    """
    cfg = model_plan(model_cfg)
    dtype = model_dtype(cfg)
    if cfg.name == "hf":
        return load_dir(hf_dir(cfg), dtype)
    from transformers import LlamaForCausalLM

    config = llama_config(cfg, vocab_size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(cfg.init_seed))
        model = LlamaForCausalLM(config)
    return model.to(dtype)


def lora_targets(model: nn.Module, targets: list[str]) -> dict[str, tuple[int, int]]:
    """Names of the adaptable layers (``nn.Linear`` or transformers ``Conv1D``) that ``targets``
    selects (suffixes, or ``[all-linear]`` / ``[auto]``: harness.tasks.targets) ->
    (in_features, out_features). Raises a one-line ConfigError listing the model's modules when a
    target matches nothing."""
    from harness.tasks.layers import adaptable_layers, resolve_targets

    chosen = set(resolve_targets(model, targets))
    return {n: shape for n, shape in adaptable_layers(model).items() if n.split(".")[-1] in chosen}


def _rank_of(name: str, ranks: dict[str, int], default: int) -> int:
    """peft's rank_pattern rule: a key matches a module name that ends with it."""
    for key, r in ranks.items():
        if re.match(rf"(.*\.)?{key}$", name):
            return r
    return default


def make_lora(model: nn.Module, rank: int | Mapping[str, int], alpha: float | None = None,
              targets: list[str] | None = None, init: str = "default", seed: int = 0):
    """Wrap ``model`` (in place) with peft LoRA adapters on ``targets`` and return the PeftModel.

    ``rank``: an int, or a dict of per-module ranks keyed by module name suffix (peft
    rank_pattern), with an optional "default" key for the other targets (else the largest).
    ``alpha``: None gives scale 1 on every module (alpha = r per module). ``seed`` fixes the
    draw of A. Only adapter parameters require grad afterwards.
    """
    from peft import LoraConfig, get_peft_model

    targets = list(targets or ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    if init not in LORA_INITS:
        raise ConfigError(f"model.lora_init: {init!r} is not allowed; choose one of {', '.join(LORA_INITS)}")
    ranks = dict(rank) if isinstance(rank, Mapping) else {"default": rank}
    for key, r in ranks.items():
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            where = "model.rank" if key == "default" else f"model.rank[{key}]"
            raise ConfigError(f"{where}: {r!r} is not a rank; it must be an integer >= 1")
    default = ranks.pop("default", max(ranks.values()) if ranks else 1)
    from harness.tasks.layers import resolve_targets

    targets = resolve_targets(model, targets)
    layers = lora_targets(model, targets)
    for name, (d_in, d_out) in layers.items():
        r = _rank_of(name, ranks, default)
        if r > min(d_in, d_out):
            raise ConfigError(f"model.rank: {r} is larger than the smallest dimension ({min(d_in, d_out)}) of the "
                              f"adapted layer {name} ({d_in} -> {d_out}); choose 1..{min(d_in, d_out)}")
    if alpha is None:
        lora_alpha, alpha_pattern = float(default), {k: float(r) for k, r in ranks.items()}
    else:
        lora_alpha, alpha_pattern = float(alpha), {}
    conv1d = any(type(m).__name__ == "Conv1D" and n.split(".")[-1] in targets for n, m in model.named_modules())
    config = LoraConfig(r=default, fan_in_fan_out=conv1d, lora_alpha=lora_alpha, target_modules=targets, rank_pattern=ranks,
                        alpha_pattern=alpha_pattern, lora_dropout=0.0, bias="none",
                        init_lora_weights="gaussian" if init == "gaussian" else True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft_model = get_peft_model(model, config)
    if init == "zeros":
        with torch.no_grad():
            for name, p in peft_model.named_parameters():
                if "lora_A" in name:
                    p.zero_()
    return peft_model

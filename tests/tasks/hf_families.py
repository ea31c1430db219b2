"""Tiny local Hugging Face models of several architecture families, each saved with its own
byte-level BPE tokenizer trained here on the arithmetic language (digits merge into
multi-digit tokens). Nothing is downloaded: transformers configs + the ``tokenizers`` library.

Families and the module names they differ in:
  llama    q_proj k_proj v_proj o_proj gate_proj up_proj down_proj   (nn.Linear, GQA)
  qwen2    same names as llama, biases on q/k/v, no BOS token
  gpt2     c_attn c_proj c_fc (transformers Conv1D), lm_head tied
  gpt_neox query_key_value dense dense_h_to_4h dense_4h_to_h
  phi      q_proj k_proj v_proj dense fc1 fc2
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

FAMILIES = ("llama", "qwen2", "gpt2", "gpt_neox", "phi")

# what [all-linear] must resolve to (the output projection lm_head excluded)
ALL_LINEAR = {
    "llama": ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"],
    "qwen2": ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"],
    "gpt2": ["c_attn", "c_fc", "c_proj"],
    "gpt_neox": ["dense", "dense_4h_to_h", "dense_h_to_4h", "query_key_value"],
    "phi": ["dense", "fc1", "fc2", "k_proj", "q_proj", "v_proj"],
}


def arithmetic_corpus(n: int = 3000, seed: int = 0) -> list[str]:
    """Lines like '07+58=56' (reversed answers, as the tasks write them) to train the BPE on."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(0, 100, (n,), generator=g).tolist()
    b = torch.randint(0, 100, (n,), generator=g).tolist()
    ops = torch.randint(0, 2, (n,), generator=g).tolist()
    lines = []
    for x, y, o in zip(a, b, ops):
        v = x + y if o == 0 else x - y
        ans = ("-" if v < 0 else "") + str(abs(v))[::-1]
        lines.append(f"{x:02d}{'+-'[o]}{y:02d}={ans}")
    return lines


def bpe_tokenizer(bos: str | None, eos: str, pad: str | None, vocab_size: int = 300):
    """A byte-level BPE (GPT-2 style pre-tokenizer: digit runs stay together and merge) as a
    transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [t for t in (bos, eos, pad) if t]
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(dict.fromkeys(specials)),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    raw.train_from_iterator(arithmetic_corpus(), trainer=trainer)
    kw = {"eos_token": eos}
    if bos:
        kw["bos_token"] = bos
    if pad:
        kw["pad_token"] = pad
    return PreTrainedTokenizerFast(tokenizer_object=raw, **kw)


def _config(family: str, vocab: int, bos_id: int | None, eos_id: int, pad_id: int | None, hidden: int = 32):
    import transformers as tf

    h = hidden
    ids = dict(bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id, vocab_size=vocab)
    if family == "llama":
        return tf.LlamaConfig(hidden_size=h, intermediate_size=2 * h, num_hidden_layers=1, num_attention_heads=4,
                              num_key_value_heads=2, max_position_embeddings=64, **ids)
    if family == "qwen2":
        return tf.Qwen2Config(hidden_size=h, intermediate_size=2 * h, num_hidden_layers=1, num_attention_heads=4,
                              num_key_value_heads=2, max_position_embeddings=64, **ids)
    if family == "gpt2":
        return tf.GPT2Config(n_embd=h, n_layer=1, n_head=4, n_positions=64, **ids)
    if family == "gpt_neox":
        return tf.GPTNeoXConfig(hidden_size=h, intermediate_size=2 * h, num_hidden_layers=1, num_attention_heads=4,
                                max_position_embeddings=64, **ids)
    if family == "phi":
        return tf.PhiConfig(hidden_size=h, intermediate_size=2 * h, num_hidden_layers=1, num_attention_heads=4,
                            max_position_embeddings=64, **ids)
    raise ValueError(family)


def save_family(family: str, out: Path, seed: int = 0, hidden: int = 32) -> Path:
    """Save a randomly initialised tiny ``family`` causal LM (1 layer, ``hidden`` wide, 4 heads) and
    its BPE tokenizer to ``out``."""
    from transformers import AutoModelForCausalLM

    specials = {"llama": ("<s>", "</s>", None), "qwen2": (None, "<|endoftext|>", "<|pad|>"),
                "gpt2": ("<|endoftext|>", "<|endoftext|>", None),
                "gpt_neox": ("<|endoftext|>", "<|endoftext|>", "<|padding|>"), "phi": (None, "<|endoftext|>", None)}
    tok = bpe_tokenizer(*specials[family])
    config = _config(family, len(tok), tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, hidden)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


# --------------------------------------------------------------------------- GGUF files
# Families whose GGUF transformers 5.24 can dequantize, and whose tensors llama.cpp permutes.
GGUF_FAMILIES = ("llama", "qwen2")
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|' + m['role'] + '|>' + m['content'] + eos_token }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")


def _llama_permute(w, n_head: int):
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (rotary halves -> interleaved pairs);
    transformers' GGUF loader undoes it."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def save_gguf(family: str, out: Path, seed: int = 0, hidden: int = 64, qtype: str = "F32") -> Path:
    """Write a randomly initialised tiny ``family`` model ("llama" | "qwen2"; 1 layer, ``hidden``
    wide, 4 heads / 2 kv heads) with its BPE tokenizer and a chat template as one GGUF file, the
    way llama.cpp's converter lays it out (tensor names, q/k permutation for llama, tokenizer in
    the metadata). ``qtype``: the GGML type of the 2-D projection weights ("F32" keeps them exact;
    "Q8_0" / "Q4_1" quantize them, so loading has something to dequantize). Returns ``out``.

    The HF model it was written from is saved beside it (``out.with_suffix('')``) for reference."""
    import gguf
    import numpy as np

    if family not in GGUF_FAMILIES:
        raise ValueError(f"family: {family!r}; GGUF files are written for {', '.join(GGUF_FAMILIES)}")
    folder = save_family(family, out.with_suffix(""), seed=seed, hidden=hidden)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(folder))
    cfg = model.config
    arch = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2}[family]
    names = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    writer = gguf.GGUFWriter(str(out), gguf.MODEL_ARCH_NAMES[arch])
    writer.add_name(f"tiny {family}")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_vocab_size(cfg.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if qtype == "F32" else gguf.LlamaFileType[f"MOSTLY_{qtype}"])
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    assert [i for _, i in vocab] == list(range(len(vocab)))
    specials = set(tok.all_special_tokens)
    merges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2" if family == "qwen2" else "default")   # as llama.cpp labels them
    writer.add_token_list([t for t, _ in vocab])
    writer.add_token_types([gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL for t, _ in vocab])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    if tok.bos_token_id is not None:
        writer.add_bos_token_id(tok.bos_token_id)
    writer.add_eos_token_id(tok.eos_token_id)
    if tok.pad_token_id is not None:
        writer.add_pad_token_id(tok.pad_token_id)
    writer.add_add_bos_token(tok.bos_token_id is not None)
    writer.add_chat_template(CHAT_TEMPLATE)
    quant = gguf.GGMLQuantizationType[qtype]
    for hf_name, tensor in model.state_dict().items():
        if hf_name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        base, suffix = hf_name.rsplit(".", 1)
        name = f"{names.get_name(base)}.{suffix}"
        data = tensor.numpy().astype(np.float32)
        if family == "llama" and base.endswith(("q_proj", "k_proj")):
            heads = cfg.num_attention_heads if base.endswith("q_proj") else cfg.num_key_value_heads
            data = _llama_permute(data, heads)
        if data.ndim == 2 and quant != gguf.GGMLQuantizationType.F32 and name.startswith("blk."):
            writer.add_tensor(name, gguf.quants.quantize(data, quant), raw_dtype=quant)
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out

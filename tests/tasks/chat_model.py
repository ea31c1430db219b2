"""A tiny local chat model for the chat-task tests: a character-level tokenizer over printable
ASCII with ``<|im_start|>`` / ``<|im_end|>`` specials and a ChatML template (the shape of
SmolLM2's), and a 1-layer Llama over it. Built here; nothing is downloaded."""
from __future__ import annotations

import string
from pathlib import Path

import torch

TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
            "{{ '<|im_start|>system\nYou are a tiny test model<|im_end|>\n' }}{% endif %}"
            "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def chat_tokenizer(template: str | None = TEMPLATE):
    """A transformers fast tokenizer: one id per printable character, ChatML specials."""
    from tokenizers import Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as RawTokenizer
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in "\r\x0b\x0c"]
    vocab = {tok: i for i, tok in enumerate(list(SPECIALS) + chars)}
    raw = RawTokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    raw.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    raw.decoder = decoders.Fuse()
    hf = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                 pad_token="<|im_end|>", unk_token="<|endoftext|>")
    if template is not None:
        hf.chat_template = template
    return hf


def chat_model(vocab_size: int, seed: int = 0):
    """A 1-layer Llama (hidden 32) over ``vocab_size`` tokens, weights drawn from ``seed``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                         pad_token_id=2, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def save_chat_model(path: Path, seed: int = 0) -> Path:
    """Write the tiny chat model and its tokenizer as a local HF directory (``model=hf``)."""
    hf = chat_tokenizer()
    chat_model(len(hf), seed).save_pretrained(str(path))
    hf.save_pretrained(str(path))
    return path

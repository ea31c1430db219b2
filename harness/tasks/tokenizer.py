"""Tokenizer: the synthetic arithmetic vocabulary, or any local Hugging Face tokenizer.

The synthetic vocabulary is one token per character: ``<pad> <bos> <eos> <unk>``, the digits,
the operators ``+ - *`` and ``=`` (18 ids). It is a real ``tokenizers`` WordLevel model in a
transformers fast tokenizer, so ``save_pretrained`` writes a directory that
``AutoTokenizer.from_pretrained`` loads back: a pretrained synthetic model is just another
local Hugging Face model directory (the ``model=hf`` path).

Invariant: ``decode(encode(text)) == text`` for every text over the vocabulary.
"""
from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
CHARS = tuple("0123456789+-*=")


class Tokenizer:
    """A thin, typed wrapper of a transformers tokenizer with the ids the tasks need.

    ``pad_id`` falls back to ``eos_id`` for tokenizers without a pad token; ``bos_id`` is None
    when the tokenizer has no BOS token (the prompt then starts without one).
    """

    def __init__(self, hf) -> None:
        self.hf = hf
        if hf.eos_token_id is None:
            raise ValueError("tokenizer: it has no eos token; the tasks end every answer with eos")
        self.eos_id: int = int(hf.eos_token_id)
        self.pad_id: int = int(hf.pad_token_id) if hf.pad_token_id is not None else self.eos_id
        self.bos_id: int | None = int(hf.bos_token_id) if hf.bos_token_id is not None else None
        self.vocab_size: int = len(hf)
        self._chars: frozenset[str] | None = None

    @classmethod
    def synthetic(cls) -> "Tokenizer":
        """The arithmetic language's own character vocabulary (18 tokens)."""
        from tokenizers import Regex, decoders, models, pre_tokenizers
        from tokenizers import Tokenizer as RawTokenizer
        from transformers import PreTrainedTokenizerFast

        vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
        raw = RawTokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        raw.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
        raw.decoder = decoders.Fuse()
        hf = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", bos_token="<bos>",
                                     eos_token="<eos>", unk_token="<unk>")
        tok = cls(hf)
        tok._chars = frozenset(CHARS)
        return tok

    @classmethod
    def from_pretrained(cls, path: str | Path, gguf_file: str | None = None) -> "Tokenizer":
        """The tokenizer saved in a local directory, or (``gguf_file``: a file's name in it) the one in a
        GGUF file's metadata; never downloads."""
        from transformers import AutoTokenizer

        extra = {"gguf_file": gguf_file} if gguf_file else {}
        hf = AutoTokenizer.from_pretrained(str(path), local_files_only=True, **extra)
        tok = cls(hf)
        if set(hf.get_vocab()) == set(SPECIALS + CHARS):
            tok._chars = frozenset(CHARS)
        return tok

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without special tokens. Raises ValueError on a character the
        synthetic vocabulary does not have."""
        if self._chars is not None:
            bad = set(text) - self._chars
            if bad:
                raise ValueError(f"tokenizer: {''.join(sorted(bad))!r} is not in the vocabulary; "
                                 f"allowed: {''.join(CHARS)}")
        return list(self.hf(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids) -> str:
        """Text of ``ids`` (list or 1-D tensor); special tokens (pad, bos, eos) are dropped."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        return self.hf.decode(ids, skip_special_tokens=True)

    def batch_decode(self, rows) -> list[str]:
        """``decode`` of each row of a 2-D tensor or list of lists."""
        if hasattr(rows, "tolist"):
            rows = rows.tolist()
        return self.hf.batch_decode(rows, skip_special_tokens=True)

    def save_pretrained(self, path: str | Path) -> None:
        self.hf.save_pretrained(str(path))

    def __repr__(self) -> str:
        return (f"Tokenizer(vocab_size={self.vocab_size}, pad={self.pad_id}, bos={self.bos_id}, "
                f"eos={self.eos_id})")

"""Problems <-> token tensors: prompts, supervised batches, the answer check, the SFT loss.

A prompt is ``[bos] + encode("07+58=")`` (no bos when the tokenizer has none, or when bos is
the pad id), left-padded with ``pad_id`` to the longest prompt of the batch (never needed
by the synthetic vocabulary, whose prompts of a task all have one length). A supervised
example is the prompt followed by ``encode(answer) + [eos]``, right-padded; its labels are
-100 except on the answer and eos tokens.
"""
from __future__ import annotations

import torch

from harness.tasks.arith import Arithmetic, Problems
from harness.tasks.rollouts import forward_logits, prompt_mask
from harness.tasks.tokenizer import Tokenizer

IGNORE = -100


def _prefix(tok: Tokenizer) -> list[int]:
    return [tok.bos_id] if tok.bos_id is not None and tok.bos_id != tok.pad_id else []


def encode_prompts(tok: Tokenizer, lang: Arithmetic, problems: Problems) -> torch.Tensor:
    """[n, P] int64 prompt ids, left-padded."""
    rows = [_prefix(tok) + tok.encode(t) for t in lang.prompt_text(problems)]
    width = max(len(r) for r in rows)
    return torch.tensor([[tok.pad_id] * (width - len(r)) + r for r in rows], dtype=torch.long)


def problems_of(tok: Tokenizer, lang: Arithmetic, prompts: torch.Tensor) -> Problems:
    """The problems that ``prompts`` (as from ``encode_prompts``) ask."""
    return lang.parse([t.strip() for t in tok.batch_decode(prompts)])


def sft_batch(tok: Tokenizer, lang: Arithmetic, problems: Problems,
              values: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask / labels [n, L] of prompt + answer + eos (module doc);
    ``values`` replaces the true answers (the student's pretraining labels)."""
    prompts = [_prefix(tok) + tok.encode(t) for t in lang.prompt_text(problems)]
    answers = [tok.encode(t) + [tok.eos_id] for t in lang.answer_text(problems, values)]
    width = max(len(p) + len(a) for p, a in zip(prompts, answers))
    ids, labels, attn = [], [], []
    for p, a in zip(prompts, answers):
        fill = width - len(p) - len(a)
        ids.append(p + a + [tok.pad_id] * fill)
        labels.append([IGNORE] * len(p) + a + [IGNORE] * fill)
        attn.append([1] * (len(p) + len(a)) + [0] * fill)
    return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(attn), "labels": torch.tensor(labels)}


def sft_loss(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy (nats per token) over the labelled (answer) tokens."""
    logits = forward_logits(model, batch["input_ids"], batch["attention_mask"])
    labels = batch["labels"][:, 1:].to(logits.device)
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                             ignore_index=IGNORE)


def correct(tok: Tokenizer, lang: Arithmetic, prompts: torch.Tensor, completions: torch.Tensor,
            mask: torch.Tensor) -> torch.Tensor:
    """[N] bool: the completion is exactly the answer followed by eos. ``prompts`` has one
    row per completion."""
    prompts, completions, mask = prompts.cpu(), completions.cpu(), mask.cpu()
    want = lang.answer_text(problems_of(tok, lang, prompts))
    ended = ((completions == tok.eos_id) & mask).any(1)
    got = tok.batch_decode(torch.where(mask, completions, torch.full_like(completions, tok.pad_id)))
    return torch.tensor([g.strip() == w for g, w in zip(got, want)]) & ended


def prompt_attention(tok: Tokenizer, prompts: torch.Tensor) -> torch.Tensor:
    return prompt_mask(prompts, tok.pad_id)

"""Problems <-> token tensors: prompts, supervised batches, the answer check, the SFT loss.

A prompt is ``[bos] + encode("07+58=")`` (no bos when the tokenizer has none, or when bos is
the pad id), left-padded with ``pad_id`` to the longest prompt of the batch (never needed
by the synthetic vocabulary, whose prompts of a task all have one length). A supervised
example is the prompt followed by ``encode(answer) + [eos]``, right-padded; its labels are
-100 except on the answer and eos tokens.
"""
from __future__ import annotations

import inspect

import torch

from harness.tasks.arith import Arithmetic, Problems
from harness.tasks.rollouts import _cache_kw, _cache_of, device_of, forward_logits, positions, prompt_mask
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


def shared_prefix_len(batch: dict[str, torch.Tensor]) -> int:
    """Columns (tokens) at the start of ``batch`` that sft_loss_shared_prefix computes once: the
    longest run of columns where every row holds the same real token (attention 1), cut to end
    before the column whose logits predict the first label of any row (so no logit of the prefix
    is needed). 0 for a batch with no label."""
    ids, attn, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    labelled = (labels != IGNORE).any(0).nonzero()
    if len(labelled) == 0:
        return 0
    same = ((ids == ids[:1]) & (attn != 0)).all(0)
    return min(int(same.long().cumprod(0).sum()), int(labelled[0]) - 1)


def sft_loss_shared_prefix(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """``sft_loss(model, batch)`` (nats per labelled token) with the prefix that every row shares
    computed once per batch, not once per row; the same value and gradients up to float rounding
    (tests/tasks/test_sft_prefix.py: loss and LoRA gradients on three architecture families).

    The prefix (``shared_prefix_len`` columns P, e.g. the chat template's system turn) runs as a
    batch of one with the KV cache on and one logit (``logits_to_keep=1`` where the forward has
    it); the cache is repeated to the batch size (``batch_repeat_interleave``, an autograd op, so
    every row's gradient reaches the prefix's computation); the remaining columns run on it with
    the full attention mask and the position ids of the full pass, and only the columns from the
    one predicting the first label on go through the output layer. Invariant: no label lies in
    the prefix or the column after it, so the prefix's logits are never needed.

    Falls back to ``sft_loss`` when P < 2 (no shared prefix worth a second forward call), when
    the model's forward takes no KV cache, or when it returns none (e.g. gradient checkpointing
    in training mode turns the cache off).

    Speed: ``python -m harness.commands.sft_timing`` (a ChatSFTTask batch of 8 x 56 tokens from
    chat_sft.yaml, shared prefix 27 columns, 76 labels; SmolLM2-135M fp32, LoRA r=16 on every
    linear layer; one CPU thread; forward + backward, alternating, 3 each after a warm-up):
    sft_loss 3.51 s, this 2.18 s (medians), median ratio 1.62x."""
    ids, attn, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    p = shared_prefix_len(batch)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(base.forward).parameters
    if p < 2 or "use_cache" not in params or not {"cache", "past_key_values"} & set(params):
        return sft_loss(model, batch)
    device = device_of(model)
    ids, attn, labels = ids.to(device), attn.to(device).long(), labels.to(device)
    n, width = ids.shape
    pos = positions(attn)
    keep = "logits_to_keep" in params
    out = model(input_ids=ids[:1, :p], attention_mask=attn[:1, :p], position_ids=pos[:1, :p], use_cache=True,
                **({"logits_to_keep": 1} if keep else {}))
    past = _cache_of(out)
    if past is None:
        return sft_loss(model, batch)
    if n > 1:
        past.batch_repeat_interleave(n)
    first = int((labels != IGNORE).any(0).nonzero()[0])        # > p: its logits sit at column first - 1 >= p
    need = width - first + 1                                   # columns first-1 .. width-1 (the last is unused)
    rest = model(input_ids=ids[:, p:], attention_mask=attn, position_ids=pos[:, p:], use_cache=True,
                 **{_cache_kw(model): past}, **({"logits_to_keep": need} if keep else {}))
    logits = rest.logits[:, -need:-1].float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, first:].reshape(-1),
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

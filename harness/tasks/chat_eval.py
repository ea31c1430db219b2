"""Greedy held-out evaluation of a chat model, per prompt: completions and a continuous score.

``greedy_scored(model, rows, answers, ...)`` decodes every prompt greedily (the same rule as
``rollouts.sample`` with one sample and no generator) and, on the way, scores the reference
answer by teacher forcing: ``answer_logprob`` [nats], the sum of the log-probabilities of the
answer's tokens and eos after the prompt, the continuous per-prompt score that sits beside the 0/1
correctness (DESIGN.md, "Measurement protocol").

Where the time goes, and what this saves over one ``sample`` call per batch of prompts (the task
evaluates hundreds of prompts after several updates of a run):
- the chat template's prefix that every prompt shares (the system turn, ~27 tokens on SmolLM2)
  runs once per evaluation as a batch of one; its KV cache is copied and repeated to each batch;
- prefill runs only each prompt's own tokens, and only the last position goes through the output
  layer (``logits_to_keep=1``; the vocabulary is 49152 on SmolLM2);
- the reference answer (a few tokens) runs on the prompt's cache, which is then cropped back, so
  scoring it costs no second prefill.
Prompts are left-padded after the shared prefix (``[prefix][pads][question]``): the attention mask
hides the pads and the position ids skip them, so every row sees the positions of its own
unpadded sequence. Models whose forward has no KV cache take the plain path (``sample`` and one
full teacher-forced pass); the results agree up to float rounding (tests/tasks/test_chat_eval.py).
"""
from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

from harness.tasks.rollouts import (_cache_kw, _cache_of, decode, device_of, forward_logits, positions, prompt_mask,
                                    sample)

BATCH = 128          # prompts decoded together (task.eval_batch)


@dataclass
class GreedyScored:
    """Per prompt (row i of the evaluated rows)."""
    completions: torch.Tensor      # [n, T] int64, pad after the end
    mask: torch.Tensor             # [n, T] bool, a prefix of each row (through eos)
    answer_logprob: torch.Tensor   # [n] float64, nats: log p(answer tokens, eos | prompt), teacher-forced


def common_prefix(rows: list[list[int]]) -> int:
    """Columns every row starts with, leaving each row at least one token of its own."""
    if not rows:
        return 0
    first, n = rows[0], min(len(r) for r in rows) - 1
    p = 0
    while p < n and all(r[p] == first[p] for r in rows):
        p += 1
    return p


def _left_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad_id] * (width - len(r)) + r for r in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    return ids, mask


def _right_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=torch.long)
    return ids, mask


def _supports_cache(model) -> tuple[bool, bool]:
    """(takes a KV cache, takes logits_to_keep)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(base.forward).parameters
    return ("use_cache" in params and bool({"cache", "past_key_values"} & set(params)),
            "logits_to_keep" in params)


def _crop_to(past, length: int) -> None:
    """Cut the cache back to its first ``length`` positions (a negative ``crop`` removes that many
    tokens in every transformers version that has it)."""
    extra = past.get_seq_length() - length
    if extra > 0:
        past.crop(-extra)


@torch.no_grad()
def _answer_logprob_plain(model, prompts: torch.Tensor, pmask: torch.Tensor, answers: list[list[int]],
                          pad_id: int) -> torch.Tensor:
    """Teacher-forced log p(answer | prompt) by one full forward (models without a KV cache)."""
    ans, amask = _right_pad(answers, pad_id)
    ids = torch.cat([prompts, ans], 1)
    attn = torch.cat([pmask.long(), amask], 1)
    logits = forward_logits(model, ids, attn)
    p = prompts.shape[1]
    logp = torch.log_softmax(logits[:, p - 1:-1].double(), -1).gather(2, ans.to(logits.device)[..., None]).squeeze(2)
    return (logp * amask.to(logp.device)).sum(1).cpu()


@torch.no_grad()
def greedy_scored(model, rows: list[list[int]], answers: list[list[int]], max_new_tokens: int, *, eos_id: int,
                  pad_id: int, batch: int = BATCH, on_batch: Callable[[], None] | None = None) -> GreedyScored:
    """Greedy completions of ``rows`` (prompt token ids, unpadded) and the teacher-forced
    log-probability of ``answers`` (token ids of each reference answer, eos last); see the module doc.
    ``on_batch`` is called after each batch of prompts (a role's progress: a long evaluation is not a hang)."""
    if len(rows) != len(answers) or not rows:
        raise ValueError(f"greedy_scored: {len(rows)} prompts and {len(answers)} answers (need as many, >= 1)")
    device = device_of(model)
    cached, keep = _supports_cache(model)
    p = common_prefix(rows) if cached else 0
    prefix = None
    if p >= 1:
        out = model(input_ids=torch.tensor([rows[0][:p]], device=device), attention_mask=torch.ones(1, p, dtype=torch.long,
                    device=device), position_ids=torch.arange(p, device=device)[None], use_cache=True,
                    **({"logits_to_keep": 1} if keep else {}))
        prefix = _cache_of(out)
    parts: list[tuple[torch.Tensor, torch.Tensor]] = []
    scores: list[torch.Tensor] = []
    for i in range(0, len(rows), batch):
        chunk, ans = rows[i:i + batch], answers[i:i + batch]
        if prefix is None:
            prompts, pmask = _left_pad(chunk, pad_id)
            comp, mask, _ = sample(model, prompts, pmask.bool(), max_new_tokens, group=1, eos_id=eos_id, pad_id=pad_id)
            parts.append((comp, mask))
            scores.append(_answer_logprob_plain(model, prompts, pmask, ans, pad_id))
            if on_batch is not None:
                on_batch()
            continue
        comp, mask, score = _chunk(model, prefix, p, chunk, ans, max_new_tokens, eos_id, pad_id, keep)
        parts.append((comp, mask))
        scores.append(score)
        if on_batch is not None:
            on_batch()
    width = max(c.shape[1] for c, _ in parts)
    completions = torch.cat([torch.nn.functional.pad(c, (0, width - c.shape[1]), value=pad_id) for c, _ in parts])
    masks = torch.cat([torch.nn.functional.pad(m, (0, width - m.shape[1]), value=False) for _, m in parts])
    return GreedyScored(completions, masks, torch.cat(scores).double())


def _chunk(model, prefix, p: int, rows: list[list[int]], answers: list[list[int]], max_new_tokens: int, eos_id: int,
           pad_id: int, keep: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batch on a copy of the shared prefix's cache: prefill, teacher-forced answer, greedy decode."""
    device = device_of(model)
    n = len(rows)
    past = copy.deepcopy(prefix)
    if n > 1:
        past.batch_repeat_interleave(n)
    suffix, smask = _left_pad([r[p:] for r in rows], pad_id)
    suffix, smask = suffix.to(device), smask.to(device)
    attn = torch.cat([torch.ones(n, p, dtype=torch.long, device=device), smask], 1)
    pos = p + positions(smask)
    out = model(input_ids=suffix, attention_mask=attn, position_ids=pos, use_cache=True,
                **{_cache_kw(model): past}, **({"logits_to_keep": 1} if keep else {}))
    past, logits = _cache_of(out), out.logits[:, -1].float()
    length = attn.shape[1]
    ans, amask = _right_pad(answers, pad_id)
    ans, amask = ans.to(device), amask.to(device)
    score = torch.log_softmax(logits.double(), -1).gather(1, ans[:, :1]).squeeze(1)
    if ans.shape[1] > 1:
        k = ans.shape[1] - 1
        a_attn = torch.cat([attn, amask[:, :-1]], 1)
        a_pos = pos[:, -1:] + 1 + torch.arange(k, device=device)[None, :]
        more = model(input_ids=ans[:, :-1], attention_mask=a_attn, position_ids=a_pos, use_cache=True,
                     **{_cache_kw(model): past})
        past = _cache_of(more)
        logp = torch.log_softmax(more.logits[:, -k:].double(), -1).gather(2, ans[:, 1:, None]).squeeze(2)
        score = score + (logp * amask[:, 1:]).sum(1)
        _crop_to(past, length)
    comp, mask, _ = decode(model, past, logits, attn, pos[:, -1], max_new_tokens, eos_id=eos_id, pad_id=pad_id)
    return comp, mask, score.cpu()


def prompt_rows(prompts: torch.Tensor, pad_id: int) -> list[list[int]]:
    """Unpadded token rows of left-padded ``prompts``."""
    mask = prompt_mask(prompts, pad_id)
    return [r[m].tolist() for r, m in zip(prompts.cpu(), mask.cpu())]

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
  scoring it costs no second prefill;
- distillation's per-prompt reverse KL to the teacher (``reverse_kl_scorer``, a ``score_batch``)
  takes the student's log-probabilities from the decode loop's own logits and runs only the teacher,
  on its own cache of the shared prefix, where a full teacher-forced pass of both models over every
  prompt and completion ran before: on SmolLM2 (128 test prompts, one thread) the evaluation takes
  0.63x the time (tests/benchmarks/test_distill_eval.py), the reverse KL agreeing to 1e-5 relative.
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
# score_batch(rows, completions [b, T], mask [b, T], the decode loop's logits [b, T, V]) -> [b]
BatchScore = Callable[[list[list[int]], torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class GreedyScored:
    """Per prompt (row i of the evaluated rows)."""
    completions: torch.Tensor      # [n, T] int64, pad after the end
    mask: torch.Tensor             # [n, T] bool, a prefix of each row (through eos)
    answer_logprob: torch.Tensor   # [n] float64, nats: log p(answer tokens, eos | prompt), teacher-forced
    extra: torch.Tensor | None = None   # [n] float64: ``score_batch``'s value per prompt (None: not computed)


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
def shared_prefix(model, rows: list[list[int]]):
    """(p, the KV cache of the first p tokens every row shares), computed once as a batch of one;
    (0, None) where the model's forward takes no KV cache or the rows share nothing."""
    cached, keep = _supports_cache(model)
    p = common_prefix(rows) if cached else 0
    if p < 1:
        return 0, None
    device = device_of(model)
    out = model(input_ids=torch.tensor([rows[0][:p]], device=device), attention_mask=torch.ones(1, p, dtype=torch.long,
                device=device), position_ids=torch.arange(p, device=device)[None], use_cache=True,
                **({"logits_to_keep": 1} if keep else {}))
    return p, _cache_of(out)


@torch.no_grad()
def greedy_scored(model, rows: list[list[int]], answers: list[list[int]], max_new_tokens: int, *, eos_id: int,
                  pad_id: int, batch: int = BATCH, on_batch: Callable[[], None] | None = None,
                  score_batch: BatchScore | None = None) -> GreedyScored:
    """Greedy completions of ``rows`` (prompt token ids, unpadded) and the teacher-forced
    log-probability of ``answers`` (token ids of each reference answer, eos last); see the module doc.
    ``on_batch`` is called after each batch of prompts (a role's progress: a long evaluation is not a hang).
    ``score_batch(rows, completions, mask, logits)`` -> [b] is called on each batch with the decode
    loop's own logits [b, T, V] (those that chose each token) and fills ``extra``; on the plain path
    (no KV cache) it is not called and ``extra`` is None."""
    if len(rows) != len(answers) or not rows:
        raise ValueError(f"greedy_scored: {len(rows)} prompts and {len(answers)} answers (need as many, >= 1)")
    keep = _supports_cache(model)[1]
    p, prefix = shared_prefix(model, rows)
    parts: list[tuple[torch.Tensor, torch.Tensor]] = []
    scores: list[torch.Tensor] = []
    extra: list[torch.Tensor] = []
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
        comp, mask, score, logits = _chunk(model, prefix, p, chunk, ans, max_new_tokens, eos_id, pad_id, keep,
                                           score_batch is not None)
        parts.append((comp, mask))
        scores.append(score)
        if score_batch is not None:
            extra.append(score_batch(chunk, comp, mask, logits).double().cpu())
        if on_batch is not None:
            on_batch()
    width = max(c.shape[1] for c, _ in parts)
    completions = torch.cat([torch.nn.functional.pad(c, (0, width - c.shape[1]), value=pad_id) for c, _ in parts])
    masks = torch.cat([torch.nn.functional.pad(m, (0, width - m.shape[1]), value=False) for _, m in parts])
    return GreedyScored(completions, masks, torch.cat(scores).double(), torch.cat(extra) if extra else None)


def _prefill(model, prefix, p: int, rows: list[list[int]], pad_id: int, keep: bool):
    """Each row's own tokens (after the shared ``p``) on a copy of ``prefix``'s cache, repeated per row,
    only the last position through the output layer where the forward has ``logits_to_keep``:
    (cache, logits [n, V] float32 predicting each row's next token, attention mask [n, L], position ids [n, L - p])."""
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
    return _cache_of(out), out.logits[:, -1].float(), attn, pos


def _chunk(model, prefix, p: int, rows: list[list[int]], answers: list[list[int]], max_new_tokens: int, eos_id: int,
           pad_id: int, keep: bool, want_logits: bool = False
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One batch on a copy of the shared prefix's cache: prefill, teacher-forced answer, greedy decode;
    (completions, mask, answer score, the decode loop's logits [n, T, V] where ``want_logits``)."""
    device = device_of(model)
    n = len(rows)
    past, logits, attn, pos = _prefill(model, prefix, p, rows, pad_id, keep)
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
    kept = torch.zeros(n, max_new_tokens, logits.shape[-1], device=device) if want_logits else None
    comp, mask, _ = decode(model, past, logits, attn, pos[:, -1], max_new_tokens, eos_id=eos_id, pad_id=pad_id,
                           logits_out=kept)
    return comp, mask, score.cpu(), None if kept is None else kept[:, :comp.shape[1]]


def prompt_rows(prompts: torch.Tensor, pad_id: int) -> list[list[int]]:
    """Unpadded token rows of left-padded ``prompts``."""
    mask = prompt_mask(prompts, pad_id)
    return [r[m].tolist() for r, m in zip(prompts.cpu(), mask.cpu())]


@torch.no_grad()
def completion_logits_on_prefix(model, prefix, p: int, rows: list[list[int]], completions: torch.Tensor,
                                pad_id: int) -> torch.Tensor:
    """[n, T, V] float32 logits predicting each token of ``completions`` [n, T] after its prompt
    (``rows``, unpadded, sharing their first ``p`` tokens, whose cache is ``prefix``): on a copy of
    the prefix's cache, each prompt's own tokens (only the last position through the output layer),
    then the completion but its last token. The numbers of ``rollouts.completion_logits_shared`` on
    the left-padded prompts, up to float rounding. (One forward over both with ``logits_to_keep=T``
    measured slower on CPU: the kept hidden states are a strided slice, which the output layer's
    batched matmul takes on a slow path.)"""
    device = device_of(model)
    n, t = completions.shape
    past, logits, attn, pos = _prefill(model, prefix, p, rows, pad_id, _supports_cache(model)[1])
    first = logits[:, None]
    if t <= 1:
        return first
    rest = model(input_ids=completions[:, :-1].to(device),
                 attention_mask=torch.cat([attn, torch.ones(n, t - 1, dtype=torch.long, device=device)], 1),
                 position_ids=pos[:, -1:] + 1 + torch.arange(t - 1, device=device)[None, :], use_cache=True,
                 **{_cache_kw(model): past})
    return torch.cat([first, rest.logits.float()], 1)


def reverse_kl_scorer(teacher, rows: list[list[int]], pad_id: int) -> BatchScore | None:
    """A ``score_batch`` for ``greedy_scored``: per prompt, the mean over its completion's tokens of
    KL(student || teacher) in nats at each position, the student's log-probabilities from the decode
    loop's logits (no second student pass), the teacher's from one pass on its own cache of the
    shared prefix (``completion_logits_on_prefix``). The numbers of a full teacher-forced pass of
    both models up to float rounding (tests/tasks/test_chat_eval.py). None where the teacher takes
    no KV cache or the rows share no prefix (the caller takes the plain path)."""
    p, prefix = shared_prefix(teacher, rows)
    if prefix is None:
        return None

    @torch.no_grad()
    def score(chunk: list[list[int]], comp: torch.Tensor, mask: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        logp_s = torch.log_softmax(logits, -1)
        logp_t = torch.log_softmax(completion_logits_on_prefix(teacher, prefix, p, chunk, comp, pad_id), -1)
        kl = (logp_s.exp() * (logp_s - logp_t.to(logp_s.device))).sum(-1)
        w = mask.to(kl.device).float()
        return (kl * w).sum(1) / w.sum(1).clamp(min=1)

    return score

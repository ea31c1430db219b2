"""Rollouts: sampled completions of prompts, their behaviour logprobs, and a compact wire format.

Layout. ``prompts`` [G, P] are the distinct prompts, left-padded with ``pad_id``; each is
repeated ``group`` times, so completion row ``i`` belongs to prompt ``i // group``.
``completions`` [N = G*group, T] hold the sampled tokens; ``completion_mask`` is True on
the tokens that were generated up to and including eos (a prefix of each row); the rest is
``pad_id``. ``logprobs`` [N, T] are the behaviour policy's log-probabilities (natural log,
at the sampling temperature) of those tokens, 0 where masked. ``rewards`` [N] or None.

Rollouts live on the CPU (the wire and the reward check need them there); losses move them
to the policy's device.

Wire format (``to_bytes``): a 32-byte header, the G*P prompt ids, per-prompt pad counts,
per-row completion lengths, then only the unmasked completion ids and logprobs: token ids
as uint8 (vocab <= 256), int16 or int32; logprobs as fp16 (default) or fp32; rewards fp32.
A receiver that decodes fp16 logprobs gets them rounded: the learner must use the decoded
values, never its own copy, so every party computes on the same numbers.
"""
from __future__ import annotations

import inspect
import struct
from dataclasses import dataclass

import torch

_MAGIC = b"NBRO"
_HEADER = struct.Struct("<4sBBBBIIIIiI")  # magic, version, id bytes, lp bytes, has_rewards, G, P, T, group, pad, vocab
_ID_DTYPES = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
_LP_DTYPES = {"fp16": (2, torch.float16), "fp32": (4, torch.float32)}


class RolloutsError(ValueError):
    """Corrupt or truncated rollout bytes."""


def prompt_mask(prompts: torch.Tensor, pad_id: int) -> torch.Tensor:
    """True from each row's first non-pad token on (prompts are left-padded)."""
    return (prompts != pad_id).long().cummax(dim=1).values.bool()


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that skip left padding: 0 at each row's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def device_of(model) -> torch.device:
    """The device of a model's first parameter (CPU for a parameter-free stand-in)."""
    return next(iter(model.parameters()), torch.empty(0)).device


def forward_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Logits [N, L, V] in float32 of a causal LM over left-padded sequences (no cache);
    inputs are moved to the model's device."""
    device = device_of(model)
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    out = model(input_ids=input_ids, attention_mask=attention_mask.long(),
                position_ids=positions(attention_mask), use_cache=False)
    return out.logits.float()


def completion_logits_shared(model, r: "Rollouts") -> torch.Tensor:
    """[N, T, V] float32 logits predicting each completion token of ``r``, each distinct prompt
    computed ONCE (not ``group`` times), with gradients through the prompt's keys and values.

    The same numbers as ``forward_logits(model, r.sequences, r.attention_mask)[:, P-1:P-1+T]``
    up to float rounding (tests/tasks/test_chat_rollouts.py checks logits and LoRA gradients):
    the G prompts run with the KV cache on and only their last position through the output
    layer (``logits_to_keep=1``); the cache is repeated ``group`` times (an autograd op, so the
    completions' gradients reach the prompt's computation); then the N completions (all but
    their last token) run on it. The learner of a chat task spends most of its forward pass on
    the ~45-token chat prompt: on SmolLM2 with 4 prompts x 4 samples this is ~3x less compute
    than one pass over every full sequence. Models whose forward has no ``logits_to_keep``
    compute the prompt's logits in full (the same result)."""
    device = device_of(model)
    prompts = r.prompts.to(device)
    pm = prompt_mask(prompts, r.pad_id).long()
    pos = positions(pm)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(base.forward).parameters else {}
    out = model(input_ids=prompts, attention_mask=pm, position_ids=pos, use_cache=True, **keep)
    first = out.logits[:, -1:].float().repeat_interleave(r.group, 0)
    t = int(r.completions.shape[1])
    if t <= 1:
        return first
    past = _cache_of(out)
    if r.group > 1:
        past.batch_repeat_interleave(r.group)
    n = len(r)
    attn = torch.cat([pm.repeat_interleave(r.group, 0), torch.ones(n, t - 1, dtype=pm.dtype, device=device)], 1)
    after = pos[:, -1:].repeat_interleave(r.group, 0) + 1 + torch.arange(t - 1, device=device)[None, :]
    rest = model(input_ids=r.completions[:, :-1].to(device), attention_mask=attn, position_ids=after,
                 use_cache=True, **{_cache_kw(model): past})
    return torch.cat([first, rest.logits.float()], 1)


def _cache_kw(model) -> str:
    """The forward keyword of the KV cache: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _cache_of(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


@torch.no_grad()
def generate(model, prompts: torch.Tensor, mask: torch.Tensor, max_new_tokens: int, *, eos_id: int,
             pad_id: int, temperature: float = 1.0, generator: torch.Generator | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample (``generator`` given) or greedily decode (None) up to ``max_new_tokens`` tokens.

    A plain loop over a KV cache. Returns (completions [N, T], completion_mask [N, T],
    logprobs [N, T]) with T <= max_new_tokens (the loop stops once every row has emitted
    eos). Logprobs are of the softmax at ``temperature`` (greedy: temperature 1). Runs on the
    model's device; returns CPU tensors. A ``generator`` must live on the model's device.
    """
    n = prompts.shape[0]
    device = device_of(model)
    prompts = prompts.to(device)
    attn = mask.to(device).long()
    out = model(input_ids=prompts, attention_mask=attn, position_ids=positions(attn), use_cache=True)
    past, logits = _cache_of(out), out.logits[:, -1].float()
    pos = positions(attn)[:, -1]
    done = torch.zeros(n, dtype=torch.bool, device=device)
    toks, lps, alive = [], [], []
    for t in range(max_new_tokens):
        logp, tok = _next_token(logits, temperature, generator)
        lp = logp.gather(1, tok[:, None]).squeeze(1)
        keep = ~done
        toks.append(torch.where(keep, tok, torch.full_like(tok, pad_id)))
        lps.append(torch.where(keep, lp, torch.zeros_like(lp)))
        alive.append(keep)
        done = done | (tok == eos_id)
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        attn = torch.cat([attn, torch.ones(n, 1, dtype=attn.dtype, device=device)], 1)
        pos = pos + 1
        out = model(input_ids=toks[-1][:, None], attention_mask=attn, position_ids=pos[:, None],
                    use_cache=True, **{_cache_kw(model): past})
        past, logits = _cache_of(out), out.logits[:, -1].float()
    return torch.stack(toks, 1).cpu(), torch.stack(alive, 1).cpu(), torch.stack(lps, 1).cpu()


def _next_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probabilities, next token) of each row: greedy without a generator, else a draw at ``temperature``."""
    if generator is None:
        logp = torch.log_softmax(logits, -1)
        return logp, logp.argmax(-1)
    logp = torch.log_softmax(logits / temperature, -1)
    return logp, torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)


@torch.no_grad()
def sample(model, prompts: torch.Tensor, mask: torch.Tensor, max_new_tokens: int, *, group: int, eos_id: int,
           pad_id: int, temperature: float = 1.0, generator: torch.Generator | None = None
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``group`` completions of each of the G distinct ``prompts``, for models where decoding
    dominates (a pretrained LM with long chat prompts): rows i*group .. (i+1)*group-1 belong to
    prompt i, as ``generate(prompts.repeat_interleave(group, 0), ...)`` lays them out.

    Two savings over ``generate``, same outputs' meaning: the prompts are prefilled once each
    and the KV cache is repeated ``group`` times (prefill costs G, not G*group, rows), and a
    row that has emitted eos leaves the batch (its cache rows are dropped), so each decode step
    costs only the rows still writing. Sampling draws from ``generator`` per step over the live
    rows, so the draws (and the last bits of logits, batched differently) differ from
    ``generate``'s for the same seed; the function is deterministic on its own. Returns CPU
    (completions [N, T], completion_mask [N, T], logprobs [N, T]), N = G * group.
    """
    if group < 1:
        raise ValueError(f"group: {group} must be >= 1")
    device = device_of(model)
    prompts = prompts.to(device)
    attn = mask.to(device).long()
    out = model(input_ids=prompts, attention_mask=attn, position_ids=positions(attn), use_cache=True)
    past = _cache_of(out)
    logits = out.logits[:, -1].float()
    pos = positions(attn)[:, -1]
    if group > 1:
        past.batch_repeat_interleave(group)
        logits, attn, pos = (x.repeat_interleave(group, 0) for x in (logits, attn, pos))
    return decode(model, past, logits, attn, pos, max_new_tokens, eos_id=eos_id, pad_id=pad_id,
                  temperature=temperature, generator=generator)


@torch.no_grad()
def decode(model, past, logits: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, max_new_tokens: int, *,
           eos_id: int, pad_id: int, temperature: float = 1.0, generator: torch.Generator | None = None,
           logits_out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The decode loop of ``sample`` from a prefilled state: ``past`` (the KV cache of N rows),
    ``logits`` [N, V] predicting each row's first new token, ``attn`` [N, L] the cache's attention
    mask, ``pos`` [N] each row's last position id. A row that has emitted eos leaves the batch (its
    cache rows are dropped). Returns CPU (completions [N, T], completion_mask [N, T], logprobs [N, T]).
    ``logits_out`` [N, max_new_tokens, V] (optional, on the logits' device): each live row's float32
    logits at each step, those that chose its token (entries past a row's end are left as they were)."""
    device = logits.device
    n = logits.shape[0]
    live = torch.arange(n, device=device)                  # row of each live batch entry
    toks = torch.full((n, max_new_tokens), pad_id, dtype=torch.long, device=device)
    lps = torch.zeros(n, max_new_tokens, dtype=torch.float32, device=device)
    length = torch.zeros(n, dtype=torch.long, device=device)
    steps = 0
    for t in range(max_new_tokens):
        logp, tok = _next_token(logits, temperature, generator)
        if logits_out is not None:
            logits_out[live, t] = logits
        toks[live, t] = tok
        lps[live, t] = logp.gather(1, tok[:, None]).squeeze(1)
        length[live] = t + 1
        steps = t + 1
        going = tok != eos_id
        if not bool(going.any()) or t == max_new_tokens - 1:
            break
        if not bool(going.all()):
            keep = going.nonzero().squeeze(1)
            past.batch_select_indices(keep)
            live, tok, attn, pos = live[keep], tok[keep], attn[keep], pos[keep]
        attn = torch.cat([attn, torch.ones(len(live), 1, dtype=attn.dtype, device=device)], 1)
        pos = pos + 1
        out = model(input_ids=tok[:, None], attention_mask=attn, position_ids=pos[:, None],
                    use_cache=True, **{_cache_kw(model): past})
        past, logits = _cache_of(out), out.logits[:, -1].float()
    keep_mask = torch.arange(steps, device=device)[None, :] < length[:, None]
    return toks[:, :steps].cpu(), keep_mask.cpu(), lps[:, :steps].cpu()


@dataclass
class Rollouts:
    """Completions of ``prompts``, each prompt sampled ``group`` times (see module doc)."""
    prompts: torch.Tensor                  # [G, P] int64, left-padded
    completions: torch.Tensor              # [N, T] int64, N = G * group
    completion_mask: torch.Tensor          # [N, T] bool, a prefix of each row
    logprobs: torch.Tensor                 # [N, T] float32, behaviour logprobs, 0 where masked
    rewards: torch.Tensor | None           # [N] float32
    group: int
    pad_id: int
    vocab_size: int = 0                    # 0: unknown (ids stored as int32)

    @property
    def prompt_len(self) -> int:
        return int(self.prompts.shape[1])

    @property
    def sequences(self) -> torch.Tensor:
        """[N, P+T] prompt (repeated per sample) followed by its completion."""
        return torch.cat([self.prompts.repeat_interleave(self.group, 0), self.completions], 1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """[N, P+T] bool: the prompt's real tokens and every completion position."""
        pm = prompt_mask(self.prompts, self.pad_id).repeat_interleave(self.group, 0)
        return torch.cat([pm, torch.ones_like(self.completion_mask)], 1)

    def __len__(self) -> int:
        return int(self.completions.shape[0])

    @classmethod
    def cat(cls, parts: list["Rollouts"]) -> "Rollouts":
        """Rows of ``parts`` in order (completions right-padded to the longest)."""
        if not parts:
            raise ValueError("Rollouts.cat: nothing to concatenate")
        first = parts[0]
        for p in parts:
            if (p.group, p.pad_id, p.prompt_len) != (first.group, first.pad_id, first.prompt_len):
                raise ValueError("Rollouts.cat: parts differ in group, pad_id or prompt length")
            if (p.rewards is None) != (first.rewards is None):
                raise ValueError("Rollouts.cat: some parts have rewards and some do not")
        width = max(int(p.completions.shape[1]) for p in parts)

        def pad(x: torch.Tensor, value) -> torch.Tensor:
            return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)
        return cls(prompts=torch.cat([p.prompts for p in parts]),
                   completions=torch.cat([pad(p.completions, first.pad_id) for p in parts]),
                   completion_mask=torch.cat([pad(p.completion_mask, False) for p in parts]),
                   logprobs=torch.cat([pad(p.logprobs, 0.0) for p in parts]),
                   rewards=None if first.rewards is None else torch.cat([p.rewards for p in parts]),
                   group=first.group, pad_id=first.pad_id, vocab_size=max(p.vocab_size for p in parts))

    # -- wire format --------------------------------------------------------------------------
    def to_bytes(self, logprob_dtype: str = "fp16") -> bytes:
        """Compact encoding (module doc); ``len(to_bytes(d)) == nbytes_as(d)``."""
        if logprob_dtype not in _LP_DTYPES:
            raise ValueError(f"logprob_dtype: {logprob_dtype!r} is not allowed; choose fp16 or fp32")
        lp_bytes, lp_dtype = _LP_DTYPES[logprob_dtype]
        id_bytes = 1 if 0 < self.vocab_size <= 256 else 2 if 0 < self.vocab_size <= 32768 else 4
        id_dtype = _ID_DTYPES[id_bytes]
        lengths = self.completion_mask.sum(1)
        if not torch.equal(self.completion_mask, torch.arange(self.completion_mask.shape[1]) < lengths[:, None]):
            raise ValueError("Rollouts.to_bytes: completion_mask must be a prefix of each row")
        g, p = self.prompts.shape
        header = _HEADER.pack(_MAGIC, 1, id_bytes, lp_bytes, self.rewards is not None, g, p,
                              self.completions.shape[1], self.group, self.pad_id, self.vocab_size)
        pads = (~prompt_mask(self.prompts, self.pad_id)).sum(1)
        chunks = [header, self.prompts.to(id_dtype).numpy().tobytes(),
                  pads.to(torch.int32).numpy().tobytes(), lengths.to(torch.int16).numpy().tobytes(),
                  self.completions[self.completion_mask].to(id_dtype).numpy().tobytes(),
                  self.logprobs[self.completion_mask].to(lp_dtype).numpy().tobytes()]
        if self.rewards is not None:
            chunks.append(self.rewards.to(torch.float32).numpy().tobytes())
        return b"".join(chunks)

    @property
    def nbytes(self) -> int:
        """Bytes of ``to_bytes()`` (default fp16 logprobs)."""
        return self.nbytes_as("fp16")

    def nbytes_as(self, logprob_dtype: str) -> int:
        lp_bytes = _LP_DTYPES[logprob_dtype][0]
        id_bytes = 1 if 0 < self.vocab_size <= 256 else 2 if 0 < self.vocab_size <= 32768 else 4
        g, p = self.prompts.shape
        k = int(self.completion_mask.sum())
        n = len(self)
        return (_HEADER.size + g * p * id_bytes + 4 * g + 2 * n + k * (id_bytes + lp_bytes)
                + (4 * n if self.rewards is not None else 0))

    @classmethod
    def from_bytes(cls, data: bytes) -> "Rollouts":
        """Inverse of ``to_bytes``; RolloutsError on corrupt or truncated data."""
        if len(data) < _HEADER.size:
            raise RolloutsError(f"rollouts: {len(data)} bytes is shorter than the header")
        magic, version, id_bytes, lp_bytes, has_rewards, g, p, t, group, pad_id, vocab = _HEADER.unpack_from(data)
        if magic != _MAGIC or version != 1 or id_bytes not in _ID_DTYPES or lp_bytes not in (2, 4) or group < 1:
            raise RolloutsError("rollouts: bad header (not rollout bytes or another version)")
        id_dtype = _ID_DTYPES[id_bytes]
        lp_dtype = torch.float16 if lp_bytes == 2 else torch.float32
        n = g * group
        view = memoryview(data)
        offset = _HEADER.size

        def take(count: int, dtype: torch.dtype) -> torch.Tensor:
            nonlocal offset
            size = count * torch.tensor([], dtype=dtype).element_size()
            if offset + size > len(data):
                raise RolloutsError(f"rollouts: truncated ({len(data)} bytes)")
            out = torch.frombuffer(bytearray(view[offset:offset + size]), dtype=dtype) if count else torch.zeros(0, dtype=dtype)
            offset += size
            return out

        prompts = take(g * p, id_dtype).long().reshape(g, p)
        take(g, torch.int32)                           # pad counts: implied by pad ids, kept for readers
        lengths = take(n, torch.int16).long()
        if bool((lengths < 0).any()) or bool((lengths > t).any()):
            raise RolloutsError("rollouts: completion length outside 0..T")
        mask = torch.arange(t) < lengths[:, None]
        k = int(lengths.sum())
        completions = torch.full((n, t), pad_id, dtype=torch.long)
        completions[mask] = take(k, id_dtype).long()
        logprobs = torch.zeros(n, t, dtype=torch.float32)
        logprobs[mask] = take(k, lp_dtype).float()
        rewards = take(n, torch.float32).clone() if has_rewards else None
        if offset != len(data):
            raise RolloutsError(f"rollouts: {len(data) - offset} unexpected trailing bytes")
        return cls(prompts, completions, mask, logprobs, rewards, group, pad_id, vocab)

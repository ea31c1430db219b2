"""Rollout throughput at real size: the chat task's sampler against plain ``model.generate``.

    python -m harness.commands.chat_rollouts [--path DIR|GGUF] [--prompts 4] [--group 4] [--reps 2]

One process, one worker's work: ``--prompts`` chat prompts of the chat task (train split) with
``--group`` samples each, at most ``task.max_new_tokens`` (16) new tokens, temperature 1, through a
LoRA-wrapped policy (rank 16 on every linear layer, B = 0: what a worker holds at the start). Three
ways, each timed ``--reps`` times after one warm-up, the median kept:

- ``sample``: harness.tasks.rollouts.sample (what the chat task uses): each prompt prefilled once,
  its KV cache repeated ``group`` times, finished rows dropped from the batch;
- ``generate``: harness.tasks.rollouts.generate (the synthetic tasks' loop): KV cache, batched
  sampling over the repeated prompts, finished rows kept to the end;
- ``hf``: ``model.generate(do_sample=True, top_k=0, top_p=1.0)`` over the repeated prompts (the
  plain transformers way, KV cache included).

tokens/s counts the generated tokens each way kept (up to and including eos); the ratio is
``sample`` tokens/s over ``hf`` tokens/s. The draws differ between the ways (different
sampling orders), so their token counts differ a little: that is why the rate, not the time, is
compared. One torch thread by default (as a role process runs).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Rate:
    """One way's median over repetitions: generated tokens, seconds, tokens per second."""
    way: str
    tokens: float
    seconds: float

    @property
    def per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("inf")


def hf_generate(policy, prompts: torch.Tensor, mask: torch.Tensor, max_new_tokens: int, eos_id: int, pad_id: int,
                seed: int) -> int:
    """Tokens ``model.generate`` produced (each row up to and including its first eos)."""
    torch.manual_seed(seed)
    out = policy.generate(input_ids=prompts, attention_mask=mask.long(), do_sample=True, temperature=1.0, top_k=0,
                          top_p=1.0, max_new_tokens=max_new_tokens, eos_token_id=eos_id, pad_token_id=pad_id)
    new = out[:, prompts.shape[1]:]
    is_eos = new == eos_id
    first = torch.where(is_eos.any(1), is_eos.float().argmax(1) + 1, torch.full((len(new),), new.shape[1]))
    return int(first.sum())


def measure(policy, task, n_prompts: int, group: int, reps: int, ways=("sample", "generate", "hf")) -> dict[str, Rate]:
    """The median Rate of each way over ``reps`` timed runs (after one untimed warm-up each)."""
    from harness.tasks.rollouts import generate, prompt_mask, sample

    tok = task.tok
    prompts = task.prompts("train", n_prompts, 0, 0)
    mask = prompt_mask(prompts, tok.pad_id)
    reps_p, reps_m = prompts.repeat_interleave(group, 0), mask.repeat_interleave(group, 0)
    T = task.max_new_tokens

    def run(way: str, seed: int) -> int:
        gen = torch.Generator().manual_seed(seed)
        if way == "sample":
            return int(sample(policy, prompts, mask, T, group=group, eos_id=tok.eos_id, pad_id=tok.pad_id,
                              generator=gen)[1].sum())
        if way == "generate":
            return int(generate(policy, reps_p, reps_m, T, eos_id=tok.eos_id, pad_id=tok.pad_id, generator=gen)[1].sum())
        return hf_generate(policy, reps_p, reps_m, T, tok.eos_id, tok.pad_id, seed)

    out = {}
    with torch.no_grad():
        for way in ways:
            run(way, 999)
            tokens, seconds = [], []
            for r in range(reps):
                t = time.perf_counter()
                tokens.append(run(way, r))
                seconds.append(time.perf_counter() - t)
            out[way] = Rate(way, statistics.median(tokens), statistics.median(seconds))
    return out


def main(argv: list[str] | None = None) -> dict[str, Rate]:
    from harness.tasks import make_lora
    from harness.tasks.chat import build_chat_task
    from harness.commands.chat_headroom import SMOLLM2, model_folder, task_cfg
    from harness.tasks.models import load_dir
    from harness.tasks.tokenizer import Tokenizer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", default=SMOLLM2)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    path = model_folder(args.path)
    tok = Tokenizer.from_pretrained(path)
    task = build_chat_task(task_cfg("reward", []), tok)
    policy = make_lora(load_dir(path, torch.float32).eval(), args.rank, None, ["all-linear"])
    rates = measure(policy, task, args.prompts, args.group, args.reps)
    print(f"rollouts  {path.name}  {args.prompts} prompts x {args.group} samples, <= {task.max_new_tokens} new tokens, "
          f"LoRA r={args.rank}, {args.threads} thread(s), median of {args.reps}")
    for r in rates.values():
        print(f"  {r.way:9s} {r.tokens:6.0f} tokens  {r.seconds:7.2f} s  {r.per_s:7.1f} tokens/s")
    print(f"  ratio sample / hf generate: {rates['sample'].per_s / rates['hf'].per_s:.2f}x   "
          f"(generate / hf: {rates['generate'].per_s / rates['hf'].per_s:.2f}x)")
    return rates


if __name__ == "__main__":
    main(sys.argv[1:])

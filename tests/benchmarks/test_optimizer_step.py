"""Benchmark of the replicas' optimizer step: AdamW over the tiny model's LoRA adapter (28 tensors,
r = 64), tensor by tensor (torch, ``foreach=False``) against harness.optim.FlatOptimizer (the same
arithmetic over one flat buffer). Both run on every replica of a HiLo update: the workers' step is
on the update's path.

    .venv/bin/python -m pytest tests/benchmarks/test_optimizer_step.py --benchmark-enable -n 0

One torch thread (as the role processes run). With benchmarks disabled (the default) each case
runs once: the suite checks that it works, not how fast.
"""
from __future__ import annotations

import pytest
import torch

from harness import optim
from harness.commands.compress_bench import gradients as bench_gradients


@pytest.fixture(scope="module")
def tiny_grads():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield list(bench_gradients.lora_gradients(steps=2, warmup=1, model="tiny")[0].values())
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("layout", ["per_tensor", "flat"])
def test_adamw_step(benchmark, tiny_grads, layout):
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in tiny_grads]
    build = lambda ps: optim.make_optimizer(ps, "adamw", lr=1e-3, weight_decay=0.01)   # noqa: E731
    opt = optim.FlatOptimizer(params, build) if layout == "flat" else build(params)

    def step():
        for p, g in zip(params, tiny_grads):
            p.grad = g
        opt.step()
        opt.zero_grad(set_to_none=True)

    benchmark(step)
    benchmark.extra_info.update(tensors=len(params), numbers=sum(p.numel() for p in params))
    assert any(bool(p.detach().abs().sum() > 0) for p in params)        # the step reached the tensors

"""Benchmark: one local SGD step of a client at rank 64 (batch 64), A frozen (spra/ffa) against
A trained (fedit and the other baselines), on the tiny and the small model. Speed is
measured, not asserted (compare the Min column: the machine is shared):

    .venv/bin/python -m pytest tests/federated/test_bench_client_step.py --benchmark-enable -n 0

With --benchmark-disable (the default in pyproject) each runs once as a plain test.
"""
from __future__ import annotations

import pytest
import torch

from harness.federated.adapter import Adapter
from harness.federated.projection import draw
from harness.tasks.models import build_model, make_lora
from harness.tasks.tokenizer import Tokenizer

from .fakes import TinyTask

pytestmark = pytest.mark.benchmark(group="federated-client-step")
MODELS = {
    "tiny": {"name": "tiny", "hidden_size": 128, "intermediate_size": 256, "num_layers": 2, "num_heads": 4,
             "num_kv_heads": 4, "max_positions": 32},
    "small": {"name": "small", "hidden_size": 256, "intermediate_size": 768, "num_layers": 4, "num_heads": 8,
              "num_kv_heads": 4, "max_positions": 32},
}


def _client(model_name: str, frozen_a: bool, rank: int = 64):
    tok = Tokenizer.synthetic()
    model = make_lora(build_model(MODELS[model_name], tok.vocab_size), rank, None, None, init="zeros")
    ad = Adapter(model)
    for t in ad.targets:
        ad.load(t.name, torch.zeros(t.d_out, rank), draw(0, 0, t.name, rank, t.d_in))
    ad.freeze_a(frozen_a)
    task = TinyTask(tok, 1)
    batch = next(task.batches(0, 64, torch.Generator().manual_seed(0)))
    opt = torch.optim.SGD(ad.trainable(), lr=1e-3)

    def step():
        loss = task.loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step, ad


@pytest.mark.parametrize("frozen_a", [True, False], ids=["a_frozen", "a_trained"])
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_client_step(benchmark, model_name, frozen_a):
    step, ad = _client(model_name, frozen_a)
    benchmark(step)
    grads = [ad.a(n).grad for n in ad.names]
    assert all(g is None for g in grads) if frozen_a else all(g is not None for g in grads)

"""Error feedback: decoded + new_residual == input + old_residual, for every compressor."""
from __future__ import annotations

import pytest
import torch

from compress_inputs import lora_like, options, rel_error
from harness.compress import NAMES, ErrorFeedback, Payload, build


@pytest.mark.parametrize("name", NAMES)
def test_invariant_holds_every_step_and_decoded_comes_from_the_bytes(name):
    comp = build(name, error_feedback=True, **options(name))
    assert isinstance(comp, ErrorFeedback) and comp.name == name
    for step in range(4):
        grads = lora_like(seed=10 + step)
        old = {n: comp.residual.get(n, torch.zeros_like(t)) for n, t in grads.items()}
        payload = comp.encode(grads, step=step)
        worker = build(name, **options(name)).decode(Payload.from_bytes(payload.to_bytes()))
        for n, t in grads.items():
            assert torch.equal(comp.last_decoded[n], worker[n])          # learner == worker bits
            assert torch.allclose(worker[n] + comp.residual[n], t + old[n], rtol=1e-6, atol=1e-7)
        assert payload.info["residual_norm"] >= 0


def test_error_feedback_recovers_the_sum_of_gradients():
    """With EF, what was shipped in total tracks what was computed in total (topk, 20 steps)."""
    plain, fed = build("topk", budget=0.1), build("topk", budget=0.1, error_feedback=True)
    total = shipped_plain = shipped_fed = None
    grads = lora_like(seed=1)                            # a persistent direction, as in training
    for step in range(20):
        a, b = plain.decode(plain.encode(grads, step)), fed.decode(fed.encode(grads, step))
        add = (lambda acc, d: d if acc is None else {n: acc[n] + d[n] for n in d})
        total, shipped_plain, shipped_fed = add(total, grads), add(shipped_plain, a), add(shipped_fed, b)
    assert rel_error(total, shipped_fed) < 0.5 * rel_error(total, shipped_plain)


def test_reset_forgets_the_residual(grads):
    comp = build("spar", budget=0.1, error_feedback=True)
    comp.encode(grads)
    assert comp.residual
    comp.reset()
    assert comp.residual == {} and comp.last_decoded is None
    assert comp.budget == 0.1                            # options of the wrapped compressor show through

"""Pure tier: the loop's small parts: framing, schedules, the policy-mismatch diagnostic."""
from __future__ import annotations

import torch

from harness.onpolicy.mismatch import policy_kl, swapped
from harness.onpolicy.loop import eval_due, frame, unframe, verify_due
from harness.seeds import derive
from harness.onpolicy.state import adapter_params

from .helpers import FakeRollouts as _Rollouts, FakeTask as _Task, make_peft


def test_frame_round_trip():
    meta, body = unframe(frame({"rollout_s": 0.25, "checksum": "ab"}, b"\x00\x01payload"))
    assert meta == {"rollout_s": 0.25, "checksum": "ab"} and body == b"\x00\x01payload"
    assert unframe(frame({}))[1] == b""


def test_schedules():
    assert [s for s in range(6) if verify_due(s, 2)] == [1, 3, 5]
    assert not any(verify_due(s, 0) for s in range(6))
    assert [s for s in range(7) if eval_due(s, 3, 7)] == [2, 5, 6]     # and always the last
    assert [s for s in range(7) if eval_due(s, 3, 7, final=False)] == [2, 5]
    assert not any(eval_due(s, 0, 7, final=False) for s in range(7))   # a timing-only run: none
    assert derive(0, "rollout", 3, 1) == derive(0, "rollout", 3, 1) != derive(0, "rollout", 3, 0)


def test_policy_kl_is_zero_for_the_same_adapter_and_positive_otherwise():
    model = make_peft()
    params = adapter_params(model)
    before = {n: p.detach().clone() for n, p in params.items()}
    r = _Rollouts()
    same = {n: p.detach().clone() for n, p in params.items()}
    assert policy_kl(_Task(), model, params, same, r) == 0.0         # equal tensors, equal logits
    other = {n: p + 0.05 * torch.randn_like(p) for n, p in same.items()}
    assert policy_kl(_Task(), model, params, other, r) > 1e-6
    assert all(torch.equal(params[n], before[n]) for n in params)     # restored bit for bit


def test_swapped_restores_even_on_error():
    model = make_peft()
    params = adapter_params(model)
    before = {n: p.detach().clone() for n, p in params.items()}
    try:
        with swapped(params, {n: torch.zeros_like(p) for n, p in params.items()}):
            assert all(float(p.detach().abs().sum()) == 0 for p in params.values())
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert all(torch.equal(params[n], before[n]) for n in params)

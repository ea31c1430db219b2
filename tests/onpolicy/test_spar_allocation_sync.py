"""Spar's allocation option in hilo: the learner reads its replicated Adam state, the workers
need nothing new (bit-identical replicas), and the planner refuses it where no Adam state is."""
from __future__ import annotations

import pytest
import torch

from harness.errors import ConfigError
from harness.onpolicy.state import adapter_params
from harness.optim import second_moments
from harness.plan import build_plan

from .helpers import lm_backward
from .test_sync import pair, run, same_tensors


@pytest.mark.parametrize("allocation", ["normalized", "preconditioned"])
def test_hilo_workers_stay_bit_identical_with_any_allocation(allocation):
    lm, ls, wm, ws = pair("hilo", comp=dict(name="spar", budget=0.05, options={"allocation": allocation}))

    def check(step, ls, ws):
        assert ws.checksum() == ls.expected_checksum(), f"step {step}"
    run(lm, ls, wm, ws, 4, check)
    assert same_tensors(adapter_params(lm), adapter_params(wm))


def test_the_preconditioned_learner_hands_spar_its_adam_state_and_it_changes_the_ranks():
    ranks = {}
    for allocation in ("energy", "preconditioned"):
        lm, ls, wm, ws = pair("hilo", comp=dict(name="spar", budget=0.05, options={"allocation": allocation}))
        seen = []
        inner = ls.compressor.inner
        original = inner.provide_preconditioner
        inner.provide_preconditioner = lambda *a: (seen.append(a), original(*a))[-1]
        for step in range(4):
            lm_backward(lm, step)
            update = ls.step(step)
            ws.apply(update.payload, step)
        ranks[allocation] = update.info["ranks"]
        if allocation == "preconditioned":
            assert [s[1] for s in seen] == [0, 1, 2, 3]          # steps taken before each encode
            moments, _, beta2, eps = seen[-1]
            assert (beta2, eps) == (0.999, 1e-8)
            state = ls.replica.optimizer.state
            p = next(iter(ls.replica.params.values()))
            assert set(moments) == set(ls.replica.params)
            assert moments[next(iter(ls.replica.params))].shape == p.shape and "exp_avg_sq" in state[p]
        else:
            assert seen == []
    assert ranks["energy"] != ranks["preconditioned"]


def test_second_moments_refuses_sgd():
    w = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(ValueError, match="SGD keeps no second moment"):
        second_moments(torch.optim.SGD([w], lr=0.1), {"w": w})


@pytest.mark.parametrize("variant, extra, message", [
    ("delta_spar", [], "compressor.options.allocation: preconditioned is not allowed with method.name=delta"),
    ("hilo_spar", ["onpolicy.optimizer=sgd"],
     "compressor.options.allocation: preconditioned is not allowed with method.name=hilo and onpolicy.optimizer=sgd"),
])
def test_preconditioned_fails_in_the_planner_without_replicated_adam_state(variant, extra, message):
    from tests.config.test_plan import HILO, variant_cfg

    cfg = variant_cfg(HILO, variant, *extra, "compressor.options.allocation=preconditioned")
    with pytest.raises(ConfigError) as err:
        build_plan(cfg)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_an_unknown_allocation_fails_in_the_planner():
    from tests.config.test_plan import HILO, variant_cfg

    cfg = variant_cfg(HILO, "hilo_spar", "compressor.options.allocation=sigma")
    with pytest.raises(ConfigError, match="compressor.options.allocation: 'sigma' is not allowed"):
        build_plan(cfg)

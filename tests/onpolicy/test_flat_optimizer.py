"""Pure tier: the replicas' optimizer steps one flat buffer and is the per-tensor loop bit for bit."""
from __future__ import annotations

import pytest
import torch

from harness import optim
from harness.errors import ConfigError
from harness.onpolicy.state import Replica, adapter_params, checksum, flip_bit, load_state, make_optimizer, pack_state
from .helpers import lm_backward, make_peft

SETTINGS = [("adamw", dict(lr=1e-2, weight_decay=0.0)), ("adamw", dict(lr=1e-2, weight_decay=0.1)),
            ("adam", dict(lr=1e-2, weight_decay=0.01)), ("sgd", dict(lr=1e-2, weight_decay=0.01, momentum=0.9))]


def _pair(name: str, kw: dict):
    """Two identical peft models: one with the plain per-tensor optimizer, one with the flat one."""
    plain_model, flat_model = make_peft(8), make_peft(8)
    plain = optim.make_optimizer(adapter_params(plain_model).values(), name, **kw)
    flat = optim.FlatOptimizer(adapter_params(flat_model).values(), lambda ps: optim.make_optimizer(ps, name, **kw))
    return (plain_model, plain), (flat_model, flat)


@pytest.mark.parametrize("name,kw", SETTINGS)
def test_flat_step_is_the_per_tensor_loop_bit_for_bit(name, kw):
    (pm, po), (fm, fo) = _pair(name, kw)
    for step in range(4):
        for model, opt in ((pm, po), (fm, fo)):
            lm_backward(model, step)          # the models' own forward/backward: the flat views are what they use
            opt.step()
            opt.zero_grad(set_to_none=True)
    pp, fp = adapter_params(pm), adapter_params(fm)
    for n in pp:
        assert torch.equal(pp[n], fp[n]), n
        for key, value in po.state[pp[n]].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(fo.state[fp[n]][key])), (n, key)
    assert checksum(pp, po) == checksum(fp, fo)


def test_the_tensors_are_views_of_one_buffer_and_writes_go_through():
    model = make_peft(8)
    params = adapter_params(model)
    before = {n: p.detach().clone() for n, p in params.items()}
    opt = make_optimizer(params, "adamw", 1e-2)
    assert all(torch.equal(before[n], p) for n, p in params.items())        # same values after flattening
    base = opt.flat.untyped_storage().data_ptr()
    assert all(p.untyped_storage().data_ptr() == base for p in params.values())
    lm_backward(model, 0)
    opt.step()
    assert any(not torch.equal(p, before[n]) for n, p in params.items())     # the step reached the model's tensors
    rep = Replica(params, opt)
    was = rep.checksum()
    flip_bit(rep, "exp_avg")                  # the per-tensor state is a view: the flat state changes
    assert rep.checksum() != was and opt.inner.state[opt.flat]["exp_avg"].view(torch.int32)[0] != 0


def test_resync_round_trip_and_a_plain_optimizers_state_load():
    (pm, po), (fm, fo) = _pair("adamw", dict(lr=1e-2))
    for model, opt in ((pm, po), (fm, fo)):
        lm_backward(model, 0)
        opt.step()
        opt.zero_grad()
    target = Replica(adapter_params(m := make_peft(8)), make_optimizer(adapter_params(m), "adamw", 1e-2))
    load_state(pack_state(adapter_params(fm), fo), target)
    assert target.checksum() == checksum(adapter_params(fm), fo)
    other = Replica(adapter_params(m2 := make_peft(8)), make_optimizer(adapter_params(m2), "adamw", 1e-2))
    load_state(pack_state(adapter_params(pm), po), other)             # the per-tensor format is the same
    assert other.checksum() == checksum(adapter_params(pm), po)


def test_lr_of_the_group_is_live_and_gradients_must_be_all_or_none():
    model = make_peft(8)
    params = adapter_params(model)
    opt = make_optimizer(params, "adamw", 1e-2)
    opt.param_groups[0]["lr"] = 0.0
    before = {n: p.detach().clone() for n, p in params.items()}
    lm_backward(model, 0)
    opt.step()
    assert all(torch.equal(before[n], p) for n, p in params.items())
    opt.zero_grad()
    opt.step()                                 # no gradients at all: nothing to do
    next(iter(params.values())).grad = torch.zeros_like(next(iter(params.values())))
    with pytest.raises(ValueError, match="has no gradient"):
        opt.step()


def test_an_unknown_name_fails_before_any_tensor_is_moved():
    model = make_peft(8)
    params = adapter_params(model)
    ptrs = [p.data_ptr() for p in params.values()]
    with pytest.raises(ConfigError, match="onpolicy.optimizer: 'lion'"):
        make_optimizer(params, "lion")
    assert ptrs == [p.data_ptr() for p in params.values()]

"""Pure tier: replica state, checksums, the full-sync and resync wire formats."""
from __future__ import annotations

import pytest
import torch

from harness.errors import ConfigError
from harness.onpolicy.state import (Replica, SyncError, adapter_params, checksum, flip_bit, load_state,
                                    make_optimizer, FLAT_OVERHEAD, pack_flat, pack_state, unpack_flat)
from .helpers import lm_backward, make_peft


def _replica(rank=8, optimizer=True):
    model = make_peft(rank)
    params = adapter_params(model)
    return model, Replica(params, make_optimizer(params, "adamw", 1e-2) if optimizer else None)


def test_same_seed_same_checksum_and_a_flipped_bit_changes_it():
    _, a = _replica()
    _, b = _replica()
    assert a.checksum() == b.checksum()
    flip_bit(b, "param")
    assert a.checksum() != b.checksum()


def test_checksum_covers_optimizer_state():
    model, a = _replica()
    lm_backward(model, 0)
    a.optimizer.step()
    before = a.checksum()
    assert checksum(a.params) != before          # the state is part of it
    flip_bit(a, "exp_avg")
    assert a.checksum() != before


def test_flip_exp_avg_before_any_step_is_a_clear_error():
    _, a = _replica()
    with pytest.raises(SyncError, match="fault_flip_target"):
        flip_bit(a, "exp_avg")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_flat_pack_round_trip_and_size(dtype):
    _, a = _replica()
    data = pack_flat(a.tensors(), dtype)
    numel = sum(t.numel() for t in a.tensors())
    assert len(data) == FLAT_OVERHEAD + numel * torch.tensor([], dtype=dtype).element_size()
    for got, want in zip(unpack_flat(data, a.tensors()), a.tensors()):
        assert torch.equal(got, want.detach().to(dtype))


def test_flat_pack_rejects_other_shapes_and_truncation():
    _, a = _replica(rank=8)
    _, b = _replica(rank=4)
    data = pack_flat(a.tensors(), torch.bfloat16)
    with pytest.raises(SyncError, match="rank"):
        unpack_flat(data, b.tensors())
    with pytest.raises(SyncError, match="truncated"):
        unpack_flat(data[:-3], a.tensors())
    with pytest.raises(SyncError, match="header"):
        unpack_flat(b"xx", a.tensors())


def test_resync_restores_params_and_optimizer_bit_for_bit():
    model, a = _replica()
    for step in range(2):
        lm_backward(model, step)
        a.optimizer.step()
        a.optimizer.zero_grad()
    _, b = _replica()
    assert a.checksum() != b.checksum()
    load_state(pack_state(a.params, a.optimizer), b)
    assert a.checksum() == b.checksum()


def test_unknown_optimizer_names_the_key():
    _, a = _replica(optimizer=False)
    with pytest.raises(ConfigError, match="onpolicy.optimizer: 'lion'"):
        make_optimizer(a.params, "lion")

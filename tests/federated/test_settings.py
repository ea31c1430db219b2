"""Settings from the config (bad values name the key), messages round-trip exactly."""
from __future__ import annotations

import pytest
import torch

from harness.federated.codec import CodecError, decode, encode
from harness.federated.messages import DownMsg, UpMsg
from harness.federated.methods import Down, Merge
from harness.federated.settings import from_cfg
from harness.errors import ConfigError

from .fakes import config


@pytest.mark.parametrize("key, value", [
    ("federated.drop_policy", "maybe"), ("federated.optimizer", "lion"), ("federated.fraction", 0.0),
    ("federated.ranks", []), ("federated.rounds", 0), ("method.lr_rule", "cubic"),
    ("method.resample_every", -1), ("method.name", "fedsgd"), ("method.a_variance", "half"),
    ("task.eval_split", "holdout"),
])
def test_bad_values_name_the_key(key, value):
    cfg = config("spra")
    section, field = key.split(".")
    cfg[section][field] = value
    with pytest.raises(ConfigError) as err:
        from_cfg(cfg)
    assert str(err.value).startswith(key), str(err.value)


def test_ranks_cycle_and_lr_is_rank_aware():
    cfg = config("spra", clients=5, ranks=[16, 4], lr=0.1)
    cfg["method"]["lr_rule"] = "linear"
    s = from_cfg(cfg)
    assert s.ranks == (16, 4, 16, 4, 16) and s.r_ref == 16
    assert s.lr_of(0) == pytest.approx(0.1) and s.lr_of(1) == pytest.approx(0.025)


def test_sampling_is_seeded_and_sized():
    s = from_cfg(config("spra", clients=10, fraction=0.3))
    picks = [s.selected(t, list(range(10))) for t in range(5)]
    assert all(len(p) == 3 for p in picks)
    assert picks == [s.selected(t, list(range(10))) for t in range(5)]
    assert len({tuple(p) for p in picks}) > 1
    assert s.selected(0, [4]) == [4]


def test_down_and_up_messages_round_trip():
    names = ["a.q", "a.v"]
    c = {n: torch.randn(4, 2) for n in names}
    z = {n: torch.randn(2, 3) for n in names}
    merge = Merge(index=3, c={n: torch.randn(4, 5) for n in names}, z=None, period=1)
    msg = DownMsg(7, True, Down(c=c, z=z, basis="given", period=2), [merge], expect="abc")
    back = DownMsg.from_bytes(msg.to_bytes(names), names)
    assert (back.round, back.selected, back.expect, back.down.basis, back.down.period) == (7, True, "abc", "given", 2)
    assert all(torch.equal(back.down.c[n], c[n]) and torch.equal(back.down.z[n], z[n]) for n in names)
    assert back.merges[0].index == 3 and back.merges[0].z is None and back.merges[0].period == 1
    assert torch.equal(back.merges[0].c["a.v"], merge.c["a.v"])
    up = UpMsg(7, c=c, info={"examples": 12, "in_sync": True})
    data = up.to_bytes(names)
    back_up = UpMsg.from_bytes(data, names)
    assert back_up.info == {"examples": 12, "in_sync": True} and not back_up.z
    assert up.tensor_bytes == 2 * 4 * 2 * 4 and len(data) > up.tensor_bytes


def test_corrupt_payload_is_a_clear_error():
    data = encode({"x": torch.ones(3)}, {"k": 1})
    with pytest.raises(CodecError):
        decode(data[: len(data) // 2])
    with pytest.raises(CodecError):
        decode(b"\x01")

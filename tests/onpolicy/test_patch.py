"""Pure tier of the ``patch`` sync method (harness.onpolicy.patch): the wire format round-trips,
a damaged patch is refused before anything is applied, and learner + worker follow full sync
(bf16)'s states bit for bit, checksum equal at every update."""
from __future__ import annotations

import pytest
import torch

from harness.errors import ConfigError
from harness.onpolicy import patch
from harness.onpolicy.codec import check
from harness.onpolicy.state import SyncError, adapter_params, checksum, flip_bit

from .helpers import lm_backward
from .test_sync import pair, same_tensors


def _changes(numels, fracs, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for n, f in zip(numels, fracs):
        idx = torch.nonzero(torch.rand(n, generator=g) < f).view(-1)
        out.append((idx, torch.randint(-2**15, 2**15, (idx.numel(),), generator=g, dtype=torch.int16)))
    return out


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_encode_decode_round_trip_every_index_width(codec):
    # gaps < 256, < 65536 and >= 65536 (a sparse tensor of 300k entries), and an empty tensor
    numels, fracs = [1000, 50_000, 300_000, 64], [0.5, 0.001, 0.00001, 0.0]
    changes = _changes(numels, fracs)
    changes[2] = (torch.tensor([0, 70_000, 299_999]), torch.tensor([1, -2, 3], dtype=torch.int16))
    data, stats = patch.encode(changes, sum(numels), codec, 3)
    assert stats.nbytes == len(data)
    assert stats.changed == sum(c[0].numel() for c in changes)
    assert stats.raw_value_bytes == 2 * stats.changed
    if codec == "none":
        assert stats.raw_bytes == len(data)
    decoded = patch.decode(data, numels)
    for (i0, v0), (i1, v1) in zip(changes, decoded):
        assert torch.equal(i0, i1) and torch.equal(v0, v1)


def test_wrong_replica_shape_is_refused():
    data, _ = patch.encode(_changes([100, 100], [0.1, 0.1]), 200)
    with pytest.raises(SyncError, match="different adapter"):
        patch.decode(data, [100, 101])


def test_patch_follows_full_sync_bf16_bit_for_bit():
    """What the registry declares (patch trains_like full_sync: harness.tune gives both one entry) holds."""
    from harness.onpolicy.methods import lookup

    assert lookup("patch").trains_like == "full_sync"
    fm, fs, fwm, fws = pair("full_sync", sync_dtype="bf16")
    pm, ps, pwm, pws = pair("patch")
    for step in range(6):
        assert lm_backward(fm, step) == lm_backward(pm, step)
        full, part = fs.step(step), ps.step(step)
        fws.apply(full.payload, step)
        pws.apply(part.payload, step)
        assert pws.checksum() == ps.expected_checksum() == fws.checksum() == fs.expected_checksum(), step
        assert same_tensors(adapter_params(pwm), adapter_params(fwm)), step
        assert same_tensors(ps.worker_view(), fs.worker_view()), step
        cols = part.columns
        assert cols["patch_index_bytes"] + cols["patch_value_bytes"] + patch.PATCH_OVERHEAD == len(part.payload)
        assert cols["patch_raw_value_bytes"] == 2 * cols["patch_changed"]
        assert 0 < cols["patch_changed_frac"] <= 1
    assert same_tensors(adapter_params(pm), adapter_params(fm))           # learners: same fp32 trajectory
    assert checksum(ps.replica.params, ps.replica.optimizer) == checksum(fs.replica.params, fs.replica.optimizer)


def test_unchanged_adapter_ships_an_empty_patch():
    pm, ps, pwm, pws = pair("patch")
    lm_backward(pm, 0)
    pws.apply(ps.step(0).payload, 0)
    before = pws.checksum()
    for p in ps.replica.params.values():            # a zero step: nothing moves
        p.grad = torch.zeros_like(p)
    ps.replica.optimizer.param_groups[0]["lr"] = 0.0
    update = ps.step(1)
    assert update.columns["patch_changed"] == 0
    pws.apply(update.payload, 1)
    assert pws.checksum() == before == ps.expected_checksum()


@pytest.mark.parametrize("where", [0, 40, -1])      # header, index section, CRC trailer
def test_a_damaged_patch_fails_before_anything_is_applied(where):
    pm, ps, pwm, pws = pair("patch")
    lm_backward(pm, 0)
    pws.apply(ps.step(0).payload, 0)
    lm_backward(pm, 1)
    data = bytearray(ps.step(1).payload)
    data[where] ^= 0x10
    before = pws.checksum()
    with pytest.raises(SyncError, match="checksum mismatch"):
        pws.apply(bytes(data), 1)
    assert pws.checksum() == before


def test_a_flipped_worker_bit_is_seen_and_repaired_by_resync():
    pm, ps, pwm, pws = pair("patch")
    for step in range(2):
        lm_backward(pm, step)
        pws.apply(ps.step(step).payload, step)
    flip_bit(pws.replica, "param", 3)
    assert pws.checksum() != ps.expected_checksum()
    pws.load_resync(ps.resync_payload())
    assert pws.checksum() == ps.expected_checksum()
    lm_backward(pm, 2)
    pws.apply(ps.step(2).payload, 2)
    assert pws.checksum() == ps.expected_checksum()


@pytest.mark.parametrize("codec, level, key", [("lz4", 3, "method.codec"), ("zstd", 0, "method.codec_level"),
                                               ("zstd", 23, "method.codec_level")])
def test_bad_codec_or_level_is_one_line(codec, level, key):
    with pytest.raises(ConfigError) as err:
        check(codec, level)
    assert str(err.value).startswith(key) and "\n" not in str(err.value)


@pytest.mark.parametrize("override, key", [("method.codec=lz4", "method.codec"),
                                           ("method.codec_level=30", "method.codec_level")])
def test_bad_codec_fails_validation_before_launch(override, key):
    from harness.plan import build_plan
    from harness.compose import compose_config

    cfg = compose_config(["method=patch", override])
    with pytest.raises(ConfigError) as err:
        build_plan(cfg)
    assert str(err.value).startswith(key) and "\n" not in str(err.value)


def test_bad_codec_on_the_command_line_exits_2_with_one_line():
    import warm_cli

    out = warm_cli.run("harness", ["method=patch", "method.codec=brotli"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: method.codec:") and "brotli" in lines[0], out.stderr

"""The wire format: exact round trip, exact byte count, and loud failure on bad bytes."""
from __future__ import annotations

import random

import pytest
import torch

from compress_inputs import LOSSY, lora_like, options
from harness.compress import NAMES, Payload, PayloadError, build, decode


@pytest.mark.parametrize("name", NAMES)
def test_bytes_round_trip_exactly_and_nbytes_counts_everything(name, grads):
    comp = build(name, **options(name))
    payload = comp.encode(grads, step=5)
    data = payload.to_bytes()
    assert payload.nbytes == len(data) == payload.info["used_bytes"]
    again = Payload.from_bytes(data)
    assert again.to_bytes() == data and again.nbytes == len(data)
    assert (again.step, again.seed, again.compressor) == (5, 0, name)
    assert [e.name for e in again.entries] == list(grads)
    out = comp.decode(again)
    assert list(out) == list(grads)
    for n, t in grads.items():
        assert out[n].dtype == torch.float32 and out[n].shape == t.shape
    generic = decode(data)                       # stateless decode by the id on the wire
    assert all(torch.equal(generic[n], out[n]) for n in out)


@pytest.mark.parametrize("name", NAMES)
def test_corrupted_bytes_fail_with_payload_error(name, grads):
    comp = build(name, **options(name))
    data = bytearray(comp.encode(grads).to_bytes())
    rng = random.Random(0)
    for pos in [0, 4, 5, 8, 20, 31, 40, len(data) // 2, len(data) - 5, len(data) - 1] + \
               [rng.randrange(len(data)) for _ in range(20)]:
        bad = bytearray(data)
        bad[pos] ^= 1 << rng.randrange(8)
        with pytest.raises(PayloadError):
            comp.decode(Payload.from_bytes(bytes(bad)))


@pytest.mark.parametrize("name", NAMES)
def test_truncated_or_extended_bytes_fail_with_payload_error(name, grads):
    data = build(name, **options(name)).encode(grads).to_bytes()
    for cut in [0, 3, 31, 32, 36, 100, len(data) // 2, len(data) - 4, len(data) - 1]:
        with pytest.raises(PayloadError):
            Payload.from_bytes(data[:cut])
    with pytest.raises(PayloadError):
        Payload.from_bytes(data + b"\x00")


def test_wrong_magic_version_and_decoder_are_named():
    data = bytearray(build("identity").encode({"w": torch.ones(3, 2)}).to_bytes())
    with pytest.raises(PayloadError, match="magic"):
        Payload.from_bytes(b"XXXX" + bytes(data[4:]))
    bad = bytearray(data)
    bad[4] = 99
    with pytest.raises(PayloadError, match="version 99"):
        Payload.from_bytes(bytes(bad))
    with pytest.raises(PayloadError, match="made by 'identity'"):
        build("topk", budget=0.5).decode(Payload.from_bytes(bytes(data)))


def test_header_is_small_and_counted(grads):
    payload = build("spar", budget=0.2).encode(grads)
    sections = sum(len(s) for r in payload.records for s in r.sections)
    assert payload.header_nbytes + sections == payload.nbytes
    assert payload.info["header_bytes"] == payload.header_nbytes
    assert payload.header_nbytes < 0.05 * payload.info["dense_bf16_bytes"]


@pytest.mark.parametrize("name", LOSSY)
def test_payload_carries_only_what_decoding_needs(name):
    """A fresh decoder (no encoder state, other options) decodes the same bits."""
    grads = lora_like(seed=3)
    enc = build(name, seed=11, **options(name))
    data = enc.encode(grads, step=7).to_bytes()
    fresh = build(name, budget=0.9 if name != "powersgd" else 0.5, seed=0)
    a, b = enc.decode(Payload.from_bytes(data)), fresh.decode(Payload.from_bytes(data))
    assert all(torch.equal(a[n], b[n]) for n in a)

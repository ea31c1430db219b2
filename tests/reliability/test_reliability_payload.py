"""Pure tier: corrupted or truncated bytes fed to every decode path a role applies.

Each case builds a real payload (the learner's side of the method, or the federated server's
message), damages it (truncated, a bit flipped in the header, in the body, in the last byte)
and hands it to the receiving side. The contract (issue 8): decoding fails with a clear,
one-line error of the path's own type, and nothing is applied (the receiver's adapter and
optimizer state are bit-identical to before, checked by their SHA-256).
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from harness.compress import PayloadError
from harness.onpolicy import methods as sync_methods
from harness.onpolicy.state import Replica, SyncError, make_optimizer

SHAPES = {"layers.0.q_proj.lora_A": (8, 32), "layers.0.q_proj.lora_B": (48, 8),
          "layers.0.v_proj.lora_A": (8, 32), "layers.0.v_proj.lora_B": (32, 8)}


def _params(seed: int = 0) -> dict[str, nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return {n: nn.Parameter(torch.randn(*s, generator=g)) for n, s in SHAPES.items()}


def _pair(method: str, comp: dict | None = None):
    """(learner sync, worker sync) of ``method`` built alike, after one real update."""
    from harness.compress import build

    lp, wp = _params(), _params()
    learner = Replica(lp, make_optimizer(lp, "adamw", 1e-2))
    worker = Replica(wp, make_optimizer(wp, "adamw", 1e-2) if sync_methods.worker_needs_optimizer(method) else None)
    factory = (lambda: build(**comp)) if comp else None
    ls = sync_methods.build(method, "learner", learner, sync_dtype="bf16", compressor_factory=factory)
    ws = sync_methods.build(method, "worker", worker, sync_dtype="bf16", compressor_factory=factory)
    for step in range(2):                      # two updates: Adam state exists on both sides
        g = torch.Generator().manual_seed(100 + step)
        for p in learner.params.values():
            p.grad = torch.randn(p.shape, generator=g)
        ws.apply(ls.step(step).payload, step)
    return ls, ws


def _flip(data: bytes, index: int, bit: int = 3) -> bytes:
    out = bytearray(data)
    out[index] ^= 1 << bit
    return bytes(out)


DAMAGE = {
    "empty": lambda d: b"",
    "truncated_to_10": lambda d: d[:10],
    "truncated_half": lambda d: d[:len(d) // 2],
    "last_byte_missing": lambda d: d[:-1],
    "extra_byte": lambda d: d + b"\0",
    "flip_header": lambda d: _flip(d, 1),
    "flip_body": lambda d: _flip(d, len(d) * 2 // 3),
    "flip_last_byte": lambda d: _flip(d, len(d) - 1),
}


def _one_line(err: BaseException) -> None:
    text = str(err)
    assert text and "\n" not in text, f"error is not one clear line: {text!r}"


@pytest.mark.parametrize("comp", [{"name": "spar", "budget": 0.2}, {"name": "topk", "budget": 0.2},
                                  {"name": "quant", "budget": 0.5}, {"name": "identity"}],
                         ids=lambda c: c["name"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_hilo_worker_refuses_a_damaged_gradient_payload_and_applies_nothing(comp, damage):
    ls, ws = _pair("hilo", comp)
    for p in ls.replica.params.values():
        p.grad = torch.randn(p.shape)
    payload = ls.step(2).payload
    before = ws.checksum()
    with pytest.raises(PayloadError) as err:
        ws.apply(DAMAGE[damage](payload), 2)
    _one_line(err.value)
    assert ws.checksum() == before, "a damaged payload changed the worker's adapter or optimizer state"
    assert all(p.grad is None for p in ws.replica.params.values()), "gradients were set from a damaged payload"
    ws.apply(payload, 2)                        # the intact payload still applies: nothing was half-done
    assert ws.checksum() == ls.expected_checksum()


@pytest.mark.parametrize("method, comp, error", [("delta", {"name": "topk", "budget": 0.2}, PayloadError),
                                                  ("full_sync", None, SyncError)], ids=["delta", "full_sync"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_delta_and_full_sync_workers_refuse_a_damaged_update_and_apply_nothing(method, comp, error, damage):
    ls, ws = _pair(method, comp)
    for p in ls.replica.params.values():
        p.grad = torch.randn(p.shape)
    payload = ls.step(2).payload
    before = ws.checksum()
    with pytest.raises(error) as err:
        ws.apply(DAMAGE[damage](payload), 2)
    _one_line(err.value)
    assert ws.checksum() == before, "a damaged update changed the worker's adapter or optimizer state"
    ws.apply(payload, 2)                        # the intact payload still applies: nothing was half-done
    assert ws.checksum() == ls.expected_checksum()
    assert ws.checksum() != before              # (and applying it is visible: the check above can fail)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_resync_is_refused_and_applies_nothing(damage):
    ls, ws = _pair("hilo", {"name": "spar", "budget": 0.2})
    blob = ls.resync_payload()
    with torch.no_grad():                        # make the worker differ so that a load would show
        next(iter(ws.replica.params.values())).add_(1.0)
    before = ws.checksum()
    with pytest.raises(SyncError) as err:
        ws.load_resync(DAMAGE[damage](blob))
    assert str(err.value).startswith("resync payload"), str(err.value)
    assert ws.checksum() == before


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_federated_messages_refuse_damaged_bytes(damage):
    from harness.federated.codec import CodecError
    from harness.federated.messages import UpMsg

    names = list(SHAPES)
    g = torch.Generator().manual_seed(0)
    up = UpMsg(3, c={n: torch.randn(s[0], 4, generator=g) for n, s in SHAPES.items()},
               info={"examples": 10.0, "in_sync": True})
    data = up.to_bytes(names)
    with pytest.raises(CodecError) as err:
        UpMsg.from_bytes(DAMAGE[damage](data), names)
    _one_line(err.value)


def test_corruption_is_seen_before_any_state_is_read():
    """Payload.from_bytes validates the CRC over the whole message before parsing sections."""
    from harness.compress import Payload, build

    comp = build("spar", budget=0.2)
    encoded = comp.encode({n: torch.randn(*s) for n, s in SHAPES.items()}, step=0)
    payload = encoded.to_bytes()
    for index in range(0, len(payload), max(1, len(payload) // 64)):
        with pytest.raises(PayloadError, match="checksum|truncated|magic|version"):
            Payload.from_bytes(_flip(payload, index))
    # the refusals are the flips' doing, not the parser's: the intact message parses back to itself
    # and decodes to exactly what the encoder's own Payload object decodes to (no bytes in between)
    intact = Payload.from_bytes(payload)
    assert intact.to_bytes() == payload
    meant, got = comp.decode(encoded), comp.decode(intact)
    assert set(got) == set(SHAPES)
    assert all(torch.equal(got[n], meant[n]) for n in SHAPES)

"""Pure tier: what takes HiLo's own work off the critical path keeps every exactness guarantee.

- the learner's deferred replay (payload first, decode + step after) gives the same payload
  bytes and the same state, bit for bit, as stepping before sending; the state does not move
  until the replay runs (so a resync taken then is the previous update's state);
- ErrorFeedback.encode_deferred leaves the residual alone until finish(), then matches encode;
- the background checksum gives the checksum (and re-raises a failure).
"""
from __future__ import annotations

import pytest
import torch

from harness.compress import ErrorFeedback
from harness.onpolicy.loop import Background

from .helpers import compressor, lm_backward
from .test_sync import pair, same_tensors


@pytest.mark.parametrize("name", ["spar", "identity"])
def test_deferred_replay_matches_stepping_before_sending_bit_for_bit(name):
    comp = dict(name=name, budget=0.1) if name == "spar" else dict(name=name, dtype="fp32")
    am, a, awm, aw = pair("hilo", comp=comp)            # steps before sending (defer=False)
    bm, b, bwm, bw = pair("hilo", comp=comp)            # payload first, replay after
    for step in range(4):
        assert lm_backward(am, step) == lm_backward(bm, step)
        ua = a.step(step)
        before = b.replica.checksum()
        ub = b.step(step, defer=True)
        assert ub.payload == ua.payload
        assert b.replica.checksum() == before, "the learner's state moved before its replay"
        assert ub.replay is not None and ua.replay is None
        ub.replay()
        bw.apply(ub.payload, step)
        assert b.replica.checksum() == a.replica.checksum() == bw.checksum()
    assert same_tensors(dict(am.named_parameters()), dict(bm.named_parameters()))


def test_error_feedback_deferred_decode_matches_encode():
    torch.manual_seed(0)
    grads = [{"a": torch.randn(16, 32), "b": torch.randn(32, 16)} for _ in range(3)]
    eager, lazy = ErrorFeedback(compressor("spar", budget=0.2)), ErrorFeedback(compressor("spar", budget=0.2))
    for step, g in enumerate(grads):
        p1 = eager.encode(g, step)
        old = {n: r.clone() for n, r in lazy.residual.items()}
        p2, finish = lazy.encode_deferred(g, step)
        assert p1.to_bytes() == p2.to_bytes()
        assert set(old) == set(lazy.residual) and all(torch.equal(old[n], lazy.residual[n]) for n in old)
        decoded = finish()
        assert all(torch.equal(decoded[n], eager.last_decoded[n]) for n in g)
        assert all(torch.equal(lazy.residual[n], eager.residual[n]) for n in g)


def test_background_returns_the_result_and_reraises_a_failure():
    assert Background(lambda: "digest").result() == "digest"

    def broken():
        raise ValueError("no state")
    with pytest.raises(ValueError, match="no state"):
        Background(broken).result()

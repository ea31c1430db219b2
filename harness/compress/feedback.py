"""Error feedback: a wrapper that carries what a compressor dropped into the next step.

    v_t      = g_t + e_t                      (e_0 = 0, one residual per tensor name)
    payload  = C.encode(v_t, step)
    g^_t     = C.decode(Payload.from_bytes(payload.to_bytes()))   # the bytes the workers get
    e_{t+1}  = v_t - g^_t

Invariant after each call (to float32 rounding): decoded + new_residual == input + old_residual.
The decoded gradient is computed from the serialised bytes, the same path every worker takes,
and kept in `last_decoded`: a learner steps on it without decoding twice.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from harness.compress.base import Compressor
from harness.compress.payload import Payload


class ErrorFeedback:
    """Wraps any Compressor; same protocol; state: `residual` (name -> float32 tensor)."""

    def __init__(self, inner: Compressor) -> None:
        self.inner = inner
        self.name = inner.name
        self.residual: dict[str, torch.Tensor] = {}
        self.last_decoded: dict[str, torch.Tensor] | None = None

    def encode(self, tensors: dict[str, torch.Tensor], step: int = 0) -> Payload:
        """Encode input + residual; side effect: `residual` becomes what this payload misses."""
        payload, finish = self.encode_deferred(tensors, step)
        finish()
        return payload

    def encode_deferred(self, tensors: dict[str, torch.Tensor], step: int = 0
                        ) -> tuple[Payload, Callable[[], dict[str, torch.Tensor]]]:
        """Encode input + residual now; decode later. Returns (payload, finish).

        ``finish()`` decodes the payload's bytes, makes `residual` what the payload misses,
        sets `last_decoded` and returns it; it must run before the next encode. It lets a
        learner put the payload on the wire before its own decode-for-replay (the decode is
        then off the critical path, overlapping the transfer). ``payload.info`` gets its
        ``residual_norm`` when ``finish()`` runs.
        """
        corrected = {}
        for name, t in tensors.items():
            v = t.detach().float()
            if name in self.residual:
                v = v + self.residual[name].to(v.device)
            corrected[name] = v
        payload = self.inner.encode(corrected, step)

        def finish() -> dict[str, torch.Tensor]:
            decoded = self.inner.decode(Payload.from_bytes(payload.to_bytes()))
            self.residual = {n: v - decoded[n].to(v.device) for n, v in corrected.items()}
            self.last_decoded = decoded
            payload.info["residual_norm"] = sum(float(r.double().square().sum())
                                                for r in self.residual.values()) ** 0.5
            return decoded
        return payload, finish

    def decode(self, payload: Payload) -> dict[str, torch.Tensor]:
        return self.inner.decode(payload)

    def reset(self) -> None:
        """Forget the residuals (e.g. after a full resync)."""
        self.residual = {}
        self.last_decoded = None

    def __getattr__(self, item: str) -> Any:  # budget, dtype, seed, ... of the wrapped compressor
        if item == "inner":
            raise AttributeError(item)
        return getattr(self.inner, item)

    def __repr__(self) -> str:
        return f"ErrorFeedback({self.inner!r})"

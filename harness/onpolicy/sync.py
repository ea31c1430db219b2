"""Sync strategies: how the learner's update reaches the rollout workers.

Each method is a pair of small classes with one interface, used by the role loops:

    learner: loss.backward(); sync.backward_done(); clip (factor c)
                                       update = sync.step(step, grad_scale=c) -> Update (payload bytes)
    worker:                            sync.apply(payload, step)
    both:    checksum of the state the workers must hold (learner: ``expected_checksum``,
             worker: ``checksum``); learner ``resync_payload`` -> worker ``load_resync``.

What each method sends down per update:
- ``full_sync`` / ``lowrank``: every adapter tensor in ``method.sync_dtype`` (bf16 default).
  Workers hold the adapter as shipped, i.e. the learner's fp32 tensors rounded to the wire
  dtype, so what is comparable (and checksummed) is that rounded view; the learner's Adam
  state lives on the learner only. ``policy_kl`` measures what the rounding costs.
- ``delta``: C(params - view), the learner's new params minus the workers' view, compressed
  by any compressor. The learner keeps the view (the workers' params) by adding the same
  decoded delta, so what was not shipped is in the next delta: exact error feedback without
  a residual. With ``compressor.error_feedback=false`` it ships C(params_t+1 - params_t)
  instead and the view drifts (the ablation).
- ``hilo``: C(g + e), the compressed gradient with a residual e (harness.compress's
  ErrorFeedback, which decodes the payload's BYTES: g^ is exactly what a worker decodes);
  e <- g + e - g^; the learner steps on g^ and so does every worker, on a replicated
  optimizer state: adapters and optimizer states stay bit-identical, and that is verified.
  With Spar's ``allocation: preconditioned`` the learner hands the compressor its Adam second
  moments before each encode (harness.optim.second_moments); they only choose the ranks, so a
  worker decodes and replays exactly as with any other allocation.
- ``patch`` (harness.onpolicy.patch): the entries whose bf16 view changed, as positions and
  new bf16 values, zstd-coded; the workers' state is full_sync (bf16)'s bit for bit.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import Tensor

from harness.onpolicy.methods import SyncMethod
from harness.onpolicy.state import (Replica, SyncError, checksum, load_state, pack_flat,
                                    pack_state, unpack_flat, wire_dtype)

@dataclass
class Update:
    """What the learner's step produced: the downlink payload and how long it took.

    ``replay``, when not None, is the learner's own decode + optimizer step, deferred so that
    the payload goes on the wire first (hilo): the caller runs it after handing the payload
    to the transport and before anything reads the learner's state; it returns its seconds
    (decode, step). Methods whose payload depends on the stepped state (full sync, delta)
    step inside ``step()`` and leave it None.
    """
    payload: bytes
    step_s: float                 # optimizer step on the learner before sending (seconds)
    encode_s: float               # compress (+ decode-for-replay when not deferred) (seconds)
    info: dict[str, Any] = field(default_factory=dict)   # compressor's info (ranks, budget)
    replay: Callable[[], tuple[float, float]] | None = None
    columns: dict[str, Any] = field(default_factory=dict)  # extra per-update row columns (patch_*)


def _timer() -> float:
    return time.perf_counter()


def _decode(compressor, data: bytes) -> dict[str, Tensor]:
    """Decode a payload from its BYTES (exactly what a worker gets), as fp32 tensors."""
    from harness.compress import Payload

    decoded = compressor.decode(Payload.from_bytes(data))
    return {n: t.to(torch.float32) for n, t in decoded.items()}


def _encode(compressor, tensors: dict[str, Tensor], step: int) -> tuple[bytes, dict]:
    payload = compressor.encode(tensors, step=step)
    data = payload.to_bytes()
    return data, dict(getattr(payload, "info", {}) or {})


# --------------------------------------------------------------------------- learner side
class LearnerSync:
    """Learner side of a method. ``replica.optimizer`` is the learner's optimizer."""
    method = "base"

    def __init__(self, replica: Replica):
        if replica.optimizer is None:
            raise SyncError("the learner's replica needs an optimizer")
        self.replica = replica

    def step(self, step: int, defer: bool = False, grad_scale: float = 1.0) -> Update:
        """Apply update ``step`` to the learner (grads are in ``.grad``) and return the payload.
        ``defer``: the method may leave its own decode + step to ``Update.replay``. ``grad_scale``:
        the factor clipping multiplied the gradients by (1.0: none), for side work done before it."""
        raise NotImplementedError

    def backward_done(self) -> None:
        """Called after ``loss.backward()``, before clipping scales ``.grad`` in place: side work
        that reads the gradients as backward produces them finishes here (hilo with Spar's
        ``backward_grams``: harness.onpolicy.overlap). Nothing for the other methods."""

    def warm_up(self) -> None:
        """Run this method's step (and its deferred replay) once on a deep copy of this side,
        with random gradients: the first call of each code path pays one-off costs (LAPACK and
        allocator initialisation; Spar's first encode measured 69-117 ms) that would otherwise land
        in update 0's timed window. The replica,
        the optimizer state and any compressor state (error feedback, warm starts) are untouched:
        the copy is thrown away. Called once before the loop, outside every window."""
        sandbox = copy.deepcopy(self)
        for n, g in _random_grads(sandbox.replica).items():
            sandbox.replica.params[n].grad = g
        update = sandbox.step(0, defer=True)
        if update.replay is not None:
            update.replay()

    def worker_view(self) -> dict[str, Tensor] | None:
        """The adapter the workers hold now, or None when it is bit-identical to the learner's."""
        return None

    def worker_params(self) -> dict[str, Tensor]:
        """The adapter the workers hold now, always as tensors (a copy of the learner's own where
        they are bit-identical): what ``policy_kl`` measures against."""
        view = self.worker_view()
        if view is not None:
            return view
        return {n: p.detach().clone() for n, p in self.replica.params.items()}

    def expected_checksum(self) -> str:
        """Checksum a worker in sync must report after applying the latest payload: by default
        of the adapter the workers hold (``worker_view``, else the learner's own)."""
        view = self.worker_view()
        return checksum(view if view is not None else self.replica.params)

    def resync_payload(self) -> bytes:
        """Full state that puts a worker back in sync: by default the adapter the workers hold,
        without optimizer state (methods whose workers replay steps override this)."""
        view = self.worker_view()
        return pack_state(view if view is not None else self.replica.params, None)

    def _optimizer_step(self) -> float:
        t0 = _timer()
        self.replica.optimizer.step()
        self.replica.optimizer.zero_grad(set_to_none=True)
        return _timer() - t0


class FullSyncLearner(LearnerSync):
    method = "full_sync"

    def __init__(self, replica: Replica, dtype: str = "bf16"):
        super().__init__(replica)
        self.dtype = wire_dtype(dtype)
        self.shipped = False      # before the first payload workers hold the shared fp32 init

    def step(self, step: int, defer: bool = False, grad_scale: float = 1.0) -> Update:
        step_s = self._optimizer_step()
        t0 = _timer()
        payload = pack_flat(self.replica.tensors(), self.dtype)
        self.shipped = True
        return Update(payload, step_s, _timer() - t0)

    def worker_view(self) -> dict[str, Tensor] | None:
        if self.dtype == torch.float32 or not self.shipped:
            return None
        return {n: p.detach().to(self.dtype).to(torch.float32) for n, p in self.replica.params.items()}


class DeltaLearner(LearnerSync):
    method = "delta"

    def __init__(self, replica: Replica, compressor, error_feedback: bool = True):
        super().__init__(replica)
        self.compressor = compressor
        self.error_feedback = error_feedback
        # the workers' params (exact: updated with the same decoded bytes they apply)
        self.view = {n: p.detach().clone() for n, p in replica.params.items()}
        self._prev = None if error_feedback else {n: p.detach().clone() for n, p in replica.params.items()}

    def step(self, step: int, defer: bool = False, grad_scale: float = 1.0) -> Update:
        step_s = self._optimizer_step()
        t0 = _timer()
        base = self.view if self.error_feedback else self._prev
        delta = {n: p.detach() - base[n] for n, p in self.replica.params.items()}
        data, info = _encode(self.compressor, delta, step)
        decoded = _decode(self.compressor, data)
        for n, d in decoded.items():
            self.view[n].add_(d)
        if self._prev is not None:
            self._prev = {n: p.detach().clone() for n, p in self.replica.params.items()}
        return Update(data, step_s, _timer() - t0, info)

    def worker_view(self) -> dict[str, Tensor] | None:
        return self.view


class HiLoLearner(LearnerSync):
    method = "hilo"

    def __init__(self, replica: Replica, compressor, error_feedback: bool = True):
        super().__init__(replica)
        from harness.compress import ErrorFeedback

        self.compressor = ErrorFeedback(compressor) if error_feedback else compressor
        self.backward = None          # Spar's Gram matrices during backward (compressor.options.backward_grams)
        if getattr(compressor, "backward_grams", False):
            from harness.onpolicy.overlap import BackwardGrams

            self.backward = BackwardGrams(replica.params, lambda: self.residual)

    def backward_done(self) -> None:
        if self.backward is not None:
            self.backward.wait()

    def step(self, step: int, defer: bool = False, grad_scale: float = 1.0) -> Update:
        """Encode the gradient, decode it and step. With ``defer`` the decode + step is left to
        ``Update.replay`` (run it after the payload is on the wire; the state is unchanged
        until then)."""
        t0 = _timer()
        grams = self.backward.grams(grad_scale) if self.backward is not None else None
        if grams is not None:
            self.compressor.provide_grams(grams)
        if getattr(self.compressor, "allocation", None) == "preconditioned":
            from harness.optim import second_moments   # Spar allocating by the replicated Adam state

            self.compressor.provide_preconditioner(*second_moments(self.replica.optimizer, self.replica.params))
        grads = {}
        for n, p in self.replica.params.items():
            if p.grad is None:
                raise SyncError(f"hilo: parameter {n} has no gradient; call loss.backward() first")
            grads[n] = p.grad.detach()
        deferred = getattr(self.compressor, "encode_deferred", None)
        if deferred is not None:
            payload, finish = deferred(grads, step=step)
        else:
            payload, finish = self.compressor.encode(grads, step=step), None
        data = payload.to_bytes()
        info = payload.info if payload.info is not None else {}
        encode_s = _timer() - t0

        def replay() -> tuple[float, float]:
            # ErrorFeedback decodes the payload's bytes (what the workers get) to form its residual
            t1 = _timer()
            g_hat = finish() if finish is not None else _decode(self.compressor, data)
            g_hat = {n: t.to(torch.float32) for n, t in g_hat.items()}
            decode_s = _timer() - t1
            _set_grads(self.replica, g_hat)
            return decode_s, self._optimizer_step()
        if defer:
            return Update(data, 0.0, encode_s, info, replay)
        decode_s, step_s = replay()
        return Update(data, step_s, encode_s + decode_s, info)

    @property
    def residual(self) -> dict[str, Tensor]:
        """The error-feedback residual per tensor (empty without error feedback)."""
        return getattr(self.compressor, "residual", {})

    def expected_checksum(self) -> str:
        return self.replica.checksum()

    def resync_payload(self) -> bytes:
        return pack_state(self.replica.params, self.replica.optimizer)


def _random_grads(replica: Replica) -> dict[str, Tensor]:
    """Seeded random gradients shaped like the replica's tensors: warm-up input."""
    g = torch.Generator().manual_seed(0)
    return {n: torch.randn(p.shape, generator=g).mul_(1e-3).to(p.device) for n, p in replica.params.items()}


def _set_grads(replica: Replica, grads: dict[str, Tensor]) -> None:
    missing = set(replica.params) - set(grads)
    if missing:
        raise SyncError(f"payload lacks {len(missing)} adapter tensors, e.g. {sorted(missing)[0]}")
    for n, p in replica.params.items():
        p.grad = grads[n].to(device=p.device, dtype=p.dtype).reshape(p.shape).contiguous()


# --------------------------------------------------------------------------- worker side
class WorkerSync:
    """Worker side of a method: applies payloads to the worker's replica."""

    def __init__(self, replica: Replica):
        self.replica = replica

    def apply(self, payload: bytes, step: int) -> None:
        raise NotImplementedError

    def warm_payload(self) -> bytes | None:
        """A payload of this method's format from random gradients, for :meth:`warm_up`: by default
        a copy of its compressor's encoding of them (methods with a compressor); None: no warm-up."""
        compressor = getattr(self, "compressor", None)
        if compressor is None:
            return None
        return _encode(copy.deepcopy(compressor), _random_grads(self.replica), 0)[0]

    def warm_up(self) -> None:
        """Apply a :meth:`warm_payload` once to a deep copy of this side (see LearnerSync.warm_up):
        the replica and its optimizer state are untouched."""
        payload = self.warm_payload()
        if payload is not None:
            copy.deepcopy(self).apply(payload, 0)

    def checksum(self) -> str:
        return self.replica.checksum()

    def load_resync(self, data: bytes) -> None:
        load_state(data, self.replica)


class FullSyncWorker(WorkerSync):
    def warm_payload(self) -> bytes | None:
        return pack_flat(self.replica.tensors(), torch.bfloat16)

    def apply(self, payload: bytes, step: int) -> None:
        tensors = unpack_flat(payload, self.replica.tensors())
        with torch.no_grad():
            for p, t in zip(self.replica.tensors(), tensors):
                p.copy_(t)


class DeltaWorker(WorkerSync):
    def __init__(self, replica: Replica, compressor):
        super().__init__(replica)
        self.compressor = compressor

    def apply(self, payload: bytes, step: int) -> None:
        decoded = _decode(self.compressor, payload)
        with torch.no_grad():
            for n, p in self.replica.params.items():
                if n in decoded:
                    p.add_(decoded[n].to(device=p.device).reshape(p.shape))


class HiLoWorker(WorkerSync):
    def __init__(self, replica: Replica, compressor):
        super().__init__(replica)
        if replica.optimizer is None:
            raise SyncError("hilo: a worker's replica needs its replicated optimizer")
        self.compressor = compressor

    def apply(self, payload: bytes, step: int) -> None:
        _set_grads(self.replica, _decode(self.compressor, payload))
        self.replica.optimizer.step()
        self.replica.optimizer.zero_grad(set_to_none=True)


# the registry entries of this module (harness.onpolicy.methods; the method YAMLs name this module)
_PLAIN = SyncMethod(learner=lambda r, o: FullSyncLearner(r, o.sync_dtype), worker=lambda r, o: FullSyncWorker(r))
SYNCS = {
    "full_sync": _PLAIN,
    "lowrank": _PLAIN,                      # full sync of a lower-rank adapter (method.rank)
    "delta": SyncMethod(learner=lambda r, o: DeltaLearner(r, o.compressor, o.error_feedback),
                        worker=lambda r, o: DeltaWorker(r, o.compressor), uses_compressor=True),
    "hilo": SyncMethod(learner=lambda r, o: HiLoLearner(r, o.compressor, o.error_feedback),
                       worker=lambda r, o: HiLoWorker(r, o.compressor), uses_compressor=True, worker_optimizer=True),
}

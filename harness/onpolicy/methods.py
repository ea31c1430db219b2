"""The registry of on-policy sync methods: a method's name -> its learner and worker sides.

A new method is one module with its LearnerSync/WorkerSync pair (harness.onpolicy.sync holds
the base classes and the built-in methods), its name in ``sync.METHODS``, one branch below
and one YAML file under harness/conf/method/ (docs/interfaces.md shows a worked example).
Kept apart from sync.py so that a method module may import the base classes without an
import cycle.
"""
from __future__ import annotations

from typing import Any, Callable

from harness.onpolicy.patch import PatchLearner, PatchWorker
from harness.onpolicy.state import Replica, SyncError
from harness.onpolicy.sync import (METHODS, DeltaLearner, DeltaWorker, FullSyncLearner, FullSyncWorker,
                                   HiLoLearner, HiLoWorker, LearnerSync, WorkerSync)


def worker_needs_optimizer(method: str) -> bool:
    """Whether the method's workers replay optimizer steps (and so hold optimizer state)."""
    return method == "hilo"


def build(method: str, side: str, replica: Replica, *, sync_dtype: str = "bf16",
          compressor_factory: Callable[[], Any] | None = None,
          error_feedback: bool = True, codec: str = "zstd", codec_level: int = 3) -> LearnerSync | WorkerSync:
    """The ``side`` ("learner" | "worker") of ``method``. ``compressor_factory()`` builds a
    fresh compressor (delta, hilo); the learner's and every worker's must be built alike.
    ``codec`` / ``codec_level``: the byte codec of ``patch`` (harness.onpolicy.codec)."""
    if method not in METHODS:
        raise SyncError(f"method.name: {method!r} is not an on-policy method; use one of {', '.join(METHODS)}")
    if side not in ("learner", "worker"):
        raise SyncError(f"side: {side!r} is not learner or worker")
    if method in ("full_sync", "lowrank"):
        return FullSyncLearner(replica, sync_dtype) if side == "learner" else FullSyncWorker(replica)
    if method == "patch":
        return PatchLearner(replica, codec, codec_level) if side == "learner" else PatchWorker(replica)
    if compressor_factory is None:
        raise SyncError(f"method {method}: needs a compressor")
    comp = compressor_factory()
    if method == "delta":
        return DeltaLearner(replica, comp, error_feedback) if side == "learner" else DeltaWorker(replica, comp)
    return HiLoLearner(replica, comp, error_feedback) if side == "learner" else HiLoWorker(replica, comp)

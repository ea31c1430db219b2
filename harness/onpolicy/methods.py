"""The registry of on-policy sync methods: a method's name -> its learner and worker sides.

A method is declared where its classes live, in a module-level ``SYNCS`` dict of
``SyncMethod`` (harness.onpolicy.sync declares full_sync, lowrank, delta and hilo;
harness.onpolicy.patch declares patch), and its config file names that module:

    # harness/conf/method/NAME.yaml
    defaults: [method_schema, _self_]
    name: NAME
    kind: onpolicy
    sync: harness.onpolicy.NAME_MODULE      # the module whose SYNCS holds NAME

So a new method is one module and one YAML file; this file, the planner, the roles and the
row keys need no edit (docs/interfaces.md has a worked example). The known methods are the
method configs of kind ``onpolicy``; the planner imports the module and checks the name
before anything starts.
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any, Callable

from harness.onpolicy.state import Replica, SyncError


@dataclass(frozen=True)
class SyncOptions:
    """What a side may need beyond the replica: the wire dtype of plain sync, a freshly built
    compressor (methods with ``uses_compressor``), error feedback, the byte codec of patch."""
    sync_dtype: str = "bf16"
    compressor: Any = None
    error_feedback: bool = True
    codec: str = "zstd"
    codec_level: int = 3


@dataclass(frozen=True)
class SyncMethod:
    """One on-policy sync method: ``learner(replica, options)`` / ``worker(replica, options)``
    build its two sides; ``uses_compressor``: it ships compressor-coded tensors (compressor.*
    applies, and every side gets its own freshly built compressor); ``worker_optimizer``: its
    workers replay optimizer steps, so they hold optimizer state too; ``trains_like``: the method
    whose training trajectory this one's is, bit for bit (the workers hold the same policy), so
    one learning-rate tuning entry serves both (harness.tune)."""
    learner: Callable[[Replica, SyncOptions], Any]
    worker: Callable[[Replica, SyncOptions], Any]
    uses_compressor: bool = False
    worker_optimizer: bool = False
    trains_like: str | None = None


@functools.lru_cache(maxsize=None)
def configured() -> dict[str, str]:
    """name -> module of every method config of kind ``onpolicy`` (harness/conf/method/*.yaml)."""
    from omegaconf import OmegaConf

    from harness.paths import project_root

    found = {}
    for path in sorted((project_root() / "harness" / "conf" / "method").glob("*.yaml")):
        cfg = OmegaConf.load(path)
        if cfg.get("kind") == "onpolicy":
            found[str(cfg.get("name", path.stem))] = str(cfg.get("sync") or "")
    return found


def names() -> tuple[str, ...]:
    return tuple(configured())


def module_of(method: str, module: str | None = None) -> str:
    """The module that declares ``method``: ``module`` when given, else the one its config names ("" if none)."""
    return module or configured().get(method, "")


def lookup(method: str, module: str | None = None) -> SyncMethod:
    """The SyncMethod ``method`` (declared in ``module``'s SYNCS; default: the module its config names)."""
    module = module_of(method, module)
    if not module:
        raise SyncError(f"method.name: {method!r} is not an on-policy method; use one of {', '.join(names())}")
    try:
        syncs = importlib.import_module(module).SYNCS
    except (ImportError, AttributeError) as err:
        raise SyncError(f"method.sync: {module!r} is not a module with SYNCS ({err})") from None
    if method not in syncs:
        raise SyncError(f"method.sync: {module} declares {', '.join(syncs)}, not {method!r}")
    return syncs[method]


def worker_needs_optimizer(method: str, module: str | None = None) -> bool:
    """Whether the method's workers replay optimizer steps (and so hold optimizer state)."""
    return lookup(method, module).worker_optimizer


def build(method: str, side: str, replica: Replica, *, module: str | None = None, sync_dtype: str = "bf16",
          compressor_factory: Callable[[], Any] | None = None,
          error_feedback: bool = True, codec: str = "zstd", codec_level: int = 3) -> Any:
    """The ``side`` ("learner" | "worker") of ``method``. ``compressor_factory()`` builds a
    fresh compressor (methods with ``uses_compressor``); the learner's and every worker's
    must be built alike. ``codec`` / ``codec_level``: the byte codec of ``patch``."""
    if side not in ("learner", "worker"):
        raise SyncError(f"side: {side!r} is not learner or worker")
    found = lookup(method, module)
    if found.uses_compressor and compressor_factory is None:
        raise SyncError(f"method {method}: needs a compressor")
    options = SyncOptions(sync_dtype=sync_dtype, error_feedback=error_feedback, codec=codec, codec_level=codec_level,
                          compressor=compressor_factory() if found.uses_compressor else None)
    return (found.learner if side == "learner" else found.worker)(replica, options)

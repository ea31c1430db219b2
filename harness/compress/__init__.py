"""Gradient compressors: one protocol, built by name, exact byte accounting on the wire.

    from harness.compress import build
    comp = build("spar", budget=0.016, error_feedback=True)   # 1.6% of the bf16 bytes
    payload = comp.encode({name: grad, ...}, step=t)           # payload.nbytes <= budget, header included
    data = payload.to_bytes()                                  # what the transport sends
    grads = comp.decode(Payload.from_bytes(data))              # float32, original shapes

Names: identity, spar, powersgd, topk, randk, quant, demo (the `compressor` config group's names;
``NAMES`` is what discovery found in this package, ``WIRE_IDS`` each one's payload id).
Options common to all: budget (fraction of bf16 bytes, 0 < b <= 1), budget_bytes (absolute,
wins), dtype (wire dtype), seed; error_feedback=True wraps the result in ErrorFeedback.
Compressor-specific options (the config's `compressor.options`):
  spar:     allocator greedy|exact, allocation energy|normalized|preconditioned, svd sketch|gram|svd,
            sketch_columns, sketch_power,
            backward_grams (hilo: Gram matrices computed during backward, harness.onpolicy.overlap)
  powersgd: rank (int: fixed instead of fitted to the budget), warm_start
  randk:    unbiased
  quant:    bits 8|4|2|1 (null: fit), block_size (0: per tensor), stochastic
See docs/compress.md for the measured comparison.
"""
from __future__ import annotations

import inspect
from typing import Any, Mapping

import torch

from harness.compress.base import BaseCompressor, Compressor, CompressorError
from harness.compress.feedback import ErrorFeedback
from harness.compress.payload import COMPRESSOR_IDS, Payload, PayloadError

def _discover() -> dict[str, type[BaseCompressor]]:
    """Every named BaseCompressor subclass defined in this package's modules.

    A new compressor is one new module here (a BaseCompressor subclass with a ``name`` and a
    ``wire_id``) plus one file conf/compressor/<name>.yaml; nothing else is edited
    (docs/interfaces.md). Defining the class registers its wire id (a taken id or name fails
    the import with one line naming both classes).
    """
    from harness.discovery import named_subclasses

    return named_subclasses(__name__, __path__, BaseCompressor)   # the package holds compressors and their parts only


REGISTRY: dict[str, type[BaseCompressor]] = _discover()
NAMES = tuple(sorted(REGISTRY))
WIRE_IDS: dict[str, int] = {name: COMPRESSOR_IDS[name] for name in NAMES}   # name -> the payload's compressor byte

__all__ = ["NAMES", "Compressor", "CompressorError", "ErrorFeedback", "Payload", "PayloadError", "build",
           "build_from_config", "decode"]


def build(name: str, *, error_feedback: bool = False, options: Mapping[str, Any] | None = None,
          **kwargs: Any) -> Compressor:
    """The compressor `name` with its options (flat kwargs and/or an `options` mapping).

    Raises CompressorError naming the key, the value and what is allowed for unknown names,
    unknown options and bad values.
    """
    if name not in REGISTRY:
        raise CompressorError(f"compressor.name: {name!r} is not a compressor; choose one of {', '.join(NAMES)}")
    cls = REGISTRY[name]
    merged = {**kwargs, **dict(options or {})}
    allowed = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    for key in merged:
        if key not in allowed:
            raise CompressorError(f"compressor.options: {key!r} is not an option of {name}; "
                                  f"allowed: {', '.join(allowed)}")
    comp = cls(**merged)
    return ErrorFeedback(comp) if error_feedback else comp


def build_from_config(cfg: Mapping[str, Any]) -> Compressor:
    """Build from the `compressor` config section (a dict or DictConfig of CompressorConfig)."""
    cfg = dict(cfg)
    options = dict(cfg.pop("options", None) or {})
    name = cfg.pop("name")
    return build(name, options=options, **cfg)


def decode(payload: Payload | bytes) -> dict[str, torch.Tensor]:
    """Decode any payload (or its bytes) with the compressor it names; decoding is stateless."""
    if not isinstance(payload, Payload):
        payload = Payload.from_bytes(payload)
    return REGISTRY[payload.compressor]._decode_static(payload)

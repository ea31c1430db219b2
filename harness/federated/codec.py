"""Federated messages as bytes: named tensors (safetensors) plus a small JSON header.

``encode(tensors, meta)`` -> bytes; ``decode(bytes)`` -> (tensors, meta). The payload is
exactly what goes on the wire (``len(data)`` is the recorded payload size): the tensors'
raw bytes (float32 unless given otherwise), safetensors' header (names, dtypes, shapes,
offsets: ~60 bytes per tensor with our short names), the JSON meta and a 4-byte CRC32
trailer (harness.wire.sealed), checked before anything is parsed. Tensor names are
short (``c/3``: the coefficients of target index 3) so the header stays small next to
the numbers; ``tensor_bytes`` counts the numbers alone (for exact element ratios).
"""
from __future__ import annotations

import json
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor

from harness.wire.sealed import seal, unseal

META_KEY = "nb"


class CodecError(ValueError):
    """A message that is not a federated payload (corrupt or truncated)."""


def encode(tensors: dict[str, Tensor], meta: dict[str, Any]) -> bytes:
    """Named tensors and a JSON-serialisable meta dict -> one byte string."""
    flat = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    return seal(st_save(flat, metadata={META_KEY: json.dumps(meta, sort_keys=True, separators=(",", ":"))}))


def decode(data: bytes) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Inverse of :func:`encode`; raises CodecError naming what is wrong."""
    data = unseal(data, "federated payload", CodecError)
    if len(data) < 8:
        raise CodecError(f"federated payload of {len(data)} bytes is too short")
    header_len = int.from_bytes(data[:8], "little")
    if header_len <= 0 or 8 + header_len > len(data):
        raise CodecError(f"federated payload header of {header_len} bytes does not fit in {len(data)} bytes")
    try:
        header = json.loads(data[8:8 + header_len])
        meta = json.loads(header.get("__metadata__", {}).get(META_KEY, "{}"))
        tensors = st_load(bytes(data))
    except (ValueError, KeyError, RuntimeError, SafetensorError) as err:
        raise CodecError(f"federated payload is corrupt: {err}") from err
    return tensors, meta


def tensor_bytes(tensors: dict[str, Tensor]) -> int:
    """Bytes of the numbers alone (no names, shapes or meta)."""
    return sum(t.numel() * t.element_size() for t in tensors.values())

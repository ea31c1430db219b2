"""The one state checksum: SHA-256 over (label, dtype, shape, raw bytes) of tensors in order.

Used wherever two processes must prove they hold the same state (on-policy replicas with
their optimizer state, federated adapters). Bytes are hashed as stored (no conversion), so
bit-identical state is the only way to match; the caller fixes the order (insertion order
for a replica, name order for a federated adapter).
"""
from __future__ import annotations

import hashlib
from typing import Iterable

import torch
from torch import Tensor


def raw_bytes(t: Tensor) -> memoryview:
    """The tensor's bytes as stored, on CPU, contiguous (empty for an empty tensor)."""
    t = t.detach().reshape(-1).contiguous().cpu()
    return memoryview(t.view(torch.uint8).numpy())


def state_checksum(items: Iterable[tuple[str, Tensor]]) -> str:
    """Hex SHA-256 of ``(label, tensor)`` pairs in the given order: label|dtype|shape| then the bytes."""
    h = hashlib.sha256()
    for label, t in items:
        h.update(f"{label}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(raw_bytes(t))
    return h.hexdigest()

"""The one seed derivation: every random stream of a run is seeded by ``derive(*parts)``.

A run has one root seed (``seed``, one per variant x seed of a scenario). Every stream drawn
from it (prompts per split and step, rollouts per step and shard, a client's batches, the
federated split and pool, a compressor's projections per step and tensor) is seeded by a
hash of the root seed and the stream's name, never by arithmetic on the seed (``seed + k``
makes seed 0's client 1 the same stream as seed 1's client 0). The hash is BLAKE2b over the
parts' ``str`` joined by ``|``: stable across processes, machines and Python versions.
"""
from __future__ import annotations

import hashlib
from typing import Any


def derive(*parts: Any) -> int:
    """A 63-bit seed, a pure function of ``parts`` (their ``str``, in order)."""
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)

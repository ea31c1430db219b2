"""A CRC32 trailer for whole-state wire formats (full sync, resync, federated messages).

``seal(body)`` appends the CRC32 of ``body`` (4 bytes, little-endian); ``unseal(data, what,
error)`` checks and strips it, raising ``error`` with a one-line message naming ``what``. A
receiver unseals before it reads anything, so a damaged message is refused and nothing of it
is applied. Compressed payloads (harness.compress.payload) end with the same trailer.
"""
from __future__ import annotations

import struct
import zlib

_CRC = struct.Struct("<I")
CRC_NBYTES = _CRC.size


def seal(body: bytes) -> bytes:
    """``body`` followed by its CRC32."""
    return bytes(body) + _CRC.pack(zlib.crc32(body))


def unseal(data: bytes, what: str, error: type[Exception] = ValueError) -> bytes:
    """The body of a sealed message; ``error`` when it is too short or its CRC32 does not match."""
    if len(data) < CRC_NBYTES:
        raise error(f"{what}: {len(data)} bytes is shorter than its {CRC_NBYTES}-byte CRC32 trailer")
    body = memoryview(data)[:-CRC_NBYTES]
    (want,) = _CRC.unpack_from(data, len(data) - CRC_NBYTES)
    got = zlib.crc32(body)
    if got != want:
        raise error(f"{what}: checksum mismatch (CRC32 {got:08x}, trailer says {want:08x}): corrupted or truncated")
    return bytes(body)

"""The wire format of every compressor: a versioned, self-describing, checksummed payload.

Layout (little-endian; every byte counts against the compressor's budget):

    preamble  32 bytes   magic b"NBCP", version u8, compressor id u8, flags u16,
                         step u64, seed u64, n_tensors u32, table_len u32
    table     table_len  zlib(JSON {"meta": {...}, "tensors": [[name, shape, dtype], ...]}):
                         the static part (tensor names, shapes, original dtypes and the
                         compressor's decode options); its size does not depend on ranks or k
    records   per tensor kind u8, param u32, n_sections u8, then n_sections x u32 byte lengths
                         (kind: how the tensor was shipped; param: its rank / k / bits)
    data      sum(lens)  the sections, in record order
    trailer   4 bytes    CRC32 of everything before it

The header (everything but the data) is known exactly before any data is produced
(`header_nbytes`), so a compressor can fit its rank, k or bits to a byte budget that
includes the header. `Payload.from_bytes` validates magic, version, lengths and the CRC and
raises `PayloadError` on anything corrupt or truncated; it never returns a partial payload.
"""
from __future__ import annotations

import json
import struct
import sys
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from harness.wire.sealed import CRC_NBYTES, seal, unseal

if sys.byteorder != "little":  # pragma: no cover - every supported host is little-endian
    raise ImportError("harness.compress writes little-endian tensors and needs a little-endian host")

MAGIC = b"NBCP"
VERSION = 1
_PREAMBLE = struct.Struct("<4sBBHQQII")
_RECORD = struct.Struct("<BIB")
_LEN = struct.Struct("<I")
PREAMBLE_NBYTES = _PREAMBLE.size  # 32

# The compressor id byte of the preamble: each compressor class declares its own (``wire_id`` on
# the class, harness/compress/base.py) and registers it here when the class is defined. An id once
# shipped is never reused or renumbered (tests/compress/test_wire_ids.py pins the shipped ones).
COMPRESSOR_IDS: dict[str, int] = {}          # compressor name -> wire id
COMPRESSOR_NAMES: dict[int, str] = {}        # wire id -> compressor name
_OWNERS: dict[str, str] = {}                 # compressor name -> "module.Class" that declared it

# Wire dtypes by name: (torch dtype, bytes per element).
DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.int8,
    "uint8": torch.uint8, "int16": torch.int16, "uint16": torch.uint16, "int32": torch.int32,
    "int64": torch.int64, "fp64": torch.float64,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class PayloadError(ValueError):
    """A payload that is corrupt, truncated, or made by another compressor/version."""


def register_wire_id(name: str, wire_id: int, owner: str) -> None:
    """Give compressor ``name`` the preamble id ``wire_id`` (0..255), declared by class ``owner``
    ("module.Class"). Raises ValueError when another class already holds the name or the id (a
    class defined again under the same qualified name, e.g. a reloaded module, replaces itself)."""
    if isinstance(wire_id, bool) or not isinstance(wire_id, int) or not 0 <= wire_id <= 255:
        raise ValueError(f"{owner}.wire_id: {wire_id!r} is not allowed; declare an integer 0..255 that no other "
                         f"compressor uses (taken: {', '.join(f'{n}={i}' for n, i in sorted(COMPRESSOR_IDS.items()))})")
    holder = COMPRESSOR_NAMES.get(wire_id)
    if holder is not None and holder != name:
        raise ValueError(f"{owner}.wire_id: {wire_id} is taken by compressor {holder!r} ({_OWNERS[holder]}); "
                         f"choose a free id (taken: {', '.join(str(i) for i in sorted(COMPRESSOR_NAMES))})")
    if name in _OWNERS and _OWNERS[name] != owner:
        raise ValueError(f"{owner}.name: {name!r} is taken by {_OWNERS[name]}; compressor names are unique")
    old = COMPRESSOR_IDS.get(name)
    if old is not None and old != wire_id:
        del COMPRESSOR_NAMES[old]
    COMPRESSOR_IDS[name], COMPRESSOR_NAMES[wire_id], _OWNERS[name] = wire_id, name, owner


def dtype_name(dtype: torch.dtype) -> str:
    """The wire name of a torch dtype ('fp32', 'bf16', ...)."""
    try:
        return DTYPE_NAMES[dtype]
    except KeyError:
        raise ValueError(f"dtype {dtype} has no wire name; supported: {', '.join(DTYPES)}") from None


def tensor_to_bytes(t: torch.Tensor, dtype: str) -> bytes:
    """Raw little-endian bytes of `t` cast to the wire dtype `dtype` (round-to-nearest)."""
    t = t.detach().to(device="cpu", dtype=DTYPES[dtype]).contiguous().reshape(-1)
    if t.numel() == 0:
        return b""
    return t.view(torch.uint8).numpy().tobytes()


def bytes_to_tensor(data: bytes | memoryview, dtype: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """Inverse of `tensor_to_bytes`: a new CPU tensor of the wire dtype (not upcast)."""
    torch_dtype = DTYPES[dtype]
    size = torch.empty((), dtype=torch_dtype).element_size()
    if len(data) % size:
        raise PayloadError(f"section of {len(data)} bytes is not a whole number of {dtype} elements")
    if len(data) == 0:
        flat = torch.empty(0, dtype=torch_dtype)
    else:
        flat = torch.from_numpy(np.frombuffer(data, dtype=np.uint8).copy()).view(torch_dtype)
    return flat.reshape(shape) if shape is not None else flat


@dataclass(frozen=True)
class TensorEntry:
    """The static description of one tensor: its name, shape and original dtype name."""
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class Record:
    """How one tensor was shipped: `kind` and `param` are the compressor's (e.g. kind=factors,
    param=rank); `sections` are raw byte strings whose dtypes the compressor knows."""
    kind: int
    param: int
    sections: list[bytes]


def table_bytes(entries: list[TensorEntry], meta: dict[str, Any]) -> bytes:
    """The compressed static table: deterministic for equal entries and meta."""
    doc = {"meta": meta, "tensors": [[e.name, list(e.shape), e.dtype] for e in entries]}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return zlib.compress(text.encode("utf-8"), 9)


def header_nbytes(table_len: int, sections_per_tensor: list[int]) -> int:
    """Exact bytes of everything but the data, for a table of `table_len` bytes and these
    section counts (one per tensor, in order)."""
    return (PREAMBLE_NBYTES + table_len + CRC_NBYTES
            + sum(_RECORD.size + _LEN.size * n for n in sections_per_tensor))


@dataclass
class Payload:
    """What a compressor sends: `to_bytes()` goes on the wire, `nbytes == len(to_bytes())`.

    `info` is encoder-side diagnostics (used_bytes, budget_bytes, ranks, ...); it is not
    sent. After `from_bytes` it holds what the wire says (used_bytes, params per tensor).
    """
    compressor: str
    step: int
    seed: int
    meta: dict[str, Any]
    entries: list[TensorEntry]
    records: list[Record]
    info: dict[str, Any] = field(default_factory=dict)
    _table: bytes | None = field(default=None, repr=False, compare=False)
    _bytes: bytes | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.entries) != len(self.records):
            raise ValueError(f"{len(self.entries)} tensor entries but {len(self.records)} records")
        if self.compressor not in COMPRESSOR_IDS:
            raise ValueError(f"compressor {self.compressor!r} has no wire id")

    @property
    def table(self) -> bytes:
        if self._table is None:
            self._table = table_bytes(self.entries, self.meta)
        return self._table

    @property
    def header_nbytes(self) -> int:
        return header_nbytes(len(self.table), [len(r.sections) for r in self.records])

    @property
    def nbytes(self) -> int:
        """Bytes on the wire, header and checksum included."""
        return self.header_nbytes + sum(len(s) for r in self.records for s in r.sections)

    def to_bytes(self) -> bytes:
        if self._bytes is None:
            parts = [_PREAMBLE.pack(MAGIC, VERSION, COMPRESSOR_IDS[self.compressor], 0, self.step,
                                    self.seed, len(self.entries), len(self.table)), self.table]
            for r in self.records:
                parts.append(_RECORD.pack(r.kind, r.param, len(r.sections)))
                parts.extend(_LEN.pack(len(s)) for s in r.sections)
            for r in self.records:
                parts.extend(r.sections)
            body = b"".join(parts)
            self._bytes = seal(body)
        return self._bytes

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> "Payload":
        """Parse and validate; raises PayloadError on any corruption or truncation."""
        data = bytes(data)
        if len(data) < PREAMBLE_NBYTES + CRC_NBYTES:
            raise PayloadError(f"payload truncated: {len(data)} bytes, a header alone is "
                               f"{PREAMBLE_NBYTES + CRC_NBYTES}")
        magic, version, cid, _flags, step, seed, n, table_len = _PREAMBLE.unpack_from(data, 0)
        if magic != MAGIC:
            raise PayloadError(f"not a narrowband payload: magic {magic!r}, expected {MAGIC!r}")
        if version != VERSION:
            raise PayloadError(f"payload format version {version}; this build reads version {VERSION}")
        unseal(data, f"payload ({len(data)} bytes)", PayloadError)
        if cid not in COMPRESSOR_NAMES:
            raise PayloadError(f"unknown compressor id {cid}")
        pos = PREAMBLE_NBYTES
        end = len(data) - CRC_NBYTES
        try:
            table = data[pos:pos + table_len]
            doc = json.loads(zlib.decompress(table).decode("utf-8"))
            pos += table_len
            entries = [TensorEntry(str(name), tuple(int(d) for d in shape), str(dt))
                       for name, shape, dt in doc["tensors"]]
            if len(entries) != n:
                raise PayloadError(f"table lists {len(entries)} tensors, preamble says {n}")
            heads = []
            for _ in range(n):
                kind, param, nsec = _RECORD.unpack_from(data, pos)
                pos += _RECORD.size
                lens = [_LEN.unpack_from(data, pos + i * _LEN.size)[0] for i in range(nsec)]
                pos += nsec * _LEN.size
                heads.append((kind, param, lens))
        except PayloadError:
            raise
        except (struct.error, zlib.error, ValueError, KeyError, TypeError) as err:
            raise PayloadError(f"payload header unreadable: {err}") from None
        if pos > end or pos + sum(sum(h[2]) for h in heads) != end:
            raise PayloadError(f"payload sections do not add up: header ends at {pos}, data should end "
                               f"at {end}")
        records = []
        for kind, param, lens in heads:
            sections = []
            for ln in lens:
                sections.append(data[pos:pos + ln])
                pos += ln
            records.append(Record(kind, param, sections))
        payload = cls(COMPRESSOR_NAMES[cid], step, seed, doc["meta"], entries, records,
                      info={"used_bytes": len(data)}, _table=table, _bytes=data)
        return payload

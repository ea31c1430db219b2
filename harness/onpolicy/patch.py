"""``patch``: lossless sparse bf16 weight patches (PULSE-style, arXiv 2602.03839).

After each optimizer step the learner rounds its fp32 adapter to bf16 and ships only the
entries whose bf16 bits differ from what the workers hold: their positions and their new bf16
values (values, never deltas: nothing accumulates, no error feedback, no drift). A worker
writes those values into its adapter, so it holds exactly the learner's adapter rounded to
bf16, which is what ``full_sync`` with ``method.sync_dtype=bf16`` gives it: same state, same
checksum (SHA-256 of the bf16 view as fp32, as full sync's), same rollouts, same trajectory
bit for bit. Fewer bytes wherever most bf16 entries did not move (docs/onpolicy.md measures
how many do, for LoRA: ``python -m harness.commands.sparsity``).

Wire format (little-endian):

    header   36 bytes: magic b"NBPA", version 1, codec code (0 none, 1 zstd), codec level
             (int8), pad, tensors (uint32), total elements (uint64), raw and coded lengths of the
             index section and of the value section (4 x uint32)
    indices  codec(per tensor, in adapter order: count (uint32), width (uint8: 1, 2 or 4 bytes),
             then ``count`` gaps, gap_i = idx_i - idx_{i-1} - 1 with idx_{-1} = -1, each in
             ``width`` bytes: the smallest unsigned width that holds the tensor's largest gap)
    values   codec(the changed entries' bf16 bits, 2 bytes each, same order)
    CRC32    of everything before it (harness.wire.sealed)

Indices and values are coded as two separate frames so that the payload's split (index bytes
vs value bytes, each before and after the codec) is measured, not estimated. A receiver checks
the CRC32, decodes both frames, and checks every count and index against its own tensors
before it writes anything: a damaged patch is a SyncError and the replica is untouched.

The first payload is computed against the bf16 view of the shared fp32 initialisation; before
applying it a worker rounds its (identical, verified) initial adapter to bf16 once, so entries
that did not move in bf16 need not be shipped even then.
"""
from __future__ import annotations

import struct
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from harness.onpolicy import codec as codecs
from harness.onpolicy.methods import SyncMethod
from harness.onpolicy.state import Replica, SyncError, load_state
from harness.onpolicy.sync import LearnerSync, Update, WorkerSync
from harness.wire.sealed import CRC_NBYTES, seal, unseal

_MAGIC = b"NBPA"
_HEADER = struct.Struct("<4sBBbxIQIIII")
_COUNT = struct.Struct("<IB")
_WIDTHS = {1: np.uint8, 2: np.uint16, 4: np.uint32}
_NAMES = {v: k for k, v in codecs.CODEC_CODES.items()}
PATCH_OVERHEAD = _HEADER.size + CRC_NBYTES      # bytes of a patch besides its two frames


@dataclass
class PatchStats:
    """What one patch is made of (bytes unless noted)."""
    changed: int                  # entries shipped
    entries: int                  # entries of the whole adapter
    raw_index_bytes: int          # index section before the codec (counts, widths, gaps)
    raw_value_bytes: int          # value section before the codec (2 bytes per entry)
    index_bytes: int              # index section as shipped
    value_bytes: int              # value section as shipped
    nbytes: int                   # the whole payload: header + both sections + CRC32

    @property
    def raw_bytes(self) -> int:
        """The payload the same patch would have without the codec."""
        return PATCH_OVERHEAD + self.raw_index_bytes + self.raw_value_bytes

    def columns(self) -> dict[str, float]:
        """Per-update row columns (``patch_*``)."""
        return {"patch_changed": self.changed,
                "patch_changed_frac": self.changed / self.entries if self.entries else 0.0,
                "patch_index_bytes": self.index_bytes, "patch_value_bytes": self.value_bytes,
                "patch_raw_index_bytes": self.raw_index_bytes, "patch_raw_value_bytes": self.raw_value_bytes,
                "patch_raw_bytes": self.raw_bytes, "patch_codec_saved_bytes": self.raw_bytes - self.nbytes}


def bf16_bits(t: Tensor) -> Tensor:
    """The bf16 rounding of ``t`` (flattened, on the CPU) as its raw 16-bit patterns (int16)."""
    return t.detach().reshape(-1).to(torch.bfloat16).cpu().view(torch.int16)


def encode(changes: list[tuple[Tensor, Tensor]], entries: int, codec: str = "zstd",
           level: int = 3) -> tuple[bytes, PatchStats]:
    """A patch from ``changes``: per tensor (sorted int64 positions, int16 bf16 bits)."""
    index_parts, value_parts, changed = [], [], 0
    for idx, vals in changes:
        pos = idx.numpy()
        gaps = np.diff(pos, prepend=-1) - 1
        top = int(gaps.max()) if gaps.size else 0
        width = 1 if top < 1 << 8 else 2 if top < 1 << 16 else 4
        index_parts.append(_COUNT.pack(pos.size, width) + gaps.astype(_WIDTHS[width]).tobytes())
        value_parts.append(vals.numpy().tobytes())
        changed += pos.size
    raw_index, raw_value = b"".join(index_parts), b"".join(value_parts)
    index = codecs.compress(raw_index, codec, level)
    value = codecs.compress(raw_value, codec, level)
    header = _HEADER.pack(_MAGIC, 1, codecs.CODEC_CODES[codec], level if codec != "none" else 0,
                          len(changes), entries, len(raw_index), len(raw_value), len(index), len(value))
    data = seal(header + index + value)
    return data, PatchStats(changed, entries, len(raw_index), len(raw_value), len(index), len(value), len(data))


def decode(data: bytes, numels: list[int]) -> list[tuple[Tensor, Tensor]]:
    """Inverse of ``encode`` for tensors of ``numels`` entries: per tensor (int64 positions,
    int16 bf16 bits). Every check (CRC32, header, sizes, counts, positions) runs before
    anything is returned; any failure is a SyncError."""
    body = unseal(data, "patch payload", SyncError)
    if len(body) < _HEADER.size:
        raise SyncError(f"patch payload: {len(body)} bytes is shorter than its header")
    magic, version, code, _, tensors, entries, raw_i, raw_v, len_i, len_v = _HEADER.unpack_from(body)
    if magic != _MAGIC or version != 1 or code not in _NAMES:
        raise SyncError("patch payload: not a narrowband patch (bad header)")
    if tensors != len(numels) or entries != sum(numels):
        raise SyncError(f"patch payload: {tensors} tensors / {entries} entries, this replica has "
                        f"{len(numels)} / {sum(numels)} (different adapter rank or targets?)")
    if _HEADER.size + len_i + len_v != len(body) or raw_v % 2:
        raise SyncError("patch payload: section lengths do not add up (truncated or padded)")
    try:
        raw_index = codecs.decompress(body[_HEADER.size:_HEADER.size + len_i], _NAMES[code], raw_i)
        raw_value = codecs.decompress(body[_HEADER.size + len_i:], _NAMES[code], raw_v)
    except ValueError as err:
        raise SyncError(f"patch payload: cannot be decoded ({err})") from None
    values = torch.frombuffer(bytearray(raw_value), dtype=torch.int16) if raw_v else torch.empty(0, dtype=torch.int16)
    out, at, vat = [], 0, 0
    for n in numels:
        if at + _COUNT.size > len(raw_index):
            raise SyncError("patch payload: index section ends early")
        count, width = _COUNT.unpack_from(raw_index, at)
        at += _COUNT.size
        if width not in _WIDTHS or at + count * width > len(raw_index) or vat + count > values.numel():
            raise SyncError("patch payload: index section is malformed")
        gaps = np.frombuffer(raw_index, dtype=_WIDTHS[width], count=count, offset=at).astype(np.int64)
        pos = np.cumsum(gaps + 1) - 1
        if count and pos[-1] >= n:
            raise SyncError(f"patch payload: position {int(pos[-1])} is outside a tensor of {n} entries")
        out.append((torch.from_numpy(pos), values[vat:vat + count]))
        at += count * width
        vat += count
    if at != len(raw_index) or vat != values.numel():
        raise SyncError("patch payload: sections hold more than the tensors' changes")
    return out


# --------------------------------------------------------------------------- learner / worker
class PatchLearner(LearnerSync):
    """Learner side: steps on its true gradient, ships the entries whose bf16 view changed."""
    method = "patch"

    def __init__(self, replica: Replica, codec: str = "zstd", level: int = 3):
        super().__init__(replica)
        codecs.check(codec, level)
        self.codec, self.level = codec, level
        self.sent = {n: bf16_bits(p) for n, p in replica.params.items()}   # the workers' bf16 bits
        self.shipped = False      # before the first payload workers hold the shared fp32 init

    def step(self, step: int, defer: bool = False, grad_scale: float = 1.0) -> Update:
        step_s = self._optimizer_step()
        t0 = time.perf_counter()
        changes = []
        for n, p in self.replica.params.items():
            bits, sent = bf16_bits(p), self.sent[n]
            idx = torch.nonzero(bits != sent).view(-1)
            vals = bits[idx]
            sent[idx] = vals
            changes.append((idx, vals))
        data, stats = encode(changes, sum(t.numel() for t in self.sent.values()), self.codec, self.level)
        self.shipped = True
        return Update(data, step_s, time.perf_counter() - t0, columns=stats.columns())

    def worker_view(self) -> dict[str, Tensor] | None:
        if not self.shipped:
            return None
        return {n: self.sent[n].view(torch.bfloat16).to(torch.float32).view(p.shape).to(p.device)
                for n, p in self.replica.params.items()}


class PatchWorker(WorkerSync):
    """Worker side: writes the patch's bf16 values into its adapter (held as fp32)."""

    def __init__(self, replica: Replica):
        super().__init__(replica)
        self.rounded = False      # the initial fp32 adapter is rounded to bf16 before patch 0
        self.columns: dict[str, float] = {}

    def apply(self, payload: bytes, step: int) -> None:
        t0 = time.perf_counter()
        changes = decode(payload, [p.numel() for p in self.replica.params.values()])
        t1 = time.perf_counter()
        with torch.no_grad():
            for p, (idx, vals) in zip(self.replica.params.values(), changes):
                flat = p.data.view(-1)
                if not self.rounded:
                    flat.copy_(flat.to(torch.bfloat16).to(flat.dtype))
                flat[idx.to(flat.device)] = vals.view(torch.bfloat16).to(device=flat.device, dtype=flat.dtype)
        self.rounded = True
        self.columns = {"decode_s": t1 - t0, "scatter_s": time.perf_counter() - t1}

    def load_resync(self, data: bytes) -> None:
        load_state(data, self.replica)
        self.rounded = False      # an fp32 resync (before the first patch) is rounded again


# the registry entry of this module (harness.onpolicy.methods; harness/conf/method/patch.yaml names this module)
# lossless: the workers hold the learner's exact bf16 adapter, as bf16 full sync's do
SYNCS = {"patch": SyncMethod(learner=lambda r, o: PatchLearner(r, o.codec, o.codec_level),
                             worker=lambda r, o: PatchWorker(r), trains_like="full_sync")}

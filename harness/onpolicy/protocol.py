"""The on-policy loop's wire protocol and small helpers, shared by the learner (loop.py) and
the workers (loop.py, stale.py): framed messages, the verdict flag bytes, when verification
and evaluation are due, a background thread with a result."""
from __future__ import annotations

import json
import struct
import threading
import time
from typing import Any, Callable


_LEN = struct.Struct("<I")
_OK, _RESYNC = b"\x00", b"\x01"


def frame(meta: dict[str, Any], body: bytes = b"") -> bytes:
    """A small JSON header (timings, checksum) in front of a body; both count as payload bytes."""
    head = json.dumps(meta, separators=(",", ":")).encode()
    return _LEN.pack(len(head)) + head + body


def unframe(data: bytes) -> tuple[dict[str, Any], bytes]:
    (n,) = _LEN.unpack_from(data)
    return json.loads(data[_LEN.size:_LEN.size + n]), data[_LEN.size + n:]


def verify_due(step: int, every: int) -> bool:
    return every > 0 and (step + 1) % every == 0


def eval_due(step: int, every: int, steps: int, final: bool = True) -> bool:
    """Evaluate after update ``step``: every ``every`` updates (0: never between), and after the last when ``final``."""
    return (final and step == steps - 1) or (every > 0 and (step + 1) % every == 0)


def _now() -> float:
    return time.perf_counter()


def _delta(a, b) -> tuple[int, int]:
    """(tx, rx) bytes between two counter readings."""
    return b.tx_bytes - a.tx_bytes, b.rx_bytes - a.rx_bytes


class Background:
    """``fn()`` run in a daemon thread; ``result()`` waits for it (and re-raises its error)."""

    def __init__(self, fn: Callable[[], Any], name: str = "checksum"):
        self._out: list = []
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True, name=name)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._out.append((True, fn()))
        except BaseException as err:   # noqa: BLE001 - re-raised by result()
            self._out.append((False, err))

    def result(self) -> Any:
        self._thread.join()
        ok, value = self._out[0]
        if not ok:
            raise value
        return value


def apply_verdict(ch, s, tag: str) -> tuple[bool, int, int]:
    """Receive the learner's verdict; load the resync it carries, if any.
    (in sync, resync bytes, verdict bytes)."""
    verdict, _ = ch.scatter(None, tag)
    if verdict[:1] == _RESYNC:
        s.sync.load_resync(verdict[1:])
        return False, len(verdict), len(verdict)
    return True, 0, len(verdict)

"""Tidy rows and run metadata, written as the run goes so that a crash loses nothing.

Layout of one run (``<out_dir>/<scenario>/<run_id>/``, out_dir ``outputs/runs`` by default):

    run.json                 resolved config, commit, versions, kernel, backend, status
    rows/<role>-<seq>.parquet  append-only part files, one per flush, never rewritten

Each role process owns its own part files (no two writers share a file), and every file
is written to a temporary name and renamed, so a reader never sees half a file. One row is
one (run, role, step) observation; its key columns come first (KEY_COLUMNS).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

KEY_COLUMNS = ["run_id", "scenario", "variant", "method", "compressor", "task", "seed",
               "backend", "rate_mbit", "delay_ms", "rank", "budget_frac", "role", "step"]

EXTRA_KEYS = ("trace", "host", "device", "cpus", "oversubscribed")
# run keys present only when given: trace (the link traces' names); the role's placement (harness.placement):
# host, device (resolved: cpu | cuda:i), cpus (the CPU ids it may run on, "0,1"), oversubscribed (its run
# put more busy roles than cores on some host: timing includes waiting for a core)

STATUSES = ("running", "ok", "failed", "interrupted")


def file_mode() -> int:
    """The mode a plain ``open`` would give a new file: 0o666 less the process's umask (read from
    /proc/self/status, which changes nothing; 0o022 where it is not there)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o644


def _atomic_write(path: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename over ``path``. The file gets
    the umask's mode like any other (mkstemp's 0600 would hide run.json and rows from the other
    users of a shared out_dir)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, file_mode())
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class Recorder:
    """Appends rows of one role; each flush writes a new parquet part file.

    ``keys`` are the run's key columns (all of KEY_COLUMNS but role and step); ``row``
    adds the measured columns of one step. Cells hold scalars only (a dict or list is
    stored as a JSON string), so the tables can be read without our code.
    """

    def __init__(self, run_dir: Path | str, keys: dict[str, Any], role: str, flush_every: int = 1):
        self.dir = Path(run_dir) / "rows"
        self.keys = {k: keys.get(k) for k in KEY_COLUMNS if k not in ("role", "step")}
        self.keys.update({k: keys[k] for k in EXTRA_KEYS if k in keys})
        self.role = role
        self.flush_every = max(1, int(flush_every))
        self._pending: list[dict[str, Any]] = []
        self._seq = len(list(self.dir.glob(f"{role}-*.parquet"))) if self.dir.exists() else 0

    def row(self, step: int, **measured: Any) -> None:
        cells = {k: (json.dumps(v, sort_keys=True) if isinstance(v, (dict, list, tuple)) else v)
                 for k, v in measured.items()}
        self._pending.append({**self.keys, "role": self.role, "step": int(step), **cells})
        if len(self._pending) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        frame = pd.DataFrame(self._pending)
        path = self.dir / f"{self.role}-{self._seq:05d}.parquet"
        _atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))
        self._seq += 1
        self._pending = []

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_rows(run_dir: Path | str) -> pd.DataFrame:
    """All rows of one run (every role, every part file), in write order per role."""
    parts = sorted((Path(run_dir) / "rows").glob("*.parquet"))
    if not parts:
        return pd.DataFrame(columns=KEY_COLUMNS)
    return pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True, sort=False)


def write_run_json(run_dir: Path | str, meta: dict[str, Any]) -> None:
    """Write (or replace) run.json atomically."""
    path = Path(run_dir) / "run.json"
    text = json.dumps(meta, indent=2, sort_keys=True, default=str)
    _atomic_write(path, lambda tmp: Path(tmp).write_text(text + "\n"))


def read_run_json(run_dir: Path | str) -> dict[str, Any]:
    path = Path(run_dir) / "run.json"
    return json.loads(path.read_text()) if path.exists() else {}


def set_status(run_dir: Path | str, status: str, reason: str = "", **extra: Any) -> None:
    """Update the run's status in run.json (ok / failed / interrupted / running) and why."""
    if status not in STATUSES:
        raise ValueError(f"status: {status!r} is not one of {', '.join(STATUSES)}")
    meta = read_run_json(run_dir)
    meta.update(status=status, reason=reason, **extra)
    write_run_json(run_dir, meta)

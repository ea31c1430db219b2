"""Tidy rows and run metadata, written as the run goes so that a crash loses nothing.

Layout of one run (``<out_dir>/<scenario>/<run_id>/``, out_dir ``outputs/runs`` by default):

    run.json                 resolved config, commit, versions, kernel, backend, status
    rows/<role>-<seq>.parquet  append-only part files, one per flush, never rewritten
    prompts/<role>-<step>[-<view>].parquet   one evaluation's per-prompt records (PROMPT_COLUMNS first)

Each role process owns its own part files (no two writers share a file), and every file
is written to a temporary name and renamed, so a reader never sees half a file. One row is
one (run, role, step) observation; its key columns come first (KEY_COLUMNS).
"""
from __future__ import annotations

import errno
import json
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from harness.errors import ConfigError

KEY_COLUMNS = ["run_id", "scenario", "variant", "method", "compressor", "task", "seed",
               "backend", "rate_mbit", "delay_ms", "rank", "budget_frac", "role", "step"]

EXTRA_KEYS = ("trace", "host", "device", "cpus", "oversubscribed")
# run keys present only when given: trace (the link traces' names); the role's placement (harness.placement):
# host, device (resolved: cpu | cuda:i), cpus (the CPU ids it may run on, "0,1"), oversubscribed (its run
# put more busy roles than cores on some host: timing includes waiting for a core)

STATUSES = ("running", "ok", "failed", "interrupted")
PROMPT_COLUMNS = KEY_COLUMNS + ["view", "prompt"]
# a per-prompt record: the run's keys, the role and the update after which it evaluated (step -1: the base
# model, before update 0), the policy it scored (view: "learner", or "worker" where the workers' copy
# differs), the prompt's index in the evaluation order, then the task's columns (harness/tasks: a, op, b,
# correct, ended, answer, answer_logprob, reward | reverse_kl)


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

    def prompts(self, step: int, frame: pd.DataFrame, view: str = "learner") -> None:
        """Write one evaluation's per-prompt records (one row per prompt) as their own file, now."""
        cells = frame.assign(**{**self.keys, "role": self.role, "step": int(step), "view": view})
        cells = cells[PROMPT_COLUMNS + [c for c in frame.columns if c not in PROMPT_COLUMNS]]
        suffix = "" if view == "learner" else f"-{view}"
        path = self.dir.parent / "prompts" / f"{self.role}-{int(step) + 1:05d}{suffix}.parquet"
        _atomic_write(path, lambda tmp: cells.to_parquet(tmp, index=False))

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


def read_prompts(run_dir: Path | str) -> pd.DataFrame:
    """Every per-prompt record of one run (empty frame when it kept none)."""
    parts = sorted((Path(run_dir) / "prompts").glob("*.parquet"))
    if not parts:
        return pd.DataFrame(columns=PROMPT_COLUMNS)
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


# ---- a full or unwritable out_dir (disk full, quota, read-only, permissions) --------------------------
DISK_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
               errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
               errno.EPERM: "operation not permitted", errno.EIO: "input/output error"}
LOW_FREE_BYTES = 1 << 20        # a folder with less free space than this counts as full after a failed run
FALLBACK_ENV = "NARROWBAND_STATUS_FALLBACK"    # where a status goes when its run.json cannot be written


class OutDirFull(Exception):
    """out_dir filled up or became unwritable during a run; the message is the one line to print
    (the folder, what went wrong, what was kept, how to rerun). The run is recorded failed where it can be."""


def disk_trouble(err: BaseException) -> str:
    """What ``err`` says about the disk ("no space left on the device", ...), "" when it is something else."""
    return DISK_ERRNOS.get(err.errno, "") if isinstance(err, OSError) else ""


def out_dir_trouble(folder: Path | str) -> str:
    """Whether ``folder``'s filesystem is read-only, not writable or (nearly) full now: the words, or ""."""
    try:
        st = os.statvfs(folder)
    except OSError as err:
        return disk_trouble(err) or f"cannot be examined ({err.strerror})"
    if st.f_flag & os.ST_RDONLY:
        return "read-only file system"
    if not os.access(folder, os.W_OK):
        return "not writable (permission denied)"
    free = st.f_bavail * st.f_frsize
    return f"no space left on the device ({free // 1024} kB free)" if free < LOW_FREE_BYTES else ""


@contextmanager
def writable(folder: Path | str, doing: str) -> Iterator[None]:
    """Around the writes before a run starts: a full or unwritable folder is a ConfigError naming
    out_dir (one line, exit 2: nothing started)."""
    try:
        yield
    except OSError as err:
        why = disk_trouble(err)
        if not why:
            raise
        raise ConfigError(f"out_dir: {folder}: {why} while {doing}; nothing was started for this run; free space "
                          f"or choose a writable folder (out_dir=...)") from None


def close_run(run_dir: Path | str, status: str, reason: str = "", **extra: Any) -> tuple[str, str, str]:
    """Write the run's final status (set_status), surviving a full or unwritable out_dir.

    Returns (the status and reason recorded, a line to print: "" when all is well). When the run failed and its
    folder is full or read-only now (a role that cannot write its rows dies of it), or run.json cannot
    be written, the run is recorded ``failed`` with the reason, and the line names the folder, what
    went wrong, what was kept and how to rerun (OutDirFull carries it up). Where run.json cannot be
    replaced, its status is rewritten in place without the extras (the new text, compact, is padded
    to the old size: no new block is needed); where even that fails, beside it in the fallback folder.
    """
    run_dir = Path(run_dir)
    trouble = out_dir_trouble(run_dir) if status == "failed" else ""
    if trouble:            # a role's reason ends with its log's last lines (a traceback): the log keeps them
        reason = f"out_dir: {trouble} during the run; {reason.splitlines()[0].rstrip(':') if reason else 'no other reason'}"
    try:
        set_status(run_dir, status, reason, **extra)
        return status, reason, (_full_line(run_dir, trouble, "run.json") if trouble else "")
    except OSError as err:
        found = disk_trouble(err)
        if not found:
            raise
    if not trouble:
        trouble, reason = found, f"out_dir: {found} when the run ended ({reason or 'its roles had finished'})"
    small = {k: v for k, v in extra.items() if isinstance(v, (int, float, str)) or v is None}
    where = _status_in_place(run_dir / "run.json", {**read_run_json(run_dir), **small, "status": "failed",
                                                      "reason": reason, "record": "incomplete: " + trouble})
    return "failed", reason, _full_line(run_dir, trouble, where or _status_elsewhere(run_dir, reason))


def _status_in_place(path: Path, meta: dict) -> str:
    """Overwrite ``path`` with ``meta`` as compact JSON padded with spaces to its size; "run.json"
    when that worked, "" when it cannot (no file, too long, not writable)."""
    text = json.dumps(meta, sort_keys=True, separators=(",", ":"), default=str).encode()
    try:
        size = path.stat().st_size
        if len(text) > size:
            return ""
        with open(path, "r+b") as f:
            f.write(text.ljust(size, b" "))
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        return ""
    return "run.json (rewritten in place, without the run's closing extras)"


def _status_elsewhere(run_dir: Path, reason: str) -> str:
    """The status as a small JSON file in the fallback folder (NARROWBAND_STATUS_FALLBACK, else the
    temporary folder), named after the run; what the line names, or that nowhere worked."""
    folder = Path(os.environ.get(FALLBACK_ENV) or tempfile.gettempdir()) / "narrowband-status"
    path = folder / f"{run_dir.parent.name}--{run_dir.name}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"run_dir": str(run_dir), "status": "failed", "reason": reason,
                                    "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n")
    except OSError as err:
        return f"no status anywhere ({path}: {err.strerror}); run.json still says 'running'"
    return f"{path} (run.json still says 'running')"


def kept(run_dir: Path | str) -> str:
    """What a run's folder holds: row files (and of how many roles), logs, run.json."""
    run_dir = Path(run_dir)
    rows = sorted((run_dir / "rows").glob("*.parquet")) if (run_dir / "rows").is_dir() else []
    roles = {p.name.rsplit("-", 1)[0] for p in rows}
    logs = list((run_dir / "logs").glob("*.log")) if (run_dir / "logs").is_dir() else []
    parts = [f"{len(rows)} row files of {len(roles)} roles" if rows else "no rows", f"{len(logs)} role logs"]
    return ", ".join(parts)


def _full_line(run_dir: Path, trouble: str, status_where: str) -> str:
    out_dir = run_dir.parent.parent
    return (f"out_dir {out_dir}: {trouble}; run {run_dir.name} failed; kept in {run_dir}: {kept(run_dir)}, "
            f"status in {status_where}; free space or make the folder writable (or choose another out_dir=...) and "
            f"run the same command again (this attempt is moved aside as {run_dir.name}.attempt<N>; with resume=true "
            f"complete runs are skipped)")

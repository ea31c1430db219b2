"""Run a scenario: its runs planned by harness.scenario.plan_scenario, each launched (harness.cluster) and recorded.

One run = one resolved config = one directory ``<out_dir>/<scenario>/<run_id>/`` (out_dir: outputs/runs by default; the references' runs: results/runs, results/real/runs).
The run id is ``<variant>-s<seed>-<hash>``, the hash of the resolved config (run-control keys
left out); a multirun job puts its swept values after the variant (harness.sweeplabel:
``full_sync-rate=5mbit-rank=16-s0-<hash>``). Re-running the same config finds its directory (under
either spelling): a complete (``ok``) run
is skipped when ``resume=true``, an incomplete one is moved aside as ``<id>.attempt<N>``
(kept, marked with its status) and run again. Resume is therefore per (variant, seed).

Seeds are an axis: ``seeds: [0, 1, 2]`` in a scenario (or ``seeds=[0,1,2]``) runs every variant
at every seed, interleaved: for each seed, every variant in turn, so that the runs a timing
ratio pairs (same seed, two methods) ran close in time on the same machine state. ``seed=N``
on the command line (also a Hydra multirun ``-m seed=0,1,2``) runs that one seed only.
"""
from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from omegaconf import DictConfig, OmegaConf

from harness.cluster.spawn import single_threaded_launcher
from harness.paths import project_root
from harness.record import OutDirFull, close_run, read_run_json, read_rows, set_status, writable, write_run_json
from harness.plan import RunPlan
from harness.scenario import PlannedRun, plan_scenario
from harness.sweeplabel import describe, sweep_values
from harness.tasks.source import materialise

PACKAGES = ("torch", "transformers", "peft", "pyroute2", "hydra-core", "pandas", "narrowband-bench")
INTERRUPTED_EXIT = 130     # what a shell reports for a process ended by SIGINT
HELD_EXIT = 75             # EX_TEMPFAIL: every run of the command is running in another process; try again later
HELD = "running in another process"


@dataclass
class Outcome:
    run_id: str
    run_dir: Path
    status: str          # ok | failed | interrupted | skipped
    reason: str = ""
    variant: str = ""
    seed: int = 0


def run_scenario(cfg: DictConfig, overrides: list[str]) -> list[Outcome]:
    """Plan every (seed, variant) of the composed scenario (harness.scenario.plan_scenario: bad input
    fails here, before anything exists), then run them in that order: seed 0 of every variant, then
    seed 1 of every variant, ..."""
    single_threaded_launcher()                   # before any torch op here: the roles are forked (spawn.py)
    runs = plan_scenario(cfg, overrides)
    command = "python -m harness " + " ".join(shlex.quote(o) for o in _display(overrides))
    scenario = runs[0].scenario
    outcomes: list[Outcome] = []
    try:
        if len(runs) == 1 and not cfg.variants and runs[0].cfg is cfg:
            return [run_one(runs[0], command)]
        point = describe(sweep_values())           # a multirun job's grid point ('' otherwise)
        for i, run in enumerate(runs):
            print(f"\n=== {scenario}{f' [{point}]' if point else ''}: run {i + 1}/{len(runs)}: {run.variant}, "
                  f"seed {run.seed} ===", flush=True)
            outcomes.append(run_one(run, command))
    except KeyboardInterrupt:
        _stop_interrupted(scenario, outcomes)
    _print_scenario_summary(scenario, outcomes)
    return outcomes


def _stop_interrupted(scenario: str, outcomes: list[Outcome]) -> NoReturn:
    """Ctrl-C: run_one marked the run in progress ``interrupted``; end with one line, no traceback."""
    if outcomes:
        _print_scenario_summary(scenario, outcomes)
    print("[narrowband] interrupted: the run in progress is marked 'interrupted'; run the same command "
          "again to resume (complete runs are skipped)", file=sys.stderr, flush=True)
    raise SystemExit(INTERRUPTED_EXIT) from None


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=project_root(), capture_output=True, text=True, timeout=10)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def run_metadata(cfg: DictConfig, command: str) -> dict[str, Any]:
    """What run.json says about where and how a run ran (no hostname)."""
    from netem.caps import probe

    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "config": OmegaConf.to_container(cfg, resolve=True),
        "command": command,
        "git_commit": _git("rev-parse", "HEAD") or None,
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "versions": {"python": platform.python_version(), **versions},
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "capabilities": probe().to_dict(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _prepare_dir(run_dir: Path, resume: bool) -> bool:
    """True when the run must be (re)done; moves an incomplete earlier attempt aside."""
    if not run_dir.exists():
        return True
    meta = read_run_json(run_dir)
    if resume and meta.get("status") == "ok":
        return False
    n = 1
    while run_dir.with_name(f"{run_dir.name}.attempt{n}").exists():
        n += 1
    if meta.get("status") in (None, "running"):
        set_status(run_dir, "interrupted", meta.get("reason") or "did not finish (found running at restart)")
    attempt = run_dir.with_name(f"{run_dir.name}.attempt{n}")
    run_dir.rename(attempt)
    moved = read_run_json(attempt)
    reason = str(moved.get("reason") or "")
    if f"{run_dir}/" in reason:               # a log the reason quotes moved with it (the new attempt writes the old path)
        set_status(attempt, moved["status"], reason.replace(f"{run_dir}/", f"{attempt}/"))
    return True


@dataclass
class RunRecord:
    """A run being recorded: its run.json as written at the start, the payload every role gets,
    and what the end needs (start time and load). Made by :func:`open_record`, ended by
    :func:`close_record`; the one-host launch (here) and the multi-host lead share both."""
    run: PlannedRun
    meta: dict[str, Any]
    payload: dict[str, Any]
    t0: float
    load0: dict[str, Any]


def open_record(run: PlannedRun, command: str, **meta: Any) -> RunRecord | None:
    """Move an earlier incomplete attempt aside and write run.json (status running, the resolved
    config, the plan, ``meta``); None when the run is complete already and ``resume`` is set."""
    with writable(run.run_dir.parent.parent, "moving an earlier attempt aside"):
        fresh = _prepare_dir(run.run_dir, bool(run.cfg.resume))
    if not fresh:
        print(f"[narrowband] {run.scenario}/{run.run_id}: complete already, skipped (resume=true)", flush=True)
        return None
    run.resolved_config()                    # scenario and variant into the config run.json records
    plan = run.plan
    record = {**run_metadata(run.cfg, command), "run_id": run.run_id, "scenario": run.scenario,
              "variant": run.variant, "backend": plan.backend.value, "backend_reason": plan.backend_reason,
              "status": "running", "reason": "", "placement": plan.placement.describe() if plan.placement else None,
              "plan": plan.to_dict(), **meta}
    with writable(run.run_dir.parent.parent, "writing run.json"):
        run.run_dir.mkdir(parents=True, exist_ok=True)
        write_run_json(run.run_dir, record)
    return RunRecord(run, record, run.payload(), time.time(), load_snapshot())


def close_record(rec: RunRecord, status: str, reason: str, extra: dict[str, Any]) -> tuple[str, str]:
    """Record how the run ended (status, reason, the load it ran under, the bases' hashes, ``extra``)
    and print its one-screen summary; (status, reason) as recorded. Raises KeyboardInterrupt for an
    interrupted run and OutDirFull when the out_dir filled up (the next runs would meet it too)."""
    extra = {**extra, "load": load_record(rec.load0, load_snapshot()), "bases": _bases(rec.run.plan)}
    status, reason, full = close_run(rec.run.run_dir, status, reason, seconds=round(time.time() - rec.t0, 3),
                                     finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra)
    _print_run_summary(rec.run.run_dir, status, reason, extra["bases"])
    if status == "interrupted":
        raise KeyboardInterrupt
    if full:                                 # the next runs would meet the same disk: stop with its one line
        raise OutDirFull(full)
    return status, reason


def run_one(run: PlannedRun, command: str) -> Outcome:
    """Launch one planned run and record it. Never raises for a failed run: the outcome says it;
    bad input raised ConfigError in the planner, before anything existed."""
    materialise(run.plan.model_source, progress=bool(run.cfg.get("progress", True)))   # a GGUF, once
    with writable(run.run_dir.parent.parent, "creating the run's lock file"):
        lock = _claim(run.run_dir)
    if lock is None:
        print(f"[narrowband] {run.scenario}/{run.run_id}: running in another process (it holds "
              f"{lock_path(run.run_dir).name}), skipped", flush=True)
        return Outcome(run.run_id, run.run_dir, "skipped", HELD, variant=run.variant, seed=run.seed)
    try:
        return _run_claimed(run, command)
    finally:
        _release(lock, run.run_dir)


def lock_path(run_dir: Path) -> Path:
    """``.<run_id>.lock`` beside the run's folder (hidden: ``ls`` of a scenario shows runs only)."""
    return run_dir.with_name(f".{run_dir.name}.lock")


def _claim(run_dir: Path) -> int | None:
    """An exclusive lock on ``.<run_id>.lock`` beside the run's folder (flock: released when the
    process ends, however it ends), so two jobs of a sweep that share an out_dir never run the
    same run id at once, and a live run is never taken for a killed one and moved aside. None:
    another process holds it. (flock is per machine on some network filesystems: docs/sweeps.md.)"""
    import fcntl

    run_dir.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock_path(run_dir), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        if _is_lock_file(fd, run_dir):
            return fd
        os.close(fd)          # its holder removed it as we took it (_release): take the new one


def _is_lock_file(fd: int, run_dir: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(lock_path(run_dir)).st_ino
    except FileNotFoundError:
        return False


def _release(fd: int, run_dir: Path) -> None:
    """Remove the lock file (while still holding it, so no one takes the removed one) and close it."""
    try:
        if _is_lock_file(fd, run_dir):
            os.unlink(lock_path(run_dir))
    except OSError:
        pass
    finally:
        os.close(fd)


def _run_claimed(run: PlannedRun, command: str) -> Outcome:
    from harness.cluster.launch import launch
    from netem.topology import clean

    rec = open_record(run, command)
    if rec is None:
        return Outcome(run.run_id, run.run_dir, "skipped", variant=run.variant, seed=run.seed)
    removed = clean()
    if removed:
        print(f"[narrowband] removed leftovers of earlier runs: {', '.join(removed)}", flush=True)
    plan = run.plan
    try:
        result = launch(plan.role_specs(), plan.entry, rec.payload, backend=plan.backend.value,
                        backend_reason=plan.backend_reason, run_dir=run.run_dir, hang_timeout_s=plan.hang_timeout_s,
                        progress=bool(run.cfg.progress), seed=plan.seed)
        status, reason = result.status, result.reason
        extra = {"qdiscs": result.qdiscs, "capabilities": result.caps or rec.meta["capabilities"],
                 "dropped": result.dropped}
        if result.topology.get("replay"):   # link traces on a kernel backend: t0, changes, how late
            extra["trace_replay"] = result.topology["replay"]
    except KeyboardInterrupt:
        status, reason, extra = "interrupted", "KeyboardInterrupt", {}
    except Exception as err:  # recorded, not lost: the run is marked failed with the reason
        status, reason, extra = "failed", f"{type(err).__name__}: {err}", {}
    status, reason = close_record(rec, status, reason, extra)
    return Outcome(run.run_id, run.run_dir, status, reason, variant=run.variant, seed=run.seed)


def machine_cpu_s() -> float | None:
    """CPU seconds every process of the machine has run (user, nice, system, irq, softirq, steal; /proc/stat)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    except (OSError, ValueError):  # pragma: no cover - not Linux
        return None
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def load_snapshot() -> dict[str, Any]:
    """The machine's load now: 1/5/15-minute load averages, wall clock (s), the CPU seconds
    (user + system) of this process and of its finished, waited-for children (the role
    processes), and of the whole machine."""
    import resource

    kids, me = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    return {"loadavg": [round(x, 3) for x in os.getloadavg()], "wall": time.monotonic(),
            "children_cpu_s": kids.ru_utime + kids.ru_stime, "self_cpu_s": me.ru_utime + me.ru_stime,
            "machine_cpu_s": machine_cpu_s()}


def load_record(start: dict[str, Any], end: dict[str, Any]) -> dict[str, Any]:
    """run.json's ``load``: load averages at start and end, usable CPUs, the CPU seconds of the
    roles, of the launching process and of the whole machine, and the wall seconds between.
    ``others_cpu_s`` = machine - roles - launcher: what other programs took while the run ran
    (near 0 = the run had the machine to itself). A load average alone cannot say that: it
    still carries the previous run's own processes for a minute after they exit."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    from harness.cluster.launch import ROLE_THREADS

    roles = end["children_cpu_s"] - start["children_cpu_s"]
    launcher = end["self_cpu_s"] - start["self_cpu_s"]
    record = {"start": {"loadavg": start["loadavg"]}, "end": {"loadavg": end["loadavg"]}, "cpus": cpus,
              "threads_per_role": int(os.environ["OMP_NUM_THREADS"])
              if os.environ.get("OMP_NUM_THREADS", "").isdigit() else ROLE_THREADS,
              "roles_cpu_s": round(roles, 3), "launcher_cpu_s": round(launcher, 3)}
    if start["machine_cpu_s"] is not None and end["machine_cpu_s"] is not None:
        machine = end["machine_cpu_s"] - start["machine_cpu_s"]
        record |= {"machine_cpu_s": round(machine, 3), "others_cpu_s": round(max(0.0, machine - roles - launcher), 3)}
    return record | {"wall_s": round(end["wall"] - start["wall"], 3)}


def _bases(plan: RunPlan) -> dict[str, Any]:
    """run.json's ``bases``: the plan's model source described (harness.tasks.source: per base the
    SHA-256 of its weights, origin, path; for a GGUF the file and its SHA-256); never fails the record."""
    try:
        if plan.model_source is None:
            return {"error": "the plan has no model_source"}
        return plan.model_source.describe()
    except Exception as err:  # noqa: BLE001 - recorded: a base that cannot be hashed is said so
        return {"error": f"{type(err).__name__}: {err}"}


def _display(overrides: list[str]) -> list[str]:
    return [o.replace("scenarios@_global_=", "scenario=") for o in overrides]


SUMMARY_COLUMNS = ("loss", "accuracy", "reverse_kl", "reward", "eval_loss", "payload_bytes_down",
                   "payload_bytes_up", "update_s", "round_s", "in_sync")


def _print_run_summary(run_dir: Path, status: str, reason: str, bases: dict | None = None) -> None:
    """One screen: status, where the rows are, the hub's last metrics and mean costs; a base
    rebuilt with other weights than the shipped reference is named on the status line."""
    from harness.tasks.bases import summary_note

    rows = read_rows(run_dir)
    note = summary_note({k: v for k, v in (bases or {}).items() if isinstance(v, dict)})
    print(f"[narrowband] run {run_dir.name}: {status}{(' - ' + reason) if reason else ''}"
          f"{(' [' + note + ']') if note else ''}")
    print(f"[narrowband]   rows: {len(rows)} in {run_dir}")
    hub = rows[rows["role"].isin(["learner", "server"])] if "role" in rows else rows
    if hub.empty:
        return
    parts = []
    for col in SUMMARY_COLUMNS:
        if col in hub and hub[col].notna().any():
            series = hub[col].dropna()
            value = series.iloc[-1] if col in ("loss", "accuracy", "reverse_kl", "reward", "eval_loss") else series.mean()
            parts.append(f"{col}={value:.4g}" if isinstance(value, float) else f"{col}={value}")
    print("[narrowband]   " + "  ".join(parts), flush=True)


def _print_scenario_summary(scenario: str, outcomes: list[Outcome]) -> None:
    point = describe(sweep_values())
    print(f"\n=== {scenario}{f' [{point}]' if point else ''}: {len(outcomes)} runs ===")
    for o in outcomes:
        print(f"  {o.status:<11} {o.run_id:<32} {o.reason}")
    sys.stdout.flush()

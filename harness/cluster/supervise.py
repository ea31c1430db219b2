"""Role processes as the parent sees them: start one, watch them all, stop them all.

Each child runs in its own session (so a terminal's Ctrl-C reaches only the parent, which
then stops the children in order) and gets PR_SET_PDEATHSIG(SIGKILL), so it dies with the
thread that started it even when the parent is killed with SIGKILL. Its stdout and stderr
go to ``<run_dir>/logs/<role>.log``; it reports progress on a pipe (see harness.cluster.role).

``watch`` returns ("ok", "") when every child exited 0, ("failed", reason) when one exited
non-zero (the reason names the role, its exit status and the last lines of its log) or
when nothing progressed for the hang timeout. The role named is the likeliest cause: a killed
one before one that raised its own error, before one that only lost a peer; a role that failed
only because a peer went away waits up to VICTIM_GRACE_S for that peer to exit too. An *expendable* child (never rank 0, the hub)
may die without failing the run: it is logged, its ``dropped`` note is set, and the others
are watched on (a federated client dropped under ``federated.drop_policy=continue``).
"""
from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm
from harness.progress import frames

from harness.cluster.role import HEARTBEAT_ENV, set_parent_death_signal
from harness.cluster.spawn import ForkedProcess, fork_role

STOP_GRACE_S = 3.0
# A role that failed only because a peer went away waits this long for the cause to exit too.
VICTIM_GRACE_S = 10.0
tqdm.monitor_interval = 0      # no monitor thread: the launcher forks role processes (harness.cluster.spawn)
TAIL_LINES = 12
# Lines by which a role says a peer went away: such a role is a victim, not the cause.
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
             "Application timeout caused pair closure", "TransportError")


@dataclass
class RoleProcess:
    """A started child. ``last`` is its latest heartbeat line; ``ready`` once it joined the group."""

    name: str
    rank: int
    popen: subprocess.Popen | ForkedProcess
    log_path: Path
    beat_fd: int
    last: str = "start?"
    step: int | None = None          # latest step of a `beat <step>` line
    ready: bool = False
    expendable: bool = False         # may die without failing the run (never the hub, rank 0)
    dropped: str = ""                # why it left, once an expendable child died ("" while not)
    heard: float = field(default_factory=time.monotonic)
    _partial: bytes = b""

    def describe_exit(self) -> str:
        code = self.popen.returncode
        if code is None:
            return "is running"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"

    def tail(self, lines: int = TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.rstrip().splitlines()[-lines:]) or "(empty log)"


def _child_setup() -> None:
    """Runs in the forked child before exec: die with the parent (SIGKILL); a clean signal mask.

    The launcher holds SIGINT/SIGTERM blocked while it forks (so a started child is always
    tracked); exec keeps the mask, so it is cleared here or SIGTERM could not stop the child.
    """
    set_parent_death_signal()
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def start(name: str, rank: int, cmd: list[str], env: dict[str, str], log_path: Path,
          expendable: bool = False, fork: tuple[list[str], str | None] | None = None) -> RoleProcess:
    """Start one role process with a heartbeat pipe; its output goes to ``log_path``.

    ``cmd`` is exec'd; with ``fork=(role_argv, netns)`` the child is forked from this process
    instead and runs ``harness.cluster.role.main(role_argv)`` inside ``netns`` (see harness.cluster.spawn).
    ``expendable`` (ignored for rank 0, the hub): its death is tolerated by ``watch``.
    """
    read_fd, write_fd = os.pipe()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if fork is not None:
            popen = fork_role(fork[0], {**env, HEARTBEAT_ENV: str(write_fd)}, log_path, write_fd, fork[1])
        else:
            with open(log_path, "ab") as log:
                popen = subprocess.Popen(cmd, env={**env, HEARTBEAT_ENV: str(write_fd)}, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                                         start_new_session=True, preexec_fn=_child_setup)
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    os.set_blocking(read_fd, False)
    return RoleProcess(name, rank, popen, log_path, read_fd, expendable=expendable and rank != 0)


def watch(procs: list[RoleProcess], hang_timeout_s: float, startup_timeout_s: float,
          progress: bool = True, label: str = "cluster") -> tuple[str, str]:
    """Wait until all children exit 0 (ok), one fails, or nothing progresses for too long.

    A non-zero exit of an expendable child is not a failure: it is logged on stdout, noted
    in its ``dropped`` and the rest are watched on (their heartbeats still tell hangs).
    """
    selector = selectors.DefaultSelector()
    for proc in procs:
        selector.register(proc.beat_fd, selectors.EVENT_READ, proc)
    last_progress = time.monotonic()
    first_victim = 0.0                  # when a role first failed only because a peer went away
    bar = tqdm(total=len(procs), desc=f"{label}: starting roles", unit="role", disable=not frames(progress),
               leave=False, mininterval=1.0,    # roles joined, elapsed, each role's latest step
               bar_format="{desc}: {n_fmt}/{total_fmt} roles ready [{elapsed}]{postfix}")
    announced = not progress or not bar.disable      # no terminal: one line when every role is ready
    try:
        while True:
            for key, _ in selector.select(timeout=0.1):
                if _read_beats(key.data, selector):
                    last_progress = time.monotonic()
            _update_bar(bar, procs, label)
            if not announced and all(p.ready for p in procs):
                print(f"[narrowband] {label}: all {len(procs)} roles ready", flush=True)
                announced = True
            failed = [p for p in procs if p.popen.poll() not in (None, 0) and not p.dropped]
            for proc in [p for p in failed if p.expendable]:
                _drop(proc)
            failed = [p for p in failed if not p.dropped]
            if failed:
                blamed = {p.name: _blame_rank(p) for p in failed}
                victims_only = all(rank[0] == 2 for rank in blamed.values())
                running = any(p.popen.returncode is None for p in procs if not p.dropped)
                if victims_only and running:
                    # The peer that went away may still be shutting down (its traceback printed,
                    # its sockets closed, the interpreter not yet gone): give it a moment to exit,
                    # so the run names the cause rather than the role that lost it.
                    first_victim = first_victim or time.monotonic()
                    if time.monotonic() - first_victim < VICTIM_GRACE_S:
                        continue
                culprit = min(failed, key=lambda p: blamed[p.name])
                return "failed", (f"role {culprit.name} (rank {culprit.rank}) {culprit.describe_exit()}; "
                                  f"last lines of {culprit.log_path}:\n{culprit.tail()}")
            live = [p for p in procs if not p.dropped]
            if all(p.popen.returncode == 0 for p in live):
                return "ok", ""
            silent = time.monotonic() - last_progress
            limit = hang_timeout_s if all(p.ready for p in live) else max(hang_timeout_s, startup_timeout_s)
            if silent > limit:
                now = time.monotonic()
                heard = ", ".join(f"{p.name} '{p.last}' {now - p.heard:.0f}s ago" for p in live)
                return "failed", f"hang: no progress from any role for {silent:.0f}s (limit {limit:.0f}s); last heard: {heard}"
    finally:
        bar.close()
        selector.close()


def _drop(proc: RoleProcess) -> None:
    """Note and log the death of an expendable child; the run goes on without it."""
    proc.dropped = f"{proc.name} (rank {proc.rank}) {proc.describe_exit()}"
    tqdm.write(f"[narrowband] role {proc.dropped}: expendable, dropped; the run goes on without it "
               f"(log: {proc.log_path})", file=sys.stdout)
    sys.stdout.flush()


def _read_beats(proc: RoleProcess, selector: selectors.BaseSelector) -> bool:
    """Consume heartbeat lines of one child; True when at least one arrived."""
    try:
        data = os.read(proc.beat_fd, 65536)
    except BlockingIOError:
        return False
    except OSError:
        data = b""
    if not data:
        selector.unregister(proc.beat_fd)
        return False
    lines = (proc._partial + data).split(b"\n")
    proc._partial = lines.pop()
    for line in lines:
        text = line.decode(errors="replace").strip()
        if text:
            proc.last, proc.heard = text, time.monotonic()
            if text.startswith("beat "):
                proc.step = int(text.split()[1])
            proc.ready = proc.ready or text in ("ready", "done") or text.startswith(("beat", "progress"))
    return bool(lines)


def _blame_rank(proc: RoleProcess) -> tuple[int, int]:
    """Order failed children by how likely they are the cause: killed > own error > peer gone."""
    if proc.popen.returncode < 0:
        return (0, proc.rank)
    tail = proc.tail(40)
    return (2 if any(s in tail for s in PEER_GONE) else 1, proc.rank)


def _update_bar(bar, procs: list[RoleProcess], label: str) -> None:
    """Roles ready out of all, then each role's latest step; redrawn only when something changed."""
    if bar.disable:
        return
    ready = sum(p.ready for p in procs)
    steps = " ".join(f"{p.name}:{p.step}" for p in procs if p.step is not None)
    if (ready, steps) == getattr(bar, "_nb_shown", None):
        return
    bar._nb_shown = (ready, steps)
    bar.n = ready
    if ready == len(procs):
        bar.set_description_str(f"{label}: running", refresh=False)
    bar.set_postfix_str(steps, refresh=False)
    bar.refresh()


def stop_all(procs: list[RoleProcess], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every live child's process group, SIGKILL after ``grace_s``, reap, close pipes."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.popen.wait()
    for proc in procs:
        _signal_group(proc, signal.SIGKILL)        # stragglers the child itself started
        try:
            os.close(proc.beat_fd)
        except OSError:
            pass


def _signal_group(proc: RoleProcess, sig: int) -> None:
    try:
        os.killpg(proc.popen.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass

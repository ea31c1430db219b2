"""The parent's side of role processes, with tiny plain-Python children (no torch, fast)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from harness.cluster.supervise import start, stop_all, watch

BEAT = "import os; beat = lambda s: os.write(int(os.environ['NARROWBAND_HEARTBEAT_FD']), s.encode())\n"


def child(tmp_path, name: str, rank: int, code: str):
    return start(name, rank, [sys.executable, "-c", BEAT + textwrap.dedent(code)], dict(os.environ),
                 tmp_path / "logs" / f"{name}.log")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:          # a zombie is gone too
        return stat.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_all_children_exiting_zero_is_ok(tmp_path):
    procs = [child(tmp_path, n, r, "beat('ready\\nbeat 1\\n')") for r, n in enumerate(("a", "b"))]
    try:
        assert watch(procs, hang_timeout_s=20, startup_timeout_s=20, progress=False) == ("ok", "")
        assert [p.step for p in procs] == [1, 1]
    finally:
        stop_all(procs)


def test_a_failing_child_names_itself_its_status_and_its_log(tmp_path):
    procs = [child(tmp_path, "a", 0, "beat('ready\\n'); import time; time.sleep(30)"),
             child(tmp_path, "b", 1, "beat('ready\\n'); print('boom: bad thing'); raise SystemExit(3)")]
    try:
        status, reason = watch(procs, hang_timeout_s=20, startup_timeout_s=20, progress=False)
    finally:
        stop_all(procs)
    assert status == "failed"
    assert reason.startswith("role b (rank 1) exited with code 3")
    assert "boom: bad thing" in reason and str(tmp_path / "logs" / "b.log") in reason
    assert all(gone(p.popen.pid) for p in procs)


def test_the_killed_child_is_blamed_not_its_victims(tmp_path):
    victim = child(tmp_path, "victim", 0, """
        beat('ready\\n'); import time; time.sleep(0.3)
        print('RuntimeError: Connection closed by peer'); raise SystemExit(1)""")
    killed = child(tmp_path, "killed", 1, "beat('ready\\n'); import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    deadline = time.monotonic() + 60                  # both are dead before the parent looks (no fixed sleep:
    while not (gone(victim.popen.pid) and gone(killed.popen.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)                              # a loaded machine may start them slowly)
    assert gone(victim.popen.pid) and gone(killed.popen.pid)
    try:
        status, reason = watch([victim, killed], hang_timeout_s=20, startup_timeout_s=20, progress=False)
    finally:
        stop_all([victim, killed])
    assert (status, reason.split(";")[0]) == ("failed", "role killed (rank 1) was killed by SIGKILL")


def test_silence_is_a_hang(tmp_path):
    procs = [child(tmp_path, "quiet", 0, "beat('ready\\n'); import time; time.sleep(60)")]
    try:
        status, reason = watch(procs, hang_timeout_s=0.5, startup_timeout_s=0.5, progress=False)
    finally:
        stop_all(procs)
    assert status == "failed" and reason.startswith("hang: no progress from any role")
    assert "quiet 'ready'" in reason
    assert gone(procs[0].popen.pid)


def test_children_die_with_a_parent_killed_by_sigkill(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        from harness.cluster.supervise import start
        p = start("sleeper", 0, [sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ),
                  Path({str(tmp_path)!r}) / "sleeper.log")
        print(p.popen.pid, flush=True)
        time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert not gone(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 60          # a bound on waiting, not a timing assertion
        while not gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(pid), "PR_SET_PDEATHSIG did not stop the child"
    finally:
        parent.kill()


def test_children_started_while_signals_are_held_still_stop_on_sigterm(tmp_path):
    held = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT, signal.SIGTERM])
    try:
        proc = child(tmp_path, "sleeper", 0, "import time; time.sleep(60)")
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    stop_all([proc])
    # SIGTERM itself ended it (stop_all escalates to SIGKILL only for a child that ignores SIGTERM,
    # which a child that inherited the blocked mask would): the behaviour, without a wall-clock window
    assert proc.popen.returncode == -signal.SIGTERM

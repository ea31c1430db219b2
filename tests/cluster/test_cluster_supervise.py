"""The parent's side of role processes, with tiny plain-Python children (no torch, fast)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
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


def test_a_role_that_lost_its_peer_waits_for_the_cause_to_exit(tmp_path):
    """The victim exits first (its peer's socket closed before the peer's interpreter was gone);
    the run still names the role whose own error ended it, not the one that lost it."""
    lost = tmp_path / "lost"
    victim = child(tmp_path, "hub", 0, f"""
        beat('ready\\n'); open({str(lost)!r}, 'w').close()
        print('TransportError: Read error: Connection reset by peer'); raise SystemExit(1)""")
    cause = child(tmp_path, "w0", 1, f"""
        beat('ready\\n'); import os, time
        while not os.path.exists({str(lost)!r}): time.sleep(0.02)
        time.sleep(0.5); print('PayloadError: checksum mismatch'); raise SystemExit(1)""")
    try:
        status, reason = watch([victim, cause], hang_timeout_s=60, startup_timeout_s=60, progress=False)
    finally:
        stop_all([victim, cause])
    assert (status, reason.split(";")[0]) == ("failed", "role w0 (rank 1) exited with code 1")
    assert "PayloadError" in reason


def test_a_victim_is_named_when_no_cause_exits(tmp_path, monkeypatch):
    """The wait for a cause is bounded: with the peer alive and silent, the victim is named."""
    monkeypatch.setattr("harness.cluster.supervise.VICTIM_GRACE_S", 0.5)
    victim = child(tmp_path, "hub", 0, "beat('ready\\n'); print('Connection reset by peer'); raise SystemExit(1)")
    alive = child(tmp_path, "w0", 1, "beat('ready\\n'); import time; time.sleep(60)")
    try:
        status, reason = watch([victim, alive], hang_timeout_s=60, startup_timeout_s=60, progress=False)
    finally:
        stop_all([victim, alive])
    assert (status, reason.split(";")[0]) == ("failed", "role hub (rank 0) exited with code 1")
    assert all(gone(p.popen.pid) for p in (victim, alive))


def _wait_for_file(path, timeout_s: float = 60.0) -> None:
    """A bound on waiting for a child to get somewhere (a loaded machine starts Python slowly), not a timing check."""
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert path.exists(), f"the child never wrote {path}"


def test_silence_is_a_hang(tmp_path):
    marker = tmp_path / "beaten"
    procs = [child(tmp_path, "quiet", 0, f"beat('ready\\n'); open({str(marker)!r}, 'w').close(); "
                                         "import time; time.sleep(60)")]
    _wait_for_file(marker)              # 'ready' is in the pipe before the watch starts: start-up is not timed
    try:
        status, reason = watch(procs, hang_timeout_s=0.5, startup_timeout_s=0.5, progress=False)
    finally:
        stop_all(procs)
    assert status == "failed" and reason.startswith("hang: no progress from any role")
    assert "quiet 'ready'" in reason
    assert gone(procs[0].popen.pid)


NOTICE_S = 5.0      # the watchdog polls every 0.1 s; a regression to a slow poll (or to the hang timeout) breaks this


def test_a_death_is_noticed_within_seconds_not_at_the_hang_timeout(tmp_path):
    marker = tmp_path / "up"
    procs = [child(tmp_path, "hub", 0, "beat('ready\\n'); import time; time.sleep(120)"),
             child(tmp_path, "victim", 1, f"beat('ready\\n'); open({str(marker)!r}, 'w').close(); "
                                          "import time\nwhile True: beat('beat 1\\n'); time.sleep(0.2)")]
    _wait_for_file(marker)
    result: dict = {}

    def kill_soon():
        time.sleep(1.0)
        os.kill(procs[1].popen.pid, signal.SIGKILL)
        result["killed"] = time.monotonic()

    killer = threading.Thread(target=kill_soon)
    killer.start()
    try:
        status, reason = watch(procs, hang_timeout_s=60, startup_timeout_s=60, progress=False)
        noticed = time.monotonic()
    finally:
        killer.join()
        stop_all(procs)
    assert (status, reason.split(";")[0]) == ("failed", "role victim (rank 1) was killed by SIGKILL")
    assert noticed - result["killed"] < NOTICE_S, f"the death was noticed {noticed - result['killed']:.2f}s after the kill"


def test_stop_all_escalates_to_sigkill_after_the_grace_for_a_child_ignoring_sigterm(tmp_path):
    from harness.cluster.supervise import STOP_GRACE_S

    marker = tmp_path / "deaf"
    stubborn = child(tmp_path, "stubborn", 0, f"""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open({str(marker)!r}, 'w').close()
        time.sleep(120)""")
    polite = child(tmp_path, "polite", 1, "import time; time.sleep(120)")
    _wait_for_file(marker)                       # SIGTERM is ignored from here on
    started = time.monotonic()
    stop_all([stubborn, polite])
    took = time.monotonic() - started
    assert stubborn.popen.returncode == -signal.SIGKILL, stubborn.popen.returncode
    assert polite.popen.returncode == -signal.SIGTERM, polite.popen.returncode
    assert took >= STOP_GRACE_S, f"SIGKILL came {took:.2f}s after SIGTERM, before the {STOP_GRACE_S:g}s grace"
    assert took < STOP_GRACE_S + 30, f"stop_all took {took:.1f}s"   # a bound on a hang, not a timing target
    assert gone(stubborn.popen.pid) and gone(polite.popen.pid)


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


class _Store:
    """The rendezvous store's add(), counting arrivals as c10d's TCPStore does."""

    def __init__(self, others: int = 0):
        self.count = others

    def add(self, key: str, amount: int) -> int:
        self.count += amount
        return self.count


def test_the_closing_barrier_waits_for_dead_peers_at_most_its_bound(monkeypatch, capsys):
    """Survivors of a dropped role leave the closing barrier after the bound (15 s in a run:
    min(CLOSING_WAIT_S, wait_s)); 0.3 s here, so the lower bound shows it waited and did not hang."""
    import torch.distributed as dist

    from harness.cluster.role import bounded_barrier

    store = _Store(others=1)                   # one survivor arrived before this one; the third is dead
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_store", lambda: store)
    started = time.monotonic()
    assert bounded_barrier(world_size=3, wait_s=0.3) is False
    took = time.monotonic() - started
    assert 0.3 <= took < 0.3 + 30, took         # waited its bound, then left (30 s: a hang bound only)
    assert "2 of 3 roles arrived within 0.3s" in capsys.readouterr().err
    store = _Store(others=2)                   # everyone else is there: no wait at all
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_store", lambda: store)
    assert bounded_barrier(world_size=3, wait_s=600) is True

"""Helpers of the reliability tests: start runs, find their role processes, wait, inspect.

A run's role processes are found in its ``cluster/roles.json`` (written by the launcher as it
starts them), so a test only ever touches processes of its own runs (other runs share this
machine).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
POLL_S = 0.2


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, poll_s: float = POLL_S) -> Any:
    """Poll ``predicate`` until it returns something truthy; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(poll_s)


def our_namespaces(owner: int | None = None) -> list[str]:
    """Namespaces of ours (``nb-<pid>-...``) owned by ``owner`` (default: this process)."""
    from netem.names import list_ours

    pid = str(owner if owner is not None else os.getpid())
    return sorted(n.name for n in list_ours() if n.owner == pid)


def all_namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def run_dirs(out_dir: Path, scenario: str) -> list[Path]:
    """Run directories of ``scenario`` under ``out_dir`` (attempts moved aside excluded)."""
    base = Path(out_dir) / scenario
    return sorted(p for p in base.glob("*") if p.is_dir() and ".attempt" not in p.name) if base.exists() else []


def run_dir_of(out_dir: Path, scenario: str, variant: str) -> Path | None:
    found = [p for p in run_dirs(out_dir, scenario) if p.name.rsplit("-", 2)[0] == variant]   # <variant>-s<seed>-<hash>
    return found[0] if found else None


def run_json(run_dir: Path) -> dict:
    from harness.record import read_run_json

    return read_run_json(run_dir)


def rows(run_dir: Path, role: str | None = None):
    from harness.record import read_rows

    frame = read_rows(run_dir)
    return frame if role is None else frame[frame.role == role]


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def role_pids(run_dir: Path) -> dict[str, int]:
    """{role name: pid} of the live role processes of the run in ``run_dir`` (from cluster/roles.json)."""
    info = launch_info(run_dir)
    return {r["name"]: int(r["pid"]) for r in info.get("roles", []) if _alive(int(r["pid"]))}


def launch_info(run_dir: Path) -> dict[str, Any]:
    """The run's cluster/roles.json ({} until the launcher wrote it)."""
    try:
        return json.loads((Path(run_dir) / "cluster" / "roles.json").read_text())
    except (OSError, ValueError):
        return {}


def leftover_processes(root: Path) -> list[int]:
    """Live processes of the runs under ``root``: role pids from every roles.json there, and any
    process whose command line names ``root``."""
    pids = {int(r["pid"]) for f in Path(root).rglob("roles.json") for r in launch_info(f.parent.parent).get("roles", [])}
    return sorted({p for p in pids if _alive(p)} | set(processes_mentioning(str(root))))


def processes_mentioning(text: str) -> list[int]:
    """PIDs of live processes (not zombies) whose command line contains ``text``."""
    return sorted(int(e.name) for e in Path("/proc").iterdir()
                  if e.name.isdigit() and any(text in a for a in _cmdline(int(e.name))) and _alive(int(e.name)))


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def learner_steps(run_dir: Path, role: str = "learner") -> int:
    """Rows written so far by ``role`` (0 when none)."""
    try:
        return len(rows(run_dir, role))
    except Exception:  # noqa: BLE001 - a part file being renamed into place
        return 0


def spawn_harness(overrides: list[str], log: Path, env: dict | None = None,
                  stderr_log: Path | None = None) -> subprocess.Popen:
    """Start ``python -m harness OVERRIDES`` as a child (its own session; forked warm, tests/warm_cli.py),
    output to ``log`` (stderr too, unless ``stderr_log`` names a file of its own)."""
    import warm_cli

    with open(log, "wb") as out, open(stderr_log or os.devnull, "wb") as err:
        return warm_cli.popen("harness", overrides, cwd=ROOT, stdout=out, stderr=err if stderr_log else subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True, env={**os.environ, **(env or {})})


def kill_tree(proc: subprocess.Popen) -> None:
    """Test cleanup: SIGKILL a child we started and its session (only ours), then reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


class Injector(threading.Thread):
    """Runs a fault injection beside a run (a daemon thread); ``result()`` re-raises its failure."""

    def __init__(self, action: Callable[[], Any]):
        super().__init__(daemon=True, name="fault-injector")
        self.action = action
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.action()
        except BaseException as err:  # noqa: BLE001 - handed to the test thread
            self.error = err

    def result(self, timeout_s: float = 30.0) -> Any:
        self.join(timeout_s)
        if self.is_alive():
            raise AssertionError("the fault injector did not finish")
        if self.error is not None:
            raise self.error
        return self.value


def has_interface(pid: int, ifname: str = "nb0") -> bool:
    """Whether process ``pid`` sees ``ifname`` (a forked role enters its namespace just after it starts)."""
    try:
        return any(line.partition(":")[0].strip() == ifname
                   for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines())
    except OSError:
        return False


def rx_bytes(pid: int, ifname: str = "nb0") -> int:
    """Bytes received on ``ifname`` in the network namespace of process ``pid`` (no fork: /proc)."""
    for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == ifname:
            return int(rest.split()[0])
    raise AssertionError(f"process {pid} has no interface {ifname}")


def set_link(netns: str, up: bool, ifname: str = "nb0") -> None:
    subprocess.run(["ip", "-n", netns, "link", "set", ifname, "up" if up else "down"], check=True, timeout=30)


def role_places(run_dir: Path) -> dict[str, dict]:
    """{role: {netns, addr, ...}} from the run's payload.json."""
    spec = json.loads((Path(run_dir) / "cluster" / "payload.json").read_text())
    return {r["name"]: r for r in spec["roles"]}


def warm_cache(overrides: list[str]) -> None:
    """Build the cached teacher/student the run will load (a no-op when cached).

    The learner pretrains a missing model inside the run without heartbeats, so with the
    short hang timeouts of these tests a cold cache would read as a hang."""
    from harness.compose import compose_config
    from harness.tasks import pretrained

    cfg = compose_config(overrides)
    kinds = ["student", "teacher"] if cfg.task.name == "distill" else ["student"]
    for kind in kinds:
        pretrained(kind, cfg.model, cfg.task, progress=False)

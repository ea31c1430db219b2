"""Start one process per role, each on its own emulated link, joined by torch.distributed (gloo).

    launch(roles, "pkg.module:function", payload, backend="auto", run_dir=..., hang_timeout_s=180)

roles[0] is the hub (learner or server). Per backend (the rules: harness/backends.py):
  netem / tc  a StarTopology (netem/) is built, one namespace per role; each role process is
              forked from this warm launcher and enters its namespace with setns(2) before the
              entry runs (harness/cluster/spawn.py; NARROWBAND_SPAWN=exec starts ``ip netns exec <ns>
              python -m harness.cluster.role ...`` instead), with GLOO_SOCKET_IFNAME=<its veth> and
              MASTER_ADDR=<the hub's address>. Needs root (CAP_NET_ADMIN).
  userspace   plain processes on loopback; the transport paces bytes (lower fidelity).
  model       plain processes on loopback, nothing paced; transfer times are modelled.
  auto        the best this machine allows (netem > tc > userspace), said in one loud line.

The resolved payload (``{"cfg": ..., "keys": ..., "plan": RunPlan.to_dict()}`` or a bare config dict) goes to the
children in ``<run_dir>/cluster/payload.json``; their logs go to ``<run_dir>/logs/<role>.log``.
Any child exiting non-zero stops the others and the run is ``failed`` with the reason (except
an ``expendable`` non-hub role: its death is logged, noted in ``ClusterResult.dropped`` and
the others go on; the children are told, ``expendable`` in the payload, so the closing
barrier of harness.cluster.role waits for them only a bounded time); so is
a run where no role progresses for ``hang_timeout_s``; SIGINT/SIGTERM to the parent stops
everything and returns ``interrupted``. The topology is always removed.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness.cluster import spawn
from harness.backends import backend_of, resolve_backend
from harness.errors import ClusterError
from harness.wire.links import LinkTable
from harness.cluster.supervise import RoleProcess, start, stop_all, watch
from netem.spec import LinkSpec

STARTUP_TIMEOUT_S = 180.0      # importing torch in N processes on 2 cores is slow
WAIT_MARGIN_S = 30.0           # the children's own timeouts exceed the parent's hang limit by this, at least
ROLE_BACKSTOP_S = 6 * 3600.0   # and, on one host, are no shorter than this (role_wait_s)
_DEVICE = re.compile(r"^(cpu|auto|cuda(:[0-9]+)?)$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass
class RoleSpec:
    """One role: its name, its link (up = egress at the role, down = towards it) and device."""

    name: str                 # "learner", "worker0", "server", "client3"
    up: LinkSpec
    down: LinkSpec
    device: str = "cpu"       # cpu | auto | cuda | cuda:i (a GPU only where one exists)
    expendable: bool = False  # may die without failing the run (never honoured for roles[0], the hub)
    cores: tuple[int, ...] = ()   # core slots to pin to on its host (harness.placement; empty: not pinned)
    host: str = "local"       # the host it runs on (harness.placement)


@dataclass
class ClusterResult:
    """How a launch ended. qdiscs: `tc qdisc show` per namespace; caps: netem.caps as a dict."""

    status: str               # ok | failed | interrupted
    reason: str
    backend: str
    qdiscs: dict[str, str]
    caps: dict
    seconds: float
    topology: dict = field(default_factory=dict)      # netem StarTopology.describe() (kernel backends)
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    log_dir: str = ""
    dropped: list[str] = field(default_factory=list)  # expendable roles that died: "<role> (rank r) <how>"


def check_roles(roles: list[RoleSpec], entry: str, backend: str) -> None:
    """Raise ClusterError for the first bad role, entry or link setting."""
    if not roles:
        raise ClusterError("roles: at least one role is needed (roles[0] is the hub)")
    names = [r.name for r in roles]
    for r in roles:
        if not _NAME.match(r.name):
            raise ClusterError(f"role name: {r.name!r} is not allowed; use 1-64 of A-Z a-z 0-9 _ . -")
        if not _DEVICE.match(r.device):
            raise ClusterError(f"model.device: {r.device!r} (role {r.name}) is not allowed; use cpu, auto, cuda or cuda:<i>")
        for side in ("up", "down"):
            spec = getattr(r, side)
            if spec.loss and not backend_of(backend).drops_packets:
                raise ClusterError(f"net loss of {r.name}.{side}: {spec.loss * 100:g}% cannot be emulated on the "
                                   f"{backend} backend (only netem drops packets); use loss 0% or net.backend=netem")
    if len(set(names)) != len(names):
        raise ClusterError(f"roles: names must be unique, got {names}")
    module, sep, function = entry.partition(":")
    if not sep or not module or not function.isidentifier():
        raise ClusterError(f"entry: {entry!r} is not 'package.module:function'")
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise ClusterError(f"entry: module {module!r} of {entry!r} cannot be found on sys.path")


def launch(roles: list[RoleSpec], entry: str, payload: dict, *, backend: str = "auto", run_dir: Path,
           hang_timeout_s: float = 180.0, progress: bool = True, backend_reason: str = "", seed: int = 0) -> ClusterResult:
    """Run ``entry(ctx)`` in one process per role on emulated links; always tears everything down.

    ``payload`` is what every role's ``ctx`` carries (a run's ``{"keys", "plan"}``). ``seed``: the
    run's seed (RunPlan.seed), which seeds the transport's per-message delays. ``backend_reason`` is
    why a caller that resolved ``auto`` itself got ``backend``; it is printed instead of "asked for".
    """
    t0 = time.monotonic()
    resolved, why = resolve_backend(backend)
    why = backend_reason or why
    check_roles(roles, entry, resolved)
    if not hang_timeout_s > 0:
        raise ClusterError(f"net.hang_timeout_s: {hang_timeout_s!r} must be > 0 (seconds without progress)")
    try:
        how = spawn.mode()
    except spawn.SpawnError as err:
        raise ClusterError(str(err)) from err
    try:
        json.dumps(payload)
    except (TypeError, ValueError) as err:
        raise ClusterError(f"payload: must be JSON-serialisable (plain dicts, lists, numbers, strings): {err}") from err
    from netem import caps as caps_mod

    caps = caps_mod.probe().to_dict()
    print(f"[narrowband] cluster: {len(roles)} roles, link backend {resolved.upper()} ({why})", flush=True)
    run_dir = Path(run_dir)
    (run_dir / "cluster").mkdir(parents=True, exist_ok=True)
    result = ClusterResult("failed", "", resolved, {}, caps, 0.0, log_dir=str(run_dir / "logs"))
    procs: list[RoleProcess] = []
    with ExitStack() as stack:
        stack.callback(_restore_signals, _install_signals())
        try:
            places = _places(roles, resolved, stack, result)
            payload_path = _write_payload(run_dir, roles, entry, payload, resolved, places, hang_timeout_s,
                                          result.topology.get("t0") or time.time(), seed)
            env = _base_env(len(roles), places[0]["addr"], _master_port(resolved))
            forking = how == "fork" and _may_fork(entry)
            for rank, (role, place) in enumerate(zip(roles, places)):
                argv = [str(payload_path), str(rank)]
                cmd = [*place["prefix"], sys.executable, "-m", "harness.cluster.role", *argv]
                role_env = {**env, "RANK": str(rank), "GLOO_SOCKET_IFNAME": place["ifname"], "NARROWBAND_ROLE": role.name}
                with _signals_held():            # a started child is always in `procs`
                    procs.append(start(role.name, rank, cmd, role_env, run_dir / "logs" / f"{role.name}.log",
                                       expendable=role.expendable, fork=(argv, place["netns"]) if forking else None))
            _write_pids(run_dir, procs, "fork" if forking else "exec", env)
            result.status, result.reason = watch(procs, hang_timeout_s, STARTUP_TIMEOUT_S, progress,
                                                 label=f"cluster[{resolved}]")
        except _Interrupted as signal_name:
            result.status, result.reason = "interrupted", f"{signal_name} to the launching process"
        finally:
            _block_signals()
            stop_all(procs)
            result.exit_codes = {p.name: p.popen.returncode for p in procs}
            result.dropped = [p.dropped for p in procs if p.dropped]
    result.seconds = time.monotonic() - t0
    return result


def _may_fork(entry: str) -> bool:
    """Whether role processes may be forked from this process (harness.cluster.spawn); preloads the entry."""
    spawn.preload(entry)
    spawn.stop_idle_helpers()
    unsafe = spawn.fork_unsafe_reason()
    if unsafe:
        print(f"[narrowband] starting roles with exec, not fork: {unsafe}", flush=True)
    return not unsafe


def _places(roles: list[RoleSpec], backend: str, stack: ExitStack, result: ClusterResult) -> list[dict]:
    """Where each role runs: {prefix, ifname, addr, netns}; builds the topology for kernel backends."""
    if not backend_of(backend).kernel:
        return [{"prefix": [], "ifname": "lo", "addr": "127.0.0.1", "netns": None} for _ in roles]
    from netem.spec import LinkSpecError
    from netem.topology import NodeSpec, StarTopology, TopologyError

    try:
        topology = stack.enter_context(StarTopology([NodeSpec(r.name, r.up, r.down) for r in roles], backend=backend))
    except (TopologyError, LinkSpecError) as err:
        raise ClusterError(str(err)) from err
    result.topology = topology.describe()
    result.qdiscs = topology.qdisc_show()
    if topology.replay is not None:       # runs before the topology closes: the replay's final account
        stack.callback(lambda: result.topology.update(replay=topology.replay.describe()))
    return [{"prefix": topology.exec_prefix(r.name), "ifname": topology.nodes[r.name].ifname,
             "addr": topology.nodes[r.name].addr, "netns": topology.nodes[r.name].netns} for r in roles]


def role_wait_s(hang_timeout_s: float) -> float:
    """How long a role waits for a peer on its own (a message header, a barrier, the rendezvous): a backstop, not the
    hang detector. Hangs are the supervisor's to find: it hears every role's heartbeats (a learner evaluating beats
    once a batch) and fails the run when none progresses for ``hang_timeout_s``; a peer that dies closes its sockets
    at once; a role dies with its launcher (PR_SET_PDEATHSIG). A bound of ``hang_timeout_s`` + a margin failed
    hilo_real runs on a loaded machine (2026-12-07): the learner evaluated 512 prompts, beating, for longer than it,
    and the workers waiting at the next barrier timed out. (gloo cannot wait again after a timeout: the pair is
    closed, so a role cannot wait in slices and ask meanwhile.)"""
    return max(float(hang_timeout_s) + WAIT_MARGIN_S, ROLE_BACKSTOP_S)


def _write_payload(run_dir: Path, roles: list[RoleSpec], entry: str, payload: dict, backend: str,
                   places: list[dict], hang_timeout_s: float, trace_t0: float, seed: int) -> Path:
    """``trace_t0``: when link traces start (wall clock): the topology's t0 on kernel backends (the
    replay thread's clock), the payload's writing elsewhere (the model integrates from there)."""
    spec = {
        "entry": entry, "backend": backend, "run_dir": str(run_dir), "payload": payload, "seed": int(seed),
        "wait_s": role_wait_s(hang_timeout_s),
        "links": LinkTable(tuple(r.up for r in roles), tuple(r.down for r in roles)).to_json(),
        "trace_t0": trace_t0,
        "roles": [{"name": r.name, "device": r.device, "netns": p["netns"], "ifname": p["ifname"] if p["netns"] else None,
                   "addr": p["addr"], "expendable": bool(r.expendable and i > 0),
                   "cores": list(r.cores), "host": r.host}
                  for i, (r, p) in enumerate(zip(roles, places))],
    }
    path = run_dir / "cluster" / "payload.json"
    path.write_text(json.dumps(spec, indent=1, sort_keys=True))
    return path


def _write_pids(run_dir: Path, procs: list[RoleProcess], how: str, env: dict[str, str]) -> None:
    """``cluster/roles.json``: which process is which role and where they meet (for people and tests:
    a forked role shows the launcher's command line in ps, and its /proc environ is the launcher's)."""
    info = {"spawn": how, "master_addr": env["MASTER_ADDR"], "master_port": int(env["MASTER_PORT"]),
            "roles": [{"name": p.name, "rank": p.rank, "pid": p.popen.pid} for p in procs]}
    (run_dir / "cluster" / "roles.json").write_text(json.dumps(info, indent=1))


ROLE_THREADS = 1


def _base_env(world_size: int, master_addr: str, master_port: int) -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path.cwd())
    env["PYTHONPATH"] = os.pathsep.join([root, env["PYTHONPATH"]]) if env.get("PYTHONPATH") else root
    env.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port), WORLD_SIZE=str(world_size),
               PYTHONUNBUFFERED="1")
    # one torch thread per role on every machine: the thread count changes a float32 reduction's
    # order and so the bits of training (measured: 20 AdamW steps of the tiny model at 1, 2 and 4
    # threads give three different weights), so a learning outcome must not follow the core count.
    # OMP_NUM_THREADS in the environment wins.
    env.setdefault("OMP_NUM_THREADS", str(ROLE_THREADS))
    env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")   # a role writes to its log file: no transformers bars there
    return env


def _master_port(backend: str) -> int:
    """A free TCP port (the hub's own namespace is fresh on kernel backends: any port is free there)."""
    if backend_of(backend).kernel:
        return 29500
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----- signals: SIGINT/SIGTERM end the launch as "interrupted" ----------------------------------
class _Interrupted(BaseException):
    pass


_LAUNCHER_PID: list[int] = []


def _on_signal(signum: int, frame) -> None:
    if os.getpid() not in _LAUNCHER_PID:
        # A forked copy of the launcher (pyroute2 forks helpers that enter namespaces) must not
        # run the launcher's code on: die of the signal as a plain process would.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise _Interrupted(signal.Signals(signum).name)


def _install_signals() -> dict:
    if threading.current_thread() is not threading.main_thread():
        return {}
    _LAUNCHER_PID[:] = [os.getpid()]
    return {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore_signals(previous: dict) -> None:
    """Put the caller's handlers back, then let through what arrived during teardown (to them)."""
    if not previous:
        return
    for sig, handler in previous.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, list(previous))


def _block_signals() -> None:
    """Hold SIGINT/SIGTERM (until _restore_signals) while stopping children and removing the topology."""
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT, signal.SIGTERM])


@contextmanager
def _signals_held():
    """Hold SIGINT/SIGTERM for a short critical section (a fork), deliver them after."""
    main = threading.current_thread() is threading.main_thread()
    held = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT, signal.SIGTERM]) if main else None
    try:
        yield
    finally:
        if main:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

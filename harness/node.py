"""The per-host agent of a multi-host run: ``python -m harness.node scenario=NAME placement.source=... ...``.

The engine starts one agent per host (``srun --ntasks-per-node=1``, ``torchrun --nnodes=N
--nproc-per-node=1``, one Ray actor per node: docs/multihost.md), each with the same overrides.
Every agent composes and plans the same runs (harness.plan: the placement says which roles are
its own, harness.placement.node_rank which host it is), then, per run:

1. Control (before anything is built). Agent 0 listens on MASTER_ADDR:NARROWBAND_CONTROL_PORT
   (default 29400) on the real network, unshaped; the others connect within NARROWBAND_CONNECT_TIMEOUT_S (60 s) and
   say hello: their address and interface (the one that routes to MASTER_ADDR), whether they may
   shape (root or CAP_NET_ADMIN, htb, ifb, mirred, vxlan) and the digest of their plan. A host
   that does not connect, cannot shape or planned something else ends every agent with one line
   naming the host and what is wrong, exit 2, and nothing built anywhere.
2. Build. Agent 0 picks the run's VXLAN id and overlay /24; every agent builds its part
   (netem.overlay.HostOverlay: its roles' namespaces, shaped per pair).
3. Calibration gate. Every shaped pair (hub -> node and node -> hub) is probed with netem's probe
   (peer.py: receiver on the destination's host, sender on the source's) for CALIBRATION_S at the
   pair's rate; run.json ``calibration`` records configured vs measured rate (against the TCP
   ceiling of the configured L2 rate) and RTT per pair. A pair more than CALIBRATION_TOLERANCE off
   is probed again, up to CALIBRATION_TRIES times (a probe on a loaded CPU can fall short once:
   measured here at load 17 on 2 cores, 89% at 100 Mbit/s, then 98-100% on the other pairs);
   every try is recorded, the closest counts, and a pair that stays off fails the run with one
   line naming it (nothing is launched).
4. Launch. Each agent starts its own roles (forked, as harness.cluster.launch does on one host)
   with MASTER_ADDR = the hub's overlay address (the TCPStore of env:// rendezvous, on the hub's
   host), GLOO_SOCKET_IFNAME = nb0 (gloo on the overlay), and the same payload as on one host, so
   collectives keep their timeouts sized from bytes and rate (harness.wire.transport). A role that
   fails, an agent that dies (its control connection closes) or agent 0's stop ends the run on
   every host; each agent always removes its part (and a SIGKILLed agent's guard removes it).
5. Record. Agent 0 writes run.json (placement, overlay per host, calibration, status); every
   role writes its rows into the run's folder, which must be on a filesystem all hosts share (as
   a Slurm cluster's home or scratch is); the rows of a host without one stay on that host.

Delay and jitter are the transport's job (the tc backend), as on one host. Where the agents
may not shape (no CAP_NET_ADMIN), ``net.backend=userspace`` runs the roles on the hosts' own
network, paced by the transport, labelled ``userspace`` in every row and in the report.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ClusterError, ConfigError

CONTROL_PORT_ENV = "NARROWBAND_CONTROL_PORT"
CONTROL_PORT = 29400
def connect_timeout_s() -> float:
    """How long an agent waits for its peers and the coordinator (NARROWBAND_CONNECT_TIMEOUT_S, read at call time)."""
    return float(os.environ.get("NARROWBAND_CONNECT_TIMEOUT_S", "60"))
CALIBRATION_S = 1.0                 # seconds of traffic per probed pair at its configured rate
CALIBRATION_TOLERANCE = 0.10        # |measured / TCP ceiling - 1| above this refuses the run
CALIBRATION_TRIES = 3               # a pair off by more is probed again (a loaded CPU slows one probe), at most this often
MASTER_PORT = 29500                 # the TCPStore, on the hub's overlay address
PEER = Path(__file__).resolve().parent.parent / "netem" / "peer.py"


class HostError(ConfigError):
    """A host that cannot take part (one line: the host and what is wrong; exit 2)."""


# ----- the control channel: JSON lines over TCP on the real network ------------------------------
class Line:
    """One control connection: ``send(dict)``, ``recv() -> dict`` (None at EOF)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.file = sock.makefile("rb")
        self._send_lock = threading.Lock()

    def send(self, msg: dict) -> None:
        with self._send_lock:
            self.sock.sendall((json.dumps(msg) + "\n").encode())

    def recv(self, timeout: float | None = None) -> dict | None:
        self.sock.settimeout(timeout)
        try:
            line = self.file.readline()
        except (OSError, ValueError):
            return None
        finally:
            try:
                self.sock.settimeout(None)
            except OSError:
                pass
        return json.loads(line) if line else None

    def close(self) -> None:
        for thing in (self.file, self.sock):
            try:
                thing.close()
            except OSError:
                pass


@dataclass
class Me:
    """This host: its node rank, name, address and interface on the real network."""
    rank: int
    name: str
    addr: str
    iface: str


def route_to(master: str) -> tuple[str, str]:
    """(this host's address towards ``master``, the interface holding it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((master, 9))
        addr = s.getsockname()[0]
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        for msg in ipr.get_addr(family=socket.AF_INET):
            if msg.get_attr("IFA_ADDRESS") == addr:
                return addr, ipr.get_links(msg["index"])[0].get_attr("IFLA_IFNAME")
    raise HostError(f"host: address {addr} (towards MASTER_ADDR {master}) is on no interface here")


def shaping_problem() -> str:
    """Why this host cannot build the overlay ("" when it can)."""
    from netem.caps import probe

    caps = probe()
    if not caps.root:
        return ("cannot shape: needs root or CAP_NET_ADMIN (`unshare -rn` shapes only inside its own namespace, "
                "not across hosts: docs/multihost.md); use net.backend=userspace")
    missing = [k for k in ("htb", "ifb", "ingress", "mirred") if not caps.qdiscs.get(k)]
    if missing:
        return f"cannot shape: kernel lacks {', '.join(missing)} ({'; '.join(caps.notes.get(k, '') for k in missing)})"
    return "" if _vxlan_ok() else "cannot shape: kernel refuses a VXLAN device (module vxlan)"


def _vxlan_ok() -> bool:
    from pyroute2 import IPRoute, netns

    from netem.names import allocate_prefix

    name = f"{allocate_prefix(first='caps')}-caps"
    try:
        with IPRoute(netns=name, flags=0) as ipr:
            ipr.link("add", ifname="cvx0", kind="vxlan", vxlan_id=1, vxlan_port=4789)
        return True
    except Exception:  # noqa: BLE001 - any refusal means no VXLAN here
        return False
    finally:
        netns.remove(name)


# ----- one planned run -----------------------------------------------------------------------------
@dataclass
class Planned:
    scenario: str
    variant: str
    cfg: Any
    plan: Any
    run_id: str
    run_dir: Path


def planned_runs(overrides: list[str]) -> list[Planned]:
    """Every (seed, variant) of the composed scenario, in harness.run's order, planned (ConfigError first)."""
    from harness.paths import project_root
    from harness.plan import build_plan
    from harness.run import _merge_overrides, compose_config, run_id_of, scenario_name, seeds_of

    cfg = compose_config(overrides)
    scenario = scenario_name(overrides)
    variants = dict(cfg.variants or {}) or {cfg.variant: []}
    if cfg.only:
        unknown = [v for v in cfg.only if v not in variants]
        if unknown:
            raise ConfigError(f"only: {unknown[0]!r} is not a variant of scenario {scenario}; choose from {', '.join(variants)}")
        variants = {k: v for k, v in variants.items() if k in cfg.only}
    runs = []
    for seed in seeds_of(cfg, overrides):
        for name, extra in variants.items():
            vcfg = compose_config(_merge_overrides(overrides, list(extra) + [f"seed={seed}"]))
            plan = build_plan(vcfg)
            if plan.placement is None or not plan.placement.multihost:
                raise ConfigError(f"placement.source: {vcfg.placement.source!r} gives one host; python -m harness.node "
                                  f"runs across hosts (hostfile, slurm, torchrun); on one host use python -m harness")
            if plan.backend.value not in ("tc", "netem", "userspace"):
                raise ConfigError(f"net.backend: {plan.backend.value!r} across hosts is not allowed; use tc (kernel "
                                  f"shaping on the overlay) or userspace (no CAP_NET_ADMIN)")
            if any(r.up.trace or r.down.trace for r in plan.roles):
                raise ConfigError("net.trace: link traces across hosts are not replayed yet (netem/overlay.py has no "
                                  "replay); drop net.trace or run on one host")
            run_id = vcfg.run_id or run_id_of(vcfg, name, plan.backend.value)
            runs.append(Planned(scenario, name, vcfg, plan, run_id, project_root() / vcfg.out_dir / scenario / run_id))
    return runs


def digest(runs: list[Planned]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps([r.plan.to_dict() for r in runs], sort_keys=True, default=str).encode()).hexdigest()[:16]


# ----- the agent -----------------------------------------------------------------------------------
@dataclass
class Agent:
    me: Me
    hosts: int
    names: list[str] = field(default_factory=list)          # host names by node rank
    current: Any = None                                      # the Planned run in progress
    lines: dict[int, Line] = field(default_factory=dict)     # agent 0: node rank -> connection; others: {0: line}
    addrs: dict[int, str] = field(default_factory=dict)      # node rank -> real address
    overlay: Any = None
    servers: dict[str, subprocess.Popen] = field(default_factory=dict)
    procs: list = field(default_factory=list)

    # -- phase 1: control ----------------------------------------------------------------------
    @classmethod
    def connect(cls, runs: list[Planned], rank: int, master: str, port: int) -> "Agent":
        placement = runs[0].plan.placement
        host = placement.hosts[rank]
        addr, iface = route_to(master)
        if host.addr and host.addr not in (addr, master) and rank != 0:
            addr = host.addr
        iface = host.iface or iface
        agent = cls(Me(rank, host.name, addr, iface), len(placement.hosts), [h.name for h in placement.hosts])
        wanted = runs[0].plan.backend.value != "userspace"
        hello = {"op": "hello", "rank": rank, "host": host.name, "addr": addr, "iface": iface,
                 "problem": shaping_problem() if wanted else "", "digest": digest(runs)}
        if rank == 0:
            agent._gather(hello, master, port)
        else:
            agent._join(hello, master, port)
        return agent

    def _gather(self, hello: dict, master: str, port: int) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", port))
        listener.listen(self.hosts)
        hellos = {0: hello}
        deadline = time.monotonic() + connect_timeout_s()
        try:
            while len(hellos) < self.hosts and time.monotonic() < deadline:
                listener.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    sock, _ = listener.accept()
                except socket.timeout:
                    break
                line = Line(sock)
                msg = line.recv(timeout=10)
                if not msg or msg.get("op") != "hello" or not isinstance(msg.get("rank"), int):
                    line.close()
                    continue
                if msg["rank"] in hellos:
                    line.send({"op": "error", "message": f"host {msg['host']}: node rank {msg['rank']} connected twice"})
                    line.close()
                    continue
                hellos[msg["rank"]] = msg
                self.lines[msg["rank"]] = line
        finally:
            listener.close()
        problem = self._judge(hellos)
        if problem:
            self.broadcast({"op": "error", "message": problem})
            self.close_lines()
            raise HostError(problem)
        self.addrs = {r: h["addr"] for r, h in hellos.items()}
        self.broadcast({"op": "welcome", "addrs": {str(r): a for r, a in self.addrs.items()}})

    def _judge(self, hellos: dict[int, dict]) -> str:
        names = self.names
        for rank in range(self.hosts):
            if rank not in hellos:
                return (f"host {names[rank]}: its agent did not connect to agent 0 at {self.me.addr} within "
                        f"{connect_timeout_s():g} s (unreachable, not started, or its firewall drops the control port)")
        for rank in range(self.hosts):
            h = hellos[rank]
            if h["problem"]:
                return f"host {names[rank]}: {h['problem']}"
            if h["digest"] != hellos[0]["digest"]:
                return f"host {names[rank]}: planned other runs than agent 0 (other overrides or code); start every agent alike"
        return ""

    def _join(self, hello: dict, master: str, port: int) -> None:
        deadline = time.monotonic() + connect_timeout_s()
        last = ""
        while True:
            try:
                sock = socket.create_connection((master, port), timeout=5)
                break
            except OSError as err:
                last = err.strerror or str(err)
                if time.monotonic() > deadline:
                    raise HostError(f"host {self.names[0]}: agent 0 at {master}:{port} cannot be reached "
                                    f"from {self.me.name} within {connect_timeout_s():g} s ({last})") from None
                time.sleep(0.3)
        sock.settimeout(None)
        line = Line(sock)
        self.lines[0] = line
        line.send(hello)
        msg = line.recv()
        if msg is None:
            raise HostError(f"host {self.names[0]}: agent 0 closed the control connection")
        if msg["op"] == "error":
            raise HostError(msg["message"])
        self.addrs = {int(r): a for r, a in msg["addrs"].items()}

    def broadcast(self, msg: dict) -> None:
        for line in list(self.lines.values()):
            try:
                line.send(msg)
            except OSError:
                pass

    def close_lines(self) -> None:
        for line in self.lines.values():
            line.close()

    # -- phase 2: build -------------------------------------------------------------------------
    def build(self, run: Planned, vni: int, subnet: str, mtu: int) -> dict:
        from netem.overlay import HostOverlay, OverlayRole, OverlaySpec

        roles = tuple(OverlayRole(r.name, r.rank, r.up, r.down) for r in run.plan.roles)
        mine = tuple(p.role for p in run.plan.placement.on(self.me.rank))
        spec = OverlaySpec(vni=vni, subnet=subnet, iface=self.me.iface, local_addr=self.me.addr,
                           remotes=tuple(a for r, a in sorted(self.addrs.items()) if r != self.me.rank),
                           roles=roles, local=mine, mtu=mtu)
        self.overlay = HostOverlay(spec).__enter__()
        return self.overlay.describe()

    def teardown(self) -> None:
        from harness.cluster.supervise import stop_all

        for server in self.servers.values():
            if server.poll() is None:
                server.kill()
            server.wait()
        self.servers.clear()
        stop_all(self.procs)
        self.procs = []
        if self.overlay is not None:
            self.overlay.close()
            self.overlay = None

    # -- phase 3: calibration (the probe's two halves) -------------------------------------------
    def serve(self, role: str) -> int:
        server = subprocess.Popen(self.overlay.exec_prefix(role) + [sys.executable, str(PEER), "serve"],
                                  stdout=subprocess.PIPE, text=True)
        self.servers[role] = server
        line = server.stdout.readline()
        if not line.startswith("port "):
            raise ClusterError(f"calibration: the probe receiver in {role} did not start (said {line!r})")
        return int(line.split()[1])

    def send(self, role: str, addr: str, port: int, nbytes: int, timeout_s: float) -> dict:
        done = subprocess.run(self.overlay.exec_prefix(role) + [sys.executable, str(PEER), "send", addr, str(port),
                                                                  str(nbytes), "10"],
                              capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise ClusterError(f"calibration: the probe sender in {role} failed: {done.stderr.strip()[-300:]}")
        return json.loads(done.stdout)

    def collect(self, role: str, timeout_s: float) -> dict:
        server = self.servers.pop(role)
        deadline = time.monotonic() + timeout_s
        try:
            for line in server.stdout:
                if line.startswith("{"):
                    return json.loads(line)
                if time.monotonic() > deadline:
                    break
            raise ClusterError(f"calibration: the probe receiver in {role} gave no result")
        finally:
            server.kill()
            server.wait()


# ----- what agent 0 does with every host (itself through the same calls) ----------------------------
def ask(agent: Agent, host: int, msg: dict, timeout: float | None = None) -> dict:
    """Run ``msg`` on ``host`` (agent 0 runs its own directly) and return the reply; ClusterError on failure."""
    if host == agent.me.rank:
        return handle(agent, msg)
    line = agent.lines[host]
    line.send(msg)
    reply = line.recv(timeout=timeout)
    if reply is None:
        raise ClusterError(f"host {host}: its agent closed the control connection (died?) during {msg['op']}")
    if reply.get("op") == "error":
        raise ClusterError(reply["message"])
    return reply


def handle(agent: Agent, msg: dict) -> dict:
    op = msg["op"]
    if op == "build":
        run = agent.current
        return {"op": "built", "overlay": agent.build(run, msg["vni"], msg["subnet"], msg["mtu"])}
    if op == "serve":
        return {"op": "port", "port": agent.serve(msg["role"])}
    if op == "send":
        return {"op": "sent", "result": agent.send(msg["role"], msg["addr"], msg["port"], msg["nbytes"], msg["timeout_s"])}
    if op == "collect":
        return {"op": "received", "result": agent.collect(msg["role"], msg["timeout_s"])}
    if op == "teardown":
        agent.teardown()
        return {"op": "down"}
    raise ClusterError(f"control: unknown operation {op!r}")


def pairs(plan) -> list[tuple[str, str, float]]:
    """Every shaped pair (hub <-> each node, both ways) and its configured L2 rate (bits/s): the
    slower of the source's uplink and the destination's downlink."""
    hub = plan.roles[0]
    out = []
    for node in plan.roles[1:]:
        for src, dst in ((hub, node), (node, hub)):
            rates = [r for r in (src.up.rate_bps, dst.down.rate_bps) if r]
            if rates:
                out.append((src.name, dst.name, min(rates)))
    return out


def calibrate(agent: Agent, run: Planned, overlays: dict[int, dict]) -> list[dict]:
    """Probe every shaped pair, one at a time; the records for run.json (see the module docstring)."""
    from netem.measure import L2_FRAME, TCP_PAYLOAD

    placement = run.plan.placement
    addr = {n["name"]: n["addr"] for o in overlays.values() for n in o["nodes"]}
    delay = {r.name: (r.up.delay_s, r.down.delay_s) for r in run.plan.roles}
    records = []
    for src, dst, rate in pairs(run.plan):
        nbytes = int(max(256 * 1024, rate / 8 * CALIBRATION_S))
        timeout_s = 30.0 + 5 * nbytes * 8 / rate
        src_host, dst_host = placement.of(src).host_index, placement.of(dst).host_index
        ceiling = rate * TCP_PAYLOAD / L2_FRAME
        tries: list[float] = []
        while len(tries) < CALIBRATION_TRIES:
            port = ask(agent, dst_host, {"op": "serve", "role": dst}, timeout=30)["port"]
            sent = ask(agent, src_host, {"op": "send", "role": src, "addr": addr[dst], "port": port, "nbytes": nbytes,
                                         "timeout_s": timeout_s}, timeout=timeout_s + 10)["result"]
            got = ask(agent, dst_host, {"op": "collect", "role": dst, "timeout_s": 30}, timeout=40)["result"]
            tries.append(got["goodput_bps"] or 0.0)
            if abs(tries[-1] / ceiling - 1) <= CALIBRATION_TOLERANCE:
                break
        best = min(tries, key=lambda bps: abs(bps / ceiling - 1))
        rtts = sorted(sent["rtt_s"])
        records.append({"pair": f"{src}->{dst}", "src_host": placement.hosts[src_host].name,
                        "dst_host": placement.hosts[dst_host].name, "configured_bps": rate,
                        "tcp_ceiling_bps": ceiling, "measured_bps": best, "tries_bps": tries,
                        "ratio": best / ceiling, "bytes": nbytes,
                        "rtt_s": rtts[len(rtts) // 2] if rtts else None,
                        "configured_rtt_s": delay[src][0] + delay[dst][1] + delay[dst][0] + delay[src][1],
                        "rtt_in_kernel": False})
    return records


def calibration_problem(records: list[dict]) -> str:
    for rec in records:
        off = abs(rec["ratio"] - 1)
        if off > CALIBRATION_TOLERANCE:
            return (f"calibration: pair {rec['pair']} ({rec['src_host']} -> {rec['dst_host']}) measured "
                    f"{(rec['measured_bps'] or 0) / 1e6:.2f} Mbit/s against {rec['tcp_ceiling_bps'] / 1e6:.2f} Mbit/s "
                    f"(the TCP ceiling of {rec['configured_bps'] / 1e6:g} Mbit/s configured): {off:.0%} off, more than "
                    f"{CALIBRATION_TOLERANCE:.0%}")
    return ""


# ----- launching this host's roles -------------------------------------------------------------------
def places(agent: Agent, run: Planned, master: str) -> list[dict]:
    """Every role's place as harness.cluster.role reads it; only this host's have a namespace."""
    plan, placement = run.plan, run.plan.placement
    out = []
    for role in plan.roles:
        host = placement.of(role.name).host_index
        if agent.overlay is not None:
            node = agent.overlay.nodes.get(role.name)
            addr = agent.overlay.spec.addr(role.rank)
            out.append({"netns": node.netns if node else None, "ifname": "nb0", "addr": addr, "local": host == agent.me.rank})
        else:                              # userspace: the hosts' own network, paced by the transport
            out.append({"netns": None, "ifname": agent.me.iface, "addr": agent.addrs[host], "local": host == agent.me.rank})
    return out


def write_payload(run: Planned, payload: dict, where: list[dict], host: str, trace_t0: float) -> Path:
    """``cluster/payload-<host>.json``: what harness.cluster.launch writes on one host, with this host's namespaces."""
    from harness.cluster.launch import WAIT_MARGIN_S
    from harness.wire.links import LinkTable

    specs = run.plan.role_specs()
    spec = {"entry": run.plan.entry, "backend": run.plan.backend.value, "run_dir": str(run.run_dir), "payload": payload,
            "seed": int(run.plan.seed), "wait_s": float(run.plan.hang_timeout_s) + WAIT_MARGIN_S,
            "links": LinkTable(tuple(r.up for r in specs), tuple(r.down for r in specs)).to_json(), "trace_t0": trace_t0,
            "roles": [{"name": r.name, "device": r.device, "netns": p["netns"], "ifname": p["ifname"] if p["netns"] else None,
                       "addr": p["addr"], "expendable": bool(r.expendable and i > 0), "cores": list(r.cores), "host": r.host}
                      for i, (r, p) in enumerate(zip(specs, where))]}
    path = run.run_dir / "cluster" / f"payload-{host}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec, indent=1, sort_keys=True))
    return path


def start_roles(agent: Agent, run: Planned, payload: dict, master_addr: str, master_port: int, trace_t0: float) -> None:
    """Fork (or exec) this host's roles, as harness.cluster.launch does on one host."""
    from harness.cluster import spawn
    from harness.cluster.launch import _base_env, _may_fork
    from harness.cluster.supervise import start

    where = places(agent, run, master_addr)
    path = write_payload(run, payload, where, agent.me.name, trace_t0)
    env = _base_env(len(run.plan.roles), master_addr, master_port)
    forking = spawn.mode() == "fork" and _may_fork(run.plan.entry)
    for rank, (role, place) in enumerate(zip(run.plan.role_specs(), where)):
        if not place["local"]:
            continue
        argv = [str(path), str(rank)]
        prefix = ["ip", "netns", "exec", place["netns"]] if place["netns"] else []
        role_env = {**env, "RANK": str(rank), "GLOO_SOCKET_IFNAME": place["ifname"], "NARROWBAND_ROLE": role.name}
        agent.procs.append(start(role.name, rank, [*prefix, sys.executable, "-m", "harness.cluster.role", *argv], role_env,
                                 run.run_dir / "logs" / f"{role.name}.log", expendable=role.expendable,
                                 fork=(argv, place["netns"]) if forking else None))


def kill_roles(agent: Agent) -> None:
    """Stop this host's roles from another thread (watch then sees them exit and returns)."""
    import signal

    for proc in list(agent.procs):
        try:
            os.killpg(proc.popen.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass


def watch_roles(agent: Agent, run: Planned, progress: bool) -> tuple[str, str]:
    from harness.cluster.launch import STARTUP_TIMEOUT_S
    from harness.cluster.supervise import watch

    return watch(agent.procs, run.plan.hang_timeout_s, STARTUP_TIMEOUT_S, progress, label=f"node[{agent.me.name}]")


def local_result(agent: Agent, status: str, reason: str) -> dict:
    return {"op": "done", "host": agent.me.name, "status": status, "reason": reason,
            "exit_codes": {p.name: p.popen.returncode for p in agent.procs},
            "dropped": [p.dropped for p in agent.procs if p.dropped],
            "qdiscs": agent.overlay.qdisc_show() if agent.overlay is not None else {}}


# ----- agent 0: one run across every host ------------------------------------------------------------
def lead_run(agent: Agent, run: Planned, index: int, progress: bool) -> str:
    """Agent 0's part of one run; returns its status (run.json is written here)."""
    from harness.record import set_status, write_run_json
    from harness.run import _bases, _prepare_dir, load_record, load_snapshot, run_metadata

    if not _prepare_dir(run.run_dir, bool(run.cfg.resume)):
        agent.broadcast({"op": "skip", "index": index})
        print(f"[narrowband] {run.scenario}/{run.run_id}: complete already, skipped (resume=true)", flush=True)
        return "skipped"
    from omegaconf import OmegaConf

    OmegaConf.set_struct(run.cfg, False)
    run.cfg.scenario, run.cfg.variant = run.scenario, run.variant
    meta = {**run_metadata(run.cfg, "python -m harness.node " + " ".join(sys.argv[1:])), "run_id": run.run_id,
            "scenario": run.scenario, "variant": run.variant, "backend": run.plan.backend.value,
            "backend_reason": run.plan.backend_reason + ("; across hosts: the transport paces bytes on the hosts' own "
                                                         "network, NO kernel shaping" if run.plan.backend.value == "userspace" else
                                                         "; across hosts: VXLAN overlay, HTB per pair (netem/overlay.py)"),
            "status": "running", "reason": "", "placement": run.plan.placement.describe(), "multihost": True}
    run.run_dir.mkdir(parents=True, exist_ok=True)
    write_run_json(run.run_dir, meta)
    payload = {"cfg": meta["config"], "keys": run.plan.run_keys(run.scenario, run.variant, run.run_id), "plan": run.plan.to_dict()}
    t0, load0 = time.time(), load_snapshot()
    status, reason, extra = "failed", "", {"overlays": {}, "calibration": [], "hosts": {}}
    agent.current = run
    try:
        for host in range(1, agent.hosts):
            ask(agent, host, {"op": "run", "index": index}, timeout=120)
        kernel = run.plan.backend.value != "userspace"
        if kernel:
            vni, tag = secrets.randbelow(2 ** 24 - 2) + 1, secrets.randbelow(200) + 20
            subnet = f"10.{tag}.{secrets.randbelow(254) + 1}"
            for host in range(agent.hosts):
                extra["overlays"][agent.names[host]] = ask(agent, host, {"op": "build", "vni": vni, "subnet": subnet,
                                                                         "mtu": int(run.cfg.placement.mtu)}, timeout=120)["overlay"]
            print(f"[narrowband] node: overlay VXLAN {vni} on {subnet}.0/24 across {agent.hosts} hosts; calibrating "
                  f"{len(pairs(run.plan))} pairs", flush=True)
            extra["calibration"] = calibrate(agent, run, {i: extra["overlays"][n] for i, n in enumerate(agent.names)})
            for rec in extra["calibration"]:
                print(f"[narrowband]   {rec['pair']}: {rec['measured_bps'] / 1e6:.2f} Mbit/s of {rec['tcp_ceiling_bps'] / 1e6:.2f} "
                      f"({rec['ratio']:.1%}), rtt {rec['rtt_s'] * 1e3:.2f} ms", flush=True)
            problem = calibration_problem(extra["calibration"])
            if problem:
                raise ClusterError(problem)
            master_addr, master_port = agent.overlay.spec.addr(0), MASTER_PORT
        else:
            master_addr, master_port = agent.addrs[0], _free_port()
        status, reason, extra["hosts"] = launch_everywhere(agent, run, payload, master_addr, master_port, progress)
    except ClusterError as err:
        status, reason = "failed", str(err)
    except Exception as err:  # noqa: BLE001 - recorded: a host's build error (TopologyError, netlink) fails the run
        status, reason = "failed", f"{type(err).__name__}: {err}"
    except KeyboardInterrupt:
        status, reason = "interrupted", "KeyboardInterrupt"
    finally:
        for host in range(agent.hosts):
            try:
                ask(agent, host, {"op": "teardown"}, timeout=60)
            except (ClusterError, OSError) as err:
                print(f"[narrowband] node: teardown on {agent.names[host]}: {err}", file=sys.stderr, flush=True)
        extra["load"] = load_record(load0, load_snapshot())
        extra["bases"] = _bases(meta["config"])
        set_status(run.run_dir, status, reason, seconds=round(time.time() - t0, 3),
                   finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra)
    print(f"[narrowband] run {run.run_id}: {status}{(' - ' + reason) if reason else ''}", flush=True)
    if status == "interrupted":
        raise KeyboardInterrupt
    return status


def launch_everywhere(agent: Agent, run: Planned, payload: dict, master_addr: str, master_port: int,
                      progress: bool) -> tuple[str, str, dict]:
    """Every host starts its roles; the first failure anywhere stops them all.

    The reason names a dead agent before any other failure: when an agent is SIGKILLed its roles
    die with it, and the roles on the other hosts fail on their broken connections at about the
    same moment; which of those is heard first is a race, the agent's death is the cause."""
    trace_t0 = time.time()
    agent.broadcast({"op": "launch", "master_addr": master_addr, "master_port": master_port, "trace_t0": trace_t0})
    start_roles(agent, run, payload, master_addr, master_port, trace_t0)
    results: dict[str, dict] = {}
    first: list[tuple[int, str]] = []              # (0 for a dead agent, else 1; the reason), in the order heard

    def hear(host: int) -> None:
        msg = agent.lines[host].recv()
        died = msg is None
        if died:
            msg = {"op": "done", "host": agent.names[host], "status": "failed",
                   "reason": f"the agent on {agent.names[host]} died (its control connection closed)"}
        results[agent.names[host]] = msg
        if msg["status"] != "ok":
            first.append((0 if died else 1, f"host {agent.names[host]}: {msg['reason']}"))
            kill_roles(agent)
            agent.broadcast({"op": "stop"})

    threads = [threading.Thread(target=hear, args=(h,), name=f"hear-{h}", daemon=True) for h in range(1, agent.hosts)]
    for t in threads:
        t.start()
    status, reason = watch_roles(agent, run, progress)
    if status != "ok":
        first.append((1, f"host {agent.me.name}: {reason}"))
        agent.broadcast({"op": "stop"})
    for t in threads:
        t.join(timeout=run.plan.hang_timeout_s + 60)
    agent.broadcast({"op": "stop"})                  # releases the others' listeners
    results[agent.me.name] = local_result(agent, status, reason)
    if any(t.is_alive() for t in threads):
        first.append((1, "some host never reported the end of its roles"))
    if first:
        return "failed", min(first, key=lambda f: f[0])[1], results      # min keeps the earliest of a priority
    return "ok", "", results


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


# ----- every other agent: do what agent 0 asks ----------------------------------------------------------
def follow(agent: Agent, runs: list[Planned], progress: bool) -> int:
    line = agent.lines[0]
    while True:
        msg = line.recv()
        if msg is None:
            agent.teardown()
            print(f"[narrowband] node {agent.me.name}: agent 0 went away; removed this host's part", file=sys.stderr, flush=True)
            return 1
        op = msg["op"]
        if op in ("stop", "skip"):
            continue
        if op == "finish":
            agent.teardown()
            return 0 if msg.get("ok") else 1
        if op == "run":
            agent.current = runs[msg["index"]]
            line.send({"op": "ok"})
            continue
        if op == "launch":
            run = agent.current
            payload = {"cfg": _config(run), "keys": run.plan.run_keys(run.scenario, run.variant, run.run_id),
                       "plan": run.plan.to_dict()}
            start_roles(agent, run, payload, msg["master_addr"], msg["master_port"], msg["trace_t0"])
            stop = threading.Thread(target=_listen_for_stop, args=(agent, line), name="stop", daemon=True)
            stop.start()
            status, reason = watch_roles(agent, run, progress)
            line.send(local_result(agent, status, reason))
            stop.join()
            continue
        try:
            line.send(handle(agent, msg))
        except Exception as err:  # noqa: BLE001 - agent 0 records it and fails the run everywhere
            line.send({"op": "error", "message": f"host {agent.me.name}: {type(err).__name__}: {err}"})


def _listen_for_stop(agent: Agent, line: Line) -> None:
    msg = line.recv()
    kill_roles(agent)
    if msg is None:
        print(f"[narrowband] node {agent.me.name}: agent 0 went away during the run; stopping this host's roles",
              file=sys.stderr, flush=True)


def _config(run: Planned) -> dict:
    from omegaconf import OmegaConf

    OmegaConf.set_struct(run.cfg, False)
    run.cfg.scenario, run.cfg.variant = run.scenario, run.variant
    return OmegaConf.to_container(run.cfg, resolve=True)


# ----- entry point ---------------------------------------------------------------------------------------
_AGENT_PID: list[int] = []


def _interrupt(signum, frame) -> None:
    """SIGTERM in the agent: an orderly teardown (KeyboardInterrupt). In a forked copy of the agent
    (pyroute2 forks helpers to enter namespaces, and ends them with SIGTERM): die as a plain process."""
    if os.getpid() not in _AGENT_PID:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    from harness.placement import node_rank

    overrides = list(sys.argv[1:] if argv is None else argv)
    if not overrides or overrides[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if overrides else 2
    try:
        runs = planned_runs(overrides)
        placement = runs[0].plan.placement
        rank = node_rank(placement)
        master = os.environ.get("MASTER_ADDR") or placement.hosts[0].addr
        if not master:
            raise ConfigError("MASTER_ADDR: not set and the first host has no addr=; every agent needs agent 0's address")
        port = os.environ.get(CONTROL_PORT_ENV, str(CONTROL_PORT))
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{CONTROL_PORT_ENV}: {port!r} is not a TCP port (1-65535)")
        agent = Agent.connect(runs, rank, master, int(port))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    progress = bool(runs[0].cfg.progress)
    _AGENT_PID[:] = [os.getpid()]
    signal.signal(signal.SIGTERM, _interrupt)        # srun / torchrun end an agent with SIGTERM: tear down in order
    with ExitStack() as stack:
        stack.callback(agent.teardown)
        stack.callback(agent.close_lines)
        if rank != 0:
            try:
                return follow(agent, runs, progress)
            except KeyboardInterrupt:
                return 130
        statuses = []
        try:
            for index, run in enumerate(runs):
                print(f"\n=== {run.scenario}: run {index + 1}/{len(runs)}: {run.variant}, seed {run.plan.seed} "
                      f"across {agent.hosts} hosts ===", flush=True)
                statuses.append(lead_run(agent, run, index, progress))
        except KeyboardInterrupt:
            agent.broadcast({"op": "finish", "ok": False})
            return 130
        ok = all(s in ("ok", "skipped") for s in statuses)
        agent.broadcast({"op": "finish", "ok": ok})
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

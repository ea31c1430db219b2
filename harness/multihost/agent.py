"""The agent of one host: admission (harness.multihost.admission) and agent 0's verdict on every
host (phase 1), this host's part of the overlay (phase 2), the two halves of the calibration probe
(phase 3); ``ask`` runs an operation on any host (agent 0 on itself through the same ``handle``,
which checks every operation against its schema and its context first)."""
from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ClusterError
from harness.multihost.admission import Door, join
from harness.multihost.control import Line, connect_timeout_s, log
from harness.multihost.host import HostError, Me, route_to, shaping_problem
from harness.multihost.messages import TO_PEER, Limits, MessageError, check
from harness.multihost.runs import Planned, digest

PEER = Path(__file__).resolve().parent.parent.parent / "netem" / "peer.py"


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
    limits: Limits | None = None                             # the ranges messages are checked against

    # -- phase 1: control ----------------------------------------------------------------------
    @classmethod
    def connect(cls, runs: list[Planned], rank: int, master: str, port: int, secret: bytes) -> "Agent":
        """Admit every host (agent 0) or be admitted (the others), each proving it holds ``secret``
        (harness.multihost.admission); HostError (one line, exit 2) before anything is built."""
        placement = runs[0].plan.placement
        host = placement.hosts[rank]
        addr, iface = route_to(master)
        if host.addr and host.addr not in (addr, master) and rank != 0:
            addr = host.addr
        iface = host.iface or iface
        agent = cls(Me(rank, host.name, addr, iface), len(placement.hosts), [h.name for h in placement.hosts])
        agent.limits = Limits(hosts=agent.hosts, runs=len(runs))
        wanted = runs[0].plan.backend.value != "userspace"
        hello = {"op": "hello", "rank": rank, "host": host.name, "addr": addr, "iface": iface,
                 "problem": shaping_problem() if wanted else "", "digest": digest(runs)}
        if rank == 0:
            agent._gather(hello, port, secret)
        else:
            agent._join(hello, master, port, secret)
        return agent

    def _gather(self, hello: dict, port: int, secret: bytes) -> None:
        bind = self.me.addr
        if ipaddress.IPv4Address(bind).is_loopback:     # MASTER_ADDR resolved to this host's loopback (a
            bind = "0.0.0.0"                            # 127.0.1.1 line in /etc/hosts): no interface is known
            log(f"MASTER_ADDR resolves to {self.me.addr} here, a loopback address: listening on every interface")
        door = Door(bind, port, self.hosts, secret, self.limits)
        door.gather(hello, connect_timeout_s())
        self.lines = dict(door.lines)
        problem = self._judge(door.hellos)
        if problem:
            self.broadcast({"op": "error", "message": problem + door.refused_summary()})
            self.close_lines()
            raise HostError(problem + door.refused_summary())
        self.addrs = {r: h["addr"] for r, h in door.hellos.items()}
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

    def _join(self, hello: dict, master: str, port: int, secret: bytes) -> None:
        line, msg = join(master, port, secret, hello, self.limits, connect_timeout_s(), self.me.name)
        self.lines[0] = line
        if msg["op"] == "error":
            line.close()
            raise HostError(msg["message"])
        addrs = {int(r): a for r, a in msg["addrs"].items()}
        if sorted(addrs) != list(range(self.hosts)):
            line.close()
            raise HostError(f"agent 0's welcome: addrs: ranks {sorted(addrs)} are not allowed; allowed: 0 .. {self.hosts - 1}")
        self.addrs = addrs

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
    try:
        reply = line.recv(timeout=timeout)
    except MessageError as err:
        raise ClusterError(f"host {agent.names[host]}: its reply to {msg['op']}: {err}") from None
    if reply is None:
        why = f" ({line.problem})" if line.problem else ""
        raise ClusterError(f"host {agent.names[host]}: its agent closed the control connection (died?) during "
                           f"{msg['op']}{why}")
    if reply.get("op") == "error":
        raise ClusterError(reply["message"])
    return reply


def handle(agent: Agent, msg: dict) -> dict:
    """Run one operation of agent 0 on this host, after its schema (harness.multihost.messages) and its
    context: a run chosen, the role one of this host's, a probe address on this run's overlay.
    MessageError or ClusterError (one line) for anything else; nothing is done then."""
    check(msg, TO_PEER, agent.limits)
    op = msg["op"]
    if op == "teardown":
        agent.teardown()
        return {"op": "down"}
    run = agent.current
    if run is None:
        raise ClusterError(f"control: op {op!r} before any run was chosen")
    if op == "build":
        if agent.overlay is not None:
            raise ClusterError("control: op 'build': this host's overlay exists already (teardown first)")
        return {"op": "built", "overlay": agent.build(run, msg["vni"], msg["subnet"], msg["mtu"])}
    if op not in ("serve", "send", "collect"):
        raise ClusterError(f"control: op {op!r} is not run by handle here")
    mine = [p.role for p in run.plan.placement.on(agent.me.rank)]
    if msg["role"] not in mine:
        raise ClusterError(f"control: op {op!r}: role: {msg['role']!r} is not allowed; allowed: this host's roles "
                           f"({', '.join(mine) or 'none'})")
    if agent.overlay is None:
        raise ClusterError(f"control: op {op!r} before this host's overlay was built")
    if op == "serve":
        return {"op": "port", "port": agent.serve(msg["role"])}
    if op == "collect":
        if msg["role"] not in agent.servers:
            raise ClusterError(f"control: op 'collect': role {msg['role']!r} has no probe receiver (serve first)")
        return {"op": "received", "result": agent.collect(msg["role"], msg["timeout_s"])}
    subnet = ipaddress.IPv4Network(f"{agent.overlay.spec.subnet}.0/24")
    if ipaddress.IPv4Address(msg["addr"]) not in subnet:
        raise ClusterError(f"control: op 'send': addr: {msg['addr']!r} is not allowed; allowed: an address on this "
                           f"run's overlay {subnet}")
    return {"op": "sent", "result": agent.send(msg["role"], msg["addr"], msg["port"], msg["nbytes"], msg["timeout_s"])}

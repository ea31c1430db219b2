"""The agent of one host: the hello and agent 0's verdict on every host (phase 1), this host's
part of the overlay (phase 2), the two halves of the calibration probe (phase 3); ``ask`` runs an
operation on any host (agent 0 on itself through the same ``handle``)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ClusterError
from harness.multihost.control import Line, connect_timeout_s
from harness.multihost.host import HostError, Me, route_to, shaping_problem
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

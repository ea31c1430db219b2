"""Emulated tier: the VXLAN overlay across 3 stand-in hosts shapes every pair by the kernel (egress
HTB per destination, ingress IFB per source), within 10% of the configured rate, and nothing is
left in any host after a clean exit or a SIGKILL of one host's owner."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from multihost_hosts import in_host, stand_in_hosts
from netem.measure import TCP_PAYLOAD, L2_FRAME, transfer
from netem.names import list_ours

pytestmark = [pytest.mark.emulated]
HOST_SCRIPT = str(Path(__file__).with_name("overlay_host.py"))
ROLES = [{"name": "learner", "rank": 0, "up": None, "down": None},
         {"name": "worker0", "rank": 1, "up": "20mbit", "down": "20mbit"},
         {"name": "worker1", "rank": 2, "up": "40mbit", "down": "10mbit"}]


class Fabric:
    """The roles' namespaces of every stand-in host, as netem.measure.transfer wants a topology."""

    def __init__(self, described: list[dict]):
        from netem.topology import Node

        self.nodes = {n["name"]: Node(n["name"], 0, n["netns"], n["ifname"], n["addr"]) for d in described for n in d["nodes"]}

    def exec_prefix(self, name: str) -> list[str]:
        return ["ip", "netns", "exec", self.nodes[name].netns]

    def counters(self, name: str):
        from netem.counters import read

        return read(self.nodes[name].ifname, self.nodes[name].netns)


def _start(hosts, vni: int) -> list:
    addrs = [hosts.nodes[f"h{i}"].addr for i in range(3)]
    procs = []
    for i in range(3):
        spec = {"vni": vni, "subnet": "10.251.9", "iface": "nb0", "local": addrs[i], "mine": [ROLES[i]["name"]],
                "remotes": [a for a in addrs if a != addrs[i]], "roles": ROLES}
        procs.append(in_host(hosts, i, [sys.executable, HOST_SCRIPT, json.dumps(spec)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()}))
    described = []
    for p in procs:
        line = p.stdout.readline()
        assert line.startswith("{"), f"a host's overlay did not come up (exit {p.poll()})"
        described.append(json.loads(line))
    return procs, described


def _ours(procs) -> list[str]:
    pids = {str(p.pid) for p in procs}
    return [n.name for n in list_ours() if n.owner in pids]


def test_every_pair_is_shaped_across_hosts_and_nothing_is_left(kernel_backend):
    with stand_in_hosts(3) as hosts:
        procs, described = _start(hosts, vni=4301)
        try:
            assert all(d["mtu"] == 1400 and d["iface"] == "nb0" for d in described)
            fabric = Fabric(described)
            ceiling = TCP_PAYLOAD / L2_FRAME
            # a -> b crosses a's uplink and b's downlink: the slower of the two
            for src, dst, rate in (("learner", "worker0", 20e6), ("worker0", "learner", 20e6),
                                   ("learner", "worker1", 10e6), ("worker1", "learner", 40e6)):
                done = transfer(fabric, src, dst, int(rate / 8 * 1.0), pings=5)
                assert abs(done.goodput_bps / (rate * ceiling) - 1) < 0.10, (src, dst, done.goodput_bps)
            assert len(_ours(procs)) == 6                     # a switch and one role namespace per host
        finally:
            for p in procs:
                p.stdin.close()
            for p in procs:
                p.wait(timeout=30)
        assert _ours(procs) == []


def test_a_sigkilled_owner_leaves_nothing_behind(kernel_backend):
    with stand_in_hosts(3) as hosts:
        procs, _ = _start(hosts, vni=4302)
        try:
            victim = procs[1]
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait(timeout=10)
            deadline = time.monotonic() + 20                 # its guard notices the closed pipe
            while time.monotonic() < deadline and any(n.owner == str(victim.pid) for n in list_ours()):
                time.sleep(0.1)
            assert not [n.name for n in list_ours() if n.owner == str(victim.pid)]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.stdin.close()
                    p.wait(timeout=30)
        assert _ours(procs) == []

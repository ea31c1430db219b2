"""One host's part of a multi-host run: its roles' namespaces joined to the other hosts' through a
VXLAN overlay on the host's real interface, every pair of roles shaped by the kernel.

    with HostOverlay(OverlaySpec(vni=..., subnet="10.77.3", iface="eth0", local_addr="192.0.2.2",
                                 remotes=("192.0.2.3", ...), roles=every_role, local=("learner",))) as ov:
        ov.nodes["learner"]      -> Node(netns, ifname "nb0", addr "10.77.3.1")
        ov.exec_prefix("learner"), ov.counters("learner"), ov.describe(), ov.qdisc_show()

Per host, everything is created inside namespaces named as netem.names says (``nb-<pid>-<tag>-sw``
for the host's switch, ``nb-<pid>-<tag>-n<rank>`` for each local role), so deleting them removes
it all and ``python -m netem clean`` finds a dead agent's leftovers:

    host's own namespace   the real interface (``iface``): only a VXLAN device is created on it
                           (``link`` = iface, UDP ``port``), then moved at once into the switch
                           namespace; its UDP socket stays here. The real interface's qdiscs
                           are never touched.
    switch  nb-..-sw       bridge ``br0``: the VXLAN device ``vx0`` and one veth port ``p<rank>``
                           per local role; an all-zeros FDB entry per remote host floods what the
                           bridge has not learnt to every other host (head-end replication).
    role    nb-..-n<rank>  ``nb0`` (MTU ``mtu``, address ``<subnet>.<rank + 1>/24``); egress: an
                           HTB root whose class 1:1 is the role's uplink rate and whose children
                           (one per peer role, u32 filter on the peer's destination address) share
                           it; ingress: redirected (u32 + mirred) to the ifb ``nbi0``, whose HTB
                           class 1:1 is the role's downlink rate with one child per peer (source
                           address). Anything not addressed to a peer role (ARP, other hosts)
                           goes to the unshaped default class 1:ffff.

So a packet from role a to role b crosses a's uplink and b's downlink, as on the one-host star
(netem/topology.py), whichever hosts they are on; gloo's several connections per pair all fall
in the pair's class because the filter matches the peer's address, not a port. Rates are L2
rates (tc counts Ethernet frames), as on the star. Delay and jitter are the transport's job
(backend ``tc``: this kernel has no sch_netem; a netem leaf per class is not built).

Teardown: close() (also on an error while building) removes the namespaces. A SIGKILLed owner
cannot, so a guard process (``python -m netem.overlay guard PREFIX``, its own session) holds a
pipe from the owner and removes every ``PREFIX-*`` namespace when the pipe closes, however the
owner ended. Role processes forked from the owner close inherited descriptors, so the pipe is
the owner's alone.

MTU: VXLAN adds 50 bytes; the real interface must carry ``mtu + 50`` (checked before anything
is built). GSO is off on the role veths (one frame per packet, as on the star).
"""
from __future__ import annotations

import ipaddress
import math
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass

from netem.cleanup import remove_namespaces
from netem.counters import Counters, read
from netem.names import allocate_prefix
from netem.shaping import tbf_burst_bytes, tbf_limit_bytes
from netem.spec import LinkSpec
from netem.topology import NO_GSO, Node, TopologyError, _qdisc_text, _quiet_ipv6, _up

VXLAN_OVERHEAD = 50                 # outer Ethernet 14 + IP 20 + UDP 8 + VXLAN 8
VXLAN_PORT = 4789
IFB = "nbi0"
ROLE_IF = "nb0"
DEFAULT_MINOR = 0xFFFF              # the unshaped class of unclassified traffic
UNSHAPED = "10gbit"                 # what the default class may use (a veth's order of magnitude)
ETH_P_IP = 0x0800                   # host order: pyroute2 converts it
ETH_P_ALL = 0x0003


@dataclass(frozen=True)
class OverlayRole:
    """A role of the run: name, rank (its address is <subnet>.<rank + 1>) and its two directions."""
    name: str
    rank: int
    up: LinkSpec = LinkSpec()       # egress at the role (towards every peer)
    down: LinkSpec = LinkSpec()     # towards the role (from every peer)


@dataclass(frozen=True)
class OverlaySpec:
    """What one host builds. ``roles``: every role of the run; ``local``: the names of this host's."""
    vni: int                        # VXLAN network identifier, one per run (1 .. 2**24 - 1)
    subnet: str                     # first three octets of the run's overlay /24, e.g. "10.77.3"
    iface: str                      # the host's real interface (in the namespace this process runs in)
    local_addr: str                 # this host's address on iface
    remotes: tuple[str, ...]        # the other hosts' addresses on their real interfaces
    roles: tuple[OverlayRole, ...]
    local: tuple[str, ...]
    mtu: int = 1400
    port: int = VXLAN_PORT

    def addr(self, rank: int) -> str:
        return f"{self.subnet}.{rank + 1}"

    def check(self) -> None:
        """TopologyError naming the field and what is allowed (before anything is built)."""
        if not 1 <= self.vni < 2 ** 24:
            raise TopologyError(f"overlay vni: {self.vni} is not allowed; use 1 .. {2 ** 24 - 1}")
        try:
            ipaddress.IPv4Network(f"{self.subnet}.0/24")
        except ValueError:
            raise TopologyError(f"overlay subnet: {self.subnet!r} is not the first three octets of an IPv4 /24") from None
        if not 576 <= self.mtu <= 9000:
            raise TopologyError(f"placement.mtu: {self.mtu} is not allowed; use 576 .. 9000")
        names = {r.name for r in self.roles}
        missing = [n for n in self.local if n not in names]
        if missing:
            raise TopologyError(f"overlay local role {missing[0]!r} is not a role of the run ({', '.join(sorted(names))})")
        if len(self.roles) > 250:
            raise TopologyError(f"{len(self.roles)} roles: at most 250 on one overlay /24")


class HostOverlay:
    """Builds this host's part on __enter__, removes all of it on close() (idempotent; also at exit)."""

    def __init__(self, spec: OverlaySpec):
        spec.check()
        self.spec = spec
        self.prefix = ""
        self.nodes: dict[str, Node] = {}
        self.backend = "tc"
        self.transport_delay = True
        self._created: list[str] = []
        self._owner = os.getpid()
        self._closed = False
        self._lock = threading.RLock()
        self._guard: subprocess.Popen | None = None

    # ---- build ------------------------------------------------------------------------------
    def __enter__(self) -> "HostOverlay":
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _build(self) -> None:
        from pyroute2 import IPRoute

        spec = self.spec
        with IPRoute() as host:
            found = host.link_lookup(ifname=spec.iface)
            if not found:
                raise TopologyError(f"placement: interface {spec.iface!r} does not exist on this host")
            iface = found[0]
            iface_mtu = host.get_links(iface)[0].get("IFLA_MTU") or 1500
            if iface_mtu < spec.mtu + VXLAN_OVERHEAD:
                raise TopologyError(f"placement.mtu: {spec.mtu} + {VXLAN_OVERHEAD} (VXLAN) exceeds {spec.iface}'s "
                                    f"MTU {iface_mtu}; use placement.mtu <= {iface_mtu - VXLAN_OVERHEAD}")
            self.prefix = allocate_prefix(str(self._owner), first="sw")
            switch = f"{self.prefix}-sw"
            self._created.append(switch)
            self._guard = start_guard(self.prefix)
            vx = f"nbvx{self.prefix.rsplit('-', 1)[1]}"          # unique name in the host's namespace for a moment
            host.link("add", ifname=vx, kind="vxlan", vxlan_id=spec.vni, vxlan_link=iface,
                      vxlan_local=spec.local_addr, vxlan_port=spec.port, vxlan_learning=1)
            index = host.link_lookup(ifname=vx)[0]
            try:
                host.link("set", index=index, net_ns_fd=switch)
            except BaseException:
                host.link("del", index=index)
                raise
        _quiet_ipv6(switch)
        with IPRoute(netns=switch, flags=0) as sw:
            _up(sw, "lo")
            sw.link("add", ifname="br0", kind="bridge")
            bridge = _up(sw, "br0")
            index = sw.link_lookup(ifname=vx)[0]
            sw.link("set", index=index, ifname="vx0", mtu=spec.mtu, master=bridge)
            sw.link("set", index=index, state="up")
            for remote in spec.remotes:
                sw.fdb("append", ifindex=index, lladdr="00:00:00:00:00:00", dst=remote)
            for role in spec.roles:
                if role.name in spec.local:
                    self._add_role(sw, bridge, role)

    def _add_role(self, sw, bridge: int, role) -> None:
        from pyroute2 import IPRoute, netns

        spec = self.spec
        ns = f"{self.prefix}-n{role.rank}"
        with self._lock:
            if self._closed:
                raise TopologyError("overlay was closed while it was being built (signal?)")
            netns.create(ns)
            self._created.append(ns)
        _quiet_ipv6(ns)
        port = f"p{role.rank}"
        sw.link("add", ifname=port, kind="veth", peer={"ifname": ROLE_IF, "net_ns_fd": ns})
        index = sw.link_lookup(ifname=port)[0]
        sw.link("set", index=index, master=bridge, mtu=spec.mtu, **NO_GSO)
        sw.link("set", index=index, state="up")
        peers = [r for r in spec.roles if r.name != role.name]
        addr = spec.addr(role.rank)
        with IPRoute(netns=ns, flags=0) as node:
            _up(node, "lo")
            nb0 = node.link_lookup(ifname=ROLE_IF)[0]
            node.link("set", index=nb0, mtu=spec.mtu, **NO_GSO)
            node.addr("add", index=nb0, address=addr, prefixlen=24)
            node.link("set", index=nb0, state="up")
            if role.up.rate_bps:
                shape(node, nb0, role.up.rate_bps, [(p.rank + 1, spec.addr(p.rank)) for p in peers], match="dst", mtu=spec.mtu)
            if role.down.rate_bps:
                node.link("add", ifname=IFB, kind="ifb")
                ifb = node.link_lookup(ifname=IFB)[0]
                node.link("set", index=ifb, mtu=spec.mtu, state="up")
                node.tc("add", "ingress", index=nb0, handle="ffff:")
                node.tc("add-filter", "u32", index=nb0, parent="ffff:", protocol=ETH_P_ALL, prio=10,
                        target=0x10001, keys=["0x0/0x0+0"],
                        action={"kind": "mirred", "direction": "egress", "action": "redirect", "ifindex": ifb})
                shape(node, ifb, role.down.rate_bps, [(p.rank + 1, spec.addr(p.rank)) for p in peers], match="src", mtu=spec.mtu)
        self.nodes[role.name] = Node(role.name, role.rank, ns, ROLE_IF, addr)

    # ---- use --------------------------------------------------------------------------------
    @property
    def namespaces(self) -> list[str]:
        return list(self._created)

    def exec_prefix(self, name: str) -> list[str]:
        return ["ip", "netns", "exec", self.nodes[name].netns]

    def counters(self, name: str) -> Counters:
        node = self.nodes[name]
        return read(node.ifname, node.netns)

    def qdisc_show(self) -> dict[str, str]:
        return {ns: _qdisc_text(ns) for ns in self._created}

    def describe(self) -> dict:
        spec = self.spec
        return {"prefix": self.prefix, "backend": self.backend, "transport_delay": True, "vni": spec.vni,
                "subnet": f"{spec.subnet}.0/24", "mtu": spec.mtu, "iface": spec.iface, "local_addr": spec.local_addr,
                "remotes": list(spec.remotes), "switch": f"{self.prefix}-sw",
                "nodes": [{"name": n.name, "netns": n.netns, "ifname": n.ifname, "addr": n.addr,
                           "up": r.up.describe(), "down": r.down.describe()}
                          for r in spec.roles for n in [self.nodes.get(r.name)] if n is not None]}

    # ---- teardown ---------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._closed or os.getpid() != self._owner:
                return
            self._closed = True
            try:
                remove_namespaces(list(reversed(self._created)))   # the VXLAN device goes with the switch
            finally:
                if self._guard is not None:                        # nothing left for it: let it go
                    self._guard.stdin.close()
                    self._guard.wait()


def shape(ipr, index: int, rate_bps: float, peers: list[tuple[int, str]], match: str, mtu: int = 1500) -> None:
    """HTB on interface ``index``: class 1:1 at ``rate_bps`` (L2 bits/s) shared by one child per peer
    (``minor``, address; u32 on the IPv4 ``match`` = dst | src address), unclassified traffic to the
    unshaped 1:ffff. Bursts as tbf's (4 ms at the rate, netem.shaping); leaves are FIFOs holding
    tbf's queue in packets of ``mtu``."""
    offset = {"dst": 16, "src": 12}[match]
    rate = f"{int(round(rate_bps))}bit"
    burst = tbf_burst_bytes(rate_bps)
    ipr.tc("add", "htb", index=index, handle="1:", default=DEFAULT_MINOR)
    ipr.tc("add-class", "htb", index=index, handle="1:1", parent="1:", rate=rate, ceil=rate, burst=burst, cburst=burst)
    ipr.tc("add-class", "htb", index=index, handle=f"1:{DEFAULT_MINOR:x}", parent="1:", rate=UNSHAPED, ceil=UNSHAPED,
           burst=256 * 1024, cburst=256 * 1024)
    share = f"{max(8000, int(round(rate_bps / max(1, len(peers)))))}bit"
    for minor, addr in peers:
        handle = f"1:{minor + 0x10:x}"
        ipr.tc("add-class", "htb", index=index, handle=handle, parent="1:1", rate=share, ceil=rate,
               burst=burst, cburst=burst)
        ipr.tc("add", "pfifo", index=index, parent=handle, handle=f"{minor + 0x10:x}:",   # pyroute2's bfifo is refused
               limit=max(16, math.ceil(tbf_limit_bytes(rate_bps) / (mtu + 14))))
        hexaddr = int(ipaddress.IPv4Address(addr))
        ipr.tc("add-filter", "u32", index=index, parent="1:", prio=1, protocol=ETH_P_IP,
               target=handle, keys=[f"0x{hexaddr:08x}/0xffffffff+{offset}"])


def start_guard(prefix: str) -> subprocess.Popen:
    """A process that removes ``prefix``'s namespaces when this process's pipe to it closes."""
    return subprocess.Popen([sys.executable, "-m", "netem.overlay", "guard", prefix], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, start_new_session=True)


def _guard(prefix: str) -> int:
    from netem.names import list_ours

    signal.signal(signal.SIGINT, signal.SIG_IGN)      # a Ctrl-C to the terminal is the owner's to handle
    while sys.stdin.buffer.read(4096):
        pass
    left = [n.name for n in list_ours() if n.prefix == prefix]
    if left:
        remove_namespaces(left)
        print(f"netem.overlay guard: the owner of {prefix} ended without removing {', '.join(left)}; removed",
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "guard":
        raise SystemExit(_guard(sys.argv[2]))
    print("usage: python -m netem.overlay guard nb-<pid>-<tag>", file=sys.stderr)
    raise SystemExit(2)

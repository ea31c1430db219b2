"""Star topology: one switch namespace with a bridge, one namespace and one veth per node.

    node i namespace  nb-<pid>-<tag>-n<i>     interface `nb0`, address 10.<t0>.<t1>.<i+1>/24
    switch namespace  nb-<pid>-<tag>-sw       bridge `br0`, port `p<i>` = peer of node i's nb0

Uplink of node i (node -> anyone) = egress qdisc of its `nb0`; downlink (anyone -> node i) =
egress qdisc of switch port `p<i>`. A packet from node a to node b crosses a's uplink and b's
downlink, so asymmetric, heterogeneous and hub-bottlenecked links are all one NodeSpec away.
Nothing is created in the caller's namespace: deleting our namespaces removes every veth,
bridge and qdisc. Teardown runs on __exit__ (also after an exception), on SIGINT/SIGTERM
(then the signal is re-delivered to the previous handler) and at interpreter exit.
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from netem import caps as caps_mod
from netem.cleanup import clean, remove_namespaces
from netem.counters import Counters, read
from netem.names import PERSISTENT_OWNER, allocate_prefix, parse, subnet_of
from netem.replay import Target, TraceReplay
from netem.shaping import Qdisc, apply, plan
from netem.spec import LinkSpec

__all__ = ["NodeSpec", "Node", "StarTopology", "TopologyError", "clean"]

NODE_IFNAME = "nb0"
BRIDGE = "br0"
MAX_NODES = 250
# One frame per packet, as on a real wire: without this, veth carries 64 KB GSO super-packets,
# and its counters then omit the per-segment TCP/IP/Ethernet headers (wire bytes too low).
NO_GSO = {"gso_max_segs": 1}
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TopologyError(RuntimeError):
    """The topology cannot be built here (no root, missing kernel feature, bad node list)."""


@dataclass(frozen=True)
class NodeSpec:
    """A node and its two link directions: up = egress at the node, down = egress at its switch port."""

    name: str
    up: LinkSpec = LinkSpec()
    down: LinkSpec = LinkSpec()


@dataclass(frozen=True)
class Node:
    """A built node. addr: IPv4 without prefix length; ifname lives inside netns."""

    name: str
    index: int
    netns: str
    ifname: str
    addr: str


class StarTopology:
    """Context manager that builds the star on __enter__ and removes all of it on close().

    backend: "auto" picks netem when the kernel has it, else tc (tbf). After entry
    `backend` is "netem" or "tc", and `transport_delay` is True when delay/jitter are not
    done by the kernel (tc backend): the transport must add them.
    """

    def __init__(self, nodes: list[NodeSpec], backend: str = "auto", prefix: str | None = None,
                 persistent: bool = False):
        if not nodes:
            raise TopologyError("a topology needs at least one node")
        if len(nodes) > MAX_NODES:
            raise TopologyError(f"{len(nodes)} nodes: at most {MAX_NODES} per topology (use the model backend beyond)")
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise TopologyError(f"node names must be unique: {names}")
        if backend not in ("auto", "netem", "tc"):
            raise TopologyError(f"backend: {backend!r} is not a kernel backend; use auto, netem or tc")
        if prefix is not None and (parse(f"{prefix}-sw") is None):
            raise TopologyError(f"prefix: {prefix!r} is not of the form nb-<pid|up>-<4 hex>")
        self.specs = list(nodes)
        self.requested_backend = backend
        self.backend = backend
        self.transport_delay = False
        self.nodes: dict[str, Node] = {}
        self.prefix = prefix
        self.subnet = ""
        self.persistent = persistent      # True: owner "up", survives this process (netem up)
        self._created: list[str] = []     # namespaces, in creation order
        self._owner_pid = os.getpid()
        self._closed = False
        self._lock = threading.RLock()
        self.t0 = 0.0                     # wall clock when the links came up: traces play from here
        self.replay: TraceReplay | None = None

    # ---- build -----------------------------------------------------------------------------
    def __enter__(self) -> "StarTopology":
        self.backend = self._choose_backend()
        plans = {spec.name: (plan(spec.up, self.backend, f"{spec.name}.up"),
                             plan(spec.down, self.backend, f"{spec.name}.down")) for spec in self.specs}
        self.transport_delay = self.backend == "tc"
        _register(self)
        try:
            self._build(plans)
            self._start_replay(plans)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _choose_backend(self) -> str:
        found = caps_mod.probe()
        if not (found.root and found.netns):
            raise TopologyError(f"cannot build namespaces here: {found.notes.get('netns', 'needs root or CAP_NET_ADMIN')}")
        wanted = found.best_backend() if self.requested_backend == "auto" else self.requested_backend
        if wanted == "netem" and not found.qdiscs.get("netem"):
            raise TopologyError("backend netem: kernel has no sch_netem; use backend tc (delay in the transport)")
        if wanted != "netem" and not found.qdiscs.get("tbf"):
            raise TopologyError("backend tc: kernel has no sch_tbf; only the userspace backend works here")
        return wanted

    def _build(self, plans: dict[str, tuple[list[Qdisc], list[Qdisc]]]) -> None:
        from pyroute2 import IPRoute

        owner = PERSISTENT_OWNER if self.persistent else str(self._owner_pid)
        if self.prefix is None:
            self.prefix = allocate_prefix(owner, first="sw")
            self._created.append(f"{self.prefix}-sw")
        else:
            self._new_namespace(f"{self.prefix}-sw")
        switch = f"{self.prefix}-sw"
        self._check_open()
        self.subnet = subnet_of(self.prefix.rsplit("-", 1)[1])
        _quiet_ipv6(switch)
        with IPRoute(netns=switch, flags=0) as sw:
            _up(sw, "lo")
            sw.link("add", ifname=BRIDGE, kind="bridge")
            bridge = _up(sw, BRIDGE)
            for i, spec in enumerate(self.specs):
                ns = f"{self.prefix}-n{i}"
                self._new_namespace(ns)
                _quiet_ipv6(ns)
                port = f"p{i}"
                sw.link("add", ifname=port, kind="veth", peer={"ifname": NODE_IFNAME, "net_ns_fd": ns})
                port_index = sw.link_lookup(ifname=port)[0]
                sw.link("set", index=port_index, master=bridge, **NO_GSO)
                apply(sw, port_index, plans[spec.name][1])            # downlink: egress at the switch port
                sw.link("set", index=port_index, state="up")
                addr = f"{self.subnet}.{i + 1}"
                with IPRoute(netns=ns, flags=0) as node:
                    _up(node, "lo")
                    index = node.link_lookup(ifname=NODE_IFNAME)[0]
                    node.link("set", index=index, **NO_GSO)
                    node.addr("add", index=index, address=addr, prefixlen=24)
                    apply(node, index, plans[spec.name][0])           # uplink: egress at the node
                    node.link("set", index=index, state="up")
                self.nodes[spec.name] = Node(spec.name, i, ns, NODE_IFNAME, addr)

    def _start_replay(self, plans: dict[str, tuple[list[Qdisc], list[Qdisc]]]) -> None:
        """Set t0 and start changing the traced directions' qdiscs (netem/replay.py), if any."""
        self.t0 = time.time()
        targets = []
        for spec in self.specs:
            node = self.nodes[spec.name]
            for side, link, netns, ifname, qdiscs in (
                    ("up", spec.up, node.netns, NODE_IFNAME, plans[spec.name][0]),
                    ("down", spec.down, f"{self.prefix}-sw", f"p{node.index}", plans[spec.name][1])):
                if link.trace and qdiscs:
                    targets.append(Target(f"{spec.name}.{side}", netns, ifname, qdiscs[0], link.trace))
        if targets:
            self.replay = TraceReplay(targets, self.t0).start()

    def _check_open(self) -> None:
        if self._closed:   # a signal handler tore us down while building
            raise TopologyError("topology was closed while it was being built (signal?)")

    def _new_namespace(self, name: str) -> None:
        from pyroute2 import netns

        self._check_open()
        netns.create(name)
        with self._lock:
            if self._closed:
                remove_namespaces([name])
                self._check_open()
            self._created.append(name)

    # ---- use -------------------------------------------------------------------------------
    @property
    def namespaces(self) -> list[str]:
        """Every namespace of this topology (switch first)."""
        return list(self._created)

    def node_spec(self, name: str) -> NodeSpec:
        return next(s for s in self.specs if s.name == name)

    def exec_prefix(self, name: str) -> list[str]:
        """Command prefix that runs a program inside node `name`'s namespace."""
        return ["ip", "netns", "exec", self.nodes[name].netns]

    def counters(self, name: str) -> Counters:
        """Counters of node `name`'s veth: tx = its uplink, rx = its downlink (bytes are L2 frames)."""
        node = self.nodes[name]
        return read(node.ifname, node.netns)

    def qdisc_show(self) -> dict[str, str]:
        """`tc qdisc show` text per namespace (switch ports carry the downlinks)."""
        return {ns: _qdisc_text(ns) for ns in self._created}

    def describe(self) -> dict:
        """Plain-dict summary (for run.json and `netem up --json`)."""
        return {
            "prefix": self.prefix, "backend": self.backend, "subnet": f"{self.subnet}.0/24",
            "transport_delay": self.transport_delay, "switch": f"{self.prefix}-sw", "t0": self.t0,
            "replay": self.replay.describe() if self.replay else None,
            "nodes": [{"name": n.name, "netns": n.netns, "ifname": n.ifname, "addr": n.addr,
                       "up": self.node_spec(n.name).up.describe(),
                       "down": self.node_spec(n.name).down.describe()} for n in self.nodes.values()],
        }

    # ---- teardown --------------------------------------------------------------------------
    def detach(self) -> None:
        """Leave the topology standing after this process exits (used by `netem up`)."""
        with self._lock:
            self._closed = True
            _unregister(self)

    def close(self) -> None:
        """Remove every namespace (and so every veth, bridge and qdisc) of this topology. Idempotent."""
        with self._lock:
            if self._closed or os.getpid() != self._owner_pid:
                return
            self._closed = True
            try:
                if self.replay is not None:
                    self.replay.stop()
                remove_namespaces(list(reversed(self._created)))
            finally:
                _unregister(self)


# ---- process-wide teardown on signals and exit ------------------------------------------------
_OPEN: list[StarTopology] = []
_PREVIOUS: dict[int, object] = {}
_ATEXIT = False


def _register(topology: StarTopology) -> None:
    global _ATEXIT
    _OPEN.append(topology)
    if not _ATEXIT:
        atexit.register(_close_all)
        _ATEXIT = True
    if not _PREVIOUS and threading.current_thread() is threading.main_thread():
        for sig in _SIGNALS:
            _PREVIOUS[sig] = signal.signal(sig, _on_signal)


def _unregister(topology: StarTopology) -> None:
    if topology in _OPEN:
        _OPEN.remove(topology)
    if not _OPEN:
        _restore_handlers()


def _restore_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, previous in list(_PREVIOUS.items()):
        signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
    _PREVIOUS.clear()


def _close_all() -> None:
    for topology in list(_OPEN):
        topology.close()


def _on_signal(signum: int, frame) -> None:
    """Tear down every open topology, then hand the signal to whoever had it before us."""
    previous = _PREVIOUS.get(signum, signal.SIG_DFL)
    owned = [t for t in _OPEN if t._owner_pid == os.getpid()]
    for topology in owned:
        topology.close()
    _restore_handlers()
    if callable(previous):
        previous(signum, frame)          # e.g. default_int_handler raises KeyboardInterrupt
    elif previous != signal.SIG_IGN:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)     # die of the signal: the conventional exit status


# ---- helpers --------------------------------------------------------------------------------
def _up(ipr, ifname: str) -> int:
    index = ipr.link_lookup(ifname=ifname)[0]
    ipr.link("set", index=index, state="up")
    return index


def _quiet_ipv6(ns: str) -> None:
    """Disable IPv6 in `ns` so that neighbour discovery and MLD chatter do not add to counters."""
    script = ("for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 /proc/sys/net/ipv6/conf/default/disable_ipv6;"
              " do [ -w $f ] && echo 1 > $f; done; true")
    subprocess.run(["ip", "netns", "exec", ns, "sh", "-c", script], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _qdisc_text(ns: str) -> str:
    if shutil.which("tc"):
        done = subprocess.run(["tc", "-n", ns, "qdisc", "show"], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return done.stdout
    from pyroute2 import IPRoute

    lines = []
    with IPRoute(netns=ns, flags=0) as ipr:
        names = {link["index"]: link.get("ifname") for link in ipr.get_links()}
        for msg in ipr.get_qdiscs():
            handle = msg["handle"]
            lines.append(f"qdisc {msg.get('kind')} {handle >> 16:x}: dev {names.get(msg['index'], msg['index'])} "
                         f"{'root' if msg['parent'] == 0xFFFFFFFF else hex(msg['parent'])}")
    return "\n".join(lines) + "\n"

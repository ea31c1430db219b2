"""What this kernel and this process can emulate, found by trying, cached.

`probe()` creates a throwaway namespace (named with our prefix, so `clean()` recognises it if
the probe itself is killed), tries each feature inside it (veth, bridge, qdiscs netem / tbf /
htb / ingress, an ifb device, a u32 filter with a mirred redirect), and removes it. Nothing is
touched in the caller's namespace. Kernel facts are cached in-process and on disk at
`/tmp/narrowband-caps-<kernel release>.json` (written by a root probe only); whether this
process may create namespaces (root or CAP_NET_ADMIN) is checked live every call.
"""
from __future__ import annotations

import errno
import json
import os
import platform
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

QDISC_FEATURES = ("netem", "tbf", "htb", "ingress", "ifb", "mirred")
LINK_FEATURES = ("veth", "bridge")
CACHE_VERSION = 1
_CACHE: "Capabilities | None" = None
CAP_NET_ADMIN = 12


@dataclass(frozen=True)
class Capabilities:
    """Kernel and process facts. `qdiscs` holds netem, tbf, htb, ingress, ifb and mirred (an action)."""

    root: bool                       # euid 0 or CAP_NET_ADMIN: may create namespaces and qdiscs
    netns: bool                      # a namespace with a veth pair and a bridge was built here
    kernel: str                      # platform.release()
    qdiscs: dict[str, bool] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)   # feature -> why it is missing

    def best_backend(self) -> str:
        """'netem' (kernel netem), 'tc' (tbf shaping, delay in the transport) or 'userspace'."""
        if self.root and self.netns:
            if self.qdiscs.get("netem"):
                return "netem"
            if self.qdiscs.get("tbf"):
                return "tc"
        return "userspace"

    def emulation_missing(self) -> str | None:
        """Why real namespaces and kernel shaping cannot be used here; None when they can."""
        if not self.root:
            return "needs root or CAP_NET_ADMIN to create network namespaces"
        if not self.netns:
            return f"network namespaces unavailable here ({self.notes.get('netns', 'probe failed')})"
        if not (self.qdiscs.get("tbf") or self.qdiscs.get("netem")):
            return "kernel has neither sch_tbf nor sch_netem"
        return None

    def backends(self) -> list[str]:
        """Every backend this machine can run, best first ('model' is always possible)."""
        found = []
        if self.root and self.netns and self.qdiscs.get("netem"):
            found.append("netem")
        if self.root and self.netns and self.qdiscs.get("tbf"):
            found.append("tc")
        return found + ["userspace", "model"]

    def to_dict(self) -> dict:
        return {**asdict(self), "best_backend": self.best_backend()}


def may_admin_net() -> bool:
    """True when this process is root or holds CAP_NET_ADMIN in its effective set."""
    if os.geteuid() == 0:
        return True
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    except OSError:
        pass
    return False


def cache_path() -> Path:
    return Path(os.environ.get("NARROWBAND_CAPS_CACHE", f"/tmp/narrowband-caps-{platform.release()}.json"))


def probe(refresh: bool = False) -> Capabilities:
    """Capabilities of this machine; probes the kernel once (needs root), then reads the cache."""
    global _CACHE
    root = may_admin_net()
    if _CACHE is not None and not refresh and _CACHE.root == root:
        return _CACHE
    kernel = platform.release()
    facts = None if refresh else _read_cache(kernel)
    if facts is None and root:
        facts = _probe_kernel()
        _write_cache(kernel, facts)
    if facts is None:
        reason = "not probed: needs root or CAP_NET_ADMIN"
        facts = {"netns": False, "qdiscs": {k: False for k in QDISC_FEATURES},
                 "notes": {"netns": reason}}
    _CACHE = Capabilities(root=root, netns=root and facts["netns"], kernel=kernel,
                          qdiscs=dict(facts["qdiscs"]), notes=dict(facts["notes"]))
    return _CACHE


def _read_cache(kernel: str) -> dict | None:
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return None
    if data.get("version") != CACHE_VERSION or data.get("kernel") != kernel:
        return None
    return data


def _write_cache(kernel: str, facts: dict) -> None:
    path = cache_path()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"version": CACHE_VERSION, "kernel": kernel, **facts}, indent=1))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def _probe_kernel() -> dict:
    """Try every feature inside a throwaway namespace; return {netns, qdiscs, notes}."""
    from pyroute2 import IPRoute, netns
    from netem.names import allocate_prefix

    notes: dict[str, str] = {}
    found = {k: False for k in QDISC_FEATURES + LINK_FEATURES}
    try:
        name = f"{allocate_prefix(first='caps')}-caps"
    except OSError as error:
        notes["netns"] = f"cannot create a network namespace: {error}"
        return {"netns": False, "qdiscs": {k: False for k in QDISC_FEATURES}, "notes": notes}
    try:
        with IPRoute(netns=name, flags=0) as ipr:
            index = _try(found, notes, "veth", lambda: _add_veth(ipr, "cv0"))
            _try(found, notes, "bridge", lambda: ipr.link("add", ifname="cbr0", kind="bridge"))
            if index is not None:
                for n, (kind, options) in enumerate((("netem", {"delay": 1000}),
                                                     ("tbf", {"rate": "1mbit", "burst": 16384, "latency": 50000}),
                                                     ("htb", {}))):
                    veth = _add_veth(ipr, f"cq{n}")   # a fresh interface per qdisc: no replace quirks
                    _try(found, notes, kind, lambda: ipr.tc("add", kind, index=veth, handle="1:", **options))
                _try(found, notes, "ingress", lambda: ipr.tc("add", "ingress", index=index, handle="ffff:"))
            ifb = _try(found, notes, "ifb", lambda: _add_link(ipr, "cifb0", "ifb"))
            if index is not None and found["ingress"] and ifb is not None:
                _try(found, notes, "mirred", lambda: ipr.tc(
                    "add-filter", "u32", index=index, parent="ffff:", protocol=socket.htons(0x0003),
                    prio=10, target=0x10001, keys=["0x0/0x0+0"],
                    action={"kind": "mirred", "direction": "egress", "action": "redirect", "ifindex": ifb}))
    finally:
        netns.remove(name)
    netns_ok = found["veth"] and found["bridge"]
    if not netns_ok:
        notes.setdefault("netns", "namespace created but veth/bridge failed")
    return {"netns": netns_ok, "qdiscs": {k: found[k] for k in QDISC_FEATURES}, "notes": notes}


def _try(found: dict, notes: dict, feature: str, action):
    try:
        result = action()
    except Exception as error:  # any netlink refusal means "not available here"
        notes[feature] = _reason(feature, error)
        return None
    found[feature] = True
    return result if result is not None else True


def _reason(feature: str, error: Exception) -> str:
    code = getattr(error, "code", None) or getattr(error, "errno", None)
    if feature in ("netem", "tbf", "htb", "ingress") and code == errno.ENOENT:
        return f"kernel has no sch_{feature}"
    return f"{feature} refused: {error}"


def _add_link(ipr, ifname: str, kind: str) -> int:
    ipr.link("add", ifname=ifname, kind=kind)
    return ipr.link_lookup(ifname=ifname)[0]


def _add_veth(ipr, ifname: str) -> int:
    ipr.link("add", ifname=ifname, kind="veth", peer=f"{ifname}p")
    index = ipr.link_lookup(ifname=ifname)[0]
    ipr.link("set", index=index, state="up")
    return index

"""This host as the others see it: its node rank, name, address and interface on the real network,
and whether it can build the overlay (what its hello says; harness.commands.node's docstring, step 1)."""
from __future__ import annotations

import socket
from dataclasses import dataclass

from harness.errors import ConfigError


class HostError(ConfigError):
    """A host that cannot take part (one line: the host and what is wrong; exit 2)."""


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

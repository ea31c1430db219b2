"""Interface byte and packet counters (the kernel's 64-bit stats), optionally inside a namespace.

On a node's veth `tx_*` is what the node sent (its uplink) and `rx_*` what it received (its
downlink). Counted bytes are L2 frames (Ethernet header included, no preamble or FCS): what
tbf and netem meter, so wire_bytes * 8 / rate is the ideal transfer time.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Counters:
    """Cumulative counters of one interface (bytes and packets since it was created)."""

    tx_bytes: int = 0
    rx_bytes: int = 0
    tx_packets: int = 0
    rx_packets: int = 0

    def __sub__(self, before: "Counters") -> "Counters":
        """Delta over a phase: `after - before`."""
        return Counters(*(a - b for a, b in zip(self.astuple(), before.astuple())))

    def astuple(self) -> tuple[int, int, int, int]:
        return (self.tx_bytes, self.rx_bytes, self.tx_packets, self.rx_packets)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class CounterError(RuntimeError):
    """The interface or namespace does not exist (any more)."""


def read(ifname: str, netns: str | None = None) -> Counters:
    """Counters of `ifname` now; inside namespace `netns` when given (never creates it).

    Costs one netlink request (plus a short fork to enter `netns` when given); a process that
    already runs inside the namespace should pass netns=None.
    """
    from pyroute2 import IPRoute

    try:
        with IPRoute(netns=netns, flags=0) if netns else IPRoute() as ipr:
            found = ipr.link_lookup(ifname=ifname)
            if not found:
                raise CounterError(f"no interface {ifname!r} in namespace {netns or '(current)'}")
            link = ipr.link("get", index=found[0])[0]
    except FileNotFoundError as error:
        raise CounterError(f"no namespace {netns!r}") from error
    stats = link.get("stats64") or link.get("stats") or {}
    return Counters(
        tx_bytes=int(stats.get("tx_bytes", 0)),
        rx_bytes=int(stats.get("rx_bytes", 0)),
        tx_packets=int(stats.get("tx_packets", 0)),
        rx_packets=int(stats.get("rx_packets", 0)),
    )

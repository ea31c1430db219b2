"""An executor takes on a population client's link: its qdiscs and its channel's link table.

Who changes the qdisc: the executor itself, not the launcher. The launcher owns the
namespaces (it creates them and removes them, with every qdisc in them, when the run ends:
nothing set here can outlive the run), but the moment a link must change is known only to the
executor (just before the client's first transfer) and the launcher has no request channel to
its roles: asking it would add a protocol and a round trip per client. The executor is root
inside its namespace (forked from the root launcher, then setns), so it replaces
  the uplink:   the root qdisc of its own veth (``nb0``, egress at the node), and
  the downlink: the root qdisc of its switch port ``p<rank>`` in the switch namespace
                (``<prefix>-sw``, next to its own ``<prefix>-n<rank>``),
through pyroute2 with the same recipes the topology used (netem.shaping.plan / apply, ``tc
replace``). The server, which decides the assignment, updates its own copy of the link table
(``use_link``) so that the delays it adds (tc backend) and its ideal times follow the client.

Backends: netem (rate + delay in the kernel), tc (rate in the kernel, delay in the transport
from the link table), userspace (the channel's token buckets are rebuilt at the client's rate),
model (link table only).
"""
from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from harness.backends import backend_of
from netem.spec import LinkSpec

_LOCK = threading.Lock()


def specs(link: dict[str, float]) -> tuple[LinkSpec, LinkSpec]:
    """(up, down) LinkSpecs of a population client's link (population.PopulationPlan.link)."""
    return (LinkSpec(rate_bps=link["up_bps"], delay_s=link["delay_s"]),
            LinkSpec(rate_bps=link["down_bps"], delay_s=link["delay_s"]))


def use_link(channel: Any, rank: int, up: LinkSpec, down: LinkSpec) -> None:
    """Replace rank ``rank``'s entry of ``channel.links`` (thread-safe: the server's per-executor threads)."""
    with _LOCK:
        table = channel.links
        ups, downs = list(table.up), list(table.down)
        ups[rank], downs[rank] = up, down
        channel.links = replace(table, up=tuple(ups), down=tuple(downs))
        if getattr(channel, "rank", None) == rank and hasattr(channel, "_bucket"):
            channel._up, channel._down = channel._bucket(up.rate_bps), channel._bucket(down.rate_bps)


def set_qdiscs(netns: str, ifname: str, rank: int, backend: str, up: LinkSpec, down: LinkSpec) -> None:
    """Replace the kernel shaping of this node's link (we run inside ``netns`` as root)."""
    from pyroute2 import IPRoute

    from netem.shaping import apply, plan

    switch = f"{netns.rsplit('-', 1)[0]}-sw"
    with IPRoute() as node:                                   # our own namespace: the uplink
        apply(node, node.link_lookup(ifname=ifname)[0], plan(up, backend, where="executor.up"))
    with IPRoute(netns=switch, flags=0) as sw:                # our switch port: the downlink
        apply(sw, sw.link_lookup(ifname=f"p{rank}")[0], plan(down, backend, where="executor.down"))


def take_link(ctx: Any, link: dict[str, float]) -> None:
    """Executor side: shape this node's link as ``link`` (kernel backends) and use it in the channel."""
    up, down = specs(link)
    if backend_of(ctx.backend).kernel and ctx.netns:
        set_qdiscs(ctx.netns, ctx.ifname, ctx.rank, ctx.backend, up, down)
    use_link(ctx.channel, ctx.rank, up, down)

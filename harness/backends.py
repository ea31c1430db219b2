"""The link backends: one class each, written once here, and how ``auto`` resolves.

    backend_of(name) -> LinkBackend   the class of a resolved ``net.backend`` (netem, tc, userspace, model)
    BACKENDS                          every value of ``net.backend`` (``auto`` included)
    TRANSPORT_BACKENDS                what a run actually uses (``auto`` resolved away)
    resolve_backend(requested) -> (backend, why)

A backend is one :class:`LinkBackend` subclass with a ``name``: what it can shape (a kernel qdisc
it needs, whether it drops packets, plays link traces, works across hosts), how the transport
works over it (the kernel shapes, or the channel paces bytes with token buckets and adds delay
per message, or transfers are modelled, not timed), how the launcher places its roles (their own
namespaces on a star topology, or processes on loopback), and what the report calls it. The rest
of the harness asks these attributes (``backend_of(ctx.backend).modelled``), never compares a
backend's name. ``auto`` picks the available emulating backend of highest ``fidelity`` (netem >
tc > userspace; ``model`` is never picked). The kernel-side rules of one link (tbf's rate
ceiling, the qdisc recipes) stay in netem/shaping.py, which does not import the harness.
"""
from __future__ import annotations

from enum import Enum
from typing import ClassVar

from harness.errors import ClusterError


class LinkBackend:
    """How a run's links are carried. Subclasses set the class attributes; instances are stateless."""
    name: ClassVar[str] = ""
    label: ClassVar[str] = ""              # what the report calls it
    why: ClassVar[str] = ""                # what it does, said once at launch and kept in run.json
    qdisc: ClassVar[str | None] = None     # the kernel qdisc it needs (None: no namespaces, no root)
    drops_packets: ClassVar[bool] = False  # emulates loss > 0 (everything else refuses it)
    plays_traces: ClassVar[bool] = True    # replays net.trace (a rate that changes on schedule)
    paces: ClassVar[bool] = False          # the channel paces bytes with a token bucket per link direction
    transport_delay: ClassVar[bool] = False   # the channel adds delay/jitter per message at the receiver
    modelled: ClassVar[bool] = False       # nothing is paced: a transfer's seconds are its modelled ideal
    across_hosts: ClassVar[bool] = False   # a multi-host run may use it (harness.multihost)
    fidelity: ClassVar[int] = 0            # closeness to a real network: ``auto`` and the report's reference
                                           # pick the highest available; 0: not an emulation (never picked)

    @property
    def kernel(self) -> bool:
        """Builds namespaces and qdiscs (a star topology of its own per run; needs root)."""
        return self.qdisc is not None

    def missing(self, caps) -> str | None:
        """Why this machine (netem.caps.Capabilities) cannot run it; None when it can."""
        if not self.kernel:
            return None
        if not caps.root:
            return "needs root (CAP_NET_ADMIN) to build namespaces and qdiscs"
        if not caps.netns:
            return f"cannot create network namespaces here ({caps.notes.get('netns', 'unknown reason')})"
        if not caps.qdiscs.get(self.qdisc):
            return f"needs sch_{self.qdisc}, which this kernel lacks"
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Netem(LinkBackend):
    name = "netem"
    label = "kernel netem"
    why = "kernel netem: rate, delay, jitter and loss in the kernel"
    qdisc = "netem"
    drops_packets = True
    across_hosts = True
    fidelity = 3


class Tc(LinkBackend):
    name = "tc"
    label = "kernel tbf"
    why = "kernel tbf shapes the rate; delay/jitter added per message by the transport"
    qdisc = "tbf"
    transport_delay = True
    across_hosts = True
    fidelity = 2


class Userspace(LinkBackend):
    name = "userspace"
    label = "userspace pacing"
    why = "loopback, bytes paced by the transport (lower fidelity: no kernel queues, no TCP dynamics)"
    plays_traces = False                   # its token buckets pace at one fixed rate
    paces = True
    transport_delay = True
    across_hosts = True                    # the hosts' own network, paced by the transport
    fidelity = 1


class Model(LinkBackend):
    name = "model"
    label = "fluid model"
    why = "no shaping: transfer times are modelled as delay + bytes*8/rate (fluid, fair sharing)"
    modelled = True


def _registry() -> dict[str, LinkBackend]:
    found = {}
    for cls in LinkBackend.__subclasses__():
        if cls.name in found:
            raise TypeError(f"{cls.__qualname__}.name: {cls.name!r} is taken by {type(found[cls.name]).__qualname__}")
        found[cls.name] = cls()
    return found


REGISTRY: dict[str, LinkBackend] = _registry()
TRANSPORT_BACKENDS: tuple[str, ...] = tuple(REGISTRY)
BACKENDS: tuple[str, ...] = ("auto", *TRANSPORT_BACKENDS)
KERNEL_BACKENDS: tuple[str, ...] = tuple(n for n, b in REGISTRY.items() if b.kernel)
EMULATED: tuple[str, ...] = tuple(sorted((n for n, b in REGISTRY.items() if b.fidelity > 0),
                                         key=lambda n: -REGISTRY[n].fidelity))   # best first
Backend = Enum("Backend", [("AUTO", "auto"), *((n.upper(), n) for n in TRANSPORT_BACKENDS)], type=str)
Backend.__doc__ = "``net.backend``: a closed set (``auto`` and every registered backend's name)."


def backend_of(name: str) -> LinkBackend:
    """The backend called ``name`` (a resolved one: not ``auto``); ValueError naming the allowed ones."""
    try:
        return REGISTRY[str(getattr(name, "value", name))]
    except KeyError:
        raise ValueError(f"net.backend: {name!r} is not a transport backend; choose one of "
                         f"{', '.join(TRANSPORT_BACKENDS)}") from None


def best_available(caps) -> str:
    """The emulating backend of highest fidelity that this machine can run (what ``auto`` picks)."""
    return next(n for n in EMULATED if REGISTRY[n].missing(caps) is None)


def resolve_backend(requested: str, caps=None) -> tuple[str, str]:
    """(backend, why) for ``requested``; a kernel backend this machine cannot run is a ClusterError."""
    from netem import caps as caps_mod

    if requested not in BACKENDS:
        raise ClusterError(f"net.backend: {requested!r} is not allowed; choose one of {', '.join(BACKENDS)}")
    caps = caps or caps_mod.probe()
    if requested == "auto":
        best = best_available(caps)
        if REGISTRY[best].kernel:
            others = [n for n in EMULATED if REGISTRY[n].fidelity > REGISTRY[best].fidelity]
            lacking = f"root, no sch_{REGISTRY[others[-1]].qdisc}; " if others else ""
            return best, f"auto: {lacking}{REGISTRY[best].why}"
        cause = "not root (no CAP_NET_ADMIN)" if not caps.root else "kernel cannot shape links"
        return best, f"auto: {cause}; {REGISTRY[best].why}"
    missing = REGISTRY[requested].missing(caps)
    if missing:
        fix = "run as root or use net.backend=userspace (or auto)" if not caps.root else \
            f"use net.backend={best_available(caps)}"
        raise ClusterError(f"net.backend: {requested!r} {missing}; {fix}")
    return requested, f"asked for; {REGISTRY[requested].why}"

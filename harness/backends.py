"""The link backends: their names, what each does, and how ``auto`` resolves (one place).

    BACKENDS            every value of ``net.backend`` (``auto`` included)
    TRANSPORT_BACKENDS  what a run actually uses (``auto`` resolved away)
    KERNEL_BACKENDS     the ones that build namespaces and qdiscs (need root)
    resolve_backend(requested) -> (backend, why)

Rules, each written once here: a kernel backend needs root (CAP_NET_ADMIN), network
namespaces and its qdisc (sch_netem for ``netem``, sch_tbf for ``tc``); only ``netem`` drops
packets (:func:`drops_packets`); every backend but userspace plays link traces
(:func:`plays_traces`); ``auto`` picks netem > tc > userspace (netem.caps decides
what this machine has). The kernel-side rules of one link (tbf's rate ceiling) stay in
netem/shaping.py, which does not import the harness.
"""
from __future__ import annotations

from enum import Enum

from harness.errors import ClusterError


class Backend(str, Enum):
    """``net.backend``: a closed set."""
    AUTO = "auto"
    NETEM = "netem"
    TC = "tc"
    USERSPACE = "userspace"
    MODEL = "model"


BACKENDS: tuple[str, ...] = tuple(b.value for b in Backend)
TRANSPORT_BACKENDS: tuple[str, ...] = tuple(b for b in BACKENDS if b != "auto")
KERNEL_BACKENDS: tuple[str, ...] = ("netem", "tc")
QDISC = {"netem": "netem", "tc": "tbf"}       # the qdisc a kernel backend needs
WHY = {
    "netem": "kernel netem: rate, delay, jitter and loss in the kernel",
    "tc": "kernel tbf shapes the rate; delay/jitter added per message by the transport",
    "userspace": "loopback, bytes paced by the transport (lower fidelity: no kernel queues, no TCP dynamics)",
    "model": "no shaping: transfer times are modelled as delay + bytes*8/rate (fluid, fair sharing)",
}


def drops_packets(backend: str) -> bool:
    """Only kernel netem can emulate packet loss; every other backend refuses loss > 0."""
    return backend == "netem"


def plays_traces(backend: str) -> bool:
    """Link traces (net.trace) are replayed by kernel backends (tc change on schedule) and integrated
    by ``model``; ``userspace``'s token buckets pace at one fixed rate, so it refuses them."""
    return backend != "userspace"


def resolve_backend(requested: str, caps=None) -> tuple[str, str]:
    """(backend, why) for ``requested``; a kernel backend this machine cannot run is a ClusterError."""
    from netem import caps as caps_mod

    if requested not in BACKENDS:
        raise ClusterError(f"net.backend: {requested!r} is not allowed; choose one of {', '.join(BACKENDS)}")
    caps = caps or caps_mod.probe()
    if requested == "auto":
        best = caps.best_backend()
        if best == "userspace":
            cause = "not root (no CAP_NET_ADMIN)" if not caps.root else "kernel cannot shape links"
            return best, f"auto: {cause}; {WHY[best]}"
        if best == "tc":
            return best, f"auto: root, no sch_netem; {WHY[best]}"
        return best, f"auto: {WHY[best]}"
    if requested in KERNEL_BACKENDS:
        if not caps.root:
            raise ClusterError(f"net.backend: {requested!r} needs root (CAP_NET_ADMIN) to build namespaces and "
                               f"qdiscs; run as root or use net.backend=userspace (or auto)")
        if not caps.netns:
            raise ClusterError(f"net.backend: {requested!r} cannot create network namespaces here "
                               f"({caps.notes.get('netns', 'unknown reason')}); use net.backend=userspace")
        if not caps.qdiscs.get(QDISC[requested]):
            raise ClusterError(f"net.backend: {requested!r} needs sch_{QDISC[requested]}, which this kernel lacks; "
                               f"use net.backend={caps.best_backend()}")
    return requested, f"asked for; {WHY[requested]}"

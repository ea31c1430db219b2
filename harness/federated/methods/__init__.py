"""Federated LoRA methods: what the server keeps, what goes down and up, how it aggregates.

A method is one module of this package holding a named :class:`Method` subclass, plus one file
harness/conf/method/<name>.yaml with ``kind: federated``; discovery finds it (``METHODS``), the
planner checks the name, the roles build it (:func:`build`), and nothing else is edited. One
method declares ``report_reference = True``: the report takes every other method's ratios
(uplink, compute, accuracy gain) against it (:func:`reference`; fedit, plain federated LoRA).

==========  ===================  ==================  ==================  =====================
method      server state         down (client k)     up                  aggregate
==========  ===================  ==================  ==================  =====================
spra        C; Z_p from seed     C[:, :r_k] + seed   C_k                 column average of C (or
                                                                         product: padded update avg)
            merge-and-reset every T rounds (period p -> p+1: W += C Z_p, C = 0, new Z)
ffa         as spra, T = 0       C[:, :r_k] + seed   C_k                 column average of C
fedit       C, Z                 C[:, :r_k], Z[:r_k] C_k, Z_k            column / row average
hetlora     C, Z                 C[:, :r_k], Z[:r_k] C_k, Z_k            zero-pad average
flora       (merged into W)      pending merges      C_k, Z_k            stack -> merge into W
flexlora    D = sum p_k C_k Z_k  SVD of D at r_k     C_k, Z_k            product average
==========  ===================  ==================  ==================  =====================

The shared parts (Setup, Down, Update, Merge, Method, Basis) are in base.py.
"""
from __future__ import annotations

from harness.federated.methods.base import Basis, Down, Merge, Method, Setup, Update, fresh_basis

# the order methods are listed in (messages, --help): the paper's method first, then its baselines
ORDER = ("spra", "ffa", "fedit", "hetlora", "flora", "flexlora")


def _discover() -> dict[str, type[Method]]:
    """Every named Method subclass in this package's modules (ORDER first, then by name)."""
    from harness.discovery import named_subclasses

    found = named_subclasses(__name__, __path__, Method)
    rank = {n: i for i, n in enumerate(ORDER)}
    return dict(sorted(found.items(), key=lambda kv: (rank.get(kv[0], len(ORDER)), kv[0])))


METHODS: dict[str, type[Method]] = _discover()


def reference() -> str:
    """The method the report compares the others with: the one declaring ``report_reference``."""
    (name,) = [n for n, cls in METHODS.items() if cls.report_reference]
    return name


def build(name: str, setup: Setup) -> Method:
    """The server side of method ``name``; a ValueError names the allowed ones."""
    if name not in METHODS:
        raise ValueError(f"method.name: {name!r} is not a federated method; choose one of {', '.join(METHODS)}")
    return METHODS[name](setup)


__all__ = ["Basis", "Down", "METHODS", "Merge", "Method", "Setup", "Update", "build", "fresh_basis", "reference"]

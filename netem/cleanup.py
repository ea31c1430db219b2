"""Removing our namespaces: together with every veth, bridge, ifb and qdisc inside them.

Everything a topology creates lives inside namespaces it created, so deleting those namespaces
removes it all; processes still running inside them (programs started with `ip netns exec`)
are stopped first, otherwise they would keep an anonymous copy of the namespace alive.
"""
from __future__ import annotations

import os
import signal
import time

from netem.names import NETNS_DIR, list_ours, owner_alive

KILL_GRACE_S = 1.0


def pids_in(names: list[str]) -> list[int]:
    """PIDs of processes whose network namespace is one of `names`."""
    from pyroute2 import netns

    wanted = set(names)
    found = netns.ns_pids()
    return sorted(pid for name, pids in found.items() if name in wanted for pid in pids if pid != os.getpid())


def stop_processes(pids: list[int], grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM `pids`, wait up to `grace_s`, SIGKILL what is left."""
    alive = [pid for pid in pids if _signal(pid, signal.SIGTERM)]
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [pid for pid in alive if _exists(pid)]
    for pid in alive:
        _signal(pid, signal.SIGKILL)


def remove_namespaces(names: list[str]) -> list[str]:
    """Stop the processes inside `names`, then delete the namespaces; returns those removed."""
    from pyroute2 import netns

    present = [n for n in names if (NETNS_DIR / n).exists()]
    if not present:
        return []
    for _ in range(3):                     # a process may enter (ip netns exec) while we stop the others
        pids = pids_in(present)
        if not pids:
            break
        stop_processes(pids)
    removed = []
    for name in present:
        try:
            netns.remove(name)
            removed.append(name)
        except FileNotFoundError:
            pass
    return removed


def clean(everything: bool = False) -> list[str]:
    """Remove leftover namespaces of ours whose owner process is dead; returns the names removed.

    With everything=True, also those of live owners and those left by `python -m netem up`.
    Only names matching `nb-<pid|up>-<4 hex>-<sw|n<i>|caps>` are ever considered.
    """
    doomed = [entry.name for entry in list_ours() if everything or not owner_alive(entry)]
    return remove_namespaces(doomed)


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie still answers kill(0); it holds no namespace any more
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

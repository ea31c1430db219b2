"""Stand-in hosts on one machine: N "host" namespaces on a bridge (an unshaped netem StarTopology),
each host's veth playing its real interface; a process is started in a host with nsenter (network
namespace only: `ip netns exec` would give it a private mount namespace, and the namespaces it
creates would not be visible outside it, as they are on a real host)."""
from __future__ import annotations

import subprocess
from contextlib import contextmanager

import warm_cli

from netem.names import NETNS_DIR
from netem.topology import NodeSpec, StarTopology


@contextmanager
def stand_in_hosts(count: int):
    """A StarTopology of ``count`` unshaped "hosts" h0..h<count-1> (removed on exit)."""
    with StarTopology([NodeSpec(f"h{i}") for i in range(count)], backend="tc") as hosts:
        yield hosts


def in_host(hosts: StarTopology, index: int, argv: list[str], **popen) -> subprocess.Popen:
    """Start ``argv`` inside host ``index``'s network namespace, as an agent runs on a real host."""
    return subprocess.Popen(["nsenter", f"--net={NETNS_DIR / hosts.nodes[f'h{index}'].netns}", *argv], **popen)


def module_in_host(hosts: StarTopology, index: int, module: str, args: list[str], **popen):
    """``python -m MODULE ARGS`` inside host ``index``'s network namespace: forked from the warm test process
    and moved in by setns(2) (tests/warm_cli.py; a fresh interpreter under nsenter with $NARROWBAND_TEST_EXEC),
    so each agent skips the ~5 CPU-s import of torch, transformers and peft that a fresh one pays."""
    return warm_cli.popen(module, args, netns=hosts.nodes[f"h{index}"].netns, **popen)

"""Stand-in hosts on one machine: N "host" namespaces on a bridge (an unshaped netem StarTopology),
each host's veth playing its real interface; a process is started in a host with nsenter (network
namespace only: `ip netns exec` would give it a private mount namespace, and the namespaces it
creates would not be visible outside it, as they are on a real host)."""
from __future__ import annotations

import subprocess
from contextlib import contextmanager

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

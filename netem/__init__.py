"""netem: kernel-shaped links between Linux network namespaces, usable on its own.

    from netem import LinkSpec, NodeSpec, StarTopology
    with StarTopology([NodeSpec("hub"), NodeSpec("w0", LinkSpec.parse("10mbit"), LinkSpec.parse("10mbit"))]) as topo:
        subprocess.run(topo.exec_prefix("w0") + ["python", "client.py", topo.nodes["hub"].addr])

Never imports torch or the harness. Command line: `python -m netem check | probe | up | down | clean`.
"""
from netem.caps import Capabilities
from netem.counters import Counters
from netem.spec import LinkSpec, LinkSpecError, parse_loss, parse_rate, parse_size, parse_time
from netem.topology import Node, NodeSpec, StarTopology, TopologyError, clean

__all__ = ["Capabilities", "Counters", "LinkSpec", "LinkSpecError", "Node", "NodeSpec", "StarTopology",
           "TopologyError", "clean", "parse_loss", "parse_rate", "parse_size", "parse_time"]

"""One stand-in host's overlay (run inside a "host" namespace by test_overlay.py): build it from the
JSON spec in argv[1], print its description as one JSON line, hold it until stdin closes."""
from __future__ import annotations

import json
import sys

from netem.overlay import HostOverlay, OverlayRole, OverlaySpec
from netem.spec import LinkSpec


def main() -> None:
    spec = json.loads(sys.argv[1])
    roles = tuple(OverlayRole(r["name"], r["rank"], LinkSpec.parse(rate=r["up"]), LinkSpec.parse(rate=r["down"]))
                  for r in spec["roles"])
    with HostOverlay(OverlaySpec(vni=spec["vni"], subnet=spec["subnet"], iface=spec["iface"],
                                 local_addr=spec["local"], remotes=tuple(spec["remotes"]), roles=roles,
                                 local=tuple(spec["mine"]), mtu=spec.get("mtu", 1400))) as overlay:
        print(json.dumps(overlay.describe()), flush=True)
        sys.stdin.readline()


if __name__ == "__main__":
    main()

"""python -m netem check | probe | up | down | clean  (run `python -m netem COMMAND --help`).

Exit status: 0 done, 1 this machine cannot do it (e.g. not root), 2 bad input. Errors are
one line on stderr, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from netem.spec import LinkSpec, LinkSpecError, parse_loss, parse_rate, parse_size, parse_time

def state_dir() -> Path:
    """Where standing topologies are recorded (NARROWBAND_STATE_DIR, read at call time)."""
    return Path(os.environ.get("NARROWBAND_STATE_DIR", "/tmp/narrowband-up"))


class UsageError(Exception):
    """Bad command-line input (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        raise UsageError(f"{self.prog}: {message} (see --help)")


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except (UsageError, LinkSpecError) as error:
        print(f"netem: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("netem: interrupted (everything created was removed)", file=sys.stderr)
        return 130
    except (RuntimeError, OSError) as error:
        print(f"netem: error: {error}", file=sys.stderr)
        return 1


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m netem", description="Kernel-shaped links between network namespaces.",
                     allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    check = sub.add_parser("check", allow_abbrev=False, help="print what this kernel can emulate and the best backend")
    check.add_argument("--refresh", action="store_true", help="probe again instead of reading the cache")
    check.add_argument("--json", action="store_true", help="one JSON object")
    check.set_defaults(func=cmd_check)

    probe = sub.add_parser("probe", allow_abbrev=False, help="measure TCP goodput and RTT through a shaped two-node topology")
    _link_options(probe)
    probe.add_argument("--bytes", default=None, help="bytes to push, e.g. 4mb (default: 1.5 s at the rate)")
    probe.add_argument("--json", action="store_true", help="one JSON object (configured_bps, measured_bps, ...)")
    probe.set_defaults(func=cmd_probe)

    up = sub.add_parser("up", allow_abbrev=False, help="leave a shaped star topology standing (remove it with `down`)")
    up.add_argument("--nodes", type=int, default=2, help="number of nodes; node0 is the hub (default 2)")
    _link_options(up)
    up.add_argument("--up", dest="up_rate", default=None, help="uplink rate of every node (overrides --rate)")
    up.add_argument("--down", dest="down_rate", default=None, help="downlink rate of every node (overrides --rate)")
    up.add_argument("--hub", default=None, help="rate of node0's link, both directions ('none' = unshaped)")
    up.add_argument("--json", action="store_true", help="one JSON object describing the topology")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", allow_abbrev=False, help="remove topologies left standing by `up`")
    down.add_argument("--prefix", default=None, help="only this one (default: all of them)")
    down.set_defaults(func=cmd_down)

    clean = sub.add_parser("clean", allow_abbrev=False, help="remove namespaces left by dead runs (only ours)")
    clean.add_argument("--all", action="store_true", help="also those of live runs and of `up`")
    clean.set_defaults(func=cmd_clean)
    return parser


def _link_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", default=None, help="L2 rate, e.g. 500kbit, 10mbit, 1gbit (default: unshaped)")
    parser.add_argument("--delay", default=None, help="one-way delay, e.g. 20ms")
    parser.add_argument("--jitter", default=None, help="delay jitter, e.g. 2ms")
    parser.add_argument("--loss", default=None, help="loss, e.g. 0.1%% (netem backend only)")
    parser.add_argument("--queue", default=None, help="qdisc queue, e.g. 64kb (default: sized from the rate)")
    parser.add_argument("--backend", default="auto", choices=["auto", "netem", "tc"], help="default: auto")


def _spec(args, rate: str | None = None, rate_flag: str = "--rate") -> LinkSpec:
    """LinkSpec from the link options; errors name the command-line flag."""
    return LinkSpec(rate_bps=parse_rate(args.rate if rate is None else rate, rate_flag),
                    delay_s=parse_time(args.delay, "--delay"), jitter_s=parse_time(args.jitter, "--jitter"),
                    loss=parse_loss(args.loss, "--loss"), queue_bytes=parse_size(args.queue, "--queue"))


def _check_backend(spec: LinkSpec, backend: str) -> None:
    """Fail early, naming the flag, when the chosen kernel backend cannot do `spec`."""
    from netem.caps import probe
    from netem.shaping import check

    resolved = probe().best_backend() if backend == "auto" else backend
    if resolved in ("netem", "tc"):
        check(spec, resolved, field=lambda name: f"--{name}")


def cmd_check(args) -> int:
    from netem.caps import cache_path, probe

    found = probe(refresh=args.refresh)
    if args.json:
        print(json.dumps(found.to_dict()))
        return 0
    print(f"kernel {found.kernel}; root/CAP_NET_ADMIN: {_yes(found.root)}; namespaces+veth+bridge: {_yes(found.netns)}")
    for name, ok in found.qdiscs.items():
        note = found.notes.get(name, "")
        print(f"  {name:8s} {_yes(ok):3s} {note}")
    if "netns" in found.notes:
        print(f"  netns    {found.notes['netns']}")
    print(f"best backend: {found.best_backend()}   (available: {', '.join(found.backends())})")
    print(f"cache: {cache_path()}  (--refresh to probe again)")
    return 0


def cmd_probe(args) -> int:
    from netem.measure import run

    spec = _spec(args)
    nbytes = parse_size(args.bytes, "--bytes")
    _check_backend(spec, args.backend)
    if not args.json:
        print(f"probe: {spec.describe()} between two namespaces ({args.backend} backend)", flush=True)
    result = run(spec, nbytes=nbytes, backend=args.backend, progress=not args.json and sys.stderr.isatty())
    print(json.dumps(result.to_dict()) if args.json else "\n".join(result.lines()))
    return 0


def cmd_up(args) -> int:
    from netem.topology import MAX_NODES, NodeSpec, StarTopology

    if not 1 <= args.nodes <= MAX_NODES:
        raise UsageError(f"--nodes: {args.nodes} is not a node count; use 1 to {MAX_NODES}")
    base = _spec(args)
    up_spec = _spec(args, args.up_rate, "--up") if args.up_rate is not None else base
    down_spec = _spec(args, args.down_rate, "--down") if args.down_rate is not None else base
    nodes = [NodeSpec(f"node{i}", up_spec, down_spec) for i in range(args.nodes)]
    if args.hub is not None:
        hub = _spec(args, args.hub, "--hub")
        nodes[0] = NodeSpec("node0", hub, hub)
    for node in nodes:
        _check_backend(node.up, args.backend)
        _check_backend(node.down, args.backend)
    topo = StarTopology(nodes, backend=args.backend, persistent=True)
    with topo:
        info = topo.describe()
        state_dir().mkdir(parents=True, exist_ok=True)
        (state_dir() / f"{topo.prefix}.json").write_text(json.dumps(info, indent=1))
        topo.detach()
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"{info['prefix']}: {len(nodes)} nodes on {info['subnet']}, backend {info['backend']}"
          f"{' (delay/jitter NOT applied: the tc backend leaves them to the transport)' if info['transport_delay'] and (base.delay_s or base.jitter_s) else ''}")
    for node in info["nodes"]:
        print(f"  {node['name']:8s} {node['addr']:15s} ip netns exec {node['netns']} ...   up {node['up']}, down {node['down']}")
    print("remove with: python -m netem down")
    return 0


def cmd_down(args) -> int:
    from netem.cleanup import remove_namespaces
    from netem.names import PERSISTENT_OWNER, list_ours

    doomed = [n.name for n in list_ours() if n.owner == PERSISTENT_OWNER
              and (args.prefix is None or n.prefix == args.prefix)]
    if args.prefix is not None and not doomed and not (state_dir() / f"{args.prefix}.json").exists():
        raise UsageError(f"--prefix: {args.prefix!r} is not a standing topology; see {state_dir()}")
    removed = remove_namespaces(doomed)
    for state in state_dir().glob(f"{args.prefix or 'nb-up-*'}.json"):
        state.unlink(missing_ok=True)
    print(f"removed {len(removed)} namespaces" + (f": {' '.join(removed)}" if removed else ""))
    return 0


def cmd_clean(args) -> int:
    from netem.cleanup import clean

    removed = clean(everything=args.all)
    if args.all:
        for state in state_dir().glob("nb-up-*.json"):
            state.unlink(missing_ok=True)
    print(f"removed {len(removed)} namespaces" + (f": {' '.join(removed)}" if removed else ""))
    return 0


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


if __name__ == "__main__":
    sys.exit(main())

"""This host's roles (harness.commands.node's docstring, step 4): where each role runs, the payload they
read, starting them as harness.cluster.launch does on one host, watching and stopping them."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from harness.multihost.agent import Agent
from harness.multihost.runs import Planned


def places(agent: Agent, run: Planned, master: str) -> list[dict]:
    """Every role's place as harness.cluster.role reads it; only this host's have a namespace."""
    plan, placement = run.plan, run.plan.placement
    out = []
    for role in plan.roles:
        host = placement.of(role.name).host_index
        if agent.overlay is not None:
            node = agent.overlay.nodes.get(role.name)
            addr = agent.overlay.spec.addr(role.rank)
            out.append({"netns": node.netns if node else None, "ifname": "nb0", "addr": addr, "local": host == agent.me.rank})
        else:                              # userspace: the hosts' own network, paced by the transport
            out.append({"netns": None, "ifname": agent.me.iface, "addr": agent.addrs[host], "local": host == agent.me.rank})
    return out


def write_payload(run: Planned, payload: dict, where: list[dict], host: str, trace_t0: float) -> Path:
    """``cluster/payload-<host>.json``: what harness.cluster.launch writes on one host, with this host's namespaces."""
    from harness.cluster.launch import WAIT_MARGIN_S
    from harness.wire.links import LinkTable

    specs = run.plan.role_specs()
    spec = {"entry": run.plan.entry, "backend": run.plan.backend.value, "run_dir": str(run.run_dir), "payload": payload,
            "seed": int(run.plan.seed), "wait_s": float(run.plan.hang_timeout_s) + WAIT_MARGIN_S,
            "links": LinkTable(tuple(r.up for r in specs), tuple(r.down for r in specs)).to_json(), "trace_t0": trace_t0,
            "roles": [{"name": r.name, "device": r.device, "netns": p["netns"], "ifname": p["ifname"] if p["netns"] else None,
                       "addr": p["addr"], "expendable": bool(r.expendable and i > 0), "cores": list(r.cores), "host": r.host}
                      for i, (r, p) in enumerate(zip(specs, where))]}
    path = run.run_dir / "cluster" / f"payload-{host}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec, indent=1, sort_keys=True))
    return path


def start_roles(agent: Agent, run: Planned, payload: dict, master_addr: str, master_port: int, trace_t0: float) -> None:
    """Fork (or exec) this host's roles, as harness.cluster.launch does on one host."""
    from harness.cluster import spawn
    from harness.cluster.launch import _base_env, _may_fork
    from harness.cluster.supervise import start

    where = places(agent, run, master_addr)
    path = write_payload(run, payload, where, agent.me.name, trace_t0)
    env = _base_env(len(run.plan.roles), master_addr, master_port)
    forking = spawn.mode() == "fork" and _may_fork(run.plan.entry)
    for rank, (role, place) in enumerate(zip(run.plan.role_specs(), where)):
        if not place["local"]:
            continue
        argv = [str(path), str(rank)]
        prefix = ["ip", "netns", "exec", place["netns"]] if place["netns"] else []
        role_env = {**env, "RANK": str(rank), "GLOO_SOCKET_IFNAME": place["ifname"], "NARROWBAND_ROLE": role.name}
        agent.procs.append(start(role.name, rank, [*prefix, sys.executable, "-m", "harness.cluster.role", *argv], role_env,
                                 run.run_dir / "logs" / f"{role.name}.log", expendable=role.expendable,
                                 fork=(argv, place["netns"]) if forking else None))


def kill_roles(agent: Agent) -> None:
    """Stop this host's roles from another thread (watch then sees them exit and returns)."""
    import signal

    for proc in list(agent.procs):
        try:
            os.killpg(proc.popen.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass


def watch_roles(agent: Agent, run: Planned, progress: bool) -> tuple[str, str]:
    from harness.cluster.launch import STARTUP_TIMEOUT_S
    from harness.cluster.supervise import watch

    return watch(agent.procs, run.plan.hang_timeout_s, STARTUP_TIMEOUT_S, progress, label=f"node[{agent.me.name}]")


def local_result(agent: Agent, status: str, reason: str) -> dict:
    return {"op": "done", "host": agent.me.name, "status": status, "reason": reason,
            "exit_codes": {p.name: p.popen.returncode for p in agent.procs},
            "dropped": [p.dropped for p in agent.procs if p.dropped],
            "qdiscs": agent.overlay.qdisc_show() if agent.overlay is not None else {}}

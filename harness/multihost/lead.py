"""Agent 0: one run across every host (build, calibrate, launch everywhere, record run.json)."""
from __future__ import annotations

import secrets
import socket
import sys
import threading
import time

from harness.errors import ClusterError
from harness.multihost.agent import Agent, ask
from harness.multihost.calibration import calibrate, calibration_problem, pairs
from harness.multihost.messages import MessageError
from harness.multihost.roles import kill_roles, local_result, start_roles, watch_roles
from harness.multihost.runs import Planned

MASTER_PORT = 29500                 # the TCPStore, on the hub's overlay address


def lead_run(agent: Agent, run: Planned, index: int, progress: bool) -> str:
    """Agent 0's part of one run; returns its status (run.json is written here)."""
    from harness.record import OutDirFull, close_run, writable, write_run_json
    from harness.run import _bases, _prepare_dir, load_record, load_snapshot, run_metadata

    with writable(run.run_dir.parent.parent, "moving an earlier attempt aside"):
        fresh = _prepare_dir(run.run_dir, bool(run.cfg.resume))
    if not fresh:
        agent.broadcast({"op": "skip", "index": index})
        print(f"[narrowband] {run.scenario}/{run.run_id}: complete already, skipped (resume=true)", flush=True)
        return "skipped"
    from omegaconf import OmegaConf

    OmegaConf.set_struct(run.cfg, False)
    run.cfg.scenario, run.cfg.variant = run.scenario, run.variant
    meta = {**run_metadata(run.cfg, "python -m harness.node " + " ".join(sys.argv[1:])), "run_id": run.run_id,
            "scenario": run.scenario, "variant": run.variant, "backend": run.plan.backend.value,
            "backend_reason": run.plan.backend_reason + ("; across hosts: the transport paces bytes on the hosts' own "
                                                         "network, NO kernel shaping" if run.plan.backend.value == "userspace" else
                                                         "; across hosts: VXLAN overlay, HTB per pair (netem/overlay.py)"),
            "status": "running", "reason": "", "placement": run.plan.placement.describe(), "multihost": True}
    with writable(run.run_dir.parent.parent, "writing run.json"):
        run.run_dir.mkdir(parents=True, exist_ok=True)
        write_run_json(run.run_dir, meta)
    payload = {"cfg": meta["config"], "keys": run.plan.run_keys(run.scenario, run.variant, run.run_id), "plan": run.plan.to_dict()}
    t0, load0 = time.time(), load_snapshot()
    status, reason, extra = "failed", "", {"overlays": {}, "calibration": [], "hosts": {}}
    agent.current = run
    try:
        for host in range(1, agent.hosts):
            ask(agent, host, {"op": "run", "index": index}, timeout=120)
        kernel = run.plan.backend.value != "userspace"
        if kernel:
            vni, tag = secrets.randbelow(2 ** 24 - 2) + 1, secrets.randbelow(200) + 20
            subnet = f"10.{tag}.{secrets.randbelow(254) + 1}"
            for host in range(agent.hosts):
                extra["overlays"][agent.names[host]] = ask(agent, host, {"op": "build", "vni": vni, "subnet": subnet,
                                                                         "mtu": int(run.cfg.placement.mtu)}, timeout=120)["overlay"]
            print(f"[narrowband] node: overlay VXLAN {vni} on {subnet}.0/24 across {agent.hosts} hosts; calibrating "
                  f"{len(pairs(run.plan))} pairs", flush=True)
            extra["calibration"] = calibrate(agent, run, {i: extra["overlays"][n] for i, n in enumerate(agent.names)})
            for rec in extra["calibration"]:
                print(f"[narrowband]   {rec['pair']}: {rec['measured_bps'] / 1e6:.2f} Mbit/s of {rec['tcp_ceiling_bps'] / 1e6:.2f} "
                      f"({rec['ratio']:.1%}), rtt {rec['rtt_s'] * 1e3:.2f} ms", flush=True)
            problem = calibration_problem(extra["calibration"])
            if problem:
                raise ClusterError(problem)
            master_addr, master_port = agent.overlay.spec.addr(0), MASTER_PORT
        else:
            master_addr, master_port = agent.addrs[0], _free_port()
        status, reason, extra["hosts"] = launch_everywhere(agent, run, payload, master_addr, master_port, progress)
    except ClusterError as err:
        status, reason = "failed", str(err)
    except Exception as err:  # noqa: BLE001 - recorded: a host's build error (TopologyError, netlink) fails the run
        status, reason = "failed", f"{type(err).__name__}: {err}"
    except KeyboardInterrupt:
        status, reason = "interrupted", "KeyboardInterrupt"
    finally:
        for host in range(agent.hosts):
            try:
                ask(agent, host, {"op": "teardown"}, timeout=60)
            except (ClusterError, OSError) as err:
                print(f"[narrowband] node: teardown on {agent.names[host]}: {err}", file=sys.stderr, flush=True)
        extra["load"] = load_record(load0, load_snapshot())
        extra["bases"] = _bases(meta["config"])
        status, reason, full = close_run(run.run_dir, status, reason, seconds=round(time.time() - t0, 3),
                                         finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra)
    print(f"[narrowband] run {run.run_id}: {status}{(' - ' + reason) if reason else ''}", flush=True)
    if status == "interrupted":
        raise KeyboardInterrupt
    if full:                                 # the next runs would meet the same disk: stop with its one line
        raise OutDirFull(full)
    return status


def launch_everywhere(agent: Agent, run: Planned, payload: dict, master_addr: str, master_port: int,
                      progress: bool) -> tuple[str, str, dict]:
    """Every host starts its roles; the first failure anywhere stops them all.

    The reason names a dead agent before any other failure: when an agent is SIGKILLed its roles
    die with it, and the roles on the other hosts fail on their broken connections at about the
    same moment; which of those is heard first is a race, the agent's death is the cause."""
    trace_t0 = time.time()
    agent.broadcast({"op": "launch", "master_addr": master_addr, "master_port": master_port, "trace_t0": trace_t0})
    start_roles(agent, run, payload, master_addr, master_port, trace_t0)
    results: dict[str, dict] = {}
    first: list[tuple[int, str]] = []              # (0 for a dead agent, else 1; the reason), in the order heard

    def hear(host: int) -> None:
        line = agent.lines[host]
        try:
            msg = line.recv()
        except MessageError as err:               # checked against its schema: a bad report fails the run
            msg = {"op": "error", "message": f"its report: {err}"}
        died = msg is None
        if died:
            msg = {"op": "done", "host": agent.names[host], "status": "failed",
                   "reason": f"the agent on {agent.names[host]} died (its control connection closed"
                             f"{': ' + line.problem if line.problem else ''})"}
        elif msg["op"] != "done":
            msg = {"op": "done", "host": agent.names[host], "status": "failed", "reason": msg.get("message", msg["op"])}
        results[agent.names[host]] = msg
        if msg["status"] != "ok":
            first.append((0 if died else 1, f"host {agent.names[host]}: {msg['reason']}"))
            kill_roles(agent)
            agent.broadcast({"op": "stop"})

    threads = [threading.Thread(target=hear, args=(h,), name=f"hear-{h}", daemon=True) for h in range(1, agent.hosts)]
    for t in threads:
        t.start()
    status, reason = watch_roles(agent, run, progress)
    if status != "ok":
        first.append((1, f"host {agent.me.name}: {reason}"))
        agent.broadcast({"op": "stop"})
    for t in threads:
        t.join(timeout=run.plan.hang_timeout_s + 60)
    agent.broadcast({"op": "stop"})                  # releases the others' listeners
    results[agent.me.name] = local_result(agent, status, reason)
    if any(t.is_alive() for t in threads):
        first.append((1, "some host never reported the end of its roles"))
    if first:
        return "failed", min(first, key=lambda f: f[0])[1], results      # min keeps the earliest of a priority
    return "ok", "", results


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]

"""Every agent but agent 0: do what agent 0 asks, until it says finish (or goes away)."""
from __future__ import annotations

import sys
import threading

from harness.errors import ClusterError
from harness.multihost.agent import Agent, handle
from harness.multihost.control import Line, log
from harness.multihost.messages import MessageError
from harness.multihost.roles import kill_roles, local_result, start_roles, watch_roles
from harness.multihost.runs import Planned


def follow(agent: Agent, runs: list[Planned], progress: bool) -> int:
    """Do what agent 0 asks until it says finish (0 if the runs were ok, else 1) or goes away (1).
    A message that breaks its schema or its context gets an error reply and a log line; nothing is done."""
    line = agent.lines[0]
    while True:
        try:
            msg = line.recv()
        except MessageError as err:
            log(f"refused a message of agent 0: {err}")
            line.send({"op": "error", "message": f"host {agent.me.name}: {err}"})
            continue
        if msg is None:
            agent.teardown()
            why = f" ({line.problem})" if line.problem else ""
            print(f"[narrowband] node {agent.me.name}: agent 0 went away{why}; removed this host's part",
                  file=sys.stderr, flush=True)
            return 1
        op = msg["op"]
        if op in ("stop", "skip"):
            continue
        if op == "finish":
            agent.teardown()
            return 0 if msg["ok"] else 1
        if op == "run":
            agent.current = runs[msg["index"]]
            line.send({"op": "ok"})
            continue
        if op == "launch":
            problem = _launch_problem(agent, msg)
            if problem:
                log(f"refused a message of agent 0: {problem}")
                line.send({"op": "done", "host": agent.me.name, "status": "failed", "reason": problem,
                           "exit_codes": {}, "dropped": [], "qdiscs": {}})
                continue
            run = agent.current
            payload = {"cfg": _config(run), "keys": run.plan.run_keys(run.scenario, run.variant, run.run_id),
                       "plan": run.plan.to_dict()}
            start_roles(agent, run, payload, msg["master_addr"], msg["master_port"], msg["trace_t0"])
            stop = threading.Thread(target=_listen_for_stop, args=(agent, line), name="stop", daemon=True)
            stop.start()
            status, reason = watch_roles(agent, run, progress)
            line.send(local_result(agent, status, reason))
            stop.join()
            continue
        try:
            line.send(handle(agent, msg))
        except Exception as err:  # noqa: BLE001 - agent 0 records it and fails the run everywhere
            if isinstance(err, (MessageError, ClusterError)):
                log(f"refused a message of agent 0: {err}")
            line.send({"op": "error", "message": f"host {agent.me.name}: {type(err).__name__}: {err}"})


def _launch_problem(agent: Agent, msg: dict) -> str:
    """Why this host will not start its roles for ``msg`` ("" when it will): no run chosen, or a
    rendezvous address other than the hub's (on the overlay, or agent 0's own where there is none)."""
    if agent.current is None:
        return "control: op 'launch' before any run was chosen"
    hub = agent.overlay.spec.addr(0) if agent.overlay is not None else agent.addrs.get(0)
    if msg["master_addr"] != hub:
        return f"control: op 'launch': master_addr: {msg['master_addr']!r} is not allowed; allowed: the hub's address {hub}"
    return ""


def _listen_for_stop(agent: Agent, line: Line) -> None:
    """Stop this host's roles at agent 0's next message (stop) or when it goes away."""
    try:
        msg = line.recv()
    except MessageError as err:
        log(f"refused a message of agent 0 during the run: {err}; stopping this host's roles")
        msg = {}
    kill_roles(agent)
    if msg is None:
        print(f"[narrowband] node {agent.me.name}: agent 0 went away during the run; stopping this host's roles",
              file=sys.stderr, flush=True)


def _config(run: Planned) -> dict:
    from omegaconf import OmegaConf

    OmegaConf.set_struct(run.cfg, False)
    run.cfg.scenario, run.cfg.variant = run.scenario, run.variant
    return OmegaConf.to_container(run.cfg, resolve=True)

"""Every agent but agent 0: do what agent 0 asks, until it says finish (or goes away)."""
from __future__ import annotations

import sys
import threading

from harness.multihost.agent import Agent, handle
from harness.multihost.control import Line
from harness.multihost.roles import kill_roles, local_result, start_roles, watch_roles
from harness.multihost.runs import Planned


def follow(agent: Agent, runs: list[Planned], progress: bool) -> int:
    line = agent.lines[0]
    while True:
        msg = line.recv()
        if msg is None:
            agent.teardown()
            print(f"[narrowband] node {agent.me.name}: agent 0 went away; removed this host's part", file=sys.stderr, flush=True)
            return 1
        op = msg["op"]
        if op in ("stop", "skip"):
            continue
        if op == "finish":
            agent.teardown()
            return 0 if msg.get("ok") else 1
        if op == "run":
            agent.current = runs[msg["index"]]
            line.send({"op": "ok"})
            continue
        if op == "launch":
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
            line.send({"op": "error", "message": f"host {agent.me.name}: {type(err).__name__}: {err}"})


def _listen_for_stop(agent: Agent, line: Line) -> None:
    msg = line.recv()
    kill_roles(agent)
    if msg is None:
        print(f"[narrowband] node {agent.me.name}: agent 0 went away during the run; stopping this host's roles",
              file=sys.stderr, flush=True)


def _config(run: Planned) -> dict:
    from omegaconf import OmegaConf

    OmegaConf.set_struct(run.cfg, False)
    run.cfg.scenario, run.cfg.variant = run.scenario, run.variant
    return OmegaConf.to_container(run.cfg, resolve=True)

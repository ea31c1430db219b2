"""The per-host agent of a multi-host run: ``python -m harness.node scenario=NAME placement.source=... ...``.

The engine starts one agent per host (``srun --ntasks-per-node=1``, ``torchrun --nnodes=N
--nproc-per-node=1``, one Ray actor per node: docs/multihost.md), each with the same overrides.
Every agent composes and plans the same runs (harness.plan: the placement says which roles are
its own, harness.placement.node_rank which host it is), then, per run:

1. Control (before anything is built; docs/security.md). Every agent holds the run's secret
   (NARROWBAND_SECRET_FILE, a 0600 file: ``python -m harness.node --new-secret FILE`` makes one; or
   NARROWBAND_SECRET). Agent 0 listens on its own address towards MASTER_ADDR, port
   NARROWBAND_CONTROL_PORT (default 29400), on the real network, unshaped; the others connect within
   NARROWBAND_CONNECT_TIMEOUT_S (60 s), answer agent 0's challenge with their hello (their address
   and interface, whether they may shape: root or CAP_NET_ADMIN, htb, ifb, mirred, vxlan; the digest
   of their plan) and an HMAC-SHA256 proof, and check agent 0's proof back; every later line is
   sealed (harness.multihost.auth), bounded and checked against its operation's schema
   (harness.multihost.messages). A connection without the secret is told one line, dropped and
   logged; the run does not wait on it. A host that does not connect, cannot shape or planned
   something else ends every agent with one line naming the host and what is wrong, exit 2, and
   nothing built anywhere.
2. Build. Agent 0 picks the run's VXLAN id and overlay /24; every agent builds its part
   (netem.overlay.HostOverlay: its roles' namespaces, shaped per pair).
3. Calibration gate. Every shaped pair (hub -> node and node -> hub) is probed with netem's probe
   (peer.py: receiver on the destination's host, sender on the source's) for CALIBRATION_S at the
   pair's rate; run.json ``calibration`` records configured vs measured rate (against the TCP
   ceiling of the configured L2 rate) and RTT per pair. A pair more than CALIBRATION_TOLERANCE off
   is probed again, up to CALIBRATION_TRIES times (a probe on a loaded CPU can fall short once:
   measured here at load 17 on 2 cores, 89% at 100 Mbit/s, then 98-100% on the other pairs);
   every try is recorded, the closest counts, and a pair that stays off fails the run with one
   line naming it (nothing is launched).
4. Launch. Each agent starts its own roles (forked, as harness.cluster.launch does on one host)
   with MASTER_ADDR = the hub's overlay address (the TCPStore of env:// rendezvous, on the hub's
   host), GLOO_SOCKET_IFNAME = nb0 (gloo on the overlay), and the same payload as on one host, so
   collectives keep their timeouts sized from bytes and rate (harness.wire.transport). A role that
   fails, an agent that dies (its control connection closes) or agent 0's stop ends the run on
   every host; each agent always removes its part (and a SIGKILLed agent's guard removes it).
5. Record. Agent 0 writes run.json (placement, overlay per host, calibration, status); every
   role writes its rows into the run's folder, which must be on a filesystem all hosts share (as
   a Slurm cluster's home or scratch is); the rows of a host without one stay on that host. An
   out_dir that fills up or turns read-only ends every agent with one line (harness.record.close_run).

Delay and jitter are the transport's job (the tc backend), as on one host. Where the agents
may not shape (no CAP_NET_ADMIN), ``net.backend=userspace`` runs the roles on the hosts' own
network, paced by the transport, labelled ``userspace`` in every row and in the report.
"""
from __future__ import annotations

import os
import signal
import sys
from contextlib import ExitStack

from harness.errors import ConfigError
from harness.multihost.agent import Agent
from harness.multihost.control import CONTROL_PORT, CONTROL_PORT_ENV
from harness.multihost.follow import follow
from harness.multihost.lead import lead_run
from harness.multihost.runs import planned_runs
from harness.multihost.secret import SECRET_FILE_ENV, load_secret, new_secret
from harness.record import OutDirFull

_AGENT_PID: list[int] = []


def _interrupt(signum, frame) -> None:
    """SIGTERM in the agent: an orderly teardown (KeyboardInterrupt). In a forked copy of the agent
    (pyroute2 forks helpers to enter namespaces, and ends them with SIGTERM): die as a plain process."""
    if os.getpid() not in _AGENT_PID:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _new_secret(args: list[str]) -> int:
    """``--new-secret FILE``: write a fresh secret (mode 0600) and say how to use it."""
    if len(args) != 1:
        print("usage: python -m harness.node --new-secret FILE", file=sys.stderr)
        return 2
    try:
        path = new_secret(args[0])
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    print(f"wrote a new secret to {path} (mode 0600); on every host of the run: export {SECRET_FILE_ENV}={path.resolve()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from harness.placement import node_rank

    overrides = list(sys.argv[1:] if argv is None else argv)
    if not overrides or overrides[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if overrides else 2
    if overrides[0] == "--new-secret":
        return _new_secret(overrides[1:])
    try:
        runs = planned_runs(overrides)
        secret = load_secret()
        placement = runs[0].plan.placement
        rank = node_rank(placement)
        master = os.environ.get("MASTER_ADDR") or placement.hosts[0].addr
        if not master:
            raise ConfigError("MASTER_ADDR: not set and the first host has no addr=; every agent needs agent 0's address")
        port = os.environ.get(CONTROL_PORT_ENV, str(CONTROL_PORT))
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{CONTROL_PORT_ENV}: {port!r} is not a TCP port (1-65535)")
        agent = Agent.connect(runs, rank, master, int(port), secret)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    progress = bool(runs[0].cfg.progress)
    _AGENT_PID[:] = [os.getpid()]
    signal.signal(signal.SIGTERM, _interrupt)        # srun / torchrun end an agent with SIGTERM: tear down in order
    with ExitStack() as stack:
        stack.callback(agent.teardown)
        stack.callback(agent.close_lines)
        if rank != 0:
            try:
                return follow(agent, runs, progress)
            except KeyboardInterrupt:
                return 130
        statuses = []
        try:
            for index, run in enumerate(runs):
                print(f"\n=== {run.scenario}: run {index + 1}/{len(runs)}: {run.variant}, seed {run.plan.seed} "
                      f"across {agent.hosts} hosts ===", flush=True)
                statuses.append(lead_run(agent, run, index, progress))
        except KeyboardInterrupt:
            agent.broadcast({"op": "finish", "ok": False})
            return 130
        except (OutDirFull, ConfigError) as err:       # out_dir full or unwritable: one line, every agent ends
            agent.broadcast({"op": "finish", "ok": False})
            print(f"[narrowband] {err}" if isinstance(err, OutDirFull) else f"error: {err}", file=sys.stderr, flush=True)
            return 1 if isinstance(err, OutDirFull) else 2
        ok = all(s in ("ok", "skipped") for s in statuses)
        agent.broadcast({"op": "finish", "ok": ok})
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

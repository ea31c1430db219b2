"""End-to-end tier of populations: executors as real role processes in namespaces, per-client shaped links.

Two short runs of smoke_spra with a population (a few clients, tiny model): the deadline drops the
clients whose down + compute + up exceeds it, the rows name everyone; and an executor killed
mid-round drops its clients of that round, the run goes on, and nothing outlives it."""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
from reliability_helpers import (  # the house helpers of killing a role
    Injector,
    all_namespaces,
    learner_steps,
    our_namespaces,
    role_pids,
    role_places,
    rows,
    run_dir_of,
    wait_for,
    warm_cache,
)

pytestmark = [pytest.mark.emulated, pytest.mark.e2e, pytest.mark.slow]

BASE = ["scenario=smoke_spra", "only=[spra]", "progress=false", "federated.population=8", "federated.executors=2",
        "federated.local_steps=1", "federated.eval_every=0", "federated.drop_policy=continue", "task.eval_prompts=16"]
START_S = 300


def _run(overrides: list[str]):
    from harness.compose import compose_config
    from harness.run import run_scenario

    warm_cache(overrides)
    return run_scenario(compose_config(overrides), overrides)


def _torn_down(run_dir) -> None:
    assert not role_pids(run_dir), f"role processes outlived the run: {role_pids(run_dir)}"
    spaces = {p["netns"] for p in role_places(run_dir).values() if p["netns"]}
    assert not spaces & all_namespaces(), f"namespaces (and their qdiscs) outlived the run: {spaces & all_namespaces()}"
    assert our_namespaces() == []


DEADLINE_S = 5.0        # a fast client (one local step of the tiny model, >= 10 Mbit/s both ways) is well inside it
SLOW_MBIT = 0.075       # ~75 kB of B up at < 0.075 Mbit/s takes > 8 s: late by its transfer alone, whatever the load


def _seed_with_slow_and_fast(links: list[str], rounds: int) -> tuple[int, set[int], set[int]]:
    """A seed whose sampled clients include one surely late (uplink < SLOW_MBIT: ~75 kB of B takes
    > 8 s) and one surely in time (both directions >= 10 Mbit/s), from the plan (no run needed)."""
    from harness.plan import build_plan
    from harness.compose import compose_config

    for seed in range(50):
        pop = build_plan(compose_config([*BASE, *links, f"seed={seed}"])).federated.population
        ran = {k for t in range(rounds) for k in pop.sample(t)}
        slow = {k for k in ran if pop.up_bps[k] < SLOW_MBIT * 1e6}
        fast = {k for k in ran if min(pop.up_bps[k], pop.down_bps[k]) >= 10e6}
        if slow and fast:
            return seed, slow, fast
    raise AssertionError("no seed below 50 samples both a slow and a fast client")


def test_deadline_drops_the_slow_clients_and_rows_name_everyone(kernel_backend, tmp_path):
    """No timed window: the slow clients are late by their upload's bytes*8/rate alone (checked from
    the rows), the fast ones have seconds of slack on a loaded machine."""
    links = ["federated.up_mbit=[0.05,50]", "federated.down_mbit=[10,50]", "federated.delay_ms=[1,5]",
             "federated.per_round=3", "federated.rounds=2", f"federated.deadline_s={DEADLINE_S}", "federated.ranks=[8]"]
    seed, slow, fast = _seed_with_slow_and_fast(links, 2)
    (outcome,) = _run([*BASE, *links, f"seed={seed}", f"out_dir={tmp_path}", f"net.backend={kernel_backend}"])
    assert outcome.status == "ok", outcome.reason
    server = rows(outcome.run_dir, "server").sort_values("step").iloc[1:]
    pop = rows(outcome.run_dir, "population")
    late = {int(c[6:]) for cell in server.late for c in json.loads(cell)}
    finished = {int(c[6:]) for cell in server.finished for c in json.loads(cell)}
    assert slow <= late and fast <= finished, (slow, late, fast, finished)
    ex = rows(outcome.run_dir)
    ex = ex[ex.role.str.startswith("executor")]
    up_bytes = ex.tensor_bytes_up.max()              # one client's B (every client has rank 8)
    for k in slow:       # the premise: that update at the drawn uplink alone outlasts the deadline
        rate_bps = ex[ex.client == f"client{k}"].up_rate_mbit.iloc[0] * 1e6
        assert up_bytes * 8 / rate_bps > DEADLINE_S, (k, up_bytes, rate_bps)
    assert (pop[pop.status == "late"].client_s.fillna(99) > DEADLINE_S).all()
    assert (pop[pop.status == "finished"].client_s <= DEADLINE_S).all()
    for _, row in server.iterrows():                 # everyone sampled is accounted for, once
        sampled = json.loads(row.sampled)
        parts = [json.loads(row[c]) for c in ("unavailable", "finished", "late", "failed")]
        assert sorted(c for part in parts for c in part) == sorted(sampled) and row.n_updates == len(json.loads(row.finished))
    assert (pop[pop.status != "unavailable"].payload_bytes_down > 0).all()
    assert (pop[pop.status == "finished"].payload_bytes_up > 0).all()    # a late client may have uploaded too
    for _, r in ex.iterrows():                       # each executor ran under its client's drawn link
        p = pop[(pop.step == r.step) & (pop.client == r.client)].iloc[0]
        assert r.up_rate_mbit == pytest.approx(p.up_rate_mbit) and r["rank"] == p["rank"]
    _torn_down(outcome.run_dir)


def test_an_executor_killed_mid_round_drops_its_clients_and_the_run_goes_on(kernel_backend, tmp_path):
    out = tmp_path / "runs"

    def kill():
        run_dir = wait_for(lambda: run_dir_of(out, "smoke_spra", "spra"), START_S, "the run directory")
        wait_for(lambda: learner_steps(run_dir, "executor0") >= 1, START_S, "executor0's first client")
        os.kill(role_pids(run_dir)["executor0"], signal.SIGKILL)     # it holds a second client of this round
        return run_dir

    injector = Injector(kill)
    injector.start()
    (outcome,) = _run([*BASE, "federated.per_round=4", "federated.rounds=3", "federated.availability=always",
                       f"out_dir={out}", f"net.backend={kernel_backend}", "net.hang_timeout_s=60"])
    run_dir = injector.result()
    assert outcome.status == "ok", outcome.reason
    server = rows(run_dir, "server").sort_values("step")
    assert list(server.step) == [0, 1, 2, 3], "the rounds after the kill did not run"
    failed = [json.loads(c) for c in server.failed.dropna()]
    assert any(failed), f"the killed executor's clients are not recorded: {failed}"
    assert json.loads(server.executors.iloc[-1]) == ["executor1"]
    assert int(server.n_updates.iloc[-1]) == 4          # executor1 runs all four clients of the last round
    _torn_down(run_dir)

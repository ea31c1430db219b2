"""Pure tier: a federated population's rows (harness/federated/pool.py's layout) in the report.

A hand-made run of 2 rounds, 4 clients sampled per round: round 1 has 2 finished, 1 late and
1 unavailable client; round 2 has 3 finished and 1 unavailable. The executors' rows carry the
clients' compute; the population rows their status, bytes and time.
"""
from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.record import Recorder, set_status, write_run_json
from harness.report.collect import collect
from harness.report.metrics_federated import federated_runs
from harness.report.summary import population_table
from harness.report.tables import build_tables

from report_synthetic import _meta, _run_dir

# (round, client, status, rank, up bytes, down bytes, client_s); None: no bytes (unavailable)
CLIENTS = [
    (1, 3, "finished", 16, 1000, 3000, 0.5), (1, 7, "finished", 8, 500, 1500, 0.3),
    (1, 9, "late", 16, 100, 3000, 2.5), (1, 12, "unavailable", 4, None, None, None),
    (2, 1, "finished", 4, 250, 750, 0.2), (2, 3, "finished", 16, 1000, 3000, 0.4),
    (2, 5, "finished", 8, 500, 1500, 0.6), (2, 8, "unavailable", 16, None, None, None),
]
VIRTUAL = {1: 2.0, 2: 0.6}          # round 1 had a late client: the deadline; round 2 its slowest client
FLOPS = {"fedit": 2.0e9, "spra": 1.0e9}


def write_population(root, method: str, seed: int = 0):
    run_dir, run_id = _run_dir(root, "spra_population", method, f"tc{seed}")
    write_run_json(run_dir, _meta("spra_population", method, run_id, "tc", method, "federated", seed, 32, "running"))
    keys = {"run_id": run_id, "scenario": "spra_population", "variant": method, "method": method, "compressor": "none",
            "task": "federated", "seed": seed, "backend": "tc", "rate_mbit": 100.0, "delay_ms": 0.0, "rank": 32,
            "budget_frac": float("nan")}
    scale = 2 if method == "fedit" else 1          # fedit ships A and B
    with Recorder(run_dir, keys, "server", flush_every=1000) as rec:
        rec.row(0, rank=32, accuracy=0.5, eval_loss=1.0)
        for t in (1, 2):
            mine = [c for c in CLIENTS if c[0] == t and c[4] is not None]
            rec.row(t, rank=32, round_s=5.0, virtual_round_s=VIRTUAL[t], payload_bytes_up=scale * sum(c[4] for c in mine),
                    payload_bytes_down=sum(c[5] for c in mine), accuracy=0.6 + 0.1 * t, eval_loss=1.0 / t,
                    sampled=[f"client{c[1]}" for c in CLIENTS if c[0] == t], in_sync=True)
    with Recorder(run_dir, keys, "population", flush_every=1000) as rec:
        for t, k, status, rank, up, down, client_s in CLIENTS:
            extra = {} if up is None else dict(payload_bytes_up=scale * up, payload_bytes_down=down, client_s=client_s)
            rec.row(t, client=f"client{k}", rank=rank, status=status, available=status != "unavailable", **extra)
    with Recorder(run_dir, keys, "executor0", flush_every=1000) as rec:
        for t, k, status, rank, up, _, _ in CLIENTS:
            if up is not None:
                rec.row(t, client=f"client{k}", rank=rank, client_compute_s=0.1, client_flops=FLOPS[method])
    set_status(run_dir, "ok")


@pytest.fixture()
def population_results(tmp_path):
    for method in ("fedit", "spra"):
        write_population(tmp_path, method)
    return tmp_path


def test_population_metrics_come_from_the_population_and_executor_rows(population_results):
    runs = federated_runs(collect(population_results).rows).set_index("method")
    spra = runs.loc["spra"]
    finished = [c for c in CLIENTS if c[2] == "finished"]
    assert spra["ranks"] == "16,8,4", "the ranks the clients drew, descending"
    assert spra["sampled_per_round"] == 4
    assert spra["unavailable_frac"] == pytest.approx(2 / 8)
    assert spra["late_frac"] == pytest.approx(1 / 6) and spra["failed_frac"] == 0
    assert spra["client_uplink_bytes"] == pytest.approx(sum(c[4] for c in finished) / len(finished))
    assert spra["client_downlink_bytes"] == pytest.approx(sum(c[5] for c in finished) / len(finished))
    assert spra["client_s"] == pytest.approx(sum(c[6] for c in finished) / len(finished))
    assert spra["virtual_round_s"] == pytest.approx(sum(VIRTUAL.values()) / 2)
    assert spra["client_compute_s"] == pytest.approx(0.1), "the executors' rows are the clients' compute"
    # paired with FedIT on the same ranks: bytes and FLOPs ratios per seed
    assert spra["uplink_frac_vs_fedit"] == pytest.approx(0.5)
    assert spra["compute_frac_vs_fedit"] == pytest.approx(0.5) and spra["compute_measure"] == "client_flops"
    assert runs.loc["fedit", "client_uplink_bytes"] == pytest.approx(2 * spra["client_uplink_bytes"])


def test_the_summary_has_a_population_table_only_for_population_runs(population_results, tmp_path_factory):
    tables = build_tables(collect(population_results))
    text = "\n".join(population_table(tables.spra))
    assert "| method | variant | ranks drawn | sampled/round | unavailable | late |" in text
    spra_line = next(line for line in text.splitlines() if line.startswith("| SPRA | spra |"))
    assert "| 25.0% (n=1) | 16.7% (n=1) |" in spra_line
    plain = tables.spra.assign(virtual_round_s=math.nan)
    assert population_table(plain) == []
    assert population_table(pd.DataFrame({"method": []})) == []

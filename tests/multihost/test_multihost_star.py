"""The headline of the multi-host path: across 3 stand-in hosts, smoke_hilo's HiLo + Spar and
smoke_spra's SPRA give the one-host star's bytes per update and final quality, every shaped pair
is calibrated within 10%, and nothing is left in any host. In a file of its own so that pytest-xdist
(a file per worker) runs it beside the other multi-host tests, not after them."""
from __future__ import annotations

import json

import pytest
import warm_cli

from multihost_hosts import stand_in_hosts
from test_multihost_e2e import HILO, ROOT, SPRA, _agents, _hub, _left, _run_dir


@pytest.mark.emulated
@pytest.mark.e2e
def test_three_hosts_give_the_star_bytes_and_quality_and_leave_nothing(kernel_backend, tmp_path):
    for scenario, variant in (HILO, SPRA):
        star = warm_cli.run("harness", [f"scenario={scenario}", f"only=[{variant}]", f"out_dir={tmp_path / 'star'}",
                                        "progress=false"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert star.returncode == 0, star.stdout[-2000:] + star.stderr[-2000:]
        with stand_in_hosts(3) as hosts:
            procs = _agents(hosts, [f"scenario={scenario}", f"only=[{variant}]"], tmp_path)
            codes = [p.wait(timeout=900) for p in procs]
            assert codes == [0, 0, 0], (tmp_path / "agent0.log").read_text()[-3000:]
            assert _left(procs) == []
        one, many = _run_dir(tmp_path / "star", scenario, variant), _run_dir(tmp_path / "multi", scenario, variant)
        meta = json.loads((many / "run.json").read_text())
        assert meta["status"] == "ok" and meta["multihost"] and [h["name"] for h in meta["placement"]["hosts"]] == ["h0", "h1", "h2"]
        roles = len(meta["placement"]["roles"])
        assert len(meta["calibration"]) == 2 * (roles - 1)                       # hub <-> each node, both ways
        assert all(abs(c["ratio"] - 1) <= 0.10 for c in meta["calibration"]), meta["calibration"]
        (rows1, hub1), (rowsn, hubn) = _hub(one), _hub(many)
        assert set(rowsn["host"]) == {"h0", "h1", "h2"} and set(rows1["host"]) == {"local"}
        quality = [c for c in ("accuracy", "reverse_kl", "eval_loss") if c in hub1 and hub1[c].notna().any()]
        assert quality and [hub1[c].dropna().iloc[-1] for c in quality] == [hubn[c].dropna().iloc[-1] for c in quality]
        if scenario == "smoke_hilo":      # the compressed update each worker receives
            assert list(hub1["payload_bytes_down"].dropna()) == list(hubn["payload_bytes_down"].dropna())
        else:                             # the clients' tensors; their frames carry timings (a few bytes vary)
            key = ["role", "step"]
            a = rows1[rows1["role"] != "server"].sort_values(key)
            b = rowsn[rowsn["role"] != "server"].sort_values(key)
            assert list(a["tensor_bytes_up"]) == list(b["tensor_bytes_up"])
            assert (abs(a["payload_bytes_up"].to_numpy() - b["payload_bytes_up"].to_numpy()) <= 16).all()

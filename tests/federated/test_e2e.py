"""End-to-end tier: the smoke_spra scenario (every federated method, 3 clients of mixed ranks)
as real role processes over shaped links (tc as root, userspace otherwise). Client 2 leaves
in the last round under drop_policy=continue, so every run also exercises the drop path.
One scenario, several assertions: each launch costs ~10 s of process start-up on 2 cores."""
from __future__ import annotations

import json
import os

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROUNDS = 3
DROP_ROUND = 2
METHODS = ("spra", "ffa", "fedit", "flora", "hetlora", "flexlora")


def _backend() -> str:
    from netem.caps import probe

    caps = probe()
    if os.geteuid() == 0 and caps.netns and caps.qdiscs.get("tbf"):
        return "tc"
    return "userspace"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """{variant: (outcome, rows)} of smoke_spra with client 2 leaving in round DROP_ROUND."""
    from harness.record import read_rows
    from harness.compose import compose_config
    from harness.run import run_scenario

    out = tmp_path_factory.mktemp("runs")
    overrides = ["scenario=smoke_spra", f"out_dir={out}", f"federated.rounds={ROUNDS}", "progress=false",
                 "federated.drop_policy=continue", f"federated.fault_drop_round={DROP_ROUND}",
                 "federated.fault_drop_client=2", f"net.backend={_backend()}"]
    outcomes = run_scenario(compose_config(overrides), overrides)
    return {o.variant: (o, read_rows(o.run_dir)) for o in outcomes}


def test_every_method_runs_and_writes_its_rows(smoke):
    assert set(smoke) == set(METHODS)
    for variant, (outcome, rows) in smoke.items():
        assert outcome.status == "ok", f"{variant}: {outcome.reason}"
        server = rows[rows.role == "server"].sort_values("step")
        assert list(server.step) == list(range(ROUNDS + 1)), variant
        for col in ("round_s", "payload_bytes_up", "payload_bytes_down", "wire_bytes_up", "slowest_client_s"):
            assert server[col].iloc[1:].notna().all(), (variant, col)
        assert server.accuracy.notna().iloc[-1] and server.eval_loss.notna().iloc[0], variant
        assert server.in_sync.iloc[1:].astype(bool).all(), variant
        clients = rows[rows.role.str.startswith("client")]
        assert set(clients.role) == {"client0", "client1", "client2"}, variant
        for col in ("forward_s", "backward_s", "client_compute_s", "transfer_up_s", "transfer_down_s"):
            assert (clients[col] > 0).all(), (variant, col)
        assert clients.in_sync.astype(bool).all(), variant


def test_the_leaving_client_is_dropped_and_the_run_goes_on(smoke):
    for variant, (_, rows) in smoke.items():
        server = rows[rows.role == "server"].sort_values("step")
        assert json.loads(server.dropped.iloc[DROP_ROUND + 1]) == ["client2"], variant
        assert int(server.n_updates.iloc[-1]) == 2, variant
        assert set(rows[rows.role == "client2"].step) == set(range(1, DROP_ROUND + 1)), variant


def test_frozen_a_methods_send_b_only(smoke):
    def up(variant):
        rows = smoke[variant][1]
        return rows[rows.role.str.startswith("client")].groupby("role").tensor_bytes_up.first()

    # the tiny model: per layer B elements 4*128 + 2*256 + 128 = 1152, A elements 4*128 + 2*128 + 256 = 1024
    for method in ("spra", "ffa"):
        assert (up(method) / up("fedit")).round(6).unique().tolist() == [round(1152 / 2176, 6)]

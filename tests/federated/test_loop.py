"""The real server and client loops in one process (threads + queues): rows, merges, drops."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.federated.methods import METHODS
from harness.federated.server import ClientFailed
from harness.record import read_rows

from .fakes import config, run_in_threads


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_runs_and_stays_in_sync(method, tmp_path):
    cfg = config(method)
    parties = run_in_threads(cfg, tmp_path)
    rows = read_rows(tmp_path)
    server = rows[rows.role == "server"].sort_values("step")
    clients = rows[rows.role != "server"]
    assert list(server.step) == [0, 1, 2, 3, 4]
    assert server.eval_loss.notna().sum() == 3                    # before, after round 2 and 4
    assert set(clients.role) == {"client0", "client1", "client2"}
    assert (clients.payload_bytes_up > 0).all() and (clients.forward_s > 0).all()
    assert server.in_sync.dropna().astype(bool).all(), "a client's base or A differed from the server's"
    assert clients.in_sync.astype(bool).all()
    assert json.loads(server.ranks.iloc[0]) == [8, 4, 2]
    assert sorted(json.loads(server.round_ranks.iloc[-1])) == [2, 4, 8]
    if method == "spra":                                          # T = 2: merges before rounds 2 and 4
        assert list(server.merges.iloc[1:]) == [0, 0, 1, 1]
        assert clients.merges.max() == 1
    # every party ends with the same base once it has applied every merge it was sent
    sums = {p.adapter.base_checksum() for p in parties.values()}
    assert len(sums) == (1 if method != "flora" else 2)           # flora: the last stack is not sent


def test_eval_base_false_skips_the_evaluation_before_round_1_and_nothing_else(tmp_path):
    """federated.eval_base=false: row 0 carries no held-out metrics (every method starts at B = 0, the
    base model, so spra_real measures it once, not in each of its runs); the rounds and their
    evaluations are those of the default run, value for value (the payloads' sizes jitter by a few bytes
    with the timings they carry, so they are not compared)."""
    run_in_threads(config("spra"), tmp_path / "with")
    run_in_threads(config("spra", eval_base=False), tmp_path / "without")
    rows = {k: read_rows(tmp_path / k) for k in ("with", "without")}
    server = {k: r[r.role == "server"].sort_values("step").reset_index(drop=True) for k, r in rows.items()}
    assert server["with"].eval_loss.notna().tolist() == [True, False, True, False, True]
    assert server["without"].eval_loss.notna().tolist() == [False, False, True, False, True]
    assert "eval_s" not in server["without"].columns or pd.isna(server["without"].eval_s.iloc[0])
    for column in ("eval_loss", "accuracy"):                      # the same trajectory, bit for bit
        assert server["with"][column].iloc[1:].tolist() == pytest.approx(
            server["without"][column].iloc[1:].tolist(), nan_ok=True, rel=0, abs=0)


def test_uplink_of_frozen_a_is_b_only(tmp_path):
    up = {}
    for method in ("spra", "fedit"):
        run_in_threads(config(method, rounds=1), tmp_path / method)
        rows = read_rows(tmp_path / method)
        up[method] = rows[rows.role != "server"].set_index("role").tensor_bytes_up
    # targets q (32x32), v (32x32), down (32x48): B elements / (A+B) elements = (32+32+32)/(64+64+80)
    ratio = (up["spra"] / up["fedit"]).round(6).unique()
    assert list(ratio) == [round(96 / 208, 6)]


def test_drop_policy_continue_goes_on_without_the_client(tmp_path):
    cfg = config("spra", drop_policy="continue", fault_drop_round=1, fault_drop_client=1)
    run_in_threads(cfg, tmp_path)
    rows = read_rows(tmp_path)
    server = rows[rows.role == "server"].sort_values("step")
    assert json.loads(server.dropped.iloc[2]) == ["client1"]
    assert list(server.n_updates.iloc[1:]) == [3, 2, 2, 2]
    assert "client1" not in set(rows[(rows.role != "server") & (rows.step > 1)].role)


def test_drop_policy_fail_ends_the_run(tmp_path):
    cfg = config("fedit", drop_policy="fail", fault_drop_round=1, fault_drop_client=2)
    with pytest.raises(ClientFailed, match="client2 failed in round 1"):
        run_in_threads(cfg, tmp_path)


def test_a_dead_client_process_is_dropped(tmp_path):
    """A client whose process is gone (sends fail) is dropped at once under continue."""
    cfg = config("ffa", drop_policy="continue", rounds=2)
    run_in_threads(cfg, tmp_path, dead={3})
    rows = read_rows(tmp_path)
    server = rows[rows.role == "server"].sort_values("step")
    assert json.loads(server.dropped.iloc[1]) == ["client2"]
    assert list(server.n_updates.iloc[1:]) == [2, 2]


def test_rows_carry_flops_and_frozen_a_skips_its_gradient(tmp_path):
    """client_flops per row; spra's weight-gradient FLOPs are B's only: the same share as its uplink."""
    rows = {}
    for method in ("spra", "fedit"):
        run_in_threads(config(method, rounds=1), tmp_path / method)
        r = read_rows(tmp_path / method)
        rows[method] = r[r.role != "server"].set_index("role")
    for method in rows:
        assert (rows[method].client_flops > 0).all()
        assert (rows[method].client_flops == rows[method].flops_forward + rows[method].flops_input_grad
                + rows[method].flops_weight_grad).all()
    # same seeded batches, so the forward pass is the same computation
    assert (rows["spra"].flops_forward == rows["fedit"].flops_forward).all()
    # weight gradients: B (r x d_out) vs A and B (r x (d_in + d_out)) summed over q, v, down
    ratio = (rows["spra"].flops_weight_grad / rows["fedit"].flops_weight_grad).round(9).unique()
    assert list(ratio) == [round(96 / 208, 9)]


def test_compute_token_is_exclusive(tmp_path):
    import fcntl

    from harness.federated.client import compute_token

    path = tmp_path / ".compute.token"
    with compute_token(path) as waited:
        assert waited >= 0
        with open(path, "a+b") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(path, "a+b") as other:                               # released after the block
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_link_columns_are_the_clients_own():
    from types import SimpleNamespace

    from harness.federated.client import link_columns
    from harness.wire.links import LinkTable
    from netem.spec import LinkSpec

    links = LinkTable(up=(LinkSpec(), LinkSpec(rate_bps=5e6, delay_s=0.04), LinkSpec(rate_bps=2e6)),
                      down=(LinkSpec(), LinkSpec(rate_bps=10e6, delay_s=0.02), LinkSpec()))
    cols = link_columns(SimpleNamespace(channel=SimpleNamespace(links=links)), 1)
    assert cols == {"rate_mbit": 10.0, "delay_ms": 20.0, "up_rate_mbit": 5.0, "down_rate_mbit": 10.0,
                    "up_delay_ms": 40.0, "down_delay_ms": 20.0}
    assert link_columns(SimpleNamespace(channel=SimpleNamespace(links=None)), 1) == {}


def test_a_variance_ref_gives_every_client_variance_one_over_r_ref(tmp_path):
    """method.a_variance=ref: A_k = Z[:r_k] / sqrt(r_ref) (the ablation that separates A's variance from the lr rule)."""
    import math

    import torch

    from harness.federated.projection import draw

    cfg = config("spra", rounds=1)
    cfg["method"]["a_variance"] = "ref"
    parties = run_in_threads(cfg, tmp_path)
    for rank in (1, 2, 3):
        ad = parties[rank].adapter
        name = ad.names[0]
        z = draw(cfg["seed"], 0, name, 8, ad.targets[0].d_in)[:ad.rank(name)]
        assert torch.equal(ad.a(name).detach(), (z.double() / math.sqrt(8)).float())   # r_ref = max rank = 8
    rows = read_rows(tmp_path)
    assert rows[rows.role == "server"].in_sync.dropna().astype(bool).all()


def test_flora_downlink_is_counted_stacked_and_dense(tmp_path):
    """FLoRA's stacked downlink is sent (payload_bytes_down); the dense form is counted beside it."""
    run_in_threads(config("flora", rounds=3, eval_every=0), tmp_path)
    rows = read_rows(tmp_path)
    server = rows[(rows.role == "server") & (rows.step > 0)].sort_values("step")
    dense = 4 * (32 * 32 + 32 * 32 + 32 * 48)                        # q, v (32x32), down (32x48), fp32
    assert list(server.merge_bytes_down_dense) == [0, 3 * dense, 3 * dense]   # round 1: nothing merged yet
    assert (server.payload_bytes_down.iloc[1:] > 0).all()

"""Pure tier: every sync method in one process, learner and worker replicas side by side.

The invariants: hilo+identity(fp32) follows full_sync(fp32)'s learner trajectory bit for bit;
hilo with a lossy compressor keeps learner and worker bit-identical (adapter and Adam state);
delta's learner knows the worker's adapter exactly; a flipped bit is seen and repaired."""
from __future__ import annotations

import pytest
import torch

from harness.onpolicy import methods as sync_methods
from harness.onpolicy import sync as syncs
from harness.onpolicy.state import Replica, SyncError, adapter_params, checksum, flip_bit, make_optimizer

from .helpers import FakeRollouts, FakeTask, compressor, lm_backward, make_peft

LR = 1e-2


def pair(method: str, comp=None, sync_dtype="fp32", rank=8, ef=True):
    """(learner model, learner sync, worker model, worker sync) built alike from one seed."""
    lm, wm = make_peft(rank), make_peft(rank)
    lp, wp = adapter_params(lm), adapter_params(wm)
    lrep = Replica(lp, make_optimizer(lp, "adamw", LR))
    wrep = Replica(wp, make_optimizer(wp, "adamw", LR) if sync_methods.worker_needs_optimizer(method) else None)
    factory = (lambda: compressor(**comp)) if comp else None
    ls = sync_methods.build(method, "learner", lrep, sync_dtype=sync_dtype, compressor_factory=factory, error_feedback=ef)
    ws = sync_methods.build(method, "worker", wrep, sync_dtype=sync_dtype, compressor_factory=factory)
    return lm, ls, wm, ws


def run(lm, ls, wm, ws, steps, check=None):
    losses, sizes = [], []
    for step in range(steps):
        losses.append(lm_backward(lm, step))
        update = ls.step(step)
        ws.apply(update.payload, step)
        sizes.append(len(update.payload))
        if check:
            check(step, ls, ws)
    return losses, sizes


def same_tensors(a: dict, b: dict) -> bool:
    return all(torch.equal(a[n], b[n]) for n in a)


def test_hilo_identity_follows_full_sync_bit_for_bit():
    fm, fs, fwm, fws = pair("full_sync", sync_dtype="fp32")
    hm, hs, hwm, hws = pair("hilo", comp=dict(name="identity", dtype="fp32"))
    f_losses, _ = run(fm, fs, fwm, fws, 5)
    h_losses, _ = run(hm, hs, hwm, hws, 5)
    assert f_losses == h_losses
    assert same_tensors(adapter_params(fm), adapter_params(hm))
    assert checksum(fs.replica.params, fs.replica.optimizer) == hs.replica.checksum()   # Adam state too
    assert fws.checksum() == fs.expected_checksum()
    assert hws.checksum() == hs.expected_checksum()
    assert same_tensors(adapter_params(hwm), adapter_params(fwm))


@pytest.mark.parametrize("name", ["spar", "topk", "powersgd"])
def test_hilo_lossy_keeps_replicas_bit_identical(name):
    lm, ls, wm, ws = pair("hilo", comp=dict(name=name, budget=0.1))
    full = sum(p.numel() for p in ls.replica.params.values()) * 2

    def check(step, ls, ws):
        assert ws.checksum() == ls.expected_checksum(), f"step {step}"
    _, sizes = run(lm, ls, wm, ws, 4, check)
    assert max(sizes) <= 0.1 * full
    assert ls.worker_view() is None
    assert same_tensors(adapter_params(lm), adapter_params(wm))


def test_hilo_error_feedback_invariant():
    lm, ls, wm, ws = pair("hilo", comp=dict(name="spar", budget=0.1))
    lm_backward(lm, 0)
    grads = {n: p.grad.clone() for n, p in ls.replica.params.items()}
    ls.step(0)
    lm_backward(lm, 1)
    g1 = {n: p.grad.clone() for n, p in ls.replica.params.items()}
    old = {n: e.clone() for n, e in ls.residual.items()}
    assert old, "error feedback keeps a residual"
    update = ls.step(1)
    decoded = syncs._decode(ls.compressor, update.payload)
    for n in grads:
        assert torch.allclose(decoded[n] + ls.residual[n], g1[n] + old[n], atol=1e-6)



def test_delta_learner_tracks_the_worker_exactly_and_the_policies_differ():
    lm, ls, wm, ws = pair("delta", comp=dict(name="spar", budget=0.1))

    def check(step, ls, ws):
        assert ws.checksum() == ls.expected_checksum(), f"step {step}"
    run(lm, ls, wm, ws, 4, check)
    assert same_tensors(ls.worker_view(), adapter_params(wm))
    assert not same_tensors(ls.worker_view(), adapter_params(lm))


@pytest.mark.parametrize("method, comp, dtype", [
    ("full_sync", None, "bf16"), ("full_sync", None, "fp32"), ("delta", dict(name="spar", budget=0.1), "bf16"),
    ("hilo", dict(name="spar", budget=0.1), "bf16"),
])
def test_replicas_built_alike_start_in_sync(method, comp, dtype):
    _, ls, _, ws = pair(method, comp=comp, sync_dtype=dtype)
    assert ws.checksum() == ls.expected_checksum()


def test_full_sync_bf16_workers_hold_the_rounded_adapter():
    lm, ls, wm, ws = pair("full_sync", sync_dtype="bf16")
    run(lm, ls, wm, ws, 2)
    assert ws.checksum() == ls.expected_checksum()
    view = ls.worker_view()
    assert same_tensors(view, adapter_params(wm))
    assert not same_tensors(view, adapter_params(lm))           # rounding is real


@pytest.mark.parametrize("method, target, comp", [
    ("hilo", "exp_avg", dict(name="spar", budget=0.1)),
    ("hilo", "param", dict(name="spar", budget=0.1)),
    ("delta", "param", dict(name="topk", budget=0.1)),
    ("full_sync", "param", None),
])
def test_corrupted_worker_is_detected_and_repaired(method, target, comp):
    lm, ls, wm, ws = pair(method, comp=comp, sync_dtype="bf16")
    run(lm, ls, wm, ws, 2)
    assert ws.checksum() == ls.expected_checksum()
    flip_bit(ws.replica, target)
    assert ws.checksum() != ls.expected_checksum()             # detected
    resync = ls.resync_payload()
    ws.load_resync(resync)
    assert ws.checksum() == ls.expected_checksum()             # repaired
    run(lm, ls, wm, ws, 2)                                      # and it stays repaired
    assert ws.checksum() == ls.expected_checksum()


def test_hilo_without_a_gradient_says_so():
    lm, ls, wm, ws = pair("hilo", comp=dict(name="identity", dtype="fp32"))
    with pytest.raises(SyncError, match="no gradient"):
        ls.step(0)


def test_unknown_method_names_the_key():
    lm = make_peft()
    p = adapter_params(lm)
    with pytest.raises(SyncError, match="method.name: 'zip'"):
        sync_methods.build("zip", "learner", Replica(p, make_optimizer(p)))


@pytest.mark.parametrize("method, comp, dtype", [
    ("hilo", dict(name="identity", dtype="fp32"), "bf16"), ("hilo", dict(name="spar", budget=0.1), "bf16"),
    ("full_sync", None, "fp32"), ("full_sync", None, "bf16"), ("delta", dict(name="spar", budget=0.1), "bf16"),
])
def test_policy_kl_is_measured_against_what_the_worker_holds(method, comp, dtype):
    """policy_kl runs two forwards for every method. The test compares the worker's actual tensors
    with the learner's copy (worker_params) and with the learner's own adapter: equal tensors
    (hilo, fp32 full sync) measure exactly 0.0; a worker that holds other tensors (delta's
    compressed deltas, bf16 rounding) measures > 0."""
    from harness.onpolicy.mismatch import policy_kl

    lm, ls, wm, ws = pair(method, comp=comp, sync_dtype=dtype)
    run(lm, ls, wm, ws, 3)
    worker = adapter_params(wm)
    assert same_tensors(ls.worker_params(), worker)              # the learner knows what the worker holds
    kl = policy_kl(FakeTask(), lm, ls.replica.params, {n: t.detach() for n, t in worker.items()}, FakeRollouts())
    if same_tensors(worker, adapter_params(lm)):
        assert kl == 0.0
    else:
        assert kl > 0.0
    assert (kl == 0.0) == (method == "hilo" or dtype == "fp32")


# a new method is one module and one YAML file (docs/interfaces.md): this module plays the module
SYNCS = {"toy_copy": sync_methods.SyncMethod(learner=lambda r, o: syncs.FullSyncLearner(r, "fp32"),
                                             worker=lambda r, o: syncs.FullSyncWorker(r))}


def test_a_method_declared_in_its_own_module_is_built_through_the_registry():
    lm, wm = make_peft(), make_peft()
    lrep, wrep = Replica(adapter_params(lm), make_optimizer(adapter_params(lm))), Replica(adapter_params(wm), None)
    ls = sync_methods.build("toy_copy", "learner", lrep, module=__name__)
    ws = sync_methods.build("toy_copy", "worker", wrep, module=__name__)
    assert isinstance(ls, syncs.FullSyncLearner) and not sync_methods.worker_needs_optimizer("toy_copy", __name__)
    with pytest.raises(SyncError, match="declares toy_copy, not 'hilo'"):
        sync_methods.build("hilo", "learner", lrep, module=__name__)
    for p in lrep.params.values():
        p.grad = torch.ones_like(p)
    ws.apply(ls.step(0).payload, 0)
    assert ws.checksum() == ls.expected_checksum()


@pytest.mark.parametrize("method,comp", [("hilo", dict(name="spar", budget=0.05)),
                                         ("hilo", dict(name="powersgd", rank=1)),   # a compressor with warm-start state
                                         ("delta", dict(name="topk", budget=0.05)), ("full_sync", None), ("patch", None)])
def test_warm_up_changes_nothing_that_follows(method, comp):
    """warm_up (before the loop) runs the method's paths on throwaway copies: the states, the
    payloads and the trajectory after it are those of a twin that never warmed up."""
    cold, warm = pair(method, comp=comp, sync_dtype="bf16"), pair(method, comp=comp, sync_dtype="bf16")
    before = (warm[1].expected_checksum(), warm[3].checksum())
    warm[1].warm_up()
    warm[3].warm_up()
    assert (warm[1].expected_checksum(), warm[3].checksum()) == before
    assert all(p.grad is None for p in warm[1].replica.params.values())
    assert run(*cold, 3) == run(*warm, 3)
    assert warm[1].expected_checksum() == cold[1].expected_checksum() == warm[3].checksum()

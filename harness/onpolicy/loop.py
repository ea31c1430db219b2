"""The on-policy loop: one learner (rank 0) and N rollout workers, one update per step.

Each update t (every rank starts it together, after a barrier):

    workers  rollouts_t = task.rollout(policy_t, their shard of the prompts, seeded)
             (+ the checksum of their state after update t-1, hashed during this rollout)
                                                                                      -> gather up
    learner  compare those checksums with its own (of the state after t-1); any differ: a
             resync is due (its full state after t-1, taken now, before it steps)
             loss = task.loss(policy, rollouts); loss.backward(); clip to onpolicy.clip_norm
             (hilo with compressor.options.backward_grams: Spar's Gram matrices are computed
             on a side thread during backward, harness.onpolicy.overlap)
             update = sync.step(t): the method's payload (hilo: encode only)
             -> broadcast down: 1 flag byte (a resync follows) + payload
             -> only when a resync is due: scatter the resync to the workers that differ
                (and one byte "ok" to the others)
             hilo: the learner's own decode + optimizer step (replay) now, while the payload
             is on the wire and the workers apply it
    workers  (load the resync, if theirs) sync.apply(payload, t); ack (apply time, receive
             time)                                                                   -> gather up
             start hashing the state after t in a thread (verification due at t) while the
             next update's rollout runs

Verification is off the critical path: a worker's checksum rides on its next uplink message
and is hashed concurrently with its next rollout; the learner hashes its own state as
housekeeping (outside the timed window, where it would overlap the workers' rollouts in a
deployment); there is no verdict message unless a resync is due. A drift in the state after
update t is detected at the start of update t+1 and repaired before update t+1 is applied;
the checksum of the last update is compared after the loop (housekeeping, outside any
window), and a repair there is recorded in the last row. Rows are written once their state's
verdict is known, so row t's ``in_sync`` is about the state after update t, while
``resync_bytes`` / ``resynced_workers`` and the repair's transfer time are in the row of the
update whose window carried the repair (t+1).

Only that window is timed, so the learner's housekeeping (evaluation every
``onpolicy.eval_every`` updates, the policy-mismatch diagnostic, its checksum, writing rows)
never counts as update time. Learner rows (seconds; bytes summed over every worker's link):
  rollout_s        slowest worker's generation
  transfer_up_s    slowest rollout upload (receiver-side transfer time)
  learn_s          loss forward + backward + clipping (+ the optimizer step where the payload
                   needs the stepped state: full sync, delta)
  encode_s         compress (hilo, delta; delta also decodes for its view); packing (full_sync)
  replay_s         hilo: the learner's decode + optimizer step, run after the payload is sent
                   (overlaps the downlink and the workers' apply; 0 for other methods)
  transfer_down_s  slowest payload download (receiver side) + the resync scatter, if any
  apply_s          slowest worker's decode + apply
  ack_s            slowest acknowledgement upload (receiver side)
  update_s         the whole window, wall clock at the learner (``update_wall_s``); on the
                   ``model`` backend, where transfers are modelled and not paced, the sum of
                   the serial parts (rollout, transfer_up, learn, encode, transfer_down,
                   apply, ack) with the modelled transfer times
  bound_s          the ideal update: rollout_s + ideal_up_s + learn_s + ideal_down_s (the
                   ideals are bytes*8/rate + latency of the slowest flow): what the update
                   would take if encoding, applying, acknowledging and the harness cost
                   nothing. Efficiency = bound_s / update_s (the report's to draw).
  payload_bytes_*  exact payload bytes; wire_bytes_* the learner's interface counters
  in_sync          every worker's checksum of the state after this update matched (None when
                   not verified)
Every row also has loss, the task's other loss metrics on the update's rollouts as
``train_<name>`` (train_reverse_kl, train_reward, ...), policy_kl (``onpolicy.policy_kl``)
and, when evaluated, the task's evaluate() metrics on held-out prompts (accuracy, and
reverse_kl or reward); after the last update also those of the policy the workers hold
(``worker_accuracy`` ...) where it is not the learner's (delta, bf16 full sync).

Before update 0 every worker's checksum is compared with the learner's (they all build the
same seeded adapter); the result is ``init_in_sync`` in the row of update 0.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from harness.onpolicy.mismatch import policy_kl, swapped
from harness.onpolicy.protocol import (_OK, _RESYNC, Background, _delta, _now, apply_verdict, eval_due, frame,
                                       unframe, verify_due)
from harness.onpolicy.setup import Setup, build_setup, inject_fault, worker_rollouts
from harness.runplan import RunPlan
from harness.tasks.cache import ensure_pretrained
from harness.wire.transport import trace_rate_columns

# Imported once by the launcher before it forks the role processes (harness.cluster.spawn): the bulk
# of a role's start-up is importing these.
PRELOAD = ("torch.distributed", "transformers", "peft", "harness.tasks")

def _threads(world_size: int) -> None:
    """A fixed thread count on every machine (harness.cluster.launch.ROLE_THREADS: the count changes
    the bits of training), unless OMP_NUM_THREADS says otherwise."""
    from harness.cluster.launch import ROLE_THREADS

    env = os.environ.get("OMP_NUM_THREADS", "")
    torch.set_num_threads(int(env) if env.isdigit() and int(env) > 0 else ROLE_THREADS)


def main(ctx) -> None:
    """Entry of every role process (``harness.onpolicy.loop:main``): rank 0 learns, the rest roll out.
    The payload's plan is decoded here, once (RunPlan.from_dict); nothing is read from a config."""
    t0 = _now()
    _threads(ctx.world_size)
    plan = RunPlan.from_dict(ctx.plan)
    torch.manual_seed(plan.seed)
    ensure_pretrained(plan.model, plan.task, plan.model_source, ctx.rank, beat=ctx.progress)
    ctx.channel.barrier()
    t1 = _now()
    setup = build_setup(plan.onpolicy, plan.model, plan.task, plan.model_source,
                        "learner" if ctx.rank == 0 else "worker", ctx.device)
    setup.sync.warm_up()          # one-off first-call costs, before the loop and any window (sync.py)
    t2 = _now()
    (run_learner if ctx.rank == 0 else run_worker)(ctx, setup)
    print(f"[onpolicy] {ctx.role}: pretrained models ready {t1 - t0:.1f} s, setup {t2 - t1:.1f} s, "
          f"{plan.onpolicy.steps} updates {_now() - t2:.1f} s", flush=True)


# --------------------------------------------------------------------------- learner
@dataclass
class Verdict:
    """One verification round at the learner."""
    in_sync: bool                 # every worker's checksum matched
    resynced: int                 # workers sent a full resync
    resync_bytes: int             # bytes of those resyncs (all workers)
    sent_bytes: int               # every verdict message, resyncs included
    seconds: float                # the scatter (wall clock; modelled on the model backend)


def _verify(ctx, s: Setup, checksums: dict[int, str], tag: str) -> Verdict:
    """Compare the workers' checksums with the learner's; scatter a resync to those that differ."""
    expected = s.sync.expected_checksum()
    bad = sorted(r for r, c in checksums.items() if c != expected)
    resync = _RESYNC + s.sync.resync_payload() if bad else b""
    messages = {r: resync if r in bad else _OK for r in checksums}
    t0 = _now()
    _, transfers = ctx.channel.scatter(messages, tag)
    seconds = _now() - t0
    if ctx.channel.modelled:        # unpaced there: take the modelled times
        seconds = max(t.seconds for t in transfers)
    return Verdict(not bad, len(bad), len(resync) * len(bad), sum(map(len, messages.values())), seconds)


def run_learner(ctx, s: Setup) -> None:
    op = s.plan
    steps, every = op.steps, op.verify_every
    acks, _ = ctx.channel.gather(None, "verify/init")
    init = _verify(ctx, s, {r: unframe(a)[0]["checksum"] for r, a in acks.items()}, "resync/init")
    if not init.in_sync:
        print(f"[onpolicy] {init.resynced} workers' initial adapters differed from the learner's: resynced",
              flush=True)
    held: tuple[int, dict] | None = None      # the last row, written once its verdict is known
    expected: str | None = None               # the learner's checksum of the state after the last verified update
    pending: list[int] = []                   # staleness 1: workers found out of sync at the last ack, resynced next
    versions = {0: _snapshot(s)} if op.staleness and op.policy_kl else {}   # adapter of each policy version still needed
    base = ({f"base_{k}": v for k, v in evaluate(s, last=False, step=-1, recorder=ctx.recorder,
                                                 progress=ctx.progress).items()}
            if op.eval_base else {})   # outside every window
    for step in range(steps):
        ctx.channel.barrier()
        row, rollouts, prior_in_sync, pending = learner_update(ctx, s, step, expected, pending)
        if held is not None:
            held[1]["in_sync"] = prior_in_sync
            ctx.recorder.row(held[0], **held[1])
        # housekeeping, outside the timed window (the checksum first: policy_kl swaps params)
        expected = s.sync.expected_checksum() if verify_due(step, every) else None
        if step == 0:
            row["init_in_sync"] = init.in_sync
            row.update(base)
        if op.policy_kl:
            row["policy_kl"] = policy_kl(s.task, s.policy, s.replica.params, s.sync.worker_params(), rollouts)
            if row["rollout_policy"] != step:     # KL(rollout policy || the policy trained on them), per token
                row["rollout_kl"] = policy_kl(s.task, s.policy, s.replica.params, versions[row["rollout_policy"]],
                                              rollouts, learner=versions[step])
        if op.staleness and op.policy_kl:         # keep the versions the next update's rollout_kl needs
            versions = {v: p for v, p in versions.items() if v >= step}
            versions[step + 1] = _snapshot(s)
        if eval_due(step, op.eval_every, steps, op.eval_final):
            t0 = _now()
            row.update(evaluate(s, last=step == steps - 1, step=step, recorder=ctx.recorder, progress=ctx.progress))
            row["eval_s"] = _now() - t0
        held = (step, row)
        ctx.heartbeat(step)
    if held is not None:
        if expected is not None or (op.staleness and every > 0):   # the last update's state: compared after the loop
            acks, _ = ctx.channel.gather(None, "verify/final")
            final = _verify(ctx, s, {r: unframe(a)[0]["checksum"] for r, a in acks.items()}, "resync/final")
            held[1].update(in_sync=final.in_sync, resynced_workers=held[1]["resynced_workers"] + final.resynced,
                           resync_bytes=held[1]["resync_bytes"] + final.resync_bytes)
        ctx.recorder.row(held[0], **held[1])


def _snapshot(s: Setup) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in s.replica.params.items()}


def evaluate(s: Setup, last: bool, step: int, recorder=None, progress=None) -> dict[str, float]:
    """The task's held-out metrics of the learner's policy; after the last update also of the
    policy the workers actually hold, as ``worker_<metric>``, where that differs (delta,
    low-precision full sync). Each evaluation's per-prompt records go to ``recorder.prompts``
    (view ``learner`` / ``worker``). The learner computes with ``onpolicy.eval_threads`` threads
    meanwhile (the workers wait at the next barrier), then with its own again.

    The learning curve: with ``onpolicy.curve_prompts`` N > 0 an evaluation between the base's and
    the last scores only the first N of the held-out prompts; every evaluation also reports
    ``curve_accuracy``, the accuracy on those first N, so the curve (equal wall-clock, time to target,
    the plateau) reads one prompt set at every point while the final quality reads them all.
    ``progress`` (the role's ``ctx.progress``) is called after each batch of prompts, so that a long
    evaluation of a real model is not taken for a hang."""
    n = int(s.task_plan.eval_prompts)
    curve = int(s.plan.curve_prompts)
    scored = n if (last or step < 0 or curve <= 0) else min(curve, n)
    s.policy.eval()
    with _eval_threads(int(s.plan.eval_threads)):
        metrics, frame = s.task.evaluate_prompts(s.policy, scored, progress=progress)
        out = {k: float(v) for k, v in metrics.items()}
        if curve > 0 and "correct" in frame:
            out["curve_accuracy"] = float(frame.loc[frame["prompt"] < curve, "correct"].mean())
        if recorder is not None:
            recorder.prompts(step, frame, "learner")
        view = s.sync.worker_view() if last else None
        if view is not None:
            with swapped(s.replica.params, view):
                metrics, frame = s.task.evaluate_prompts(s.policy, scored, progress=progress)
            out.update({f"worker_{k}": float(v) for k, v in metrics.items()})
            if recorder is not None:
                recorder.prompts(step, frame, "worker")
    return out


@contextmanager
def _eval_threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def learner_update(ctx, s: Setup, step: int, expected: str | None = None, pending: list[int] | None = None
                   ) -> tuple[dict[str, Any], Any, bool | None, list[int]]:
    """One timed update at the learner: (its row, the rollouts it learned from, whether the
    workers' states after the previous update matched ``expected`` (None if not verified),
    the workers to resync in the next update).

    Synchronous (staleness 0): the checksums ride on the rollouts, and a worker that differs is
    resynced in this update. Staleness 1: they ride on the acks (the workers hash while they
    generate the next rollouts), and the workers in ``pending`` (found at the previous update's
    acks) are resynced now, before this update is applied."""
    from harness.tasks import Rollouts

    ch, stale = ctx.channel, s.plan.staleness > 0
    wire0, t0 = ctx.wire(), _now()
    parts, ups = ch.gather(None, f"rollouts/{step}")
    t1 = _now()
    metas = {r: unframe(parts[r]) for r in sorted(parts)}
    checks = {r: meta["checksum"] for r, (meta, _) in metas.items() if "checksum" in meta}
    found = _differing(checks, expected)        # synchronous: the states after the previous update
    bad = list(pending or []) if stale else found
    resync = _RESYNC + s.sync.resync_payload() if bad else b""     # the state after the previous update
    rollouts = Rollouts.cat([Rollouts.from_bytes(body) for _, body in metas.values()])
    s.policy.train()
    loss, metrics = s.task.loss(s.policy, rollouts)
    loss.backward()
    s.sync.backward_done()                      # side work on the gradients ends before clipping scales them
    grad_norm, scale = _clip(s, s.plan.clip_norm)
    t2 = _now()
    update = s.sync.step(step, defer=True, grad_scale=scale)
    message = (_RESYNC if bad else _OK) + update.payload
    _, downs = ch.broadcast(message, f"update/{step}")
    resync_s, verdict_bytes = 0.0, 0
    if bad:
        verdicts = {r: resync if r in bad else _OK for r in parts}
        tr = _now()
        _, transfers = ch.scatter(verdicts, f"resync/{step}")
        resync_s = _now() - tr
        if ctx.channel.modelled:        # unpaced there: take the modelled times
            resync_s = max(t.seconds for t in transfers)
        verdict_bytes = sum(map(len, verdicts.values()))
    decode_s, replay_step_s = update.replay() if update.replay is not None else (0.0, 0.0)
    raw, ack_transfers = ch.gather(None, f"ack/{step}")
    acks = {r: unframe(a)[0] for r, a in raw.items()}
    t3 = _now()
    tx, rx = _delta(wire0, ctx.wire())
    if stale:                             # the states after the previous update as they were, and as they are now
        checks = {r: a["checksum"] for r, a in acks.items() if "checksum" in a}
        found = _differing(checks, expected)
        pending = _differing({r: a.get("repaired", a.get("checksum", expected)) for r, a in acks.items()}, expected)
    row = dict(
        loss=float(loss.detach()), grad_norm=grad_norm,
        **{f"train_{k}": float(v) for k, v in metrics.items() if k != "loss"},
        rollout_s=max(meta["rollout_s"] for meta, _ in metas.values()),
        transfer_up_s=max(t.seconds for t in ups),
        learn_s=(t2 - t1) + update.step_s, encode_s=update.encode_s, replay_s=decode_s + replay_step_s,
        transfer_down_s=max(a["recv_s"] for a in acks.values()) + resync_s,
        apply_s=max(a["apply_s"] for a in acks.values()), ack_s=max(t.seconds for t in ack_transfers),
        update_wall_s=t3 - t0,
        ideal_up_s=max(t.ideal_s for t in ups), ideal_down_s=max(t.ideal_s for t in downs),
        **trace_rate_columns(ch, up=ups, down=downs),
        payload_bytes_up=sum(map(len, parts.values())) + sum(t.nbytes for t in ack_transfers),
        payload_bytes_down=len(message) * len(acks) + verdict_bytes,
        update_bytes=len(update.payload), wire_bytes_down=tx, wire_bytes_up=rx,
        verified=bool(checks), resynced_workers=len(bad), resync_bytes=(len(resync) * len(bad)),
        staleness=s.plan.staleness, rollout_policy=min(int(m.get("policy", step)) for m, _ in metas.values()),
        compressor_info=_info(update.info),
        **update.columns)
    row["rollout_overlapped"] = row["rollout_policy"] < step        # generated while the previous update was on the wire
    # the model backend moves bytes unpaced and models their time: its update time is the sum
    # of the serial parts with the modelled transfers (a stale rollout overlaps learn, encode and
    # the downlink); every other backend's is the wall clock
    if ctx.channel.modelled:
        middle = _with_rollout(row, row["learn_s"] + row["encode_s"] + row["transfer_down_s"])
        row["update_s"] = row["transfer_up_s"] + middle + row["apply_s"] + row["ack_s"]
    else:
        row["update_s"] = row["update_wall_s"]
    row["bound_s"] = row["ideal_up_s"] + _with_rollout(row, row["learn_s"] + row["ideal_down_s"])
    return row, rollouts, (not found) if checks else None, (pending if stale else [])


def _differing(checks: dict[int, str], expected: str | None) -> list[int]:
    """The workers whose checksum is not ``expected``, in rank order."""
    return sorted(r for r, c in checks.items() if c != expected)


def _with_rollout(row: dict[str, Any], span: float) -> float:
    """``span`` (learner-side seconds) with the rollout: after it (synchronous), or beside it
    (a stale rollout, generated while the learner learned and the payload was on the wire)."""
    return max(span, row["rollout_s"]) if row["rollout_overlapped"] else span + row["rollout_s"]


def _clip(s: Setup, max_norm: float) -> tuple[float, float]:
    """Clip the learner's true gradient (before any compression) to ``max_norm`` (0: no
    clipping); returns the norm before clipping and the factor the gradients were multiplied by
    (torch's own: min(max_norm / (norm + 1e-6), 1) in float32)."""
    grads = [p.grad for p in s.replica.params.values() if p.grad is not None]
    if max_norm > 0:
        norm = torch.nn.utils.clip_grad_norm_(list(s.replica.params.values()), max_norm)
        return float(norm), float(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    if not grads:
        return 0.0, 1.0
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))), 1.0


def _info(info: dict) -> dict:
    """The compressor's per-step diagnostics that fit a cell (ranks per matrix, budget use);
    tensor names shortened to e.g. ``layers.0.self_attn.q_proj.lora_A``."""
    keep = ("used_bytes", "budget_bytes", "ranks", "k", "bits", "energy_kept")
    out = {k: v for k, v in info.items() if k in keep}
    if isinstance(out.get("ranks"), dict):
        out["ranks"] = {_short(n): r for n, r in out["ranks"].items()}
    return out


def _short(name: str) -> str:
    for prefix in ("base_model.model.model.", "base_model.model."):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return name.replace(".default.weight", "")


# --------------------------------------------------------------------------- worker
def run_worker(ctx, s: Setup) -> None:
    if s.plan.staleness:
        from harness.onpolicy.stale import run_stale_worker

        return run_stale_worker(ctx, s)
    ch = ctx.channel
    steps, every = s.plan.steps, s.plan.verify_every
    shard = ctx.rank - 1
    ch.gather(frame({"checksum": s.sync.checksum()}), "verify/init")
    apply_verdict(ch, s, "resync/init")
    hashing: Background | None = None       # checksum of the state after the last verified update
    held: tuple[int, dict] | None = None    # the last row, written once its verdict is known
    for step in range(steps):
        ch.barrier()
        wire0, t0 = ctx.wire(), _now()
        rollouts, rollout_s = worker_rollouts(s, ctx.rank, ctx.world_size, step)
        meta: dict[str, Any] = {"rollout_s": rollout_s}
        if hashing is not None:
            meta["checksum"] = hashing.result()
        up = frame(meta, rollouts.to_bytes())
        ch.gather(up, f"rollouts/{step}")
        message, (down,) = ch.broadcast(None, f"update/{step}")
        in_sync, resync_bytes, verdict_bytes = (True if hashing is not None else None), 0, 0
        if message[:1] == _RESYNC:                # a resync is due for some worker: the verdict follows
            in_sync, resync_bytes, verdict_bytes = apply_verdict(ch, s, f"resync/{step}")
        ta = _now()
        s.sync.apply(message[1:], step)
        flipped = inject_fault(s, shard, step)
        ack: dict[str, Any] = {"recv_s": down.seconds, "apply_s": _now() - ta}
        ack_bytes = frame(ack)
        ch.gather(ack_bytes, f"ack/{step}")
        hashing = Background(s.sync.checksum) if verify_due(step, every) else None
        tx, rx = _delta(wire0, ctx.wire())
        row = dict(rollout_s=rollout_s, transfer_down_s=down.seconds, apply_s=ack["apply_s"],
                   update_s=_now() - t0, payload_bytes_up=len(up) + len(ack_bytes),
                   payload_bytes_down=len(message) + verdict_bytes,
                   wire_bytes_up=tx, wire_bytes_down=rx, resync_bytes=resync_bytes)
        row.update(getattr(s.sync, "columns", {}))      # method-specific (patch: decode_s, scatter_s)
        if flipped:
            row["fault"] = flipped
        if held is not None:                # the previous row, its verdict now known: written after the ack,
            held[1]["in_sync"] = in_sync    # off the path (a parquet file costs ~8 ms: it sat before apply)
            ctx.recorder.row(held[0], **held[1])
        held = (step, row)
        ctx.heartbeat(step)
    if held is not None:
        if hashing is not None:             # the last update's state: compared after the loop
            ch.gather(frame({"checksum": hashing.result()}), "verify/final")
            in_sync, final_bytes, _ = apply_verdict(ch, s, "resync/final")
            held[1].update(in_sync=in_sync, resync_bytes=held[1]["resync_bytes"] + final_bytes)
        ctx.recorder.row(held[0], **held[1])

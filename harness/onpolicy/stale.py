"""The rollout worker with one update of overlap (``onpolicy.staleness=1``), labelled as such.

As asynchronous RL systems do, a worker generates update t+1's rollouts with the policy it
holds while update t's payload is on the wire (policy version t, one behind the learner's
t+1), so the generation overlaps the learner's loss, encode and the downlink:

    update t   worker  send rollouts_t (made during update t-1; update 0's are made now)
                       receive update t (a thread)  ||  rollouts_{t+1} = rollout(policy_t)
                       (load a resync if flagged) apply update t; ack (+ checksum of the
                       state after t-1, hashed in a thread during this update's rollout)

The learner's loop is the synchronous one (roles.learner_update) with two changes: the
checksums ride on the acks, not on the rollouts (they are hashed while the next rollouts
are generated), and a worker found out of sync at the acks of update t is resynced in
update t+1, before that update is applied. A drift in the state after update t is detected
within one update (at the acks of update t+1) and repaired in update t+2, so the state after
t+1, built on it, also differs and its row says so (``in_sync`` false for two rows, where the
synchronous loop has one). A repaired worker's ack also carries the checksum of what it
holds after the repair (``repaired``), from which the learner decides the next resync. The
rollouts of update t come from policy version max(t - 1, 0): rows carry ``rollout_policy``
and the learner measures ``rollout_kl``, KL(rollout policy || the policy trained on them).

Worker rows in this mode carry no ``in_sync`` (the learner's rows hold every verdict);
``resync_bytes`` is in the row of the update whose window carried the repair.
"""
from __future__ import annotations

from typing import Any

from harness.onpolicy.protocol import _RESYNC, Background, _delta, _now, apply_verdict, frame, verify_due


def run_stale_worker(ctx, s) -> None:
    from harness.onpolicy.setup import inject_fault, worker_rollouts

    ch, steps, every = ctx.channel, s.plan.steps, s.plan.verify_every
    ch.gather(frame({"checksum": s.sync.checksum()}), "verify/init")
    apply_verdict(ch, s, "resync/init")
    hashing: Background | None = None          # checksum of the state after the last verified update
    ready: tuple[Any, float, int] | None = None   # (rollouts, seconds, policy version) made during the last update
    for step in range(steps):
        ch.barrier()
        wire0, t0 = ctx.wire(), _now()
        rollouts, rollout_s, version = ready if ready is not None else (*worker_rollouts(s, ctx.rank, ctx.world_size, step), step)
        up = frame({"rollout_s": rollout_s, "policy": version}, rollouts.to_bytes())
        ch.gather(up, f"rollouts/{step}")
        receiver = Background(lambda tag=f"update/{step}": ch.broadcast(None, tag), name="receive")
        ready = (*worker_rollouts(s, ctx.rank, ctx.world_size, step + 1), step) if step + 1 < steps else None   # policy version `step`
        message, (down,) = receiver.result()
        ack: dict[str, Any] = {}
        if hashing is not None:                     # the state after step-1 as it was
            ack["checksum"] = hashing.result()
        resync_bytes = verdict_bytes = 0
        if message[:1] == _RESYNC:                  # some worker's state after step-2 differed: the verdict follows
            in_sync, resync_bytes, verdict_bytes = apply_verdict(ch, s, f"resync/{step}")
            if not in_sync:                         # ours was replaced by the learner's: what we hold now
                ack["repaired"] = s.sync.checksum()
        ta = _now()
        s.sync.apply(message[1:], step)
        flipped = inject_fault(s, ctx.rank - 1, step)
        ack.update(recv_s=down.seconds, apply_s=_now() - ta)
        ack_bytes = frame(ack)
        ch.gather(ack_bytes, f"ack/{step}")
        hashing = Background(s.sync.checksum) if verify_due(step, every) else None
        tx, rx = _delta(wire0, ctx.wire())
        row = dict(rollout_s=rollout_s, rollout_policy=version, transfer_down_s=down.seconds,
                   apply_s=ack["apply_s"], update_s=_now() - t0, payload_bytes_up=len(up) + len(ack_bytes),
                   payload_bytes_down=len(message) + verdict_bytes, wire_bytes_up=tx, wire_bytes_down=rx,
                   resync_bytes=resync_bytes, staleness=1)
        row.update(getattr(s.sync, "columns", {}))
        if flipped:
            row["fault"] = flipped
        if step == steps - 1 and every > 0:     # the last update's state: compared after the loop
            ch.gather(frame({"checksum": hashing.result() if hashing is not None else s.sync.checksum()}),
                      "verify/final")
            _, final_bytes, _ = apply_verdict(ch, s, "resync/final")
            row["resync_bytes"] += final_bytes
        ctx.recorder.row(step, **row)
        ctx.heartbeat(step)

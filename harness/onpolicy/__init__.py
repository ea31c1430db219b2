"""On-policy post-training over emulated links: one learner, N rollout workers (docs/onpolicy.md).

    loop.main(ctx)             entry of every role process (harness.run launches it); the learner and worker loops
    methods.build(method, side, replica, ...) -> LearnerSync | WorkerSync   (the registry)
                               full_sync, lowrank, delta, hilo, patch: step(step) -> Update (payload)
                               on the learner, apply(payload, step) on a worker, checksums,
                               resync
    state                      Replica, checksum (SHA-256), wire formats, fault injection
    setup.build_setup(plan, model, task, source, role, device) -> Setup    policy, replica, task, sync side
    mismatch.policy_kl(...)    KL(worker policy || learner policy) on rollouts
    patch / codec              lossless sparse bf16 patches (PULSE) and their byte codec (zstd)
    sparsity                   python -m harness.commands.sparsity: bf16 update sparsity of the adapter
"""

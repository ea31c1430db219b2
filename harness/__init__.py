"""narrowband: communication-efficient distributed LoRA post-training over kernel-shaped links.

How a run flows (lower layers never import higher ones; tests/config/test_layers.py):

    __main__ (Hydra app) -> run.run_scenario -> plan.build_plan(cfg) -> RunPlan
        -> cluster.launch (cluster/: spawn, supervise, role) -> onpolicy.roles | federated.roles
        -> wire.transport (wire/: links, sealed; backends) -> record (rows, run.json) -> report

See docs/interfaces.md ("Layout", "Layers") for every module.
"""

"""Pure and composed tier: placement from a hostfile, Slurm's and torchrun's environment or the
default star; disjoint cores, GPUs, the oversubscribed flag; the plan and run.json carry it."""
from __future__ import annotations

import os

import pytest

from harness.errors import ConfigError
from harness.placement import Host, Placement, Source, assign, expand_nodelist, node_rank, resolve

ROLES = ["learner", "worker0", "worker1", "worker2"]


def test_one_host_shares_its_cores_out_disjoint_or_flags_oversubscription():
    fits = assign(Source.STAR, [Host("local", cores=8)], ROLES, gpu_wanted=False)
    cores = [set(p.cores) for p in fits.roles]
    assert all(len(c) == 2 for c in cores) and len(set().union(*cores)) == 8        # 4 x 2, disjoint
    assert not fits.oversubscribed and fits.oversubscribed_hosts == ()
    crowded = assign(Source.STAR, [Host("local", cores=2)], ROLES, gpu_wanted=False)
    assert crowded.oversubscribed and crowded.oversubscribed_hosts == ("local",)
    assert all(p.cores == () for p in crowded.roles)                                 # nobody pinned
    unpinned = assign(Source.STAR, [Host("local", cores=8)], ROLES, gpu_wanted=False, pin=False)
    assert all(p.cores == () for p in unpinned.roles) and not unpinned.oversubscribed


def test_hub_gets_host_zero_alone_and_nodes_round_robin_over_the_rest():
    hosts = [Host("a", cores=4, gpus=2), Host("b", cores=4, gpus=1), Host("c", cores=4, gpus=0)]
    p = assign(Source.HOSTFILE, hosts, ROLES, gpu_wanted=True)
    assert [r.host for r in p.roles] == ["a", "b", "c", "b"]
    assert p.of("learner").gpu == 0 and p.of("learner").device("auto") == "cuda:0"
    assert (p.of("worker0").gpu, p.of("worker2").gpu) == (0, 0) and p.gpu_shared    # host b: 1 GPU, 2 roles
    assert p.of("worker1").gpu is None and p.of("worker1").device("auto") == "auto"
    assert set(p.of("worker0").cores).isdisjoint(p.of("worker2").cores)
    assert Placement.from_dict(p.to_dict()) == p
    described = p.describe()
    assert described["hosts"][1]["roles"] == ["worker0", "worker2"] and described["oversubscribed"] is False
    cpu_only = assign(Source.HOSTFILE, hosts, ROLES, gpu_wanted=False)
    assert all(r.gpu is None for r in cpu_only.roles)


def test_hostfile_is_read_and_every_mistake_names_the_host(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# hub first\nh0 addr=10.0.0.1 cores=4 gpus=1 iface=eth0\nh1 cores=2\n\nh2  # comment\n")
    hosts = resolve({"source": "hostfile", "hostfile": str(path)}, ROLES).hosts
    assert hosts == (Host("h0", "10.0.0.1", 4, 1, "eth0"), Host("h1", None, 2, 0, None), Host("h2"))
    for text, words in (("h0 cores=0\n", "host h0: cores='0'"), ("h0 slots=2\n", "host h0: 'slots=2'"),
                        ("h0\nh0\n", "host 'h0' is listed twice"), ("bad/name\n", "host 'bad/name'"),
                        ("# nothing\n", "names no host"), ("h0 gpus=x\n", "host h0: gpus='x'")):
        path.write_text(text)
        with pytest.raises(ConfigError, match="placement.hostfile") as err:
            resolve({"source": "hostfile", "hostfile": str(path)}, ROLES)
        assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="cannot be read"):
        resolve({"source": "hostfile", "hostfile": str(tmp_path / "missing")}, ROLES)
    with pytest.raises(ConfigError, match="placement.source: 'mpi' is not allowed"):
        resolve({"source": "mpi"}, ROLES)


def test_slurm_and_torchrun_environments():
    assert expand_nodelist("gpu[01-03,7],login") == ["gpu01", "gpu02", "gpu03", "gpu7", "login"]
    env = {"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_CPUS_ON_NODE": "16(x3)", "SLURM_GPUS_ON_NODE": "4",
           "SLURM_NODEID": "2"}
    p = resolve({"source": "slurm"}, ROLES, device="cuda", env=env)
    assert [h.name for h in p.hosts] == ["n1", "n2", "n3"] and {h.cores for h in p.hosts} == {16}
    assert p.of("worker1").host == "n3" and node_rank(p, env) == 2
    assert p.of("worker0").gpu == 0 and p.of("worker2").gpu == 1                      # two roles on n2
    with pytest.raises(ConfigError, match="SLURM_JOB_NODELIST is not set"):
        resolve({"source": "slurm"}, ROLES, env={})
    tr = {"WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "1", "MASTER_ADDR": "10.1.1.1"}
    p = resolve({"source": "torchrun"}, ROLES, env=tr)
    assert [h.name for h in p.hosts] == ["node0", "node1", "node2"] and p.hosts[0].addr == "10.1.1.1"
    assert node_rank(p, tr) == 1 and p.notes
    with pytest.raises(ConfigError, match="GROUP_RANK: '7' is not a node rank"):
        node_rank(p, {**tr, "GROUP_RANK": "7"})


def test_the_plan_carries_the_placement_and_the_roles_their_slots():
    from harness.plan import RunPlan, build_plan
    from harness.compose import compose_config
    from harness.scenario import run_id_of

    cfg = compose_config(["scenario=smoke_hilo", "net.backend=model"])
    plan = build_plan(cfg)
    assert plan.placement.source is Source.STAR and [p.role for p in plan.placement.roles] == [r.name for r in plan.roles]
    assert plan.placement.oversubscribed == (len(plan.roles) > len(os.sched_getaffinity(0)))
    assert RunPlan.from_dict(plan.to_dict()) == plan
    specs = plan.role_specs()
    assert [s.cores for s in specs] == [p.cores for p in plan.placement.roles]
    # the default star leaves run ids as they were; another placement is another run
    other = compose_config(["scenario=smoke_hilo", "net.backend=model", "placement.pin=false"])
    assert run_id_of(cfg, "v") != run_id_of(other, "v")


def test_report_names_an_oversubscribed_run_without_flagging_it_loaded(tmp_path):
    """More roles than cores is the machine's shape (every run on 2 cores with 3+ roles, a method and
    its baseline alike): named in the reason, not taken for other programs' load."""
    import pandas as pd

    from harness.report.collect import Run

    idle = {"cpus": 2, "roles_cpu_s": 1.0, "wall_s": 20.0, "others_cpu_s": 0.0,
            "start": {"loadavg": [0.1]}, "end": {"loadavg": [0.1]}}
    crowded = {"oversubscribed": True, "oversubscribed_hosts": ["local"]}
    assert Run(tmp_path, "s", "r", "ok", "", {"load": idle}, pd.DataFrame()).load() == (False, "")
    flag, note = Run(tmp_path, "s", "r", "ok", "", {"load": idle, "placement": crowded}, pd.DataFrame()).load()
    assert flag is False and note == "oversubscribed: more roles than cores on local"
    busy = {**idle, "others_cpu_s": 30.0}                            # > 0.25 x 2 CPUs x 20 s: flagged, both named
    flag, note = Run(tmp_path, "s", "r", "ok", "", {"load": busy, "placement": crowded}, pd.DataFrame()).load()
    assert flag is True and note.endswith("; oversubscribed: more roles than cores on local")


def test_a_role_pins_itself_to_its_slots():
    from harness.cluster.role import pin

    before = sorted(os.sched_getaffinity(0))
    try:
        assert pin([0]) == before[:1]
    finally:
        os.sched_setaffinity(0, before)
    assert pin([]) == before

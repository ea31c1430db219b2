"""Backend resolution and launch input checks: everything that fails before anything is created."""
from __future__ import annotations

import pytest

from harness.cluster.launch import ClusterError, RoleSpec, check_roles, launch, resolve_backend
from harness.cluster.role import resolve_device
from netem.caps import Capabilities
from netem.spec import LinkSpec

ALL = {"netem": True, "tbf": True, "htb": True, "ingress": True, "ifb": True, "mirred": True}
NO_NETEM = {**ALL, "netem": False}


def caps(root: bool, qdiscs: dict, netns: bool | None = None) -> Capabilities:
    return Capabilities(root=root, netns=root if netns is None else netns, kernel="test", qdiscs=qdiscs)


def roles(n: int = 2, **link) -> list[RoleSpec]:
    return [RoleSpec(f"r{i}", LinkSpec(**link), LinkSpec(**link)) for i in range(n)]


@pytest.mark.parametrize("machine, best", [(caps(True, ALL), "netem"), (caps(True, NO_NETEM), "tc"),
                                           (caps(False, {}), "userspace"), (caps(True, NO_NETEM, netns=False), "userspace")])
def test_auto_takes_the_best_backend_and_says_why(machine, best):
    backend, why = resolve_backend("auto", machine)
    assert backend == best and why.startswith("auto:")
    assert ("not root" in why) == (not machine.root)


def test_kernel_backends_without_root_fail_before_anything_is_created(tmp_path, monkeypatch):
    monkeypatch.setattr("netem.caps.probe", lambda refresh=False: caps(False, {}))
    for backend in ("netem", "tc"):
        with pytest.raises(ClusterError, match=rf"net.backend: '{backend}' needs root"):
            launch(roles(), "harness.commands.cluster_selftest:main", {}, backend=backend, run_dir=tmp_path / "run", hang_timeout_s=5)
    assert not (tmp_path / "run").exists()


def test_missing_kernel_features_and_unknown_backends_are_named():
    with pytest.raises(ClusterError, match="needs sch_netem, which this kernel lacks; use net.backend=tc"):
        resolve_backend("netem", caps(True, NO_NETEM))
    with pytest.raises(ClusterError, match="cannot create network namespaces"):
        resolve_backend("tc", caps(True, ALL, netns=False))
    with pytest.raises(ClusterError, match="net.backend: 'fast' is not allowed; choose one of auto, netem"):
        resolve_backend("fast", caps(True, ALL))
    assert resolve_backend("model", caps(False, {}))[0] == "model"


def test_role_and_entry_checks():
    check_roles(roles(3), "harness.commands.cluster_selftest:main", "tc")
    with pytest.raises(ClusterError, match="at least one role"):
        check_roles([], "harness.commands.cluster_selftest:main", "tc")
    with pytest.raises(ClusterError, match=r"names must be unique, got \['a', 'a'\]"):
        check_roles([RoleSpec("a", LinkSpec(), LinkSpec())] * 2, "harness.commands.cluster_selftest:main", "tc")
    with pytest.raises(ClusterError, match="role name: 'a b'"):
        check_roles([RoleSpec("a b", LinkSpec(), LinkSpec())], "harness.commands.cluster_selftest:main", "tc")
    with pytest.raises(ClusterError, match="model.device: 'gpu0'"):
        check_roles([RoleSpec("a", LinkSpec(), LinkSpec(), device="gpu0")], "harness.commands.cluster_selftest:main", "tc")
    with pytest.raises(ClusterError, match=r"net loss of r0.up: 1% cannot be emulated on the tc backend"):
        check_roles(roles(2, loss=0.01), "harness.commands.cluster_selftest:main", "tc")
    check_roles(roles(2, loss=0.01), "harness.commands.cluster_selftest:main", "netem")
    with pytest.raises(ClusterError, match="entry: 'harness.commands.cluster_selftest' is not 'package.module:function'"):
        check_roles(roles(), "harness.commands.cluster_selftest", "tc")
    with pytest.raises(ClusterError, match="module 'harness.nothing' of 'harness.nothing:main' cannot be found"):
        check_roles(roles(), "harness.nothing:main", "tc")


def test_payload_and_hang_timeout_are_checked_before_anything_is_created(tmp_path):
    with pytest.raises(ClusterError, match="payload: must be JSON-serialisable"):
        launch(roles(), "harness.commands.cluster_selftest:main", {"cfg": {"x": object()}}, backend="model", run_dir=tmp_path / "a",
               hang_timeout_s=5)
    with pytest.raises(ClusterError, match="net.hang_timeout_s: 0 must be > 0"):
        launch(roles(), "harness.commands.cluster_selftest:main", {}, backend="model", run_dir=tmp_path / "b", hang_timeout_s=0)
    assert not list(tmp_path.iterdir())


def test_devices_fall_back_to_cpu_without_gpus():
    import torch

    if torch.cuda.is_available():
        assert resolve_device("auto", 3) == f"cuda:{3 % torch.cuda.device_count()}"
    else:
        assert [resolve_device(d, 1) for d in ("cpu", "auto", "cuda", "cuda:1")] == ["cpu"] * 4


def test_auto_picks_the_available_backend_of_highest_fidelity_as_the_kernel_probe_ranks_them():
    """harness.backends.best_available (each backend's class: qdisc, fidelity) agrees with netem.caps for every
    combination of root, namespaces and qdiscs."""
    import itertools

    from harness.backends import REGISTRY, best_available
    from netem.caps import Capabilities

    for root, netns, netem, tbf in itertools.product((False, True), repeat=4):
        caps = Capabilities(root, netns, "k", {"netem": netem, "tbf": tbf}, {"netns": "probe"})
        assert best_available(caps) == caps.best_backend()
        assert [n for n in caps.backends() if n != "model"] == [n for n, b in sorted(
            REGISTRY.items(), key=lambda kv: -kv[1].fidelity) if b.fidelity and b.missing(caps) is None]

"""Capabilities: choosing a backend, the no-root path, and the cached kernel probe."""
from __future__ import annotations

import pytest

from netem.caps import Capabilities


def test_best_backend_prefers_netem_then_tc_then_userspace():
    full = dict(netem=True, tbf=True, htb=True, ingress=True, ifb=True, mirred=True)
    assert Capabilities(True, True, "k", full).best_backend() == "netem"
    assert Capabilities(True, True, "k", {**full, "netem": False}).best_backend() == "tc"
    assert Capabilities(True, True, "k", {**full, "netem": False, "tbf": False}).best_backend() == "userspace"
    assert Capabilities(False, False, "k", full).best_backend() == "userspace"
    assert Capabilities(True, True, "k", {**full, "netem": False}).backends() == ["tc", "userspace", "model"]


def test_without_root_nothing_is_attempted_and_the_reason_is_stated(monkeypatch, tmp_path):
    """What a non-root user gets: userspace backend, and topologies refuse with the reason."""
    from netem import StarTopology, NodeSpec, TopologyError, caps

    monkeypatch.setenv("NARROWBAND_CAPS_CACHE", str(tmp_path / "caps.json"))
    monkeypatch.setattr(caps, "_CACHE", None)
    monkeypatch.setattr(caps, "may_admin_net", lambda: False)
    monkeypatch.setattr(caps, "_probe_kernel", lambda: pytest.fail("probed the kernel without root"))
    found = caps.probe()
    assert (found.root, found.netns, found.best_backend()) == (False, False, "userspace")
    assert "needs root" in found.notes["netns"]
    with pytest.raises(TopologyError, match="needs root"):
        StarTopology([NodeSpec("a")]).__enter__()


@pytest.mark.emulated
def test_probe_is_cached_in_process_and_on_disk(emulation, monkeypatch, tmp_path):
    from netem import caps

    monkeypatch.setenv("NARROWBAND_CAPS_CACHE", str(tmp_path / "caps.json"))
    monkeypatch.setattr(caps, "_CACHE", None)
    fresh = caps.probe(refresh=True)                       # builds and removes a throwaway namespace
    assert fresh.qdiscs["tbf"] and fresh.netns and (tmp_path / "caps.json").exists()
    assert caps.probe() is fresh
    monkeypatch.setattr(caps, "_CACHE", None)
    monkeypatch.setattr(caps, "_probe_kernel", lambda: pytest.fail("cache on disk was ignored"))
    assert caps.probe() == fresh

"""How role processes start: forked from the warm launcher (default) or exec'd (NARROWBAND_SPAWN=exec).

Each role must end up a separate process, in its own namespace on kernel backends, seeing only
its own veth, with its own RANK, whichever way it was started.
"""
from __future__ import annotations

import os

import pytest

from cluster_helpers import outputs, star
from harness.cluster.launch import ClusterError, launch
from harness.cluster.spawn import SPAWN_ENV

pytestmark = pytest.mark.e2e


def _where(run_dir, roles):
    return {r.name: outputs(run_dir, f"where-{r.name}") for r in roles}


@pytest.mark.emulated
@pytest.mark.parametrize("how", ["fork", "exec"])
def test_each_role_runs_in_its_own_namespace_and_sees_only_its_veth(how, kernel_backend, monkeypatch, tmp_path):
    monkeypatch.setenv(SPAWN_ENV, how)
    roles = star(2)
    result = launch(roles, "harness.commands.cluster_selftest:main", {"cfg": {"selftest": {"phases": ["where"]}}},
                    backend=kernel_backend, run_dir=tmp_path, hang_timeout_s=60, progress=False)
    assert result.status == "ok", result.reason
    seen = _where(tmp_path, roles)
    assert len({w["pid"] for w in seen.values()} | {os.getpid()}) == len(roles) + 1
    for rank, role in enumerate(roles):
        w = seen[role.name]
        assert w["in_netns"], w
        assert w["links"] == sorted(["lo", result.topology["nodes"][rank]["ifname"]]), w
        assert (w["rank"], w["role_env"], w["forked"]) == (str(rank), role.name, how == "fork")
    assert (tmp_path / "cluster" / "roles.json").exists()


def test_forked_roles_on_the_userspace_backend_are_children_of_the_launcher(monkeypatch, tmp_path):
    monkeypatch.delenv(SPAWN_ENV, raising=False)
    roles = star(2)
    result = launch(roles, "harness.commands.cluster_selftest:main", {"cfg": {"selftest": {"phases": ["where"]}}},
                    backend="userspace", run_dir=tmp_path, hang_timeout_s=60, progress=False)
    assert result.status == "ok", result.reason
    seen = _where(tmp_path, roles)
    assert all(w["forked"] and w["ppid"] == os.getpid() and w["netns"] is None for w in seen.values()), seen
    assert [w["rank"] for w in seen.values()] == ["0", "1", "2"]


def test_a_bad_spawn_mode_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv(SPAWN_ENV, "vfork")
    with pytest.raises(ClusterError, match=r"NARROWBAND_SPAWN: 'vfork' is not allowed; choose one of fork, exec"):
        launch(star(1), "harness.commands.cluster_selftest:main", {}, backend="userspace", run_dir=tmp_path, hang_timeout_s=5,
               progress=False)


def test_a_finished_progress_bar_does_not_keep_the_launcher_from_forking(monkeypatch):
    """tqdm's monitor thread runs while any bar is unclosed (a GGUF materialised in the planner left one,
    and every role then started with exec); the launcher stops it before deciding. harness.cluster.supervise
    turns the monitor off when it is imported, which is after the planner's bars: tqdm's default (10 s) here."""
    import io

    import tqdm

    from harness.cluster import spawn

    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 10)

    bar = tqdm.tqdm(total=3, file=io.StringIO())     # finished, never closed: what the planner was left with
    bar.update(3)
    monitor = tqdm.tqdm.monitor
    assert monitor is not None and monitor.is_alive(), "tqdm started no monitor: the test shows nothing"
    assert "tqdm_monitor" in spawn.fork_unsafe_reason()
    spawn.stop_idle_helpers()
    assert not monitor.is_alive() and spawn.fork_unsafe_reason() == ""
    bar.close()


def test_a_forked_role_that_dies_holding_tqdms_lock_does_not_block_the_launcher():
    """tqdm's default lock is a semaphore shared across fork: a child that takes it and ends with
    os._exit left it taken, and the launcher's next progress bar waited forever. private_tqdm_lock
    (what a forked role calls first) gives the child its own lock."""
    import os

    from tqdm import tqdm
    from tqdm.std import TqdmDefaultWriteLock

    from harness.cluster.spawn import private_tqdm_lock

    tqdm.get_lock()                                       # the shared lock exists before the fork
    pid = os.fork()
    if pid == 0:
        try:
            private_tqdm_lock()
            tqdm.get_lock().acquire()                     # and never released: the role just ends
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    shared = TqdmDefaultWriteLock.mp_lock                 # the semaphore (None where none could be made)
    assert shared is None or shared.acquire(timeout=10), "the launcher's tqdm lock was left taken by the dead child"
    if shared is not None:
        shared.release()


def test_a_forked_role_turns_off_the_preloaded_transformers_bars():
    """Its log is a file: transformers' 'Loading weights' bars (imported by the launcher before the
    fork, so HF_HUB_DISABLE_PROGRESS_BARS is read too late) are turned off in the role."""
    import transformers.utils.logging as hf_logging
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    from harness.cluster.launch import _base_env
    from harness.cluster.spawn import quiet_preloaded_bars

    was, hub_off = hf_logging.is_progress_bar_enabled(), are_progress_bars_disabled()
    try:
        hf_logging.enable_progress_bar()
        quiet_preloaded_bars()
        assert not hf_logging.is_progress_bar_enabled() and are_progress_bars_disabled()
    finally:
        (disable_progress_bars if hub_off else enable_progress_bars)()
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()
    assert _base_env(2, "127.0.0.1", 29500)["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"   # a spawned role's



LAUNCHER = """
import os, sys, torch
from harness.cluster.spawn import single_threaded_launcher
if sys.argv[1] == "guarded":
    single_threaded_launcher()
a = torch.randn(800, 800)
(a @ a).exp().sum()                        # the launcher's own work (a GGUF's dequantization)
pid = os.fork()
if pid == 0:                               # the role: two threads, as onpolicy.eval_threads=2 asks
    torch.set_num_threads(2)
    b = torch.randn(800, 800)
    (b @ b).exp().sum()
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("role", os.waitstatus_to_exitcode(status), torch.get_num_threads())
"""


def test_a_role_forked_by_a_single_threaded_launcher_can_use_two_threads():
    """The launcher keeps torch on one thread (spawn.single_threaded_launcher, run_scenario's first
    step), so a forked role may start an OpenMP pool of its own: a child asks for 2 threads after the
    launcher computed, and finishes. (Unguarded, on 2 threads, such a child waits forever in its first
    parallel op: hilo_real's learner, stuck in its base evaluation; not run here, it would hang.) A
    fresh interpreter: this process's own pool has long started."""
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, "-c", LAUNCHER, "guarded"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["role", "0", "1"]

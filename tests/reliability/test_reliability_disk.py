"""Emulated tier: an out_dir that fills up or turns read-only during a run (issue 48), on a small
tmpfs of the test's own. The run ends with one line naming the folder, what was kept and how to
rerun, exit 1, no traceback; its status is written where it can be (run.json in place, else the
fallback folder); its rows stay; no namespace or process outlives it. An out_dir that is not
writable before anything starts is one line and exit 2."""
from __future__ import annotations

import json
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import warm_cli

from reliability_helpers import ROOT, wait_for
from netem.names import list_ours, owner_alive

pytestmark = [pytest.mark.emulated, pytest.mark.e2e]

HILO = ["scenario=smoke_hilo", "only=[hilo_spar]", "progress=false"]
RUN_S = 600                 # any one run here, at most (a loaded 2-core machine)


@contextmanager
def small_tmpfs(path: Path, size: str, *options: str):
    """A tmpfs of ``size`` mounted at ``path`` for the test (unmounted after, lazily if busy)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "none", str(path)], check=True)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(path)], check=False)


def _one_line(err: str) -> str:
    """The line that names the folder; the rest of stderr must hold no traceback."""
    assert "Traceback" not in err, err[-3000:]
    lines = [t for t in err.splitlines() if t.startswith("[narrowband] out_dir ")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def _run_dir(out: Path) -> Path:
    found = [p for p in (out / "smoke_hilo").iterdir() if p.is_dir()]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("size", ["200k", "300k"])
def test_an_out_dir_that_fills_up_mid_run_is_one_line_and_the_run_is_marked_failed(kernel_backend, tmp_path, size):
    """300k: the size the issue tried (the rows fit, run.json's closing write does not); 200k: a
    role cannot write its rows and dies of it."""
    with small_tmpfs(tmp_path / "full", size) as out:
        t0 = time.monotonic()
        done = warm_cli.run("harness", [*HILO, f"out_dir={out}"], cwd=ROOT, capture_output=True, text=True,
                            timeout=RUN_S)
        took = time.monotonic() - t0
        line = _one_line(done.stderr)
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
        run = _run_dir(out)
        assert f"out_dir {out}: no space left on the device" in line and f"kept in {run}" in line
        assert "row files" in line and "run the same command again" in line
        meta = json.loads((run / "run.json").read_text())               # parses: rewritten whole or in place
        assert meta["status"] == "failed" and "no space left" in meta["reason"], meta["reason"]
        assert list((run / "rows").glob("*.parquet")), "the rows written before the disk filled are kept"
        print(f"{size}: exit {done.returncode} after {took:.1f} s: {line[:200]}")
    assert not _orphans()


def _orphans() -> list[str]:
    """Namespaces of ours whose owner is gone (what a run that did not tear down would leave)."""
    return [n.name for n in list_ours() if not owner_alive(n)]


def test_an_out_dir_turned_read_only_mid_run_keeps_its_status_in_the_fallback_folder(kernel_backend, tmp_path,
                                                                                    monkeypatch):
    """The run's folder is bind-mounted read-only over itself once rows exist (open logs keep writing,
    nothing new can be created there): the roles die on their next rows, run.json cannot be touched,
    the status goes to the fallback folder and the line says where."""
    monkeypatch.setenv("NARROWBAND_STATUS_FALLBACK", str(tmp_path / "fallback"))
    with small_tmpfs(tmp_path / "out", "50m") as out:
        proc = warm_cli.popen("harness", [*HILO, "onpolicy.steps=60", f"out_dir={out}"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        run = None
        try:
            run = wait_for(lambda: next(iter(out.glob("smoke_hilo/*/rows/learner-00002.parquet")), None), RUN_S,
                           "the learner's third row file").parent.parent
            subprocess.run(["mount", "--bind", str(run), str(run)], check=True)
            subprocess.run(["mount", "-o", "remount,bind,ro", str(run)], check=True)
            t0 = time.monotonic()
            out_text, err = proc.communicate(timeout=RUN_S)
            took = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if run is not None:
                subprocess.run(["umount", str(run)], check=False)
        line = _one_line(err)
        assert proc.returncode == 1, out_text[-2000:] + err[-2000:]
        assert f"out_dir {out}: read-only file system" in line and "row files" in line
        fallback = tmp_path / "fallback" / "narrowband-status" / f"smoke_hilo--{run.name}.json"
        assert str(fallback) in line
        status = json.loads(fallback.read_text())
        assert status["status"] == "failed" and "read-only" in status["reason"]
        assert json.loads((run / "run.json").read_text())["status"] == "running"   # as the line says
        print(f"read-only mid-run: exit 1 {took:.1f} s after the remount: {line[:200]}")
    assert not _orphans()


def test_an_out_dir_that_is_not_writable_before_the_run_is_exit_2_and_nothing_starts(tmp_path, harness_cli):
    with small_tmpfs(tmp_path / "ro", "1m", "ro") as out:
        code, _, err, seen = harness_cli(*HILO, f"out_dir={out}")
    assert code == 2 and "Traceback" not in err, err[-2000:]
    lines = [t for t in err.strip().splitlines() if t.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(f"error: out_dir: {out}: read-only file system"), err[-2000:]
    assert "nothing was started" in lines[0] and seen == set()

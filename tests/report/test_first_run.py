"""A newcomer's first hour does no harm: the README's first-run commands, run in a fresh clone,
finish and leave every tracked file as it was (their runs and report go to git-ignored outputs/)."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.paths import project_root

ROOT = project_root()
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def first_run_commands(readme: str) -> list[str]:
    """The commands of the README's first-run block (comments stripped)."""
    block = re.search(r"<!-- first-run:begin.*?```bash\n(.*?)```.*?<!-- first-run:end -->", readme, re.S)
    assert block, "README.md has no first-run block"
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines() if line.split("#", 1)[0].strip()]


def _clone(tmp: Path) -> Path:
    """A fresh clone of this checkout as it is now: tracked files and new ones git does not ignore."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    dst = tmp / "clone"
    for name in filter(None, (f.decode() for f in files)):
        src = ROOT / name
        if src.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "clone"]):
        subprocess.run(git + args, cwd=dst, check=True, capture_output=True)
    return dst


def test_readme_first_run_leaves_tracked_files_untouched(tmp_path):
    commands = first_run_commands((ROOT / "README.md").read_text())
    assert any("harness.report" in c for c in commands) and any("scenario=" in c for c in commands)
    clone = _clone(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("NARROWBAND_ROOT", "NARROWBAND_RESULTS")}
    env.update(MPLBACKEND="Agg", NARROWBAND_CACHE=str(tmp_path / "cache"))
    for command in commands:
        argv = shlex.split(command)
        if argv[:2] == ["make", "install"] or argv[0] in (".", "source"):
            continue                                  # the suite already runs in the installed venv
        assert argv[0] == "python", f"first-run command {command!r}: expected make install, activate or python"
        out = subprocess.run([sys.executable, *argv[1:]], cwd=clone, env=env, capture_output=True, text=True,
                             timeout=900)
        assert out.returncode == 0, f"{command}: exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True).stdout
    assert status == "", f"the first run changed the clone:\n{status}"
    assert (clone / "outputs" / "summary.md").is_file()

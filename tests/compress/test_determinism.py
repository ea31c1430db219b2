"""Two processes encode the same inputs (same seed and steps) into the same bytes and decode the
same bits: what lets HiLo workers replay the learner's optimizer step exactly."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from compress_inputs import digest_all
from harness.compress import NAMES

HERE = Path(__file__).parent


def digests_in_subprocess() -> dict:
    code = (f"import json, sys; sys.path.insert(0, {str(HERE)!r}); from compress_inputs import digest_all; "
            "print(json.dumps(digest_all()))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            cwd=HERE.parent.parent)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_two_processes_give_the_same_bytes_and_bits():
    here, there = digest_all(), digests_in_subprocess()
    assert set(here) == set(NAMES)
    for name in here:
        assert there[name] == here[name], f"{name}: bytes or decoded bits differ between processes"

"""Pure tier: the one seed derivation (harness.seeds.derive)."""
from __future__ import annotations

import subprocess
import sys

from harness.seeds import derive


def test_derive_is_a_63_bit_pure_function_of_its_parts():
    seeds = [derive("batches", s, k) for s in range(4) for k in range(4)]
    assert len(set(seeds)) == len(seeds) and all(0 <= x < 2 ** 63 for x in seeds)
    assert derive("batches", 0, 1) != derive("batches", 1, 0)        # what `seed + k` got wrong
    assert derive("a", 1) != derive("a", 1, "")                       # every part counts


def test_derive_is_stable_across_processes():
    """Hash salting (PYTHONHASHSEED) differs per process; the seed must not."""
    code = "from harness.seeds import derive; print(derive('prompts', 'train', 3, 7))"
    got = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={"PYTHONHASHSEED": str(h), "PATH": ""}).stdout.strip() for h in (1, 2)}
    assert got == {str(derive("prompts", "train", 3, 7))}

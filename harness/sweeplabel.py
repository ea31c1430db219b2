"""The values a sweep job was given, for its run folders and headers: ``rate=5mbit-rank=16``.

A multirun job (``python -m harness -m scenario=grid_hilo ...``) runs one grid point. Its run ids
are ``<variant>-<label>-s<seed>-<hash>`` (``full_sync-rate=5mbit-rank=16-backend=auto-s0-ac322973``)
instead of a single run's ``<variant>-s<seed>-<hash>``, so ``ls`` of a sweep's folder says which
folder is which grid point; the hash (of the resolved config) is unchanged, and it alone decides
whether two runs are the same: ``existing_run_dir`` finds a run done under the other spelling
(a sweep's point rerun as a single run, or a folder from before labels), so resume still skips it.

Swept keys: the scenario's ``hydra.sweeper.params`` and the command line's sweeps (values with a
comma, ``range(...)``, ``choice(...)``, ``glob(...)``), which harness/__main__.py passes to the jobs in
``$NARROWBAND_SWEPT`` (the environment reaches every launcher's jobs: in process, submitit's local
processes, Slurm). Seeds are left out (``-s<seed>`` says it), as are run-control keys.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

SWEPT_ENV = "NARROWBAND_SWEPT"
LEFT_OUT = ("seed", "seeds", "scenario", "out_dir", "resume", "progress", "only", "run_id", "variants")
MAX_LABEL = 64          # characters; the hash keeps a longer label's runs apart
_UNSAFE = re.compile(r"[^A-Za-z0-9._%+=,]")


def swept_keys_of_argv(argv: list[str]) -> list[str]:
    """The keys a multirun command line sweeps (their value is a sweep in Hydra's grammar)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    plain = [a for a in argv if not a.startswith("-") and "=" in a]
    try:
        parsed = OverridesParser.create().parse_overrides(plain)
    except Exception:        # noqa: BLE001 - bad grammar is reported elsewhere
        return []
    return [o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()]


def sweep_values() -> dict[str, str]:
    """``{key: value}`` of the swept keys in this multirun job (in the job's override order); {}
    outside a multirun job."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
            return {}
        hc = HydraConfig.get()
        swept = set(hc.sweeper.get("params") or {}) if "sweeper" in hc else set()
        task = list(hc.overrides.task)
    except Exception:        # noqa: BLE001 - no Hydra job: a plain run
        return {}
    swept |= set(filter(None, os.environ.get(SWEPT_ENV, "").split(" ")))
    out = {}
    for override in task:
        key, _, value = override.partition("=")
        key = key.lstrip("+~")
        if key in swept and key not in LEFT_OUT and not key.startswith("hydra"):
            out[key] = value
    return out


def label(values: dict[str, str]) -> str:
    """``rate=5mbit-rank=16``: each key by its last part (the full key where two share it), its value
    made safe for a folder name; at most MAX_LABEL characters."""
    leaves = [k.rsplit(".", 1)[-1] for k in values]
    parts = []
    for (key, value), leaf in zip(values.items(), leaves):
        name = leaf if leaves.count(leaf) == 1 else key
        parts.append(f"{name}={_UNSAFE.sub('_', value)}")
    return "-".join(parts)[:MAX_LABEL].rstrip("-")


def describe(values: dict[str, str]) -> str:
    """``net.rate=5mbit model.rank=16`` for a header line ('' for none)."""
    return " ".join(f"{k}={v}" for k, v in values.items())


def labelled(run_id: str, variant: str, text: str) -> str:
    """``<variant>-s<seed>-<hash>`` with ``text`` after the variant (unchanged for an empty label)."""
    if not text or not run_id.startswith(f"{variant}-"):
        return run_id
    return f"{variant}-{text}-{run_id[len(variant) + 1:]}"


def existing_run_dir(scenario_dir: Path, run_id: str, variant: str) -> Path:
    """``scenario_dir / run_id``, or an existing folder of the same run under another label: the same
    variant, seed and hash (``<variant>-[<label>-]s<seed>-<hash>``, its run.json naming the variant)."""
    wanted = scenario_dir / run_id
    if wanted.exists() or not scenario_dir.is_dir():
        return wanted
    tail = run_id[len(variant) + 1:] if run_id.startswith(f"{variant}-") else None
    if not tail or not re.fullmatch(r"(.+-)?s\d+-[0-9a-f]{8}", tail):
        return wanted
    seed_hash = re.search(r"s\d+-[0-9a-f]{8}$", tail).group(0)
    for folder in sorted(scenario_dir.glob(f"{variant}-*{seed_hash}")):
        if folder.is_dir() and not folder.name.startswith(".") and folder.name.endswith(seed_hash):
            try:
                meta = json.loads((folder / "run.json").read_text())
            except (OSError, ValueError):
                continue
            if meta.get("variant") == variant:
                return folder
    return wanted

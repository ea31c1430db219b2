"""Collect every run under ``results/runs/`` into one tidy frame, and say which runs were left out.

A run is one directory ``results/runs/<scenario>/<run_id>/`` holding ``run.json`` and
``rows/*.parquet`` (see harness/record.py). Only runs whose ``run.json`` says
``status: ok`` feed the headline tables; every other run (failed, interrupted, still
running, an ``<id>.attempt<N>`` moved aside by a restart, no rows, no run.json) is kept
in ``Collection.excluded`` with the reason, and the summary lists them.

Backends are never mixed silently: every row carries its ``backend`` key, and
``Run.backend`` is checked against ``run.json``; a mismatch excludes the run. Nor are models:
every row carries its run's ``model`` (``model_label``, from run.json's resolved ``config.model``
and its recorded ``bases``), so a claim names the model it rests on as the run recorded it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

import pandas as pd

from harness.record import read_prompts
from harness.record import read_rows as _read_rows

HUB_ROLES = {"learner": "onpolicy", "server": "federated"}
LOADED_FRACTION = 0.5   # old records (no others_cpu_s): 1-minute loadavg above this fraction of the CPUs
OTHERS_FRACTION = 0.25  # other programs took more than this share of cpus x wall: timing measured under load
TOY_MODELS = {"tiny": "tiny (toy)", "small": "small (toy)", "wide": "wide (LLM shape)"}   # harness/conf/model/*.yaml
QUANT_SUFFIX = re.compile(r"[._-](?:I?Q\d+(?:_[A-Z0-9]+)*|B?F16|F32|FP16|FP32)$", re.IGNORECASE)  # .Q4_1, -Q4_K_M, .F16


def model_label(model_cfg: Mapping[str, Any] | None, bases: Mapping[str, Any] | None = None) -> str:
    """The model a run trained, in words: what its verdicts rest on (every row's and claims.csv's ``model``).

    ``model_cfg`` is the run's resolved ``model`` config (run.json ``config.model``: ``name``, ``path``),
    ``bases`` its recorded bases (run.json ``bases``, harness.tasks.source ``ModelSource.describe``;
    the student's is the trained one). The toy presets by name: ``tiny (toy)``, ``small (toy)``,
    ``wide (LLM shape)``; ``model=hf`` from a GGUF file (``bases.student.origin == "gguf"``, or a
    ``model.path`` ending in ``.gguf``): the file's model name, its quantisation suffix stripped, and
    `` (real)`` (``.../SmolLM2-135M-Instruct.Q4_1.gguf`` -> ``SmolLM2-135M-Instruct (real)``);
    ``model=hf`` from a folder: the folder's name and `` (local HF)``; a chat distillation's derived student
    (``bases.student.origin == "derived"``): its teacher's label with the rounding named
    (``SmolLM2-135M-Instruct 3-bit/8 student (real)``). Another name is itself;
    no name at all (a run.json without its config) is ``unknown``. Older run.json files without
    ``bases`` get the same label from the config alone.
    """
    model = dict(model_cfg or {})
    name = str(model.get("name") or "")
    if name != "hf":
        return TOY_MODELS.get(name, name or "unknown")
    student = (bases or {}).get("student") if isinstance(bases, Mapping) else None
    student = student if isinstance(student, Mapping) else {}
    if student.get("origin") == "derived":      # a chat distillation's student, rounded from the teacher
        teacher = (bases or {}).get("teacher")
        head = model_label(model_cfg, {"student": teacher}) if isinstance(teacher, Mapping) else "hf"
        return head.replace(" (real)", "").replace(" (local HF)", "") + \
            f" {student.get('student_bits')}-bit/{student.get('student_group')} student" + \
            (" (real)" if head.endswith("(real)") else " (local HF)")
    path = str(model.get("path") or "")
    gguf = student.get("gguf") if student.get("origin") == "gguf" else None
    if gguf or path.startswith("pkg://") or path.lower().endswith(".gguf"):
        file = PurePosixPath(str(gguf or path)).name
        stem = file[: -len(".gguf")] if file.lower().endswith(".gguf") else file
        return f"{QUANT_SUFFIX.sub('', stem)} (real)"
    folder = str(student.get("path") or "") if student.get("origin") == "folder" else path
    folder_name = PurePosixPath(folder.rstrip("/")).name if folder else ""
    return f"{folder_name or 'hf'} (local HF)"


@dataclass
class Run:
    """One run directory: its metadata, its rows, and whether it counts."""
    run_dir: Path
    scenario: str
    run_id: str
    status: str                  # ok | failed | interrupted | running | missing (no run.json) | empty (no rows)
    reason: str
    meta: dict[str, Any]
    rows: pd.DataFrame

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def backend(self) -> str:
        if "backend" in self.rows and self.rows["backend"].notna().any():
            return str(self.rows["backend"].dropna().iloc[0])
        return str(self.meta.get("backend") or "unknown")

    @property
    def kind(self) -> str:
        """``onpolicy`` (has a learner), ``federated`` (has a server) or ``unknown``."""
        roles = set(self.rows["role"].dropna()) if "role" in self.rows else set()
        for role, kind in HUB_ROLES.items():
            if role in roles:
                return kind
        return str(self.config.get("method", {}).get("kind") or "unknown")

    @property
    def config(self) -> dict[str, Any]:
        return self.meta.get("config") or {}

    @property
    def command(self) -> str:
        """The exact command that produced the run (run.json ``command``), else the plain one."""
        return str(self.meta.get("command") or f"python -m harness scenario={self.scenario}")

    def load(self) -> tuple[bool | None, str]:
        """Was this run's timing measured under load? (flag, reason); None: run.json has no ``load``.

        Loaded when other programs took more than OTHERS_FRACTION of the machine (cpus x wall)
        while the run ran (run.json ``others_cpu_s``: the machine's CPU seconds less the roles'
        and the launcher's), or the roles' CPU time exceeds ``cpus x wall`` (the roles alone
        asked for more than the machine has). Records without ``others_cpu_s`` fall back to the
        1-minute load average at start or end above half the CPUs (which also counts the previous
        run's own processes, so it over-flags back-to-back runs). A placement with more busy roles than
        cores (``oversubscribed``) is named in the reason but does not flag the run: it is the
        machine's shape, the same for a method and its baseline (every run on 2 cores with 3 roles),
        not other programs' load; a run whose roles asked for more CPU than there was is flagged above.
        """
        load = self.meta.get("load")
        if not isinstance(load, dict):
            return None, ""
        cpus = float(load.get("cpus") or 0) or float("nan")
        cpu_s, wall_s = load.get("roles_cpu_s"), load.get("wall_s")
        notes = []
        others = load.get("others_cpu_s")
        if others is not None:
            if wall_s and cpus == cpus and float(others) > OTHERS_FRACTION * cpus * float(wall_s):
                notes.append(f"other programs took {float(others):.0f} CPU s > {OTHERS_FRACTION:g} x {cpus:g} CPUs "
                             f"x {float(wall_s):.0f} s wall")
        else:
            for when in ("start", "end"):
                avg = (load.get(when) or {}).get("loadavg") or []
                if avg and cpus == cpus and float(avg[0]) > LOADED_FRACTION * cpus:
                    notes.append(f"loadavg {float(avg[0]):.2f} at {when} > {LOADED_FRACTION:g} x {cpus:g} CPUs")
        if cpu_s is not None and wall_s and cpus == cpus and float(cpu_s) > cpus * float(wall_s):
            notes.append(f"roles' CPU {float(cpu_s):.0f} s > {cpus:g} CPUs x {float(wall_s):.0f} s wall")
        placement = self.meta.get("placement") or {}
        shape = ([f"oversubscribed: more roles than cores on {', '.join(placement.get('oversubscribed_hosts') or ['a host'])}"]
                 if placement.get("oversubscribed") else [])   # more busy roles than cores on a host (harness/placement.py)
        return bool(notes), "; ".join(notes + shape)

    def bases(self) -> tuple[bool, str]:
        """(any base rebuilt, i.e. its recipe has a shipped reference and the hash differs from it;
        "name:sha256[:12]" list, "(rebuilt)" on those, "(local)" on bases whose recipe ships no
        reference: built on this machine, e.g. the wide model's)."""
        bases = self.meta.get("bases")
        if not isinstance(bases, dict):
            return False, ""

        def state(b: dict) -> str:
            if b.get("reference", True):
                return ""
            return "rebuilt" if b.get("reference_sha256") else "local"
        states = {name: state(b) for name, b in sorted(bases.items()) if isinstance(b, dict)}
        shas = ",".join(f"{name}:{str(bases[name].get('sha256', ''))[:12]}{f'({s})' if s else ''}"
                        for name, s in states.items())
        return "rebuilt" in states.values(), shas

    def config_columns(self) -> dict[str, Any]:
        """Config knobs the tables need that rows do not carry (NaN/"" when run.json lacks them)."""
        method = self.config.get("method", {})
        return {"lr_rule": str(method.get("lr_rule") or ""),
                "a_variance": str(method.get("a_variance") or "") if self.kind == "federated" else "",
                "optimizer": str((self.config.get("federated") or {}).get("optimizer") or "") if self.kind == "federated"
                else "",
                "resample_every": float(method.get("resample_every", float("nan")) or 0),
                "sync_dtype": str(method.get("sync_dtype") or ""),
                "allocation": self.allocation,
                "steps": float((self.config.get("onpolicy") or {}).get("steps") or "nan") if self.kind == "onpolicy"
                else float("nan"),
                "reference_method": self.reference_method, "run_wall_s": self.wall_s}

    @property
    def reference_method(self) -> str:
        """The method this federated run's ratios are taken against, as its plan recorded it in run.json
        (``plan.federated.reference``: the method declaring ``report_reference``); "" for a run recorded
        before run.json held the plan (the report then asks harness.federated.methods)."""
        fed = (self.meta.get("plan") or {}).get("federated") or {}
        return str(fed.get("reference") or "") if self.kind == "federated" else ""

    @property
    def wall_s(self) -> float:
        """The run's wall seconds, launch to end (run.json ``load.wall_s``, else ``seconds``; NaN: neither)."""
        load = self.meta.get("load") or {}
        value = load.get("wall_s", self.meta.get("seconds")) if isinstance(load, dict) else self.meta.get("seconds")
        try:
            return float(value)
        except (TypeError, ValueError):
            return float("nan")

    @property
    def allocation(self) -> str:
        """Spar's rank allocation (``compressor.options.allocation``; ``energy``, the default, when unset)
        for an on-policy Spar run; "" otherwise."""
        comp = self.config.get("compressor") or {}
        if self.kind != "onpolicy" or comp.get("name") != "spar":
            return ""
        return str((comp.get("options") or {}).get("allocation") or "energy")

    @property
    def model(self) -> str:
        """The model this run trained (``model_label`` of run.json's ``config.model`` and ``bases``)."""
        return model_label(self.config.get("model"), self.meta.get("bases"))

    @property
    def ref_rank(self) -> float:
        """The scenario's training rank (``model.rank``); a ``lowrank`` run trains below it."""
        rank = self.config.get("model", {}).get("rank")
        if rank is None and "rank" in self.rows and self.rows["rank"].notna().any():
            rank = self.rows["rank"].dropna().iloc[0]
        return float(rank) if rank is not None else float("nan")


@dataclass
class Collection:
    """Every run found; ``rows`` holds the rows of the ok runs only (plus ``command``, ``model``, ``ref_rank``);
    ``prompts`` their per-prompt evaluation records (harness/record.py ``prompts/``; empty for runs that kept none)."""
    results_dir: Path
    runs: list[Run] = field(default_factory=list)
    rows: pd.DataFrame = field(default_factory=pd.DataFrame)
    prompts: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def ok_runs(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

    @property
    def excluded(self) -> list[Run]:
        return [r for r in self.runs if not r.ok]

    def run(self, run_id: str) -> Run:
        for r in self.runs:
            if r.run_id == run_id:
                return r
        raise KeyError(f"run_id: {run_id!r} is not among the {len(self.runs)} runs collected")

    def backends(self) -> list[str]:
        return sorted({r.backend for r in self.ok_runs})

    def commands(self, scenario: str, backend: str | None = None) -> list[str]:
        """Distinct commands of the ok runs of one scenario (and backend), in run order."""
        seen: dict[str, None] = {}
        for r in self.ok_runs:
            if r.scenario == scenario and backend in (None, r.backend):
                seen.setdefault(r.command, None)
        return list(seen) or [f"python -m harness scenario={scenario}"]


def _load_run(run_dir: Path) -> Run:
    scenario, run_id = run_dir.parent.name, run_dir.name
    meta_path = run_dir / "run.json"
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    except (OSError, json.JSONDecodeError) as err:
        meta = {"status": "failed", "reason": f"run.json unreadable: {err}"}
    try:
        rows = _read_rows(run_dir)
    except Exception as err:  # a corrupt part file excludes the run, with the reason
        rows = pd.DataFrame()
        meta = {**meta, "status": "failed", "reason": f"rows unreadable: {type(err).__name__}: {err}"}
    scenario = str(meta.get("scenario") or scenario)   # run_id stays the directory name: unique
    status, reason = str(meta.get("status") or "missing"), str(meta.get("reason") or "")
    if not meta_path.exists():
        status, reason = "missing", "no run.json"
    elif ".attempt" in run_dir.name and status == "ok":
        status, reason = "superseded", "earlier attempt moved aside by a restart"
    elif status == "running":
        reason = reason or "no final status: still running, or killed without cleanup"
    elif status == "ok" and rows.empty:
        status, reason = "empty", "status ok but no rows were written"
    run = Run(run_dir, scenario, run_id, status, reason, meta, rows)
    if run.ok and "backend" in rows and meta.get("backend"):
        found = set(rows["backend"].dropna().astype(str))
        if found - {str(meta["backend"])}:
            run.status = "inconsistent"
            run.reason = f"rows say backend {sorted(found)}, run.json says {meta['backend']!r}"
    return run


def run_dirs(results_dir: Path) -> list[Path]:
    """Every ``runs/<scenario>/<run_id>/`` directory (with run.json or rows/), sorted."""
    runs_root = Path(results_dir) / "runs"
    if not runs_root.is_dir():
        return []
    found = {p.parent for p in runs_root.glob("*/*/run.json")}
    found |= {p.parent for p in runs_root.glob("*/*/rows")}
    return sorted(found)


def collect(results_dir: Path | str, runs_from: Path | str | None = None) -> Collection:
    """Load every run under ``runs_from/runs`` (default ``results_dir``); concatenate the rows of the ok
    ones. ``results_dir`` is the folder the report reads its extra tables from and writes into."""
    results_dir = Path(results_dir)
    runs = [_load_run(d) for d in run_dirs(Path(runs_from) if runs_from is not None else results_dir)]
    frames = []
    for r in runs:
        if r.ok:
            frame = r.rows.copy()
            frame["run_id"] = frame["run_id"].fillna(r.run_id) if "run_id" in frame else r.run_id
            frame["scenario"] = frame["scenario"].fillna(r.scenario) if "scenario" in frame else r.scenario
            frame["backend"] = frame["backend"].fillna(r.backend) if "backend" in frame else r.backend
            frame["command"] = r.command
            frame["model"] = r.model
            frame["ref_rank"] = r.ref_rank
            frame["kind"] = r.kind
            for column, value in r.config_columns().items():
                frame[column] = value
            loaded, note = r.load()
            frame["loaded"], frame["load_notes"] = loaded, note
            frame["rebuilt_base"], frame["base_sha256"] = r.bases()
            frames.append(frame)
    rows = pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()
    kept = [read_prompts(r.run_dir).assign(run_id=r.run_id) for r in runs if r.ok]
    kept = [k for k in kept if len(k)]
    prompts = pd.concat(kept, ignore_index=True, sort=False) if kept else pd.DataFrame()
    return Collection(results_dir, runs, rows, prompts)

"""The committed references, and the rule that keeps a user's report out of them.

A folder that holds a committed reference report (``results/`` for the toy models, ``results/real/``
for the real one) carries a ``REFERENCE.json`` that lists the runs the reference is built from::

    {"what": "...", "rebuild": "make bench",
     "runs": {"hilo_real": {"full_sync_10mbit": [0, 1, 2], ...}, ...},   # scenario -> variant -> seeds
     "optional": {"spra_real": {"spra": [0, 1, 2], ...}}}                 # the bench's optional steps' runs

The rules (python -m harness.report):
- The report never writes into a reference folder unless it is asked to (``--reference``, which
  ``make bench``'s report steps pass). A user's own report goes to ``outputs/`` (git-ignored).
- ``--reference`` rebuilds only from complete reference runs: every listed (scenario, variant,
  seed) under ``runs`` has a run whose status is ok, and each optional variant (under
  ``optional``) has all its seeds or none. Anything else is one line and exit 2, before any file is written.
- Runs the manifest does not list (another variant, another seed, a user's extra run) and earlier
  runs of a listed key (the latest ok run of each key counts) are left out, each with its reason.

``harness.commands.bench.reference_manifest`` writes the manifest from the bench's steps; a test checks that
the committed files agree with it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import ConfigError
from harness.report.collect import Collection, Run

MARKER = "REFERENCE.json"


@dataclass(frozen=True)
class Manifest:
    """What a reference folder is built from (module doc)."""
    runs: dict[str, dict[str, tuple[int, ...]]]                 # scenario -> variant -> seeds (required)
    optional: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)   # all seeds or none, per variant
    rebuild: str = "make bench"

    def groups(self) -> list[tuple[str, str, tuple[int, ...], bool]]:
        """(scenario, variant, seeds, optional) of every listed variant."""
        return [(sc, v, seeds, opt) for opt, table in ((False, self.runs), (True, self.optional))
                for sc, vs in table.items() for v, seeds in vs.items()]

    def listed(self, key: tuple[str, str, int]) -> bool:
        sc, v, s = key
        return any(s in table.get(sc, {}).get(v, ()) for table in (self.runs, self.optional))

    def to_json(self, what: str) -> str:
        def table(t: dict) -> str:
            inner = ",\n".join(f'  "{sc}": {{\n' + ",\n".join(f'   "{v}": {json.dumps(list(s))}' for v, s in vs.items())
                               + "\n  }" for sc, vs in t.items())
            return "{\n" + inner + "\n }" if t else "{}"
        return (f'{{\n "what": {json.dumps(what)},\n "rebuild": {json.dumps(self.rebuild)},\n'
                f' "runs": {table(self.runs)},\n "optional": {table(self.optional)}\n}}\n')


def is_reference(folder: Path | str) -> bool:
    return (Path(folder) / MARKER).is_file()


def load_manifest(folder: Path | str) -> Manifest:
    path = Path(folder) / MARKER
    try:
        body = json.loads(path.read_text())
        tables = [{str(sc): {str(v): tuple(int(s) for s in seeds) for v, seeds in vs.items()}
                   for sc, vs in (body.get(name) or {}).items()} for name in ("runs", "optional")]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ConfigError(f"{path}: not a readable reference manifest ({type(err).__name__}: {err}); "
                          "restore it with git checkout") from None
    return Manifest(tables[0], tables[1], str(body.get("rebuild") or "make bench"))


def run_key(run: Run) -> tuple[str, str, int] | None:
    """(scenario, variant, seed) of a run, from its run.json; None when run.json lacks them."""
    variant, seed = run.meta.get("variant"), (run.meta.get("config") or {}).get("seed")
    if variant is None or seed is None:
        return None
    return run.scenario, str(variant), int(seed)


def guard_output(out_dir: Path | str, reference: bool) -> None:
    """ConfigError unless writing a report into ``out_dir`` is allowed (module doc)."""
    if is_reference(out_dir) and not reference:
        raise ConfigError(f"--out: {str(out_dir)!r} holds a committed reference report ({MARKER}); it is rebuilt "
                          f"only by {load_manifest(out_dir).rebuild} (or --reference, from complete reference runs). "
                          "Your own report goes to outputs/ (the default): python -m harness.report")
    if reference and not is_reference(out_dir):
        raise ConfigError(f"--reference: {str(out_dir)!r} has no {MARKER}; it is not a reference folder "
                          "(results/ or results/real/)")


def select_reference(coll: Collection, manifest: Manifest) -> Collection:
    """The collection restricted to the reference's runs (the latest ok run of each listed key); a
    ConfigError naming what is missing when a required scenario, or a present optional one, is incomplete."""
    chosen: dict[tuple[str, str, int], Run] = {}
    for run in coll.runs:
        key = run_key(run)
        if not run.ok or key is None or not manifest.listed(key):
            continue
        best = chosen.get(key)
        if best is None or str(run.meta.get("started", "")) >= str(best.meta.get("started", "")):
            chosen[key] = run
    missing: dict[str, list[str]] = {}
    optional_lack = False
    for scenario, variant, seeds, optional in manifest.groups():
        lack = [s for s in seeds if (scenario, variant, s) not in chosen]
        if lack and not (optional and len(lack) == len(seeds)):
            missing.setdefault(scenario, []).extend(f"{variant} seed {s}" for s in lack)
            optional_lack = optional_lack or optional
    problems = [f"{sc}: {len(m)} runs missing or not ok ({', '.join(m[:3])}{', ...' if len(m) > 3 else ''})"
                for sc, m in missing.items()]
    if problems:
        raise ConfigError(f"--reference: the runs under {coll.results_dir / 'runs'} are not a complete reference: "
                          + "; ".join(problems) + f". Run {manifest.rebuild} (it resumes)"
                          + (" and, for an optional variant begun and not finished, the optional bench step that lists "
                             "it (python -m harness.bench --only NAME; docs/bench.md)" if optional_lack else "")
                          + ", or report into outputs/ without --reference")
    keep = {id(r) for r in chosen.values()}
    for run in coll.runs:
        if id(run) in keep or not run.ok:
            continue
        key = run_key(run)
        listed = key is not None and manifest.listed(key)
        run.status, run.reason = ("superseded", "a later ok run of the same variant and seed counts") if listed else (
            "not reference", f"not a run of the reference ({MARKER} lists its runs)")
    ok_ids = {r.run_id for r in coll.ok_runs}
    rows = coll.rows[coll.rows["run_id"].isin(ok_ids)].reset_index(drop=True) if len(coll.rows) else coll.rows
    prompts = coll.prompts[coll.prompts["run_id"].isin(ok_ids)].reset_index(drop=True) if len(coll.prompts) else coll.prompts
    return Collection(coll.results_dir, coll.runs, rows, prompts)

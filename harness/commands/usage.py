"""What ``python -m harness --help`` prints, and what a bare ``python -m harness`` says.

Both are built from files only (the scenario headers, the config groups' YAML names), with
no Hydra and no torch, so they return at once however many runs lie under results/runs.
Hydra's own help stays available as ``--hydra-help``.

Choices written down: a bare ``python -m harness`` (no argument at all) prints how to start
and exits with status 2 (a usage error: nothing was asked for, so nothing runs). Any
override without a scenario (``python -m harness method=hilo``) is still an ad-hoc run of the
defaults, as before.
"""
from __future__ import annotations

import re
from pathlib import Path

from harness.paths import scenarios_root
from harness.validate import GROUPS, group_options

HELP_FLAGS = ("--help", "-h")
COMMANDS = (
    ("make bench", "the real-model reference -> results/real/summary.md, tables, plots"),
    ("python -m harness.bench --list", "the bench's steps; --quick, --full, --only NAME ..."),
    ("python -m harness.report", "tables, claims and plots of your runs: outputs/runs -> outputs/summary.md"),
    ("python -m harness.tune scenario=NAME", "tune a scenario's learning rates on its validation split"),
    ("python -m harness.commands.sizes --preset llama3-8b --rank 64", "bytes and link time per method at real shapes"),
    ("python -m netem check | probe | clean", "what this kernel can shape; measure a link; remove leftovers"),
)


def purpose(path: Path, width: int = 76) -> str:
    """The one-line purpose of a scenario file: its header's first sentence, after ``NAME:``."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text.startswith("@package"):
            continue
        if lines and (not text or re.match(r"^[A-Z][a-z]+( [a-z]+)?:", text)):
            break                      # the next labelled paragraph (Measures:, Command: ...)
        lines.append(text)
    sentence = " ".join(lines)
    sentence = re.sub(rf"^{re.escape(path.stem)}:\s*", "", sentence)
    sentence = re.split(r"(?<=[a-z0-9)])\.\s", sentence + " ", maxsplit=1)[0].strip().rstrip(".")
    if len(sentence) <= width:
        return sentence
    return sentence[: width - 3].rsplit(" ", 1)[0].rstrip(" ,;:(") + "..."


def scenarios() -> list[tuple[str, str]]:
    """(name, purpose) of every scenario file, sorted by name."""
    return [(p.stem, purpose(p)) for p in sorted(scenarios_root().glob("*.yaml"))]


def help_text() -> str:
    """The whole ``--help`` screen."""
    rows = scenarios()
    wide = max((len(n) for n, _ in rows), default=8)
    out = [
        "narrowband: a bandwidth-emulating benchmark harness for distributed LoRA post-training",
        "",
        "usage:",
        "  python -m harness scenario=NAME [key=value ...]     run a scenario (also: narrowband ...)",
        "  python -m harness scenario=NAME 'only=[VARIANT]' 'seeds=[0,1,2]'   some variants, some seeds",
        "  python -m harness scenario=NAME compressor.budget=1.6% seeds=0,1,2   a budget as a percentage; 3 seeds",
        "  python -m harness -m scenario=NAME net.rate=5mbit,20mbit   a sweep (Hydra multirun; seed=0,1,2 too)",
        "  python -m harness key=value ...                      an ad-hoc run of the defaults",
        "",
        f"scenarios ({scenarios_root()}):",
        *(f"  {name:<{wide}}  {what}" for name, what in rows),
        "",
        "config groups (GROUP=OPTION; harness/conf):",
        *(f"  {g:<10}  {', '.join(group_options(g))}" for g in GROUPS),
        "",
        "commands:",
        *(f"  {cmd:<52}  {what}" for cmd, what in COMMANDS),
        "",
        "more: README.md, docs/; the composed config: python -m harness scenario=NAME --cfg job;",
        "Hydra's own help: python -m harness --hydra-help",
    ]
    return "\n".join(out)


def start_text() -> str:
    """What a bare ``python -m harness`` prints (to stderr)."""
    names = [n for n, _ in scenarios()]
    return "\n".join([
        "narrowband: nothing to run. Start with a scenario, e.g.",
        "  python -m harness scenario=smoke_hilo      # every on-policy method, tiny model, ~1-2 min",
        f"scenarios: {', '.join(names)}",
        "python -m harness --help lists what each one measures, the config groups and the commands.",
    ])

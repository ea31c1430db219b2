"""Pure tier: the import graph of harness/ and netem/ has no cycle and no upward import.

Every ``import`` / ``from ... import`` in every module counts, function-level (lazy) ones
included. A module belongs to the layer of the longest prefix listed below and may import
only its own layer or lower ones; within a layer any order is fine as long as there is no
cycle. The same order is written in docs/interfaces.md ("Layers").
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# lowest first
LAYERS: list[tuple[str, ...]] = [
    ("netem",),                                                        # the emulator: imports no harness
    ("harness.errors", "harness.paths", "harness.wire", "harness.wire.sealed", "harness.conf", "harness.progress",
     "harness.seeds", "harness.tuned_lr", "harness.sweeplabel", "harness.discovery"),  # leaves (harness.wire's __init__ imports nothing)
    ("harness.backends", "harness.wire.links", "harness.record", "harness.digest", "harness.optim",
     "harness.fanout", "harness.placement", "harness.compress", "harness.tasks"),           # building blocks
    ("harness.wire.transport", "harness.cluster"),                     # processes (cluster/: launch, spawn,
                                                                       # supervise, role) and the wire
    ("harness.onpolicy", "harness.federated", "harness.runplan"),      # the training loops (role entries) and the
                                                                       # RunPlan they decode
    ("harness.checks", "harness.validate", "harness.compose", "harness.plan", "harness.scenario"),   # deciding what a run is
    ("harness.run", "harness.multihost", "harness.report"),            # running (one host, across hosts: the
                                                                       # agent's parts) and reporting
    ("harness.commands", "harness.__main__", "harness.bench", "harness.tune", "harness.report.__main__"),
                                                                       # entry points: harness/commands/ and the
                                                                       # aliases python -m keeps (harness.bench, ...)
]


def modules() -> dict[str, Path]:
    found = {}
    for pkg in ("harness", "netem"):
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (anywhere in its body)."""
    graph = {}
    for mod, path in known.items():
        out: set[str] = set()
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out |= {t for a in node.names if (t := _resolve(a.name, known))}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for a in node.names:
                    target = _resolve(f"{base}.{a.name}", known) or _resolve(base, known)
                    if target:
                        out.add(target)
        out.discard(mod)
        graph[mod] = out
    return graph


def layer_of(mod: str) -> int:
    best, layer = -1, None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and len(p) > best:
                best, layer = len(p), i
    assert layer is not None, f"{mod} is in no layer: add it to LAYERS (and docs/interfaces.md)"
    return layer


def test_no_upward_import():
    graph = imports(modules())
    upward = [f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
              for m, targets in graph.items() for t in targets if layer_of(t) > layer_of(m)]
    assert not upward, "\n".join(sorted(upward))


def test_netem_imports_nothing_from_harness():
    graph = imports(modules())
    assert not [(m, t) for m, ts in graph.items() if m.startswith("netem") for t in ts if t.startswith("harness")]


def test_no_import_cycle():
    graph = imports(modules())
    state: dict[str, int] = {}            # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state and (cycle := visit(t)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)):
            raise AssertionError("import cycle: " + " -> ".join(cycle))


def test_the_walker_sees_function_level_imports():
    graph = imports(modules())
    assert "harness.cluster.launch" in graph["harness.plan"]          # a function-level import
    assert "harness.errors" in graph["harness.validate"]


def test_the_layout_names_every_module_and_package():
    """docs/interfaces.md's "Layout" block lists every top-level module and package of harness/ (and no ghost)."""
    text = (ROOT / "docs" / "interfaces.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    listed = {line.split()[0].rstrip("/") for line in block.splitlines() if line.startswith("  ") and line.split()}
    tree = {p.stem if p.is_file() else p.name for p in (ROOT / "harness").iterdir()
            if (p.suffix == ".py" and p.name != "__init__.py") or (p.is_dir() and (p / "__init__.py").exists())}
    names = {n.removesuffix(".py") for n in listed}
    assert tree <= names, f"not in docs/interfaces.md's layout: {sorted(tree - names)}"
    assert names <= tree, f"in docs/interfaces.md's layout but not in harness/: {sorted(names - tree)}"

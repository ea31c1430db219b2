"""Field checks of user input and the command-line helpers, before anything is created.

``validate(cfg)`` checks the values that need no other part of the harness (names, link
specs, ranks, budgets, the backend on this machine); harness.plan.build_plan calls it first
and then checks what the role processes would (sync, optimizer, compressor options, model,
task, federated settings). Callers use build_plan: it is the one place a run is decided.

Every failure is a ConfigError whose message names the key, the value and what is
allowed, on one line; the app prints it and exits with status 2 (no traceback).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from harness.backends import BACKENDS, backend_of
from harness.checks import check_gguf_header, check_out_dir
from harness.errors import ConfigError
from harness.paths import scenario_names

CONF = Path(__file__).parent / "conf"
GROUPS = ("net", "model", "task", "compressor", "method")
WIRE_DTYPES = ("bf16", "fp16", "int8", "fp32")
NODE_KEYS = ("rate", "up", "down", "delay", "jitter", "loss", "queue", "trace")
ONPOLICY_TASKS = ("distill", "reward")


def _allowed(key: str, value: Any, allowed: Iterable[Any]) -> ConfigError:
    return ConfigError(f"{key}: {value!r} is not allowed; choose one of {', '.join(map(str, allowed))}")


def group_options(group: str) -> list[str]:
    """The option names of a config group (its YAML files, schemas excluded)."""
    if group == "scenario":
        return scenario_names()
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def precheck_argv(argv: list[str]) -> list[str]:
    """Reject ``group=unknown`` on the command line with one line instead of Hydra's traceback."""
    for arg in argv:
        if "=" not in arg or arg.startswith(("hydra", "-")):
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        if key in GROUPS or key == "scenario":
            options = group_options(key)
            for choice in value.split(","):
                if choice and choice != "null" and choice not in options:
                    raise _allowed(key, choice, options)
    return argv


def translate_argv(argv: list[str]) -> list[str]:
    """``scenario=NAME`` is Hydra's own group override (scenarios/NAME.yaml at the global package:
    hydra_plugins/narrowband_searchpath); the older spelling ``scenarios@_global_=NAME`` still works."""
    return [f"scenario={a.split('=', 1)[1]}" if a.startswith("scenarios@_global_=") else a for a in argv]


def _check_link(key: str, node: dict) -> None:
    from netem.spec import LinkSpecError, parse_loss, parse_rate, parse_size, parse_time

    parsers = {"rate": parse_rate, "up": parse_rate, "down": parse_rate, "hub": parse_rate,
               "delay": parse_time, "jitter": parse_time, "loss": parse_loss, "queue": parse_size}
    for field, value in node.items():
        if field in parsers and value is not None:
            try:
                parsers[field](value, field=f"{key}.{field}")
            except LinkSpecError as err:
                raise ConfigError(str(err)) from None


def trace_of(value: Any, side: str) -> str | None:
    """The trace one direction ('up' or 'down') gets from a ``trace`` value (a name for both, or {up, down})."""
    if value is None or isinstance(value, str):
        return value or None
    return dict(value).get(side)


def _check_trace(key: str, value: Any, backend: str) -> None:
    """A trace value names readable, well-formed traces, on a backend that can play them."""
    from netem.trace import TraceError, load

    if value is None or value == "":
        return
    if not isinstance(value, str):
        try:
            sides = dict(value)
        except (TypeError, ValueError):
            sides = None
        if sides is None or set(sides) - {"up", "down"}:
            raise ConfigError(f"{key}: {value!r} is not a trace; use a file path or shipped name (both directions) "
                              "or a mapping {up: ..., down: ...}")
    if backend != "auto" and not backend_of(backend).plays_traces:
        raise _allowed(f"net.backend (with {key} set)", backend,
                       [b for b in BACKENDS if b == "auto" or backend_of(b).plays_traces])
    for side in ("up", "down"):
        name = trace_of(value, side)
        if name is not None:
            try:
                load(str(name), key if isinstance(value, str) else f"{key}.{side}")
            except TraceError as err:
                raise ConfigError(str(err)) from None


def _check_backend(net: Any) -> None:
    """The asked-for backend can run here, and can do every link (loss needs kernel netem).

    ``auto`` is resolved as the run will resolve it (harness.backends.best_available).
    """
    from netem.caps import may_admin_net, probe
    from netem.shaping import check
    from netem.spec import LinkSpec, LinkSpecError, parse_loss, parse_rate

    from harness.backends import best_available

    asked = backend_of(net.backend) if net.backend != "auto" else None
    if asked is not None and asked.kernel and not may_admin_net():
        raise ConfigError(f"net.backend: {net.backend!r} needs root (CAP_NET_ADMIN) to create namespaces "
                          "and qdiscs; run as root or use net.backend=userspace (or auto)")
    base = {k: net[k] for k in NODE_KEYS if k != "trace"}
    links = [(f"net.nodes[{i}]", {**base, **{k: v for k, v in dict(node).items() if k != "trace"}})
             for i, node in enumerate(net.nodes)] or [("net", base)]
    lossy = [(key, link["loss"]) for key, link in links if parse_loss(link["loss"], f"{key}.loss") > 0]
    if not lossy and not (asked is not None and asked.kernel):
        return
    caps = probe()
    backend = best_available(caps) if asked is None else net.backend
    qdisc = asked.qdisc if asked is not None else None
    if qdisc and not (caps.netns and caps.qdiscs.get(qdisc)):
        why = caps.notes.get(qdisc if caps.netns else "netns", "not found")
        raise ConfigError(f"net.backend: {net.backend!r} needs network namespaces and sch_{qdisc}, which this "
                          f"machine lacks ({why}); use net.backend=auto (best here: {best_available(caps)})")
    if not backend_of(backend).kernel:          # (reached only with loss > 0 here)
        key, loss = lossy[0]
        raise ConfigError(f"{key}.loss: {loss!r} cannot be emulated on the {backend} backend (only kernel netem "
                          "drops packets); use loss 0% or net.backend=netem on a kernel with sch_netem")
    for key, link in links:
        for side in ("rate", "up", "down"):
            spec = LinkSpec(rate_bps=parse_rate(link[side] or link["rate"]), loss=parse_loss(link["loss"]))
            try:
                check(spec, backend, field=lambda name: f"{key}.{side if name == 'rate' else name}")
            except LinkSpecError as err:
                raise ConfigError(f"{err} (net.backend={net.backend} resolves to {backend})") from None


def _check_hf_paths(model: Any) -> None:
    """``model=hf``: ``model.path`` (and ``model.teacher_path`` when set) is a local Hugging Face
    folder or a GGUF file whose package (``pkg://``) and file exist (what is inside a GGUF is
    checked when the plan resolves the model source: harness.tasks.gguf_cache)."""
    from harness.tasks.gguf_cache import is_gguf, resolve_file

    for key in ("path", "teacher_path"):
        value = model.get(key)
        if key == "teacher_path" and not value:
            continue
        if is_gguf(value):
            check_gguf_header(resolve_file(str(value), f"model.{key}"), f"model.{key}")   # before any heavy import
        elif not value or not (Path(str(value)) / "config.json").is_file():
            raise ConfigError(f"model.{key}: {value!r} is not a local Hugging Face model directory (a folder with "
                              "config.json, e.g. from save_pretrained) nor a .gguf file; nothing is downloaded")


def validate(cfg: Any) -> None:
    """Raise ConfigError for the first bad field of a composed config (DictConfig or dict); called by build_plan."""
    net, model, task, comp, method = cfg.net, cfg.model, cfg.task, cfg.compressor, cfg.method
    if cfg.get("out_dir") is not None:
        check_out_dir(cfg.get("out_dir"))
    if net.backend not in BACKENDS:
        raise _allowed("net.backend", net.backend, BACKENDS)
    _check_link("net", {k: net[k] for k in ("rate", "up", "down", "hub", "delay", "jitter", "loss", "queue")})
    for i, node in enumerate(net.nodes):
        for k in node:
            if k not in NODE_KEYS:
                raise _allowed(f"net.nodes[{i}] key", k, NODE_KEYS)
        _check_link(f"net.nodes[{i}]", dict(node))
        _check_trace(f"net.nodes[{i}].trace", node.get("trace"), net.backend)
    _check_trace("net.trace", net.trace, net.backend)
    if not float(net.hang_timeout_s) > 0:
        raise ConfigError(f"net.hang_timeout_s: {net.hang_timeout_s!r} must be > 0 (seconds without progress "
                          "before a run is failed)")
    _check_backend(net)
    for group, value in (("model", model.name), ("task", task.name), ("compressor", comp.name),
                         ("method", method.name)):
        if value not in group_options(group):
            raise _allowed(f"{group}.name", value, group_options(group))
    if model.name == "hf":
        _check_hf_paths(model)
    ranks = [("model.rank", model.rank)]
    if method.get("rank") is not None:
        ranks.append(("method.rank", method.rank))
    if method.kind == "federated":
        ranks += [(f"federated.ranks[{i}]", r) for i, r in enumerate(cfg.federated.ranks)]
    limit = min(model.hidden_size, model.num_kv_heads * (model.hidden_size // model.num_heads))
    for key, r in ranks:
        if not isinstance(r, int) or r < 1:
            raise ConfigError(f"{key}: {r!r} is not a rank; it must be an integer >= 1")
        if model.name != "hf" and r > limit:
            raise ConfigError(f"{key}: {r} is larger than the smallest adapted layer dimension ({limit}); "
                              f"choose 1..{limit}")
    if comp.budget is not None and not (0 < float(comp.budget) <= 1):
        raise ConfigError(f"compressor.budget: {comp.budget!r} is outside (0, 1]; it is a fraction of the "
                          "bf16 adapter bytes, e.g. 0.016")
    if comp.budget_bytes is not None and int(comp.budget_bytes) <= 0:
        raise ConfigError(f"compressor.budget_bytes: {comp.budget_bytes!r} must be a positive number of bytes")
    if comp.dtype not in WIRE_DTYPES:
        raise _allowed("compressor.dtype", comp.dtype, WIRE_DTYPES)
    if method.kind == "onpolicy":
        if task.name not in ONPOLICY_TASKS:
            raise _allowed(f"task.name (method {method.name} is on-policy)", task.name, ONPOLICY_TASKS)
        if cfg.onpolicy.workers < 1 or cfg.onpolicy.steps < 1:
            raise ConfigError(f"onpolicy.workers / onpolicy.steps: {cfg.onpolicy.workers} / "
                              f"{cfg.onpolicy.steps}; both must be >= 1")
    elif method.kind == "federated":
        fed = cfg.federated          # every other federated.* and method knob: harness.plan.build_plan
        if task.name != "federated":
            raise _allowed(f"task.name (method {method.name} is federated)", task.name, ["federated"])
        if fed.clients > task.examples:
            raise ConfigError(f"federated.clients: {fed.clients} clients but only {task.examples} examples "
                              "(task.examples); each client needs data")
    else:
        raise _allowed("method.kind", method.kind, ["onpolicy", "federated"])

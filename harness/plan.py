"""One typed plan per run, built once from the composed config, before anything starts.

    plan = build_plan(cfg)          # ConfigError (one line: key, value, allowed) on any bad input
    plan.role_specs()               # what harness.cluster.launch starts
    plan.run_keys(scenario, variant, run_id)   # the key columns of every row
    RunPlan.from_dict(plan.to_dict()) == plan   # what the roles receive (payload["plan"])

A :class:`RunPlan` holds the resolved link backend and why, every role with its uplink and
downlink, process rank, device and seed, where each role runs (``placement``: its host, core
slots and GPU, from ``placement.*``: harness/placement.py), the settings of its method family (on-policy:
:class:`harness.onpolicy.setup.OnPolicyPlan` with its dry-built compressor; federated:
:class:`harness.federated.settings.Settings`), and the row keys. Every knob that a role
process used to check itself (prompt sharding, optimizer, compressor options, model dtype,
task parameters, federated settings, client counts) is checked here, so a bad value ends the
command with exit 2 before any namespace or process exists.

Choices written down: every role gets the run's ``seed`` (replicas must draw the same adapter
and prompts; roles differ by process rank, not by seed). The row's ``rate_mbit`` /
``delay_ms`` are those of the first node's downlink as shaped (the hub's link when the nodes
are unshaped), which is the global ``net.rate`` / ``net.delay`` unless ``net.nodes``
overrides them. With link traces (``net.trace`` / ``net.nodes[i].trace``) a direction's
LinkSpec carries the trace's resolved path and starts at its first rate; ``rate_mbit`` is then
the trace's time-mean rate over one period and the rows get a ``trace`` column (the trace names).
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Mapping

from harness.backends import Backend, backend_of, resolve_backend
from harness.errors import ClusterError, ConfigError
from harness.federated.settings import Settings
from harness.onpolicy.setup import OnPolicyPlan
from harness.placement import resolve as resolve_placement
from harness.runplan import ENTRIES, MethodKind, RolePlan, RunPlan, _specs
from harness.tasks.plans import model_plan, task_plan
from harness.tasks.source import resolve as resolve_source
from netem.spec import LinkSpec, LinkSpecError

__all__ = ["Backend", "MethodKind", "RolePlan", "RunPlan", "build_plan", "check_compressor_budget"]

def build_plan(cfg: Any) -> RunPlan:
    """The RunPlan of a composed config (DictConfig or plain dict); ConfigError on the first bad value."""
    from omegaconf import DictConfig, OmegaConf

    from harness.validate import validate

    validate(cfg)                                             # field checks: names, links, ranks, budgets
    plain = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    kind = MethodKind(plain["method"]["kind"])
    model, task = model_plan(plain["model"]), task_plan(plain["task"])    # the typed parts every role builds from
    onpolicy = federated = None
    model_source = resolve_source(plain["model"], plain["task"])   # a GGUF: hashed and checked, materialised at launch
    if kind is MethodKind.ONPOLICY:
        _check_model_and_task(plain, kind)
        from harness.onpolicy.setup import plan_from_cfg

        onpolicy = plan_from_cfg(plain)
        if onpolicy.compressor is not None:
            check_compressor_budget(onpolicy.compressor, plain["model"], onpolicy.training_rank)
    else:
        from harness.federated.settings import from_cfg

        if plain["federated"].get("population") is None:
            _check_model_and_task(plain, kind)
        federated = from_cfg(plain)              # a population is checked here, before its data split
        if federated.population is not None:
            _check_model_and_task(plain, kind, federated.clients)
    roles = _roles(plain, kind, onpolicy, federated)
    placement = resolve_placement(plain.get("placement"), [r.name for r in roles], str(plain["model"]["device"]))
    try:
        backend, why = resolve_backend(plain["net"]["backend"])
        from harness.cluster.launch import check_roles

        check_roles(_specs(roles, placement), ENTRIES[kind.value], backend)     # names, devices, loss vs backend
        if not backend_of(backend).plays_traces and any(r.up.trace or r.down.trace for r in roles):
            raise ConfigError(f"net.trace: link traces are replayed on the tc/netem (kernel) and model backends, "
                              f"not userspace ({why}); use net.backend=model or run as root")
    except ClusterError as err:
        raise ConfigError(str(err)) from None
    return RunPlan(kind=kind, method=str(plain["method"]["name"]), backend=Backend(backend),
                   backend_requested=Backend(plain["net"]["backend"]), backend_reason=why,
                   entry=ENTRIES[kind.value], roles=roles, seed=int(plain["seed"]),
                   hang_timeout_s=float(plain["net"]["hang_timeout_s"]),
                   keys=_row_keys(plain, roles, onpolicy, backend), onpolicy=onpolicy, federated=federated,
                   placement=placement, model_source=model_source, model=model, task=task)


def _check_model_and_task(cfg: Mapping[str, Any], kind: MethodKind, clients: int | None = None) -> None:
    """The model and task knobs a role would trip over, checked by dry-building the cheap parts."""
    from harness.tasks import build_tokenizer
    from harness.tasks.targets import check_model

    model, task = cfg["model"], cfg["task"]
    ranks = {"model.rank": model["rank"]}
    if cfg["method"].get("rank") is not None:
        ranks["method.rank"] = cfg["method"]["rank"]
    if kind is MethodKind.FEDERATED:
        ranks.update({f"federated.ranks[{i}]": r for i, r in enumerate(cfg["federated"]["ranks"])})
    check_model(model, ranks)   # the one call site of the model checks (dtype, init, targets by architecture, ranks)
    if model["name"] != "hf":
        from harness.tasks.cache import recipe

        recipe("student", model, task)                       # task.student_init and the pretraining recipe
    if kind is MethodKind.ONPOLICY:
        from harness.tasks import build_task

        build_task(task, build_tokenizer(model), sampler=task["name"] != "reward")   # task.format, digits/ops or chat questions, sampling
    else:
        import json

        _dry_split(json.dumps([dict(task), dict(model), clients or int(cfg["federated"]["clients"]), int(cfg["seed"])],
                              sort_keys=True, default=str))


@functools.lru_cache(maxsize=64)
def _dry_split(key: str) -> None:
    """The federated data split, dry-built (task, model, clients, seed as JSON in); a split that builds is not built
    again in this process (a scenario's variants share it); one that fails raises each time (nothing cached)."""
    import json

    from harness.tasks import build_federated, build_tokenizer

    task, model, clients, seed = json.loads(key)
    build_federated(task, build_tokenizer(model), clients, seed)


def check_compressor_budget(comp: Any, model_cfg: Mapping[str, Any], rank: int) -> None:
    """Dry-encode the run's compressor (a CompressorPlan) over gradients shaped like the adapter it will
    ship (every LoRA A and B of ``model.targets`` at ``rank``, peft's names, so the payload's header is
    the real one): a budget the compressor cannot hold (header, quant's 1-bit floor, a fixed rank or
    topk, DeMo's one coefficient per chunk) is one ConfigError here, before any role exists. Byte
    counts depend on shapes and options, not on values, so seeded normal values stand in for a
    gradient. Cached per (compressor, model, rank) in this process: a scenario's seeds share one."""
    import json

    key = json.dumps([comp.__dict__, dict(model_cfg), rank], sort_keys=True, default=str)
    error = _dry_encode(key)
    if error:
        raise ConfigError(error)


@functools.lru_cache(maxsize=64)
def _dry_encode(key: str) -> str | None:
    """The dry encode behind :func:`check_compressor_budget` (its JSON key in, the error line or None out)."""
    import json

    import torch

    from harness.compress import CompressorError
    from harness.onpolicy.setup import CompressorPlan

    comp_fields, model_cfg, rank = json.loads(key)
    g = torch.Generator().manual_seed(0)
    grads = {name: torch.randn(shape, generator=g) for name, shape in adapter_shapes(model_cfg, rank).items()}
    try:
        CompressorPlan(**comp_fields).build().encode(grads, step=0)
    except CompressorError as err:
        return f"{str(err).splitlines()[0]} (the dry encode of the {rank}-rank adapter's " \
               f"{sum(t.numel() for t in grads.values())} gradient elements)"
    return None


def adapter_shapes(model_cfg: Mapping[str, Any], rank: int) -> dict[str, tuple[int, int]]:
    """peft's name -> shape of every trainable LoRA tensor (A: rank x d_in, B: d_out x rank) on
    ``model.targets``, in module order, from the model's meta-device skeleton (no weights)."""
    from harness.tasks.targets import adaptable_layers, resolve_targets, skeleton

    model = skeleton(model_cfg)
    chosen = resolve_targets(model, model_cfg.get("targets"))
    shapes: dict[str, tuple[int, int]] = {}
    for name, (d_in, d_out) in adaptable_layers(model).items():
        if name.split(".")[-1] in chosen:
            shapes[f"base_model.model.{name}.lora_A.default.weight"] = (rank, d_in)
            shapes[f"base_model.model.{name}.lora_B.default.weight"] = (d_out, rank)
    return shapes


def _link(node: Mapping[str, Any], rate: Any, prefix: str, side: str) -> LinkSpec:
    from netem.trace import traced

    from harness.validate import trace_of

    key = f"{prefix}.trace" + ("" if isinstance(node.get("trace"), str) else f".{side}")
    try:
        spec = LinkSpec.parse(rate=rate, delay=node["delay"], jitter=node["jitter"], loss=node["loss"],
                              queue=node["queue"], prefix=prefix)
        return traced(spec, trace_of(node.get("trace"), side), key)
    except LinkSpecError as err:
        raise ConfigError(str(err)) from None


def _roles(cfg: Mapping[str, Any], kind: MethodKind, onpolicy: OnPolicyPlan | None,
           federated: Settings | None) -> tuple[RolePlan, ...]:
    """The hub and one node per worker/client, each with its uplink and downlink."""
    net, seed, device = cfg["net"], int(cfg["seed"]), str(cfg["model"]["device"])
    try:
        hub_link = LinkSpec.parse(rate=net["hub"], prefix="net.hub")
    except LinkSpecError as err:
        raise ConfigError(str(err)) from None
    if onpolicy is not None:
        hub, node, count = "learner", "worker", onpolicy.workers
        lora = [onpolicy.training_rank] * (count + 1)
        expendable = False
    else:
        assert federated is not None
        hub, node, count = "server", "client", federated.clients
        lora = [federated.r_max, *federated.ranks]
        if federated.population is not None:     # P executors take on the sampled clients' identities
            node, count = "executor", federated.population.executors
            lora = [federated.r_max] * (count + 1)
        expendable = federated.drop_policy == "continue"
    roles = [RolePlan(hub, 0, hub_link, hub_link, device, seed, lora[0])]
    for k in range(count):
        spec = {key: net.get(key) for key in ("rate", "up", "down", "delay", "jitter", "loss", "queue", "trace")}
        if net["nodes"]:
            spec.update(dict(net["nodes"][k % len(net["nodes"])]))
        prefix = f"net.nodes[{k}]"
        roles.append(RolePlan(f"{node}{k}", k + 1, _link(spec, spec["up"] or spec["rate"], prefix, "up"),
                              _link(spec, spec["down"] or spec["rate"], prefix, "down"), device, seed, lora[k + 1],
                              expendable))
    return tuple(roles)


def _row_keys(cfg: Mapping[str, Any], roles: tuple[RolePlan, ...], onpolicy: OnPolicyPlan | None,
              backend: str) -> dict[str, Any]:
    """Row keys read from the plan (not re-parsed from net.*); see the module docstring."""
    from netem.trace import load

    link = roles[1].down if len(roles) > 1 and roles[1].down.rate_bps else roles[0].up
    comp = onpolicy.compressor if onpolicy is not None else None
    traces = sorted({Path(p).stem for r in roles for p in (r.up.trace, r.down.trace) if p})
    rate_bps = load(link.trace).mean_rate_bps() if link.trace else link.rate_bps
    return {
        "method": str(cfg["method"]["name"]), "compressor": comp.name if comp else "none",
        "task": str(cfg["task"]["name"]), "seed": int(cfg["seed"]), "backend": backend,
        "rate_mbit": rate_bps / 1e6 if rate_bps else float("nan"),
        "delay_ms": (roles[1].down.delay_s if len(roles) > 1 else 0.0) * 1e3,
        "rank": onpolicy.training_rank if onpolicy else int(cfg["method"].get("rank") or cfg["model"]["rank"]),
        "budget_frac": float(comp.budget) if comp and comp.budget else float("nan"),
        **({"trace": "+".join(traces)} if traces else {}),
    }

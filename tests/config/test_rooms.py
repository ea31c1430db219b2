"""Pure tier: each part has one room. A backend's name is compared in harness/backends.py alone, a
task or model setting has its default in the schema alone, every context an entry gets is a
RoleContext, and a role reads its run from the RunPlan alone."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from harness.backends import BACKENDS
from harness.conf.schema import ChatConfig, GrowConfig, ModelConfig, TaskConfig

ROOT = Path(__file__).resolve().parents[2]


def _sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _compared_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, string) of every string constant compared with ==, !=, in, not in (alone or in a tuple/list/set)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for side in [node.left, *node.comparators]:
            items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            found += [(node.lineno, c.value) for c in items if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    return found


def test_a_backend_name_is_compared_in_harness_backends_only():
    """Every other module asks a backend's class (harness.backends.backend_of) what it can do."""
    names = set(BACKENDS) - {"model", "auto"}  # model: also a config section and a row column; auto: no backend
                                               # (the request to resolve one; also model.device and model.targets)
    offenders = []
    for path in _sources("harness"):
        if path == ROOT / "harness" / "backends.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        offenders += [f"{path.relative_to(ROOT)}:{line}: {value!r}" for line, value in _compared_names(tree)
                      if value in names]
        offenders += [f"{path.relative_to(ROOT)}:{n.lineno}: compares .backend with 'model'" for n in ast.walk(tree)
                      if isinstance(n, ast.Compare) and any(isinstance(c, ast.Constant) and c.value == "model"
                                                            for c in n.comparators)
                      and "backend" in ast.unparse(n.left)]
    assert not offenders, "\n".join(offenders)


def _fields(*schemas: type) -> set[str]:
    return {f.name for s in schemas for f in dataclasses.fields(s)}


def test_no_task_or_model_setting_has_a_default_in_code():
    """harness/tasks reads the typed plan's attributes; no ``.get(<a task or model field>, ...)`` remains
    (the schema, harness/conf/schema.py, is the one place such a default lives)."""
    settings = _fields(TaskConfig, ModelConfig, ChatConfig, GrowConfig)
    offenders = []
    for path in _sources("harness/tasks"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in settings):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, "\n".join(offenders)


def test_a_mapping_without_a_key_gets_the_schema_default_not_another():
    """What tasks and models are handed is completed by the schema (a dict need not carry every key)."""
    from harness.tasks.plans import model_plan, task_plan

    task, model = task_plan({"name": "reward"}), model_plan({"name": "tiny"})
    assert task == TaskConfig(name="reward") and model == ModelConfig(name="tiny")


def test_a_part_read_again_is_the_same_plan_and_a_callers_change_stays_its_own():
    """task_plan/model_plan remember a conversion (a plan's parts are read many times while it is built):
    the same content gives an equal object, different content a different one, a DictConfig the same as its
    dict, and a caller that sets a field on its copy changes nothing the next caller gets."""
    from omegaconf import OmegaConf

    from harness.tasks.plans import task_plan

    first = task_plan({"name": "chat_sft", "eval_prompts": 48})
    first.eval_prompts = 7
    again = task_plan({"name": "chat_sft", "eval_prompts": 48})
    assert again.eval_prompts == 48 and again is not first
    assert task_plan(OmegaConf.create({"name": "chat_sft", "eval_prompts": 48})) == again
    assert task_plan({"name": "chat_sft", "eval_prompts": 49}).eval_prompts == 49


def test_every_context_an_entry_gets_is_a_role_context(tmp_path):
    """The role process's context and both in-process runners' implement one protocol."""
    from harness.cluster.role import ProcessRoleContext, RoleContext
    from harness.federated.inproc import FakeCtx
    from harness.onpolicy.inproc import ThreadCtx

    contexts = [ProcessRoleContext(0, 1, "learner", "cpu", {"plan": {}}, None, tmp_path, None),
                ThreadCtx(0, 1, "learner", None, None), FakeCtx(0, 1, "server", None, None)]
    assert all(isinstance(ctx, RoleContext) for ctx in contexts)


def test_the_role_entries_read_no_config_beside_the_plan():
    """The on-policy and federated roles decode the RunPlan (RunPlan.from_dict) and read no ``ctx.cfg``."""
    for rel in ("harness/onpolicy/loop.py", "harness/federated/entry.py"):
        text = (ROOT / rel).read_text()
        assert "RunPlan.from_dict(ctx.plan)" in text and "ctx.cfg" not in text, rel
    for path in _sources("harness/onpolicy") + _sources("harness/federated"):
        assert "ctx.cfg" not in path.read_text() and "getattr(ctx" not in path.read_text(), path

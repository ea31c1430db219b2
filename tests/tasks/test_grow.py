"""Growth of a narrow Llama into the wide shapes (harness/tasks/grow.py) and its cache recipe."""
import pytest
import torch

from harness.errors import ConfigError
from harness.tasks import cache
from harness.tasks.grow import widen
from harness.tasks.models import build_model

NARROW = dict(name="n", hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
              max_positions=16, dtype="float32", init_seed=3)
WIDE = dict(name="w", hidden_size=128, intermediate_size=192, num_layers=2, num_heads=8, num_kv_heads=2,
            max_positions=16, dtype="float32", init_seed=0)


def _narrow():
    torch.manual_seed(0)
    s = build_model(NARROW, 18)
    for p in s.parameters():                     # norms and weights away from their init values
        p.data += 0.05 * torch.randn_like(p)
    s.model.embed_tokens.weight.data *= 50       # RMS >> the norm's epsilon, which growth scales
    return s


def test_widen_preserves_the_function_and_uses_gqa_and_rope():
    s, t = _narrow(), build_model(WIDE, 18)
    x = torch.randint(0, 18, (3, 11))
    widen(s, t, noise=0.0)
    torch.testing.assert_close(t(x).logits, s(x).logits, atol=2e-5, rtol=1e-4)


def test_noise_touches_only_new_entries_and_is_seeded():
    s = _narrow()
    a = widen(s, build_model(WIDE, 18), noise=1e-2, seed=5)
    b = widen(s, build_model(WIDE, 18), noise=1e-2, seed=5)
    z = widen(s, build_model(WIDE, 18), noise=0.0)
    for (n, pa), pb, pz in zip(a.named_parameters(), b.parameters(), z.parameters()):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)
        kept = pz != 0                            # the copied source entries (nonzero in the source)
        assert torch.equal(pa[kept], pz[kept]) or "norm" in n
        if "norm" not in n:
            assert (pa[~kept] != 0).float().mean() > 0.99, n     # every new entry got noise


def test_widen_refuses_shapes_it_cannot_embed():
    s = _narrow()
    with pytest.raises(ValueError, match="depth"):
        widen(s, build_model({**WIDE, "num_layers": 1}, 18))
    with pytest.raises(ValueError, match="heads"):
        widen(s, build_model({**WIDE, "num_kv_heads": 1, "num_heads": 4}, 18))


def test_grow_recipe_names_its_source_and_checks_it_before_launch():
    task = {"digits": 2, "ops": ["+", "-"], "reverse": True, "teacher_steps": 10, "pretrain_lr": 1e-4,
            "teacher_init": "grow", "grow": {"hidden_size": 32, "intermediate_size": 64, "num_heads": 4,
                                              "num_kv_heads": 2, "steps": 7, "batch": 8, "lr": 3e-3, "noise": 1e-3}}
    r = cache.recipe("teacher", WIDE, task)
    src = r["grow"]["source"]
    assert r["init"] == "grow" and src["init"] == "scratch" and src["steps"] == 7 and src["batch"] == 8
    assert src["model"]["hidden_size"] == 32 and src["model"]["num_layers"] == WIDE["num_layers"]
    # the scratch recipe (every shipped base) is unchanged by the new keys
    plain = {k: v for k, v in task.items() if k not in ("teacher_init", "grow")}
    assert "grow" not in cache.recipe("teacher", WIDE, plain)
    assert cache.entry_name("teacher", WIDE, {**task, "teacher_init": "scratch"}) == cache.entry_name("teacher", WIDE, plain)
    with pytest.raises(ConfigError, match="task.teacher_init: 'copy' is not allowed"):
        cache.recipe("teacher", WIDE, {**task, "teacher_init": "copy"})
    with pytest.raises(ConfigError, match="task.grow: 256/"):
        cache.recipe("teacher", WIDE, {**task, "grow": {**task["grow"], "hidden_size": 256}})
    with pytest.raises(ConfigError, match="task.grow.steps"):
        cache.recipe("teacher", WIDE, {**task, "grow": {**task["grow"], "steps": 0}})


def test_a_grown_teacher_is_built_from_its_narrow_source(tmp_path, monkeypatch):
    monkeypatch.setenv("NARROWBAND_CACHE", str(tmp_path))
    task = {"digits": 1, "ops": ["+"], "reverse": True, "teacher_steps": 2, "pretrain_lr": 1e-4, "pretrain_batch": 4,
            "teacher_init": "grow", "grow": {"hidden_size": 32, "intermediate_size": 64, "num_heads": 4,
                                              "num_kv_heads": 2, "steps": 3, "batch": 4, "lr": 3e-3, "noise": 1e-3}}
    path = cache.pretrained("teacher", WIDE, task, progress=False)
    src = cache.entry_path("teacher", *cache.grow_source(WIDE, task))
    assert (src / "meta.json").is_file() and (path / "meta.json").is_file()
    meta = cache.meta("teacher", WIDE, task)
    assert meta["recipe"]["grow"]["source"] == cache.recipe("teacher", *cache.grow_source(WIDE, task))
    assert 0.0 <= meta["grown_accuracy"] <= 1.0
    assert cache.load_base("teacher", WIDE, task).config.hidden_size == 128

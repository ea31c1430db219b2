"""Models: fresh Llama-style LMs, peft LoRA (ranks, errors), the local-HF-directory path."""
from __future__ import annotations

import pytest
import torch

from harness.tasks import build_model, build_tokenizer, make_lora
from harness.tasks.models import lora_targets
from harness.errors import ConfigError


def test_build_model_is_seeded_and_sized(model_cfg, tok):
    a, b = build_model(model_cfg, tok.vocab_size), build_model(model_cfg, tok.vocab_size)
    assert a.config.vocab_size == tok.vocab_size and a.config.num_hidden_layers == 1
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), n
    c = build_model({**model_cfg, "init_seed": 1}, tok.vocab_size)
    assert not torch.equal(next(a.parameters()), next(c.parameters()))


def test_bad_sizes_name_the_key(model_cfg, tok):
    with pytest.raises(ConfigError, match="model.num_heads"):
        build_model({**model_cfg, "num_heads": 3}, tok.vocab_size)
    with pytest.raises(ConfigError, match="model.dtype"):
        build_model({**model_cfg, "dtype": "float8"}, tok.vocab_size)


def test_lora_trains_only_adapters_and_starts_as_identity(model_cfg, tok):
    base = build_model(model_cfg, tok.vocab_size)
    x = torch.tensor([[1, 5, 6, 14, 7, 17]])
    before = base(input_ids=x).logits
    model = make_lora(base, 4, None, ["q_proj", "v_proj"])
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert len(trainable) == 2 * 2     # A and B of q_proj and v_proj in one layer
    assert torch.allclose(model(input_ids=x).logits, before)   # B = 0


def test_per_module_ranks_and_scale(model_cfg, tok):
    model = make_lora(build_model(model_cfg, tok.vocab_size), {"default": 2, "q_proj": 8},
                      None, ["q_proj", "v_proj"])
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters() if "lora_A" in n}
    assert any("q_proj" in n and s[0] == 8 for n, s in shapes.items())
    assert any("v_proj" in n and s[0] == 2 for n, s in shapes.items())
    q = model.base_model.model.model.layers[0].self_attn.q_proj
    assert q.scaling["default"] == 1.0                          # alpha None: scale 1 per module


def test_lora_init_zeros_and_gaussian(model_cfg, tok):
    z = make_lora(build_model(model_cfg, tok.vocab_size), 4, None, ["q_proj"], init="zeros")
    assert all(float(p.detach().abs().sum()) == 0 for n, p in z.named_parameters() if "lora_" in n)
    g1 = make_lora(build_model(model_cfg, tok.vocab_size), 4, None, ["q_proj"], init="gaussian", seed=3)
    g2 = make_lora(build_model(model_cfg, tok.vocab_size), 4, None, ["q_proj"], init="gaussian", seed=3)
    a1 = [p for n, p in g1.named_parameters() if "lora_A" in n][0]
    a2 = [p for n, p in g2.named_parameters() if "lora_A" in n][0]
    assert torch.equal(a1, a2) and float(a1.detach().std()) == pytest.approx(1 / 4, rel=0.5)


@pytest.mark.parametrize("rank,match", [(0, "model.rank: 0 is not a rank"), (-2, "model.rank"),
                                        (33, "model.rank: 33 is larger than the smallest dimension \\(32\\)"),
                                        ({"q_proj": 0}, "model.rank\\[q_proj\\]")])
def test_bad_ranks_fail_clearly(model_cfg, tok, rank, match):
    with pytest.raises(ConfigError, match=match):
        make_lora(build_model(model_cfg, tok.vocab_size), rank, None, ["q_proj"])


def test_unknown_targets_and_init(model_cfg, tok):
    with pytest.raises(ConfigError, match="model.targets"):
        make_lora(build_model(model_cfg, tok.vocab_size), 4, None, ["attn.c_proj"])
    with pytest.raises(ConfigError, match="model.lora_init"):
        make_lora(build_model(model_cfg, tok.vocab_size), 4, None, ["q_proj"], init="pissa?")
    layers = lora_targets(build_model(model_cfg, tok.vocab_size), ["k_proj"])
    assert list(layers.values()) == [(32, 32)]


def test_local_hf_directory_round_trip(model_cfg, tok, tmp_path):
    """save_pretrained a tiny model + tokenizer, load both back through model name=hf."""
    model = build_model(model_cfg, tok.vocab_size)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    hf_cfg = {"name": "hf", "path": str(tmp_path), "dtype": "float32"}
    back_tok = build_tokenizer(hf_cfg)
    back = build_model(hf_cfg, back_tok.vocab_size)
    ids = torch.tensor([[back_tok.bos_id] + back_tok.encode("07+58=")])
    assert torch.equal(back(input_ids=ids).logits, model(input_ids=ids).logits)
    lora = make_lora(back, 4, None, ["q_proj"])
    assert sum(p.numel() for p in lora.parameters() if p.requires_grad) > 0


def test_missing_model_path_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match="model.path: .*not a local Hugging Face model directory"):
        build_model({"name": "hf", "path": str(tmp_path / "nope")}, 18)
    with pytest.raises(ConfigError, match="model.path: None"):
        build_tokenizer({"name": "hf", "path": None})

"""Any local causal LM through the same path: LoRA targets by architecture (Linear and GPT-2's
Conv1D), the one-line check before launch, and the arithmetic tasks through each model's own
byte-level BPE tokenizer (which merges digits). Models are saved by the tests themselves
(tests/tasks/hf_families.py); nothing is downloaded."""
from __future__ import annotations

import pytest
import torch

from harness.errors import ConfigError
from harness.tasks.arith import Arithmetic
from harness.tasks.data import correct, encode_prompts, problems_of, sft_batch, sft_loss
from harness.tasks.models import build_model, build_tokenizer, make_lora
from harness.tasks.targets import check_model

from hf_families import ALL_LINEAR, FAMILIES, save_family


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {f: save_family(f, root / f) for f in FAMILIES}


def _cfg(path, targets, rank=4) -> dict:
    return {"name": "hf", "path": str(path), "targets": targets, "rank": rank, "dtype": "float32"}


@pytest.mark.parametrize("family", FAMILIES)
def test_all_linear_resolves_per_architecture_and_auto_is_peft_default(family, family_dirs):
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT

    assert check_model(_cfg(family_dirs[family], ["all-linear"])) == ALL_LINEAR[family]
    assert check_model(_cfg(family_dirs[family], ["auto"])) == sorted(PEFT[family])


@pytest.mark.parametrize("family", FAMILIES)
def test_wrong_targets_fail_with_one_line_listing_the_modules(family, family_dirs):
    with pytest.raises(ConfigError) as err:
        check_model(_cfg(family_dirs[family], ["nope_proj"]))
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("model.targets: ['nope_proj']")
    for name in ALL_LINEAR[family] + ["lm_head"]:
        assert name in msg
    some = ALL_LINEAR[family][:1] + ["nope_proj"]      # one right, one wrong: still an error
    with pytest.raises(ConfigError, match="nope_proj"):
        check_model(_cfg(family_dirs[family], some))


def test_rank_above_the_smallest_adapted_dimension_is_refused(family_dirs):
    with pytest.raises(ConfigError, match=r"model.rank: 64 is larger than the smallest dimension \(32\)"):
        check_model(_cfg(family_dirs["gpt2"], ["all-linear"], rank=64))


def test_the_preset_models_check_on_the_meta_device():
    cfg = {"name": "tiny", "hidden_size": 128, "intermediate_size": 256, "num_layers": 2, "num_heads": 4,
           "num_kv_heads": 4, "max_positions": 32, "rank": 64,
           "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
    assert len(check_model(cfg)) == 7
    with pytest.raises(ConfigError, match="c_attn"):
        check_model({**cfg, "targets": ["c_attn"]})


@pytest.mark.parametrize("family", FAMILIES)
def test_arithmetic_through_each_tokenizer_and_lora_on_all_linear(family, family_dirs):
    """Prompts round-trip to problems, the true answer (as its own tokens + eos) is judged correct,
    and one SFT step through LoRA on [all-linear] gives a finite loss and a gradient on every
    adapter matrix (Conv1D included)."""
    cfg = _cfg(family_dirs[family], ["all-linear"])
    tok = build_tokenizer(cfg)
    lang = Arithmetic(2, ["+", "-"], reverse=True)
    problems = lang.sample("train", 16, torch.Generator().manual_seed(0))
    prompts = encode_prompts(tok, lang, problems)
    back = problems_of(tok, lang, prompts)
    assert lang.prompt_text(back) == lang.prompt_text(problems)
    answers = [tok.encode(t) + [tok.eos_id] for t in lang.answer_text(problems)]
    assert max(len(a) for a in answers) <= lang.max_answer_len + 1     # char count bounds BPE tokens
    width = max(len(a) for a in answers)
    comp = torch.tensor([a + [tok.pad_id] * (width - len(a)) for a in answers])
    mask = torch.tensor([[1] * len(a) + [0] * (width - len(a)) for a in answers], dtype=torch.bool)
    assert correct(tok, lang, prompts, comp, mask).all()
    model = make_lora(build_model(cfg, tok.vocab_size), rank=4, targets=["all-linear"])
    loss = sft_loss(model, sft_batch(tok, lang, problems))
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert torch.isfinite(loss) and grads and all(g is not None for g in grads.values())
    layers = {n.rsplit(".lora_", 1)[0].split(".")[-1] for n in grads}
    assert sorted(layers) == ALL_LINEAR[family]


def test_some_tokenizer_merges_digits(family_dirs):
    """The BPE fixtures exercise multi-digit tokens (else the test above proves less)."""
    tok = build_tokenizer(_cfg(family_dirs["gpt2"], ["all-linear"]))
    assert any(len(tok.decode([i])) > 1 and tok.decode([i]).isdigit() for i in tok.encode("07+58=56"))

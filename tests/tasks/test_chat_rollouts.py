"""rollouts.sample (shared prefill, finished rows leave the batch) against generate and against a
full forward pass, on the tiny self-built chat model with left-padded chat prompts."""
from __future__ import annotations

import pytest
import torch

from chat_model import chat_model, chat_tokenizer
from harness.tasks.arith import Problems
from harness.tasks.chat import ChatPrompts, ChatSpec
from harness.tasks.rollouts import forward_logits, generate, prompt_mask, sample
from harness.tasks.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def setup():
    tok = Tokenizer(chat_tokenizer())
    model = chat_model(tok.vocab_size, seed=3)
    with torch.no_grad():                      # make eos likely, so rows finish at different steps
        model.lm_head.weight[tok.eos_id] *= 0   # (tied: touches the embedding too; fine for a test model)
        model.model.embed_tokens.weight[tok.eos_id] += 0.5
    spec = ChatSpec(low=0, high=150, ops=("+", "-"), words=False, instruction="", system=None)
    chat = ChatPrompts(spec, tok)
    prompts = chat.encode(Problems(torch.tensor([1, 100, 7]), torch.tensor([0, 1, 0]), torch.tensor([2, 50, 149])))
    return tok, model, prompts


def test_prompts_are_left_padded_to_different_lengths(setup):
    tok, _, prompts = setup
    lengths = prompt_mask(prompts, tok.pad_id).sum(1)
    assert len(set(lengths.tolist())) > 1


def test_greedy_sample_equals_generate(setup):
    tok, model, prompts = setup
    mask = prompt_mask(prompts, tok.pad_id)
    a = generate(model, prompts, mask, 12, eos_id=tok.eos_id, pad_id=tok.pad_id)
    b = sample(model, prompts, mask, 12, group=1, eos_id=tok.eos_id, pad_id=tok.pad_id)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert torch.allclose(a[2], b[2], atol=1e-5)
    # greedy with a group: every row of a group is the group=1 row
    c = sample(model, prompts, mask, 12, group=3, eos_id=tok.eos_id, pad_id=tok.pad_id)
    assert torch.equal(c[0], b[0].repeat_interleave(3, 0)) and torch.equal(c[1], b[1].repeat_interleave(3, 0))


def test_sampled_logprobs_match_a_full_forward(setup):
    tok, model, prompts = setup
    mask = prompt_mask(prompts, tok.pad_id)
    gen = torch.Generator().manual_seed(0)
    comp, cmask, logp = sample(model, prompts, mask, 10, group=4, eos_id=tok.eos_id, pad_id=tok.pad_id,
                               temperature=0.7, generator=gen)
    n, t = comp.shape
    assert n == 12
    lengths = cmask.sum(1)
    assert torch.equal(cmask, torch.arange(t)[None, :] < lengths[:, None])          # a prefix of each row
    ended = lengths < t
    assert bool(ended.any()) and len(set(lengths.tolist())) > 1                     # rows left the batch at different steps
    for i in ended.nonzero().squeeze(1).tolist():
        assert int(comp[i, lengths[i] - 1]) == tok.eos_id                          # a finished row ends with eos
    assert bool((comp[~cmask] == tok.pad_id).all()) and bool((logp[~cmask] == 0).all())
    reps = prompts.repeat_interleave(4, 0)
    seq = torch.cat([reps, comp], 1)
    attn = torch.cat([prompt_mask(reps, tok.pad_id), torch.ones_like(cmask)], 1)
    logits = forward_logits(model, seq, attn)[:, prompts.shape[1] - 1:-1] / 0.7
    want = torch.log_softmax(logits, -1).gather(2, comp[..., None]).squeeze(2)
    assert torch.allclose(logp[cmask], want[cmask], atol=1e-4)
    again = sample(model, prompts, mask, 10, group=4, eos_id=tok.eos_id, pad_id=tok.pad_id, temperature=0.7,
                   generator=torch.Generator().manual_seed(0))
    assert torch.equal(again[0], comp) and torch.equal(again[2], logp)


def _lora_with_random_b(model, seed: int):
    from harness.tasks import make_lora

    policy = make_lora(model, 4, targets=["all-linear"], seed=seed)
    with torch.no_grad():                      # B = 0 would leave A's gradient 0: nothing to compare
        g = torch.Generator().manual_seed(seed)
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return policy


def _scored(policy, r, shared: bool):
    from harness.tasks.rollouts import completion_logits_shared

    policy.zero_grad()
    if shared:
        logits = completion_logits_shared(policy, r)
    else:
        p, t = r.prompt_len, r.completions.shape[1]
        logits = forward_logits(policy, r.sequences, r.attention_mask)[:, p - 1:p - 1 + t]
    logp = torch.log_softmax(logits, -1).gather(2, r.completions[..., None]).squeeze(2)
    (logp * r.completion_mask).sum().backward()
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.requires_grad}
    return logits.detach(), grads


@pytest.mark.parametrize("family", ["chat", "qwen2", "gpt2", "gpt_neox"])
def test_shared_prefix_scoring_equals_a_full_forward(setup, family, tmp_path):
    """completion_logits_shared (each prompt computed once per group, gradients through its keys and
    values) gives the full forward's logits and LoRA gradients, on left-padded prompts of different
    lengths, rows that ended early (pad after eos) and four architecture families."""
    from transformers import AutoModelForCausalLM

    from harness.tasks.rollouts import Rollouts

    tok, chat, prompts = setup
    if family == "chat":
        model, pad, eos, vocab = chat_model(tok.vocab_size, seed=5), tok.pad_id, tok.eos_id, tok.vocab_size
    else:
        from hf_families import save_family

        model = AutoModelForCausalLM.from_pretrained(str(save_family(family, tmp_path / family, seed=1)))
        vocab = model.config.vocab_size
        pad, eos = vocab - 1, vocab - 2
        lengths = [9, 5, 12]                   # left-padded, short enough for the families' 64 positions
        g = torch.Generator().manual_seed(0)
        prompts = torch.tensor([[pad] * (12 - n) + torch.randint(0, vocab - 2, (n,), generator=g).tolist()
                                for n in lengths])
    policy = _lora_with_random_b(model, seed=2)
    mask = prompt_mask(prompts, pad)
    group = 3
    comp, cmask, logp = sample(policy, prompts, mask, 7, group=group, eos_id=eos, pad_id=pad, temperature=1.0,
                               generator=torch.Generator().manual_seed(4))
    cmask[1, 2:] = False                       # a row that ended early: pad after its last kept token
    comp[1, 2:] = pad
    r = Rollouts(prompts, comp, cmask, logp, None, group, pad, vocab)
    full, g_full = _scored(policy, r, shared=False)
    shared, g_shared = _scored(policy, r, shared=True)
    assert shared.shape == full.shape == (len(r), comp.shape[1], vocab)
    assert torch.allclose(shared, full, atol=1e-5, rtol=1e-4)
    assert g_full.keys() == g_shared.keys()
    assert any("lora_A" in n and g.abs().sum() > 0 for n, g in g_full.items())   # A's gradient: through the prompt
    for n in g_full:
        assert torch.allclose(g_shared[n], g_full[n], atol=1e-5, rtol=1e-3), n

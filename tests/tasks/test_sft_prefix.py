"""sft_loss_shared_prefix (the prefix every row shares computed once per batch) against sft_loss:
the same loss and LoRA gradients on the tiny chat model's ChatSFTTask batches and on two other
architecture families (hand-made right-padded rows with a common prefix), and the fallbacks."""
from __future__ import annotations

from unittest import mock

import pytest
import torch

from chat_model import chat_model, chat_tokenizer
from harness.tasks import data
from harness.tasks.arith import Problems
from harness.tasks.chat import ChatPrompts, ChatSpec
from harness.tasks.data import IGNORE, sft_loss, sft_loss_shared_prefix, shared_prefix_len
from harness.tasks.tokenizer import Tokenizer


def _lora_with_random_b(model, seed: int):
    from harness.tasks import make_lora

    policy = make_lora(model, 4, targets=["all-linear"], seed=seed)
    with torch.no_grad():                      # B = 0 would leave A's gradient 0: nothing to compare
        g = torch.Generator().manual_seed(seed)
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return policy


def _loss_and_grads(policy, batch, fn):
    policy.zero_grad()
    loss = fn(policy, batch)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in policy.named_parameters() if p.requires_grad}


def _assert_same(policy, batch):
    want, g_want = _loss_and_grads(policy, batch, sft_loss)
    with mock.patch.object(data, "sft_loss", side_effect=AssertionError("fell back")):   # the shared path ran
        got, g_got = _loss_and_grads(policy, batch, sft_loss_shared_prefix)
    assert torch.isfinite(want)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-3), (float(got), float(want))
    assert g_want.keys() == g_got.keys()
    assert any("lora_A" in n and g.abs().sum() > 0 for n, g in g_want.items())
    for n in g_want:
        assert torch.allclose(g_got[n], g_want[n], atol=1e-5, rtol=1e-3), n


def _rows(prefix: list[int], tails: list[tuple[list[int], list[int]]], pad: int) -> dict[str, torch.Tensor]:
    """Right-padded rows prefix + prompt tail + answer, labels on the answer only."""
    width = max(len(prefix) + len(t) + len(a) for t, a in tails)
    ids, labels, attn = [], [], []
    for t, a in tails:
        fill = width - len(prefix) - len(t) - len(a)
        ids.append(prefix + t + a + [pad] * fill)
        labels.append([IGNORE] * (len(prefix) + len(t)) + a + [IGNORE] * fill)
        attn.append([1] * (width - fill) + [0] * fill)
    return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(attn), "labels": torch.tensor(labels)}


def test_chat_sft_batches_match_sft_loss():
    tok = Tokenizer(chat_tokenizer())
    spec = ChatSpec(low=0, high=150, ops=("+", "-"), words=False, instruction="Answer with the number only.",
                    system=None, sft_target="equation")
    chat = ChatPrompts(spec, tok)
    batch = chat.sft_batch(Problems(torch.tensor([1, 100, 7, 42]), torch.tensor([0, 1, 0, 1]),
                                    torch.tensor([2, 50, 149, 3])))
    assert len(set(batch["attention_mask"].sum(1).tolist())) > 1          # rows of different lengths, padded
    p = shared_prefix_len(batch)
    assert p >= 20 and bool((batch["labels"][:, :p + 1] == IGNORE).all())
    _assert_same(_lora_with_random_b(chat_model(tok.vocab_size, seed=5), seed=2), batch)


@pytest.mark.parametrize("family", ["qwen2", "gpt2"])
def test_other_families_match_sft_loss(family, tmp_path):
    from hf_families import save_family
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(save_family(family, tmp_path / family, seed=1)))
    vocab = model.config.vocab_size
    pad = vocab - 1
    g = torch.Generator().manual_seed(0)

    def draw(k: int) -> list[int]:
        return torch.randint(0, vocab - 2, (k,), generator=g).tolist()

    batch = _rows(draw(12), [(draw(3), draw(4)), (draw(6), draw(2)), (draw(1), draw(7))], pad)
    assert shared_prefix_len(batch) == 12
    policy = _lora_with_random_b(model, seed=2)
    _assert_same(policy, batch)
    # the answer starts right after the common prefix: the prefix is cut one column short
    tight = _rows(draw(10), [([], draw(3)), ([], draw(5))], pad)
    assert shared_prefix_len(tight) == 9
    _assert_same(policy, tight)


def test_no_common_prefix_falls_back():
    tok = Tokenizer(chat_tokenizer())
    model = _lora_with_random_b(chat_model(tok.vocab_size, seed=5), seed=2)
    batch = _rows([], [([5, 6, 7], [8, 9]), ([6, 6, 7], [9, 9, 9])], tok.pad_id)
    assert shared_prefix_len(batch) == 0
    with mock.patch.object(data, "sft_loss", wraps=data.sft_loss) as spy:
        got = sft_loss_shared_prefix(model, batch)
    spy.assert_called_once()
    assert torch.equal(got, sft_loss(model, batch))
    one = _rows([5], [([6], [8, 9]), ([7], [9])], tok.pad_id)                # a prefix of 1: not worth it
    assert shared_prefix_len(one) == 1
    with mock.patch.object(data, "sft_loss", wraps=data.sft_loss) as spy:
        sft_loss_shared_prefix(model, one)
    spy.assert_called_once()



def test_chat_sft_task_loss_and_eval_use_the_shared_prefix():
    from dataclasses import asdict

    from harness.conf.schema import TaskConfig
    from harness.tasks import build_federated

    ctok = Tokenizer(chat_tokenizer())
    cfg = asdict(TaskConfig())
    cfg.update(format="chat", name="federated", eval_prompts=4, examples=64, batch_size=4, max_new_tokens=4)
    task = build_federated(cfg, ctok, 2, seed=0)
    batch = next(task.batches(0, 4, torch.Generator().manual_seed(0)))
    model = chat_model(ctok.vocab_size, seed=5)
    want = sft_loss(model, batch)
    with mock.patch.object(data, "sft_loss", side_effect=AssertionError("fell back")):
        got = task.loss(model, batch)
        assert set(task.evaluate(model)) == {"eval_loss", "accuracy", "answer_logprob"}
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-3)


def test_chat_sft_evaluation_reports_progress_after_each_batch():
    """The federated server's evaluation of 512 prompts outlasts a run's hang limit (180 s) on 2 cores:
    the task calls ``progress`` (the server's heartbeat) after each batch, so a long evaluation is not a hang."""
    from dataclasses import asdict

    from harness.conf.schema import TaskConfig
    from harness.tasks import build_federated

    ctok = Tokenizer(chat_tokenizer())
    cfg = asdict(TaskConfig())
    cfg.update(format="chat", name="federated", eval_prompts=7, eval_batch=3, examples=64, batch_size=4,
               max_new_tokens=3)
    task = build_federated(cfg, ctok, 2, seed=0)
    model = chat_model(ctok.vocab_size, seed=5)
    calls = []
    metrics, frame = task.evaluate_prompts(model, progress=lambda: calls.append(len(calls)))
    assert len(frame) == 7 and len(calls) == 3                     # batches of 3, 3 and 1
    assert metrics == task.evaluate_prompts(model)[0]              # the callback changes nothing measured

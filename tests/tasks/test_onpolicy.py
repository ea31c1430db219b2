"""On-policy tasks: losses and metrics on hand-made cases, reproducibility, rollout bytes."""
from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch

from harness.tasks import Rollouts, build_model, build_task, make_lora
from harness.tasks.data import correct
from harness.tasks.onpolicy import RewardTask
from harness.tasks.rollouts import RolloutsError
from harness.errors import ConfigError


class Fixed(torch.nn.Module):
    """A 'model' whose next-token logits are one learnable vector, whatever the input."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(logits.clone())

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, cache=None, **_):
        return SimpleNamespace(logits=self.logits.expand(*input_ids.shape, -1), cache=None)


class Oracle(torch.nn.Module):
    """Answers every prompt right (or off by ``offset``): exercises generate + evaluate."""

    def __init__(self, tok, lang, offset: int = 0) -> None:
        super().__init__()
        self.tok, self.lang, self.offset = tok, lang, offset

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, cache=None, **_):
        ids = input_ids if cache is None else torch.cat([cache, input_ids], 1)
        logits = torch.zeros(*input_ids.shape, self.tok.vocab_size)
        for i, row in enumerate(self.tok.batch_decode(ids)):
            prompt, done = row.split("=")[0] + "=", row.split("=")[1]
            p = self.lang.parse([prompt])
            p = type(p)(p.a, p.op, p.b + self.offset)
            target = self.tok.encode(self.lang.answer_text(p)[0]) + [self.tok.eos_id]
            logits[i, -1, target[min(len(done), len(target) - 1)]] = 10.0
        return SimpleNamespace(logits=logits, cache=ids)


def hand_rollouts(tok, rewards=None, group=4, t=3):
    prompts = torch.tensor([[tok.bos_id] + tok.encode("07+58=")])
    comp = torch.tensor([tok.encode("56") + [tok.eos_id]] * group)[:, :t]
    mask = torch.ones_like(comp, dtype=torch.bool)
    r = None if rewards is None else torch.tensor(rewards, dtype=torch.float32)
    return Rollouts(prompts, comp, mask, torch.zeros(comp.shape), r, group, tok.pad_id, tok.vocab_size)


def test_reverse_kl_hand_made(task_cfg, tok):
    v = tok.vocab_size
    t_logits = torch.linspace(-2, 2, v)
    task = build_task({**task_cfg, "name": "distill"}, tok, teacher=Fixed(t_logits))
    loss, metrics = task.loss(Fixed(torch.zeros(v)), hand_rollouts(tok))
    expected = -math.log(v) - float(torch.log_softmax(t_logits, 0).mean())   # KL(uniform || softmax(t))
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    assert metrics["reverse_kl"] == pytest.approx(expected, rel=1e-5)


def test_reverse_kl_of_identical_policies_is_zero(model_cfg, task_cfg, tok):
    teacher = build_model(model_cfg, tok.vocab_size)
    policy = make_lora(copy.deepcopy(teacher), 4, None, ["q_proj", "v_proj"])
    task = build_task({**task_cfg, "name": "distill"}, tok, teacher=teacher)
    r = task.rollout(policy, task.prompts("train", 3, 0, 0), 2, torch.Generator().manual_seed(0))
    loss, _ = task.loss(policy, r)
    assert float(loss.detach()) == 0.0
    loss.backward()
    assert all(p.grad is None for p in teacher.parameters())
    assert task.evaluate(policy, 8)["reverse_kl"] == 0.0


def test_distill_needs_a_teacher(task_cfg, tok):
    with pytest.raises(ConfigError, match="teacher"):
        build_task({**task_cfg, "name": "distill"}, tok)
    with pytest.raises(ConfigError, match="task.name"):
        build_task({**task_cfg, "name": "federated"}, tok)
    with pytest.raises(ConfigError, match="task.max_new_tokens"):
        build_task({**task_cfg, "name": "reward", "max_new_tokens": 2}, tok)


def test_grpo_advantages():
    assert torch.equal(RewardTask.advantages(torch.ones(8), 4), torch.zeros(8))
    adv = RewardTask.advantages(torch.tensor([1.0, 0, 0, 0, 0.5, 0.5, 0.5, 0.5]), 4)
    assert float(adv[0]) == pytest.approx(0.75 / math.sqrt(0.1875), rel=1e-3)
    assert float(adv[1]) == pytest.approx(-0.25 / math.sqrt(0.1875), rel=1e-3)
    assert torch.equal(adv[4:], torch.zeros(4))
    assert float(adv[:4].sum()) == pytest.approx(0.0, abs=1e-6)


def test_grpo_loss_ratio_one_and_clipping(task_cfg, tok):
    task = build_task({**task_cfg, "name": "reward"}, tok)
    model = Fixed(torch.linspace(-1, 1, tok.vocab_size))
    r = hand_rollouts(tok, rewards=[1, 0, 0, 0])
    logp = torch.log_softmax(model.logits.detach(), 0)[r.completions]
    r.logprobs = logp.clone()                                     # on-policy: ratio 1
    loss, metrics = task.loss(model, r)
    assert float(loss.detach()) == pytest.approx(0.0, abs=1e-6) and metrics["clip_frac"] == 0.0
    assert metrics["reward"] == 0.25
    r.logprobs = logp - math.log(2.0)                             # ratio 2: A>0 clipped to 1.2 A, A<0 kept 2 A
    adv = RewardTask.advantages(r.rewards, 4)
    expected = -float(torch.where(adv > 0, 1.2 * adv, 2.0 * adv).mean())
    loss, metrics = task.loss(model, r)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-4) and metrics["clip_frac"] == 1.0
    loss.backward()
    assert model.logits.grad is not None


def test_correct_hand_made(task_cfg, tok):
    task = build_task({**task_cfg, "name": "reward"}, tok)          # reverse=True: 07+58=65 is "56"
    prompts = torch.tensor([[tok.bos_id] + tok.encode("07+58=")] * 4)
    rows = [tok.encode("56") + [tok.eos_id], tok.encode("65") + [tok.eos_id], tok.encode("56") + [tok.pad_id],
            tok.encode("566")]
    comp = torch.tensor(rows)
    mask = comp != tok.pad_id
    assert correct(tok, task.lang, prompts, comp, mask).tolist() == [True, False, False, False]
    assert task.rewards(prompts, comp, mask).tolist() == [1.0, 0.0, 0.0, 0.0]
    shaped = build_task({**task_cfg, "name": "reward", "reward_shaping": "digits"}, tok)
    assert shaped.rewards(prompts, comp, mask).tolist() == [1.0, 0.0, 0.5, pytest.approx(1 / 3)]


def test_evaluate_with_an_oracle(task_cfg, tok):
    task = build_task({**task_cfg, "name": "reward"}, tok)
    assert task.evaluate(Oracle(tok, task.lang), 20) == {"accuracy": 1.0, "reward": 1.0}
    assert task.evaluate(Oracle(tok, task.lang, offset=1), 20)["accuracy"] == 0.0


def test_prompts_and_rollouts_are_reproducible(model_cfg, task_cfg, tok):
    task = build_task({**task_cfg, "name": "reward"}, tok)
    p = task.prompts("train", 6, seed=3, step=7)
    assert torch.equal(p, task.prompts("train", 6, seed=3, step=7))
    assert not torch.equal(p, task.prompts("train", 6, seed=3, step=8))
    assert not bool(task.lang.is_eval(task.lang.parse(tok.batch_decode(p))).any())
    policy = make_lora(build_model(model_cfg, tok.vocab_size), 4, None, ["q_proj"])
    a = task.rollout(policy, p, 3, torch.Generator().manual_seed(1))
    b = task.rollout(policy, p, 3, torch.Generator().manual_seed(1))
    assert a.to_bytes("fp32") == b.to_bytes("fp32") and len(a) == 18
    la, _ = task.loss(policy, a)
    lb, _ = task.loss(policy, b)
    assert torch.equal(la, lb)
    assert task.evaluate(policy, 8) == task.evaluate(policy, 8)


def test_behaviour_logprobs_match_a_full_forward(model_cfg, task_cfg, tok):
    task = build_task({**task_cfg, "name": "reward", "temperature": 0.7}, tok)
    policy = make_lora(build_model(model_cfg, tok.vocab_size), 4, None, ["q_proj"])
    r = task.rollout(policy, task.prompts("train", 4, 0, 0), 2, torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = task.completion_logits(policy, r) / 0.7
    lp = torch.log_softmax(logits, -1).gather(2, r.completions[..., None]).squeeze(2) * r.completion_mask
    assert torch.allclose(lp, r.logprobs, atol=1e-4)


def test_rollout_bytes_round_trip(model_cfg, task_cfg, tok):
    task = build_task({**task_cfg, "name": "reward"}, tok)
    policy = build_model(model_cfg, tok.vocab_size)
    r = task.rollout(policy, task.prompts("train", 5, 0, 0), 4, torch.Generator().manual_seed(0))
    for dtype, tol in (("fp32", 0.0), ("fp16", 1e-2)):
        data = r.to_bytes(dtype)
        assert len(data) == r.nbytes_as(dtype)
        back = Rollouts.from_bytes(data)
        assert torch.equal(back.sequences, r.sequences) and torch.equal(back.completion_mask, r.completion_mask)
        assert torch.equal(back.rewards, r.rewards) and back.group == 4 and back.prompt_len == r.prompt_len
        assert torch.allclose(back.logprobs, r.logprobs, atol=tol, rtol=tol)
    assert r.nbytes == len(r.to_bytes())
    # one byte per token id, fp16 logprobs, each prompt once: a third of the naive int64/fp32 tensors
    naive = r.sequences.numel() * 8 + r.logprobs.numel() * 4 + len(r) * 4
    assert r.nbytes < naive / 3
    with pytest.raises(RolloutsError):
        Rollouts.from_bytes(r.to_bytes()[:-3])
    with pytest.raises(RolloutsError):
        Rollouts.from_bytes(b"junk" + r.to_bytes()[4:])


def test_rollouts_cat(tok):
    a, b = hand_rollouts(tok, [1, 0, 0, 0], t=3), hand_rollouts(tok, [0, 0, 0, 1], t=2)
    c = Rollouts.cat([a, b])
    assert len(c) == 8 and c.completions.shape == (8, 3) and c.prompts.shape[0] == 2
    assert c.completion_mask[4:, 2].sum() == 0 and c.rewards.tolist() == [1, 0, 0, 0, 0, 0, 0, 1]
    assert torch.equal(Rollouts.from_bytes(c.to_bytes("fp32")).completions, c.completions)

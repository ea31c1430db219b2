"""The chat task on a tiny self-built chat model (tests/tasks/chat_model.py): prompts through the
chat template, the answer rule, the splits, the three modes' losses, the SFT data."""
from __future__ import annotations

import copy
from dataclasses import asdict

import pytest
import torch

from chat_model import chat_model, chat_tokenizer
from harness.conf.schema import TaskConfig
from harness.errors import ConfigError
from harness.tasks import build_federated, build_task, make_lora
from harness.tasks.arith import Problems
from harness.tasks.chat import (ChatDistillTask, ChatRewardTask, ChatSFTTask, ChatSpec, ChatTask, held_out,
                                last_integer, number_words)
from harness.tasks.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def ctok() -> Tokenizer:
    return Tokenizer(chat_tokenizer())


def chat_cfg(**kw) -> dict:
    cfg = asdict(TaskConfig())
    cfg.update(format="chat", name="reward", prompt_batch=3, samples_per_prompt=4, max_new_tokens=6,
               eval_prompts=8, examples=64, batch_size=8)
    chat = kw.pop("chat", {})
    cfg["chat"].update(chat)
    cfg.update(kw)
    return cfg


def encode_completion(tok: Tokenizer, text: str, eos: bool, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = tok.encode(text) + ([tok.eos_id] if eos else [])
    row = ids + [tok.pad_id] * (width - len(ids))
    return torch.tensor(row), torch.arange(width) < len(ids)


def test_number_words_and_last_integer():
    assert [number_words(n) for n in (0, 13, 20, 42, 105, 990)] == [
        "zero", "thirteen", "twenty", "forty-two", "one hundred five", "nine hundred ninety"]
    assert last_integer("17 + 5 = 22.") == 22
    assert last_integer("3 - 4 = -1") == -1
    assert last_integer("no number") is None


@pytest.mark.parametrize("words", [False, True])
def test_prompts_use_the_template_and_parse_back(ctok, words):
    task = build_task(chat_cfg(chat={"words": words}), ctok)
    assert isinstance(task, ChatRewardTask)
    prompts = task.prompts("train", 5, seed=0, step=0)
    text = ctok.hf.decode(prompts[0][prompts[0] != ctok.pad_id].tolist())
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    p = task.chat.problems(prompts)
    for a, op, b, row in zip(p.a.tolist(), p.op.tolist(), p.b.tolist(), prompts):
        q = ctok.decode(row[row != ctok.pad_id])
        sym = "+-*"[op]
        written = (f"{number_words(a)} {['plus', 'minus', 'times'][op]} {number_words(b)}" if words
                   else f"{a} {sym} {b}")
        assert f"What is {written}? Answer with the number only." in q
        assert 0 <= a <= 20 and 0 <= b <= 20 and sym in "+-"
    assert torch.equal(prompts, task.prompts("train", 5, seed=0, step=0))
    assert not torch.equal(prompts, task.prompts("train", 5, seed=0, step=1))


def test_splits_are_disjoint_fixed_and_cover_everything():
    spec = ChatSpec.from_cfg(chat_cfg())
    sets = {s: set(zip(*(t.tolist() for t in (p.a, p.op, p.b)))) for s in ("train", "validation", "test")
            for p in [spec.all_problems(s)]}
    assert sum(len(v) for v in sets.values()) == 21 * 21 * 2
    assert not (sets["train"] & sets["test"]) and not (sets["train"] & sets["validation"])
    assert not (sets["validation"] & sets["test"])
    assert 0.05 < len(sets["test"]) / (21 * 21 * 2) < 0.15
    ev = held_out(spec, "test", 20)
    assert set(zip(ev.a.tolist(), ev.op.tolist(), ev.b.tolist())) <= sets["test"]
    assert torch.equal(ev.a, held_out(spec, "test", 20).a)
    with pytest.raises(ConfigError, match="task.eval_prompts"):
        held_out(spec, "test", 10_000)


def test_training_prompts_never_hold_an_evaluation_problem(ctok):
    task = build_task(chat_cfg(), ctok)
    seen = set()
    for step in range(20):
        p = task.chat.problems(task.prompts("train", 16, 3, step))
        seen |= set(zip(p.a.tolist(), p.op.tolist(), p.b.tolist()))
    held = set()
    for split in ("test", "validation"):
        q = task.spec.all_problems(split)
        held |= set(zip(q.a.tolist(), q.op.tolist(), q.b.tolist()))
    assert seen and not (seen & held)


def test_eval_split_validation_scores_other_problems(ctok):
    test = build_task(chat_cfg(), ctok).chat.problems(build_task(chat_cfg(), ctok).eval_prompts(8))
    val_task = build_task(chat_cfg(eval_split="validation"), ctok)
    val = val_task.chat.problems(val_task.eval_prompts(8))
    t = set(zip(test.a.tolist(), test.op.tolist(), test.b.tolist()))
    v = set(zip(val.a.tolist(), val.op.tolist(), val.b.tolist()))
    assert len(t) == len(v) == 8 and not (t & v)


def test_answer_rule(ctok):
    task = build_task(chat_cfg(max_new_tokens=12), ctok)
    prob = Problems(torch.tensor([7, 3]), torch.tensor([0, 1]), torch.tensor([5, 4]))    # 7+5=12, 3-4=-1
    prompts = task.chat.encode(prob)
    cases = [("12", True, 0, True), ("7 + 5 = 12", True, 0, True), ("12", False, 0, False),
             ("13", True, 0, False), ("7 + 5 =", True, 0, False), ("3 - 4 = -1", True, 1, True),
             ("1", True, 1, False)]
    rows = [encode_completion(ctok, text, eos, 12) for text, eos, _, _ in cases]
    comp = torch.stack([r[0] for r in rows])
    mask = torch.stack([r[1] for r in rows])
    which = torch.tensor([c[2] for c in cases])
    got = task.rewards(prompts[which], comp, mask)
    assert got.tolist() == [float(c[3]) for c in cases]


def test_reward_loss_and_rollouts_round_trip(ctok):
    task = build_task(chat_cfg(), ctok)
    policy = make_lora(chat_model(ctok.vocab_size), 4, None, ["q_proj", "v_proj"])
    gen = torch.Generator().manual_seed(0)
    r = task.rollout(policy, task.prompts("train", 3, 0, 0), 4, gen)
    assert len(r) == 12 and r.rewards is not None and r.rewards.shape == (12,)
    from harness.tasks.rollouts import Rollouts
    back = Rollouts.from_bytes(r.to_bytes("fp32"))
    assert torch.equal(back.completions, r.completions) and torch.equal(back.rewards, r.rewards)
    # a reward that varies inside a group gives a gradient; the advantages are group-normalised
    r.rewards = torch.tensor([1.0, 0, 0, 0] * 3)
    loss, metrics = task.loss(policy, r)
    loss.backward()
    grads = [p.grad for p in policy.parameters() if p.requires_grad]
    assert all(g is not None for g in grads) and any(float(g.abs().sum()) > 0 for g in grads)
    adv = task.advantages(r.rewards, 4).view(3, 4)
    assert torch.allclose(adv.mean(1), torch.zeros(3), atol=1e-6)
    assert metrics["reward"] == pytest.approx(0.25)


def test_distill_kl_is_zero_to_itself_and_positive_to_another(ctok):
    base = chat_model(ctok.vocab_size, seed=0)
    teacher_same = copy.deepcopy(base)
    policy = make_lora(base, 4, None, ["q_proj", "v_proj"])         # B = 0: the policy is the base
    same = build_task(chat_cfg(name="distill"), ctok, teacher=teacher_same)
    other = build_task(chat_cfg(name="distill"), ctok, teacher=chat_model(ctok.vocab_size, seed=1))
    assert isinstance(same, ChatDistillTask)
    gen = torch.Generator().manual_seed(0)
    r = same.rollout(policy, same.prompts("train", 3, 0, 0), 2, gen)
    kl_same, _ = same.loss(policy, r)
    kl_other, _ = other.loss(policy, r)
    assert abs(float(kl_same.detach())) < 1e-5 and float(kl_other.detach()) > 1e-3
    out = other.evaluate(policy, 4)
    assert set(out) == {"accuracy", "reverse_kl", "answer_logprob"} and out["reverse_kl"] > 0
    _, frame = same.evaluate_prompts(policy, 4)             # per prompt: 0 to itself along its greedy completion
    assert len(frame) == 4 and (frame["reverse_kl"].abs() < 1e-5).all()
    with pytest.raises(ConfigError, match="teacher"):
        build_task(chat_cfg(name="distill"), ctok)


def test_distill_evaluation_scores_while_decoding_as_the_plain_pass_does(ctok):
    """The held-out reverse KL scored during decoding (chat_eval.reverse_kl_scorer) against score_more's
    full teacher-forced pass of both models: every other column identical, reverse_kl to float rounding."""
    policy = make_lora(chat_model(ctok.vocab_size, seed=0), 4, None, ["q_proj", "v_proj"])
    task = build_task(chat_cfg(name="distill", eval_batch=3), ctok, teacher=chat_model(ctok.vocab_size, seed=1))
    assert task.batch_score([[1, 2, 3], [1, 2, 4]]) is not None      # the fast path is taken
    _, fast = task.evaluate_prompts(policy, 7)
    task.batch_score = lambda rows: None                     # the plain path
    _, plain = task.evaluate_prompts(policy, 7)
    assert list(fast.columns) == list(plain.columns)
    for column in fast.columns.drop("reverse_kl"):
        assert fast[column].equals(plain[column]), column
    assert (plain["reverse_kl"] > 1e-3).all()
    assert fast["reverse_kl"].to_numpy() == pytest.approx(plain["reverse_kl"].to_numpy(), rel=1e-4, abs=1e-6)


def test_sampler_task_and_synthetic_dispatch(ctok, tok):
    sampler = build_task(chat_cfg(name="distill"), ctok, sampler=True)
    assert type(sampler) is ChatTask
    synthetic = build_task(dict(asdict(TaskConfig()), name="reward"), tok)
    assert type(synthetic).__name__ == "RewardTask"
    with pytest.raises(ConfigError, match="task.format"):
        build_task(chat_cfg(format="poetry"), ctok)


def test_sft_labels_are_the_answer_and_eos(ctok):
    task = build_federated(chat_cfg(name="federated", eval_prompts=4), ctok, 4, seed=0)
    assert isinstance(task, ChatSFTTask)
    batch = next(task.batches(0, 4))
    for row, lab, attn in zip(batch["input_ids"], batch["labels"], batch["attention_mask"]):
        prompt = row[(lab == -100) & (attn == 1)]
        assert ctok.hf.decode(prompt.tolist()).endswith("<|im_start|>assistant\n")
        q = task.chat.problems(prompt[None, :])
        a, op, b = int(q.a[0]), int(q.op[0]), int(q.b[0])
        want = a + b if op == 0 else a - b
        answer = [t for t in lab.tolist() if t != -100]
        assert answer[-1] == ctok.eos_id and ctok.decode(answer[:-1]) == str(want)
    loss = task.loss(make_lora(chat_model(ctok.vocab_size), 4, None, ["q_proj"]), batch)
    assert torch.isfinite(loss)


def test_sft_equation_target(ctok):
    task = build_federated(chat_cfg(name="federated", chat={"sft_target": "equation"}), ctok, 2, seed=0)
    batch = next(task.batches(0, 4))
    for row, lab, attn in zip(batch["input_ids"], batch["labels"], batch["attention_mask"]):
        q = task.chat.problems(row[(lab == -100) & (attn == 1)][None, :])
        a, op, b = int(q.a[0]), int(q.op[0]), int(q.b[0])
        answer = [t for t in lab.tolist() if t != -100]
        assert ctok.decode(answer[:-1]) == f"{a} {'+-'[op]} {b} = {a + b if op == 0 else a - b}"
    with pytest.raises(ConfigError, match="task.chat.sft_target"):
        build_federated(chat_cfg(name="federated", chat={"sft_target": "essay"}), ctok, 2, seed=0)


def test_sft_clients_are_disjoint_and_skip_held_out(ctok):
    task = build_federated(chat_cfg(name="federated", alpha=0.3), ctok, 4, seed=1)
    held = set()
    for split in ("test", "validation"):
        q = task.spec.all_problems(split)
        held |= set(zip(q.a.tolist(), q.op.tolist(), q.b.tolist()))
    seen: set = set()
    for k in range(4):
        d = task.client_data(k).problems
        mine = set(zip(d.a.tolist(), d.op.tolist(), d.b.tolist()))
        assert len(mine) == len(d) and not (mine & seen) and not (mine & held)
        seen |= mine
    assert len(seen) == 64
    out = task.evaluate(make_lora(chat_model(ctok.vocab_size), 4, None, ["q_proj"]))
    assert set(out) == {"eval_loss", "accuracy", "answer_logprob"} and 0 <= out["accuracy"] <= 1 and out["answer_logprob"] < 0


def test_config_errors_name_the_key(ctok):
    with pytest.raises(ConfigError, match="task.chat.low"):
        build_task(chat_cfg(chat={"low": 5, "high": 2}), ctok)
    with pytest.raises(ConfigError, match="task.ops"):
        build_task(chat_cfg(ops=["/"]), ctok)
    with pytest.raises(ConfigError, match="task.max_new_tokens"):
        build_task(chat_cfg(max_new_tokens=2), ctok)
    with pytest.raises(ConfigError, match="chat template"):
        build_task(chat_cfg(), Tokenizer(chat_tokenizer(template=None)))
    with pytest.raises(ConfigError, match="task.examples"):
        build_federated(chat_cfg(name="federated", examples=100_000), ctok, 2, 0)


def test_the_plan_checks_the_chat_task_before_launch(tmp_path):
    from chat_model import save_chat_model
    from harness.plan import build_plan
    from harness.compose import compose_config

    folder = save_chat_model(tmp_path / "chat")
    base = ["scenario=smoke_hilo", "model=hf", f"model.path={folder}", "model.targets=[q_proj,v_proj]", "model.rank=4",
            "task=chat_reward", "net.backend=model", "compressor.budget=0.9"]   # 1.6% of this 512-element
    assert build_plan(compose_config(base)).onpolicy is not None      # adapter would not hold Spar's header
    with pytest.raises(ConfigError, match="task.chat.low"):
        build_plan(compose_config(base + ["task.chat.low=60"]))     # above task.chat.high (50)
    with pytest.raises(ConfigError, match="task.format"):
        build_plan(compose_config(base + ["task.format=poetry"]))

"""On-policy tasks: ``distill`` (reverse KL to a frozen teacher) and ``reward`` (GRPO-style).

Both share prompts, sampling and evaluation; they differ in the loss and one metric.

distill: the student samples completions; the loss is the per-token, full-vocabulary
    reverse KL  KL(p_s || p_t) = sum_v p_s(v) (log p_s(v) - log p_t(v))  at each completion
    position (student and teacher at temperature 1, teacher frozen), averaged over all
    completion tokens of the batch. Its gradient is exact at the sampled prefixes.
reward: a verifiable reward per completion (1 for the exact answer followed by eos, else
    0; ``task.reward_shaping="digits"`` adds partial credit for the share of correct answer
    characters, at most 0.5). Advantages are group-normalised per prompt,
    A = (r - mean_group) / (std_group + 1e-4) (population std, so a group of equal rewards
    has A = 0); the loss is the clipped surrogate -min(rho A, clip(rho, 1-eps, 1+eps) A) with
    rho = exp(log p - behaviour log p) per token at the sampling temperature, averaged per
    sequence, then over sequences (GRPO). ``task.kl_coef`` > 0 adds a k3 KL penalty to the
    policy with adapters disabled (peft); off by default.

Determinism: prompts depend only on (seed, step, split); sampling only on the given
generator; every op runs on the CPU without nondeterministic kernels.

Evaluation split (``task.eval_split``): ``test`` (default) scores the held-out problems (the
``eval`` side of Arithmetic's fixed hash split, prompts seeded by EVAL_SEED) that every reported
result uses; ``validation`` (learning-rate tuning, harness.tune) scores as many problems of the
TRAINING side instead, drawn with their own seed (derive("prompts", "validation", EVAL_SEED)):
disjoint from the held-out problems by construction (is_eval is False for every one), so tuning
never sees the problems that report a result. (They may coincide with some training prompts,
which are drawn from the whole training side every update: validation measures the training
distribution, as a validation split does.)
"""
from __future__ import annotations

from typing import Any, Mapping

import pandas as pd
import torch

from harness.tasks.arith import OPS as ARITH_OPS, Arithmetic
from harness.tasks.chat_eval import _answer_logprob_plain
from harness.tasks.data import correct, encode_prompts, problems_of, prompt_attention
from harness.tasks.plans import task_plan
from harness.tasks.rollouts import Rollouts, device_of, forward_logits, generate
from harness.tasks.tokenizer import Tokenizer
from harness.errors import ConfigError
from harness.seeds import derive

EVAL_SEED = 1234          # the held-out prompts every method is evaluated on
NAMES = ("distill", "reward")
SHAPINGS = ("none", "digits")
EVAL_SPLITS = ("test", "validation")    # task.eval_split: held-out test problems, or training-side validation ones


class OnPolicyTask:
    """Shared prompts, rollouts and evaluation of the on-policy tasks (see module doc)."""
    name = "onpolicy"

    def __init__(self, task_cfg: Any, tokenizer: Tokenizer) -> None:
        cfg = task_plan(task_cfg)
        self.cfg = cfg
        self.tok = tokenizer
        try:
            self.lang = Arithmetic(cfg.digits, list(cfg.ops), reverse=bool(cfg.reverse))
        except ValueError as err:
            raise ConfigError(str(err)) from None
        self.temperature = float(cfg.temperature)
        if self.temperature <= 0:
            raise ConfigError(f"task.temperature: {self.temperature} must be > 0 (sampling temperature)")
        self.max_new_tokens = int(cfg.max_new_tokens)
        need = self.lang.max_answer_len + 1
        if self.max_new_tokens < need:
            raise ConfigError(f"task.max_new_tokens: {self.max_new_tokens} cannot hold the longest answer "
                              f"({self.lang.max_answer_len} characters) plus eos; use >= {need}")
        self.samples = int(cfg.samples_per_prompt)
        self.eval_split = str(cfg.eval_split)
        if self.eval_split not in EVAL_SPLITS:
            raise ConfigError(f"task.eval_split: {self.eval_split!r} is not allowed; choose one of "
                              f"{', '.join(EVAL_SPLITS)}")

    # -- prompts and rollouts ---------------------------------------------------------------
    def prompts(self, split: str, n: int, seed: int, step: int) -> torch.Tensor:
        """[n, P] prompt ids of ``split`` ("train" | "eval"), a function of (seed, step) only."""
        gen = torch.Generator().manual_seed(derive("prompts", split, seed, step))
        return encode_prompts(self.tok, self.lang, self.lang.sample(split, n, gen))

    def eval_prompts(self, n: int) -> torch.Tensor:
        """[n, P] the prompts evaluate() scores: the first ``n`` held-out problems (eval_split=test)
        or ``n`` training-side validation problems (eval_split=validation); fixed, seed-free."""
        if self.eval_split == "validation":
            gen = torch.Generator().manual_seed(derive("prompts", "validation", EVAL_SEED))
            return encode_prompts(self.tok, self.lang, self.lang.sample("train", n, gen))
        return self.prompts("eval", n, EVAL_SEED, 0)

    def rollout(self, policy, prompts: torch.Tensor, samples: int | None = None,
                generator: torch.Generator | None = None) -> Rollouts:
        """``samples`` completions per prompt at the task temperature (``generator`` None:
        greedy), with behaviour logprobs and, for ``reward``, rewards."""
        samples = samples or self.samples
        reps = prompts.repeat_interleave(samples, 0)
        comp, mask, logp = generate(policy, reps, prompt_attention(self.tok, reps), self.max_new_tokens,
                                    eos_id=self.tok.eos_id, pad_id=self.tok.pad_id,
                                    temperature=self.temperature, generator=generator)
        rewards = self.rewards(reps, comp, mask) if self.name == "reward" else None
        return Rollouts(prompts, comp, mask, logp, rewards, samples, self.tok.pad_id, self.tok.vocab_size)

    def rewards(self, prompts: torch.Tensor, completions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[N] float32 reward per completion (``prompts`` one row per completion)."""
        exact = correct(self.tok, self.lang, prompts, completions, mask).float()
        if self.cfg.reward_shaping != "digits":
            return exact
        want = self.lang.answer_text(problems_of(self.tok, self.lang, prompts))
        got = [t.strip() for t in self.tok.batch_decode(torch.where(mask, completions, self.tok.pad_id))]
        part = torch.tensor([sum(x == y for x, y in zip(g, w)) / max(len(w), len(g), 1) for g, w in zip(got, want)])
        return torch.maximum(exact, 0.5 * part)

    def completion_logits(self, model, r: Rollouts) -> torch.Tensor:
        """[N, T, V] float32 logits predicting each completion token."""
        logits = forward_logits(model, r.sequences, r.attention_mask)
        p, t = r.prompt_len, r.completions.shape[1]
        return logits[:, p - 1:p - 1 + t]

    def loss(self, policy, rollouts: Rollouts) -> tuple[torch.Tensor, dict[str, float]]:
        raise NotImplementedError

    # -- evaluation ----------------------------------------------------------------------------
    @torch.no_grad()
    def greedy(self, policy, n: int, chunk: int = 256) -> tuple[torch.Tensor, Rollouts]:
        """Greedy completions of the ``n`` evaluation prompts (eval_prompts): (correct [n] bool, rollouts)."""
        prompts = self.eval_prompts(n)
        parts = [self.rollout(policy, prompts[i:i + chunk], 1, None) for i in range(0, n, chunk)]
        r = Rollouts.cat(parts)
        return correct(self.tok, self.lang, r.prompts, r.completions, r.completion_mask), r

    def evaluate(self, policy, n: int | None = None) -> dict[str, float]:
        """``accuracy``: greedy exact match on ``n`` (default task.eval_prompts) held-out prompts."""
        return self.evaluate_prompts(policy, n)[0]

    @torch.no_grad()
    def evaluate_prompts(self, policy, n: int | None = None, progress=None) -> tuple[dict[str, float], pd.DataFrame]:
        """(the held-out metrics, one row per prompt): the metrics as ``evaluate`` always gave them,
        and per prompt its problem, ``correct`` (greedy), ``answer_logprob`` (the continuous score
        beside it: the teacher-forced log-probability in nats of the answer and eos after the prompt)
        and the mode's own columns (``per_prompt``)."""
        del progress                 # the toy tasks' evaluation is one short call: no heartbeat needed
        n = n or int(self.cfg.eval_prompts)
        ok, r = self.greedy(policy, n)
        metrics = {"accuracy": float(ok.float().mean())}
        probs = problems_of(self.tok, self.lang, r.prompts)
        answers = [self.tok.encode(t) + [self.tok.eos_id] for t in self.lang.answer_text(probs)]
        score = _answer_logprob_plain(policy, r.prompts, prompt_attention(self.tok, r.prompts), answers, self.tok.pad_id)
        frame = pd.DataFrame({"prompt": range(n), "a": probs.a.tolist(), "op": [ARITH_OPS[o] for o in probs.op.tolist()],
                              "b": probs.b.tolist(), "correct": ok.tolist(),
                              "ended": ((r.completions == self.tok.eos_id) & r.completion_mask).any(1).tolist(),
                              "answer_logprob": score.numpy()})
        more, frame = self.per_prompt(policy, n, r, frame)
        metrics.update(more)
        return metrics, frame

    def per_prompt(self, policy, n: int, greedy: Rollouts, frame: pd.DataFrame) -> tuple[dict[str, float], pd.DataFrame]:
        """The mode's own metrics and per-prompt columns, from the greedy rollouts."""
        return {}, frame


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def frozen_teacher(teacher):
    """The teacher in eval mode with no gradients; a ConfigError when a distill task has none."""
    if teacher is None:
        raise ConfigError("task.name: 'distill' needs a teacher model (build_task(..., teacher=load_base('teacher', ...)))")
    teacher = teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


class DistillTask(OnPolicyTask):
    """On-policy distillation: per-token reverse KL to a frozen teacher (module doc)."""
    name = "distill"

    def __init__(self, task_cfg: Any, tokenizer: Tokenizer, teacher) -> None:
        super().__init__(task_cfg, tokenizer)
        self.teacher = frozen_teacher(teacher)

    def token_kl(self, policy, r: Rollouts) -> torch.Tensor:
        """[N, T] reverse KL(student || teacher) in nats at each completion position."""
        logp_s = torch.log_softmax(self.completion_logits(policy, r), -1)
        with torch.no_grad():
            logp_t = torch.log_softmax(self.completion_logits(self.teacher, r), -1).to(logp_s.device)
        return (logp_s.exp() * (logp_s - logp_t)).sum(-1)

    def loss(self, policy, rollouts: Rollouts) -> tuple[torch.Tensor, dict[str, float]]:
        """Mean reverse KL over completion tokens; metrics: loss, reverse_kl, tokens."""
        kl = self.token_kl(policy, rollouts)
        mask = rollouts.completion_mask.to(kl.device).float()
        loss = _masked_mean(kl, mask)
        value = float(loss.detach())
        return loss, {"loss": value, "reverse_kl": value, "tokens": float(mask.sum())}

    @torch.no_grad()
    def per_prompt(self, policy, n: int, greedy: Rollouts, frame: pd.DataFrame) -> tuple[dict[str, float], pd.DataFrame]:
        """reverse_kl: the mean per-token reverse KL on the student's own samples (task temperature,
        fixed seed) of the same held-out prompts; per prompt, the mean over its sample's tokens."""
        prompts = self.eval_prompts(n)
        gen = torch.Generator(device=device_of(policy)).manual_seed(EVAL_SEED)
        r = self.rollout(policy, prompts, 1, gen)
        token_kl = self.token_kl(policy, r)
        mask = r.completion_mask.to(token_kl.device).float()
        kl = _masked_mean(token_kl, mask)
        per = ((token_kl * mask).sum(1) / mask.sum(1).clamp(min=1)).double().cpu().numpy()
        return {"reverse_kl": float(kl)}, frame.assign(reverse_kl=per)


class RewardTask(OnPolicyTask):
    """Group-normalised clipped policy gradient on a verifiable reward (module doc)."""
    name = "reward"

    def __init__(self, task_cfg: Any, tokenizer: Tokenizer) -> None:
        super().__init__(task_cfg, tokenizer)
        self.clip = float(self.cfg.clip_eps)
        self.kl_coef = float(self.cfg.kl_coef)
        if self.cfg.reward_shaping not in SHAPINGS:
            raise ConfigError(f"task.reward_shaping: {self.cfg.reward_shaping!r} is not allowed; "
                              f"choose one of {', '.join(SHAPINGS)}")

    @staticmethod
    def advantages(rewards: torch.Tensor, group: int, eps: float = 1e-4) -> torch.Tensor:
        """(r - group mean) / (group population std + eps), per row."""
        r = rewards.view(-1, group)
        return ((r - r.mean(1, keepdim=True)) / (r.std(1, unbiased=False, keepdim=True) + eps)).view(-1)

    def loss(self, policy, rollouts: Rollouts) -> tuple[torch.Tensor, dict[str, float]]:
        """GRPO surrogate; metrics: loss, reward, clip_frac, kl (when kl_coef > 0)."""
        if rollouts.rewards is None:
            raise ValueError("reward loss: these rollouts carry no rewards")
        logits = self.completion_logits(policy, rollouts) / self.temperature
        mask = rollouts.completion_mask.to(logits.device).float()
        tokens = rollouts.completions.to(logits.device)
        logp = torch.log_softmax(logits, -1).gather(2, tokens[..., None]).squeeze(2)
        ratio = torch.exp(logp - rollouts.logprobs.to(logits.device))
        adv = self.advantages(rollouts.rewards, rollouts.group)[:, None].to(logp.device)
        surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - self.clip, 1 + self.clip) * adv)
        per_token = -surrogate
        metrics: dict[str, float] = {}
        if self.kl_coef > 0:
            with torch.no_grad(), policy.disable_adapter():
                ref = torch.log_softmax(self.completion_logits(policy, rollouts) / self.temperature, -1)
            ref = ref.gather(2, tokens[..., None]).squeeze(2)
            k3 = torch.exp(ref - logp) - (ref - logp) - 1
            per_token = per_token + self.kl_coef * k3
            metrics["kl"] = float(_masked_mean(k3.detach(), mask))
        per_seq = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
        loss = per_seq.mean()
        clipped = ((ratio - 1).abs() > self.clip).float()
        metrics.update(loss=float(loss.detach()), reward=float(rollouts.rewards.float().mean()),
                       clip_frac=float(_masked_mean(clipped, mask)))
        return loss, metrics

    @torch.no_grad()
    def per_prompt(self, policy, n: int, greedy: Rollouts, frame: pd.DataFrame) -> tuple[dict[str, float], pd.DataFrame]:
        """reward: the reward of each greedy completion, and its mean."""
        reps = greedy.prompts.repeat_interleave(greedy.group, 0)
        reward = self.rewards(reps, greedy.completions, greedy.completion_mask)
        return {"reward": float(reward.mean())}, frame.assign(reward=reward.double().numpy())


def build_task(task_cfg: Any, tokenizer: Tokenizer, teacher=None) -> OnPolicyTask:
    """The on-policy task named ``task.name`` ("distill" needs ``teacher``)."""
    task_cfg = task_plan(task_cfg)
    name = task_cfg.name
    if name == "distill":
        return DistillTask(task_cfg, tokenizer, teacher)
    if name == "reward":
        return RewardTask(task_cfg, tokenizer)
    raise ConfigError(f"task.name: {name!r} is not an on-policy task; choose one of {', '.join(NAMES)}"
                      " (federated data: build_federated)")

"""The chat task: verifiable arithmetic questions through a pretrained model's own chat template.

A problem is ``(a, op, b)`` with operands ``task.chat.low <= a, b <= task.chat.high`` and
``op`` in ``task.ops`` (``+ - *``). Its prompt is one user message rendered by the
tokenizer's chat template with the generation prompt (the assistant turn opened)::

    What is 17 + 5? Answer with the number only.          (task.chat.words=false)
    What is seventeen plus five? Answer with the number only.   (words=true)

``task.chat.instruction`` is the sentence after the question; ``task.chat.system`` an optional
system message (None: the template's own default). The answer is parsed from the completion:
the LAST integer in its text (``-?\\d+``: "17 + 5 = 22" reads 22), and a completion counts as
correct only when it also ended (emitted eos) within ``task.max_new_tokens``, so a cut-off
restatement of the question ("17 + 5 =") never scores. Answers are always judged in digits.

Splits: a fixed integer hash of ``(a, op, b)``, independent of any seed, puts a problem in the
held-out ``test`` split (the lowest ``task.chat.test_percent`` of the hash), the ``validation``
split (the next ``task.chat.validation_percent``, for tuning) or ``train``. Training prompts are drawn from ``train``
only, uniformly with replacement, as a function of (seed, step); evaluation takes the first
``n`` problems of a fixed permutation (``EVAL_SEED``) of the split that ``task.eval_split``
names (``test`` by default, ``validation`` when tuning), the same for every seed and method.

Modes (``task.name``), the same losses as the synthetic tasks (harness.tasks.onpolicy):
- ``reward``: reward 1 for a correct completion, else 0; GRPO's group-normalised advantages
  and clipped surrogate (RewardTask.loss).
- ``distill``: per-token full-vocabulary reverse KL to a frozen teacher (DistillTask.loss).
  The pair with headroom (harness.tasks.chat_student): the teacher is the fp32 model; the
  student is the same model with every decoder linear weight rounded to ``task.chat.student_bits``
  bits per group of ``task.chat.student_group`` weights (round-to-nearest, min-max per group).
- ``federated``: SFT data for the federated side (ChatSFTTask): clients fine-tune on the
  answer tokens after the chat prompt (``task.chat.sft_target``: ``answer``, the digits and
  eos; or ``equation``, "17 + 5 = 22" and eos, the form the model replies in), split non-IID over the
  categories ``(op, hard)`` (``hard``: a carry or borrow) like the synthetic federated task.

Metrics: ``accuracy`` (greedy, the rule above) on held-out problems, ``reward`` or
``reverse_kl``, ``answer_logprob`` (the continuous score beside accuracy: the teacher-forced
log-probability in nats of the answer's digits and eos after the prompt), ``eval_loss`` (SFT).
Every on-policy evaluation also returns one row per prompt (``evaluate_prompts``: the problem,
``correct``, ``ended``, the parsed ``answer``, ``reward``, ``answer_logprob`` and for distillation
``reverse_kl``), which the learner writes to the run's per-prompt records (harness/record.py).
The chat distillation's evaluation ``reverse_kl`` is the mean per-token reverse KL(student ||
teacher) along the student's greedy completion of each prompt (deterministic; the loss samples).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd
import torch

from harness.errors import ConfigError
from harness.seeds import derive
from harness.tasks.arith import Problems
from harness.tasks.chat_eval import BatchScore, greedy_scored, reverse_kl_scorer
from harness.tasks.data import IGNORE, sft_loss_shared_prefix
from harness.tasks.federated import ClientData, client_batches
from harness.tasks.plans import task_plan
from harness.tasks.onpolicy import EVAL_SEED, DistillTask, OnPolicyTask, RewardTask, frozen_teacher
from harness.tasks.rollouts import Rollouts, completion_logits_shared, prompt_mask, sample
from harness.tasks.tokenizer import Tokenizer

OPS = ("+", "-", "*")
OP_WORDS = {"+": "plus", "-": "minus", "*": "times"}
SPLITS = ("train", "validation", "test")
SFT_TARGETS = ("answer", "equation")     # what the SFT labels write: "22" | "17 + 5 = 22" (digits, then eos)
MAX_OPERANDS = 1000          # high - low + 1 at most (the splits are enumerated)
_INT = re.compile(r"-?\d+")
_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_words(n: int) -> str:
    """English words of 0 <= n <= 999 ("twenty-one", "three hundred five")."""
    if not 0 <= n <= 999:
        raise ValueError(f"number_words: {n} is outside 0..999")
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else "-" + _ONES[n % 10])
    rest = n % 100
    return _ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + number_words(rest))


_WORD_VALUES = {number_words(n): n for n in range(1000)}


def last_integer(text: str) -> int | None:
    """The last integer written in ``text`` (``-?\\d+``), or None."""
    found = _INT.findall(text)
    return int(found[-1]) if found else None


@dataclass(frozen=True)
class ChatSpec:
    """The questions of a chat task (``task.chat`` and ``task.ops``); see the module doc."""
    low: int
    high: int
    ops: tuple[str, ...]
    words: bool
    instruction: str
    system: str | None
    sft_target: str = "answer"
    test_percent: int = 10           # test: the lowest test_percent of the hash
    validation_percent: int = 10     # validation: the next validation_percent

    @classmethod
    def from_cfg(cls, task_cfg: Any) -> "ChatSpec":
        cfg = task_plan(task_cfg)
        chat = cfg.chat
        low, high = int(chat.low), int(chat.high)
        if low < 0 or high < low or high - low + 1 > MAX_OPERANDS or (chat.words and high > 999):
            raise ConfigError(f"task.chat.low / task.chat.high: {low} / {high} is not allowed; need 0 <= low <= high, "
                              f"at most {MAX_OPERANDS} operands (and high <= 999 with task.chat.words)")
        ops = tuple(cfg.ops)
        bad = [o for o in ops if o not in OPS]
        if bad or not ops:
            raise ConfigError(f"task.ops: {list(ops)!r} is not allowed; choose a non-empty subset of {list(OPS)}")
        system = chat.system
        target = str(chat.sft_target)
        if target not in SFT_TARGETS:
            raise ConfigError(f"task.chat.sft_target: {target!r} is not allowed; choose one of {', '.join(SFT_TARGETS)}")
        test, validation = int(chat.test_percent), int(chat.validation_percent)
        if test < 1 or validation < 1 or test + validation > 90:
            raise ConfigError(f"task.chat.test_percent / validation_percent: {test} / {validation} is not allowed; "
                              "need each >= 1 and together <= 90 (the rest trains)")
        return cls(low, high, ops, bool(chat.words), str(chat.instruction), None if system is None else str(system),
                   target, test, validation)

    # -- problems and splits -------------------------------------------------------------------
    def answers(self, p: Problems) -> torch.Tensor:
        return torch.where(p.op == 0, p.a + p.b, torch.where(p.op == 1, p.a - p.b, p.a * p.b))

    def hard(self, p: Problems) -> torch.Tensor:
        """True where the column-by-column answer (no carry or borrow) is wrong, or negative."""
        naive = torch.zeros_like(p.a)
        scale = 1
        for _ in range(len(str(self.high))):
            da, db = (p.a // scale) % 10, (p.b // scale) % 10
            col = torch.where(p.op == 0, da + db, torch.where(p.op == 1, da - db, da * db)) % 10
            naive, scale = naive + col * scale, scale * 10
        return naive != self.answers(p)

    @property
    def categories(self) -> list[tuple[str, bool]]:
        """``(op, hard)`` in category-index order: index = 2 * ops.index(op) + hard."""
        return [(o, h) for o in self.ops for h in (False, True)]

    def category(self, p: Problems) -> torch.Tensor:
        op_ids = torch.tensor([OPS.index(o) for o in self.ops])
        local = (p.op.unsqueeze(1) == op_ids.unsqueeze(0)).long().argmax(1)
        return 2 * local + self.hard(p).long()

    def split_of(self, p: Problems) -> torch.Tensor:
        """Split index per problem (0 train, 1 validation, 2 test): a fixed hash, no seed."""
        h = (p.a * 1_000_003 + p.b) * 4 + p.op
        for mult in (0x9E3779B1, 0x85EBCA6B, 0xC2B2AE35):
            h = ((h ^ (h >> 16)) * mult) & 0xFFFFFFFF
        pct = h % 100
        test, validation = self.test_percent, self.test_percent + self.validation_percent
        return torch.where(pct < test, 2, torch.where(pct < validation, 1, 0))

    def all_problems(self, split: str) -> Problems:
        """Every problem of ``split`` ("train" | "validation" | "test"), in (op, a, b) order."""
        if split not in SPLITS:
            raise ValueError(f"split: {split!r} is not allowed; choose one of {', '.join(SPLITS)}")
        grid = torch.arange(self.low, self.high + 1)
        n = len(grid)
        ops = torch.tensor([OPS.index(o) for o in self.ops])
        p = Problems(grid.repeat_interleave(n).repeat(len(ops)), ops.repeat_interleave(n * n), grid.repeat(n * len(ops)))
        keep = self.split_of(p) == SPLITS.index(split)
        return Problems(p.a[keep], p.op[keep], p.b[keep])

    # -- text ------------------------------------------------------------------------------------
    def question(self, a: int, op: int, b: int) -> str:
        sym = OPS[op]
        if self.words:
            body = f"{number_words(a)} {OP_WORDS[sym]} {number_words(b)}"
        else:
            body = f"{a} {sym} {b}"
        return f"What is {body}?" + (f" {self.instruction}" if self.instruction else "")

    def target_text(self, p: Problems) -> list[str]:
        """The SFT label text per problem: the answer in digits ("22"), or with ``sft_target=
        equation`` the question restated with it ("17 + 5 = 22"), as the model tends to reply."""
        values = self.answers(p).tolist()
        if self.sft_target == "answer":
            return [str(v) for v in values]
        return [f"{a} {OPS[o]} {b} = {v}" for a, o, b, v in zip(p.a.tolist(), p.op.tolist(), p.b.tolist(), values)]

    def messages(self, a: int, op: int, b: int) -> list[dict[str, str]]:
        head = [{"role": "system", "content": self.system}] if self.system is not None else []
        return head + [{"role": "user", "content": self.question(a, op, b)}]

    def parse_question(self, text: str) -> tuple[int, int, int]:
        """(a, op, b) of the question inside a decoded prompt; ValueError when there is none."""
        if self.words:
            m = re.search(r"What is (.+?) (plus|minus|times) (.+?)\?", text)
            if m and m.group(1) in _WORD_VALUES and m.group(3) in _WORD_VALUES:
                op = OPS[list(OP_WORDS.values()).index(m.group(2))]
                return _WORD_VALUES[m.group(1)], OPS.index(op), _WORD_VALUES[m.group(3)]
        else:
            m = re.search(r"What is (\d+) ([+\-*]) (\d+)\?", text)
            if m:
                return int(m.group(1)), OPS.index(m.group(2)), int(m.group(3))
        raise ValueError(f"chat task: no question in the prompt text {text[-80:]!r}")


class ChatPrompts:
    """Problems <-> chat-template token ids for one tokenizer (left-padded prompts)."""

    def __init__(self, spec: ChatSpec, tok: Tokenizer) -> None:
        if getattr(tok.hf, "chat_template", None) is None:
            raise ConfigError("task.format: 'chat' needs a tokenizer with a chat template; this model's has none "
                              "(use task.format=synthetic, or a chat model such as model=smollm2)")
        self.spec, self.tok = spec, tok
        self._ids: dict[tuple[int, int, int], list[int]] = {}

    def ids(self, a: int, op: int, b: int) -> list[int]:
        key = (a, op, b)
        if key not in self._ids:
            text = self.tok.hf.apply_chat_template(self.spec.messages(a, op, b), add_generation_prompt=True,
                                                   tokenize=False)
            self._ids[key] = self.tok.encode(text)
        return self._ids[key]

    def encode(self, p: Problems) -> torch.Tensor:
        """[n, P] int64 prompt ids, left-padded with pad_id."""
        rows = [self.ids(a, o, b) for a, o, b in zip(p.a.tolist(), p.op.tolist(), p.b.tolist())]
        width = max(len(r) for r in rows)
        return torch.tensor([[self.tok.pad_id] * (width - len(r)) + r for r in rows], dtype=torch.long)

    def problems(self, prompts: torch.Tensor) -> Problems:
        """The problems that ``prompts`` (rows of ``encode``) ask."""
        mask = prompt_mask(prompts, self.tok.pad_id)
        texts = self.tok.hf.batch_decode([r[m].tolist() for r, m in zip(prompts.cpu(), mask.cpu())],
                                         skip_special_tokens=True)
        a, op, b = zip(*(self.spec.parse_question(t) for t in texts))
        return Problems(torch.tensor(a), torch.tensor(op), torch.tensor(b))

    def correct(self, prompts: torch.Tensor, completions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[N] bool: the completion ended with eos and its last integer is the answer (one
        prompt row per completion)."""
        completions, mask = completions.cpu(), mask.cpu()
        want = self.spec.answers(self.problems(prompts)).tolist()
        ended = ((completions == self.tok.eos_id) & mask).any(1).tolist()
        got = self.tok.batch_decode(torch.where(mask, completions, torch.full_like(completions, self.tok.pad_id)))
        return torch.tensor([e and last_integer(g) == w for e, g, w in zip(ended, got, want)], dtype=torch.bool)

    def sft_batch(self, p: Problems) -> dict[str, torch.Tensor]:
        """input_ids / attention_mask / labels [n, L]: chat prompt + answer digits + eos,
        right-padded; labels only on the answer and eos."""
        prompts = [self.ids(a, o, b) for a, o, b in zip(p.a.tolist(), p.op.tolist(), p.b.tolist())]
        answers = [self.tok.encode(t) + [self.tok.eos_id] for t in self.spec.target_text(p)]
        width = max(len(x) + len(y) for x, y in zip(prompts, answers))
        ids, labels, attn = [], [], []
        for x, y in zip(prompts, answers):
            fill = width - len(x) - len(y)
            ids.append(x + y + [self.tok.pad_id] * fill)
            labels.append([IGNORE] * len(x) + y + [IGNORE] * fill)
            attn.append([1] * (len(x) + len(y)) + [0] * fill)
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(attn), "labels": torch.tensor(labels)}


def eval_split(task_cfg: Any) -> str:
    """The split evaluation reads: ``task.eval_split`` test | validation (tuning)."""
    split = str(task_plan(task_cfg).eval_split)
    if split not in ("test", "validation"):
        raise ConfigError(f"task.eval_split: {split!r} is not allowed; choose test or validation")
    return split


def held_out(spec: ChatSpec, split: str, n: int) -> Problems:
    """The first ``n`` problems of a fixed permutation (EVAL_SEED) of ``split``."""
    every = spec.all_problems(split)
    if n > len(every):
        raise ConfigError(f"task.eval_prompts: {n} is more than the {len(every)} {split} problems of operands "
                          f"{spec.low}..{spec.high} ({''.join(spec.ops)}); ask for fewer or widen task.chat.low/high")
    perm = torch.randperm(len(every), generator=torch.Generator().manual_seed(derive("chat-eval", split, EVAL_SEED)))[:n]
    return Problems(every.a[perm], every.op[perm], every.b[perm])


class ChatTask(OnPolicyTask):
    """Prompts, rollouts and greedy evaluation of the chat task (module doc); the sampling-only
    task a worker holds. The losses are OnPolicyTask's, over completion logits that compute each
    prompt once per group."""
    name = "chat"

    def __init__(self, task_cfg: Any, tokenizer: Tokenizer) -> None:   # noqa: D107 (no Arithmetic here)
        cfg = task_plan(task_cfg)
        self.cfg, self.tok = cfg, tokenizer
        self.spec = ChatSpec.from_cfg(cfg)
        self.chat = ChatPrompts(self.spec, tokenizer)
        self.eval_split = eval_split(cfg)
        self.temperature = float(cfg.temperature)
        if self.temperature <= 0:
            raise ConfigError(f"task.temperature: {self.temperature} must be > 0 (sampling temperature)")
        self.max_new_tokens = int(cfg.max_new_tokens)
        values = torch.unique(self.spec.answers(self.spec.all_problems("train"))).tolist()
        longest = max(len(tokenizer.encode(str(v))) for v in values)
        if self.max_new_tokens < longest + 1:
            raise ConfigError(f"task.max_new_tokens: {self.max_new_tokens} cannot hold the longest answer "
                              f"({longest} tokens) plus eos; use >= {longest + 1}")
        self.samples = int(cfg.samples_per_prompt)
        self._train = self.spec.all_problems("train")

    def eval_prompts(self, n: int) -> torch.Tensor:
        """[n, P] the prompts evaluate() scores: the first ``n`` of the evaluation split."""
        return self.chat.encode(held_out(self.spec, self.eval_split, n))

    def prompts(self, split: str, n: int, seed: int, step: int) -> torch.Tensor:
        """[n, P] prompt ids: ``split`` "train" draws uniformly from the training problems as a
        function of (seed, step); "eval" is the evaluation split's fixed first ``n``."""
        if split == "eval":
            return self.eval_prompts(n)
        if split != "train":
            raise ValueError(f"split: {split!r} is not allowed; choose train or eval")
        gen = torch.Generator().manual_seed(derive("chat-prompts", split, seed, step))
        i = torch.randint(0, len(self._train), (n,), generator=gen)
        return self.chat.encode(Problems(self._train.a[i], self._train.op[i], self._train.b[i]))

    def rollout(self, policy, prompts: torch.Tensor, samples: int | None = None,
                generator: torch.Generator | None = None) -> Rollouts:
        """``samples`` completions per prompt (``generator`` None: greedy) with behaviour logprobs
        and rewards, by ``rollouts.sample``: each prompt prefilled once, finished rows dropped."""
        samples = samples or self.samples
        comp, mask, logp = sample(policy, prompts, prompt_mask(prompts, self.tok.pad_id), self.max_new_tokens,
                                  group=samples, eos_id=self.tok.eos_id, pad_id=self.tok.pad_id,
                                  temperature=self.temperature, generator=generator)
        rewards = self.rewards(prompts.repeat_interleave(samples, 0), comp, mask) if self.name == "reward" else None
        return Rollouts(prompts, comp, mask, logp, rewards, samples, self.tok.pad_id, self.tok.vocab_size)

    def completion_logits(self, model, r: Rollouts) -> torch.Tensor:
        """[N, T, V] float32 logits predicting each completion token, each prompt computed once per
        group (rollouts.completion_logits_shared; the synthetic tasks keep one pass over every
        full sequence, so their reference trajectories stay bit for bit)."""
        return completion_logits_shared(model, r)

    def rewards(self, prompts: torch.Tensor, completions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[N] float32: 1 for a correct completion (module doc), else 0."""
        return self.chat.correct(prompts, completions, mask).float()

    @torch.no_grad()
    def greedy(self, policy, n: int, chunk: int = 64) -> tuple[torch.Tensor, Rollouts]:
        """Greedy completions of the first ``n`` evaluation prompts: (correct [n] bool, rollouts)."""
        prompts = self.eval_prompts(n)
        r = Rollouts.cat([self.rollout(policy, prompts[i:i + chunk], 1, None) for i in range(0, n, chunk)])
        return self.chat.correct(r.prompts, r.completions, r.completion_mask), r

    @torch.no_grad()
    def scored(self, policy, n: int, progress=None) -> tuple[pd.DataFrame, Rollouts]:
        """Per prompt of the first ``n`` evaluation problems: the greedy completion's verdict and the
        reference answer's teacher-forced log-probability (harness.tasks.chat_eval); and the greedy
        completions as rollouts (one sample per prompt)."""
        problems = held_out(self.spec, self.eval_split, n)
        rows = [self.chat.ids(a, o, b) for a, o, b in zip(problems.a.tolist(), problems.op.tolist(), problems.b.tolist())]
        want = self.spec.answers(problems).tolist()
        answers = [self.tok.encode(str(v)) + [self.tok.eos_id] for v in want]
        extra = self.batch_score(rows)
        out = greedy_scored(policy, rows, answers, self.max_new_tokens, eos_id=self.tok.eos_id, pad_id=self.tok.pad_id,
                            batch=int(self.cfg.eval_batch), on_batch=progress,
                            score_batch=None if extra is None else extra[1])
        ended = ((out.completions == self.tok.eos_id) & out.mask).any(1)
        texts = self.tok.batch_decode(torch.where(out.mask, out.completions, self.tok.pad_id))
        got = [last_integer(t) for t in texts]
        correct = [bool(e) and g == w for e, g, w in zip(ended.tolist(), got, want)]
        frame = pd.DataFrame({"prompt": range(n), "a": problems.a.tolist(), "op": [OPS[o] for o in problems.op.tolist()],
                              "b": problems.b.tolist(), "correct": correct, "ended": ended.tolist(),
                              "answer": pd.array(got, dtype="Int64"), "answer_logprob": out.answer_logprob.numpy()})
        if extra is not None and out.extra is not None:
            frame[extra[0]] = out.extra.numpy()
        r = Rollouts(self.chat.encode(problems), out.completions, out.mask, torch.zeros(out.completions.shape),
                     None, 1, self.tok.pad_id, self.tok.vocab_size)
        return frame, r

    @torch.no_grad()
    def evaluate_prompts(self, policy, n: int | None = None, progress=None) -> tuple[dict[str, float], pd.DataFrame]:
        """(metrics, one row per prompt): accuracy, answer_logprob and the mode's own (module doc);
        ``progress`` is called after each batch of prompts (the role's heartbeat)."""
        frame, r = self.scored(policy, n or int(self.cfg.eval_prompts), progress)
        frame = self.score_more(policy, frame, r)
        metrics = {"accuracy": float(frame["correct"].mean()), "answer_logprob": float(frame["answer_logprob"].mean())}
        metrics.update({k: float(frame[k].mean()) for k in ("reward", "reverse_kl") if k in frame})
        return metrics, frame

    def score_more(self, policy, frame: pd.DataFrame, r: Rollouts) -> pd.DataFrame:
        """The mode's own per-prompt columns (reward; reverse_kl)."""
        return frame

    def batch_score(self, rows: list[list[int]]) -> tuple[str, BatchScore] | None:
        """(column, a per-batch score computed during greedy decoding: chat_eval.greedy_scored's
        ``score_batch``) for the evaluation of ``rows``, or None."""
        return None

    def evaluate(self, policy, n: int | None = None) -> dict[str, float]:
        """The held-out metrics of ``evaluate_prompts``."""
        return self.evaluate_prompts(policy, n)[0]


class ChatRewardTask(ChatTask):
    """GRPO on the chat task's correctness reward (RewardTask's loss)."""
    name = "reward"
    advantages = staticmethod(RewardTask.advantages)
    loss = RewardTask.loss

    def score_more(self, policy, frame: pd.DataFrame, r: Rollouts) -> pd.DataFrame:
        return frame.assign(reward=frame["correct"].astype(float))

    def __init__(self, task_cfg: Any, tokenizer: Tokenizer) -> None:
        super().__init__(task_cfg, tokenizer)
        self.clip = float(self.cfg.clip_eps)
        self.kl_coef = float(self.cfg.kl_coef)
        if self.cfg.reward_shaping != "none":
            raise ConfigError(f"task.reward_shaping: {self.cfg.reward_shaping!r} is not allowed with task.format=chat; "
                              "choose none")


class ChatDistillTask(ChatTask):
    """On-policy distillation on the chat task (DistillTask's loss)."""
    name = "distill"
    token_kl = DistillTask.token_kl
    loss = DistillTask.loss

    @torch.no_grad()
    def score_more(self, policy, frame: pd.DataFrame, r: Rollouts, chunk: int = 64) -> pd.DataFrame:
        """reverse_kl per prompt: the mean per-token KL(student || teacher) along its greedy completion.
        Scored during decoding where both models take a KV cache (``batch_score``); else here, by one
        teacher-forced pass of each (``token_kl``): the same numbers up to float rounding."""
        if "reverse_kl" in frame:          # scored on the way (batch_score)
            return frame
        per = []
        for i in range(0, len(r), chunk):
            part = Rollouts(r.prompts[i:i + chunk], r.completions[i:i + chunk], r.completion_mask[i:i + chunk],
                            r.logprobs[i:i + chunk], None, 1, r.pad_id, r.vocab_size)
            kl = self.token_kl(policy, part)
            mask = part.completion_mask.to(kl.device).float()
            per.append(((kl * mask).sum(1) / mask.sum(1).clamp(min=1)).cpu())
        return frame.assign(reverse_kl=torch.cat(per).double().numpy())

    def batch_score(self, rows: list[list[int]]) -> tuple[str, BatchScore] | None:
        scorer = reverse_kl_scorer(self.teacher, rows, self.tok.pad_id)
        return None if scorer is None else ("reverse_kl", scorer)

    def __init__(self, task_cfg: Any, tokenizer: Tokenizer, teacher) -> None:
        super().__init__(task_cfg, tokenizer)
        self.teacher = frozen_teacher(teacher)


def build_chat_task(task_cfg: Any, tokenizer: Tokenizer, teacher=None, sampler: bool = False) -> ChatTask:
    """The chat task of ``task.name`` (distill | reward); ``sampler``: the sampling-only task."""
    task_cfg = task_plan(task_cfg)
    name = task_cfg.name
    if sampler:
        return ChatTask(task_cfg, tokenizer)
    if name == "reward":
        return ChatRewardTask(task_cfg, tokenizer)
    if name == "distill":
        return ChatDistillTask(task_cfg, tokenizer, teacher)
    raise ConfigError(f"task.name: {name!r} is not an on-policy chat task; choose distill or reward "
                      "(federated SFT data: build_federated)")


# -- the federated side: SFT on the answer tokens ------------------------------------------------
class ChatSFTTask:
    """K clients' non-IID SFT data of the chat task (FederatedTask's interface).

    Data: ``task.examples`` distinct training problems (a seeded permutation of the train
    split); ``task.eval_split=validation`` evaluates on ``task.validation_prompts`` problems of
    the validation split (disjoint from the training pool and the test split by the hash).
    Split over the clients by ``dirichlet_split`` over ``(op, hard)`` (``task.alpha``)."""

    def __init__(self, task_cfg: Any, tokenizer: Tokenizer, n_clients: int, seed: int) -> None:
        from harness.tasks.federated import FederatedTask, dirichlet_split

        cfg = task_plan(task_cfg)
        self.cfg, self.tok, self.seed = cfg, tokenizer, seed
        self.spec = ChatSpec.from_cfg(cfg)
        self.chat = ChatPrompts(self.spec, tokenizer)
        if n_clients < 1:
            raise ConfigError(f"federated.clients: {n_clients} must be >= 1")
        every = self.spec.all_problems("train")
        examples = int(cfg.examples)
        if examples > len(every):
            raise ConfigError(f"task.examples: {examples} is more than the {len(every)} training problems of operands "
                              f"{self.spec.low}..{self.spec.high}; ask for fewer or widen task.chat.low/high")
        if n_clients > examples:
            raise ConfigError(f"federated.clients: {n_clients} clients but only {examples} examples (task.examples)")
        self.sizes = FederatedTask._sizes(list(cfg.client_sizes), n_clients, examples)
        perm = torch.randperm(len(every), generator=torch.Generator().manual_seed(derive("chat-pool", seed)))[:examples]
        self.pool = Problems(every.a[perm], every.op[perm], every.b[perm])
        self.categories = self.spec.categories
        cats = self.spec.category(self.pool)
        idx = dirichlet_split(cats, len(self.categories), self.sizes, float(cfg.alpha),
                              derive("federated-split", seed))
        self.clients = [ClientData(Problems(self.pool.a[i], self.pool.op[i], self.pool.b[i]), cats[i]) for i in idx]
        split = eval_split(cfg)
        n_eval = int(cfg.validation_prompts if split == "validation" else cfg.eval_prompts)
        self.eval_problems = held_out(self.spec, split, n_eval)
        self.eval_batch = self.chat.sft_batch(self.eval_problems)
        self.max_new_tokens = int(cfg.max_new_tokens)

    def client_data(self, k: int) -> ClientData:
        if not 0 <= k < len(self.clients):
            raise IndexError(f"client {k}: there are {len(self.clients)} clients")
        return self.clients[k]

    def batches(self, k: int, batch_size: int | None = None,
                generator: torch.Generator | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """Endless iterator of client k's SFT batches (shuffled epochs by ``generator``)."""
        return client_batches(self, k, self.chat.sft_batch, batch_size, generator)

    def loss(self, model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean next-token cross-entropy (nats/token) on the batch's answer tokens, the chat
        template's prefix that every row shares computed once per batch (data.sft_loss_shared_prefix;
        the synthetic tasks keep sft_loss, so their reference results stay bit for bit)."""
        return sft_loss_shared_prefix(model, batch)

    @torch.no_grad()
    def evaluate(self, model) -> dict[str, float]:
        """eval_loss (answer tokens) and greedy accuracy (the module's rule) on the held-out problems."""
        return self.evaluate_prompts(model)[0]

    @torch.no_grad()
    def evaluate_prompts(self, model, progress=None) -> tuple[dict[str, float], pd.DataFrame]:
        """(eval_loss, accuracy and answer_logprob, one row per held-out problem): greedy completions and
        the teacher-forced log-probability [nats] of the SFT label (``task.chat.sft_target``, then eos) by
        harness.tasks.chat_eval. ``progress`` is called after each batch of prompts (the server's heartbeat)."""
        eval_loss = float(sft_loss_shared_prefix(model, self.eval_batch))
        p = self.eval_problems
        rows = [self.chat.ids(a, o, b) for a, o, b in zip(p.a.tolist(), p.op.tolist(), p.b.tolist())]
        labels = [self.tok.encode(t) + [self.tok.eos_id] for t in self.spec.target_text(p)]
        out = greedy_scored(model, rows, labels, self.max_new_tokens, eos_id=self.tok.eos_id, pad_id=self.tok.pad_id,
                            batch=int(self.cfg.eval_batch), on_batch=progress)
        ended = ((out.completions == self.tok.eos_id) & out.mask).any(1)
        texts = self.tok.batch_decode(torch.where(out.mask, out.completions, self.tok.pad_id))
        got = [last_integer(t) for t in texts]
        want = self.spec.answers(p).tolist()
        correct = [bool(e) and g == w for e, g, w in zip(ended.tolist(), got, want)]
        frame = pd.DataFrame({"prompt": range(len(rows)), "a": p.a.tolist(), "op": [OPS[o] for o in p.op.tolist()],
                              "b": p.b.tolist(), "correct": correct, "ended": ended.tolist(),
                              "answer": pd.array(got, dtype="Int64"), "answer_logprob": out.answer_logprob.numpy()})
        metrics = {"eval_loss": eval_loss, "accuracy": float(np.mean(correct)),
                   "answer_logprob": float(frame["answer_logprob"].mean())}
        return metrics, frame

"""Dataclass schemas of the Hydra config, registered in the ConfigStore.

A typo in a key fails when the config is composed (struct mode); values are checked by
`harness.plan.build_plan` (which calls `harness.validate`) before any process or namespace
is created, and the roles receive the resulting RunPlan. The closed value sets are enums in
the plan (harness.backends.Backend, harness.plan.MethodKind); the schema keeps plain strings
so that a bad value gets the project's one-line error rather than OmegaConf's.

Ownership of sections (one concept each): net = emulated links, model = base model and
LoRA, task = what is learned, compressor = how a gradient/delta is squeezed,
method = how state is synchronised, onpolicy / federated = the loops' knobs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class NetConfig:
    """Links of the star topology. Rates like '10mbit', delays like '20ms', loss like '0.1%'."""
    backend: str = "auto"            # auto | netem | tc | userspace | model
    rate: Optional[str] = "100mbit"  # every non-hub node, both directions (None: unshaped)
    delay: str = "0ms"               # one-way, per direction
    jitter: str = "0ms"
    loss: str = "0%"
    queue: Optional[str] = None      # qdisc queue in bytes ('64kb'); None: sized from rate
    up: Optional[str] = None         # uplink (node -> hub) rate override for every node
    down: Optional[str] = None       # downlink (hub -> node) rate override for every node
    hub: Optional[str] = None        # the hub's own link, both directions; None: unshaped
    trace: Optional[Any] = None      # rate trace for every node: a path or shipped name (both directions) or
                                     # {up: ..., down: ...}; replayed on tc/netem, integrated on model (docs/netem.md)
    nodes: List[Dict[str, Any]] = field(default_factory=list)  # per-node overrides: [{rate, up, down, delay, jitter, loss, trace}]
    hang_timeout_s: float = 180.0    # no progress for this long -> run failed


@dataclass
class ModelConfig:
    name: str = "tiny"               # tiny | small | hf
    path: Optional[str] = None       # local Hugging Face directory when name=hf
    vocab_size: int = 0              # 0: from the task's tokenizer
    hidden_size: int = 128
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 4
    max_positions: int = 64
    rank: int = 64                   # LoRA training rank (capacity)
    alpha: Optional[float] = None    # LoRA alpha; None: alpha = rank (scale 1)
    targets: List[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj",
                                                         "gate_proj", "up_proj", "down_proj"])
    dtype: str = "float32"
    device: str = "cpu"              # cpu | cuda | auto (cuda:i per role where GPUs exist)
    teacher_path: Optional[str] = None  # name=hf: the distill teacher's local directory (None: path)
    init_seed: int = 0               # draw of a fresh model's weights (tiny/small)
    lora_init: str = "default"       # default (A kaiming, B=0) | gaussian (A ~ N(0, 1/r^2)) | zeros


@dataclass
class GrowConfig:
    """task.teacher_init=grow: the narrow teacher (same depth and vocabulary) the teacher is
    widened from (harness/tasks/grow.py), trained from scratch and cached like any teacher. The
    defaults are the tiny preset's teacher recipe: at the tiny model's depth (2 layers) the source
    is the shipped tiny reference teacher itself (harness/bases), the same bits on every machine."""
    name: str = "tiny"               # the narrow model's name in its recipe
    hidden_size: int = 128
    intermediate_size: int = 256
    num_heads: int = 4
    num_kv_heads: int = 4
    steps: int = 1500                # the narrow teacher's pretraining steps
    batch: int = 64
    lr: float = 3e-3
    noise: float = 1e-3              # std of the seeded noise on the wide model's new weight entries


@dataclass
class ChatConfig:
    """task.format=chat: questions through the model's chat template (harness/tasks/chat.py)."""
    low: int = 0                     # smallest operand
    high: int = 20                   # largest operand (inclusive); wider => harder
    words: bool = False              # operands and operator in English words ("seven plus five")
    instruction: str = "Answer with the number only."  # the sentence after the question
    system: Optional[str] = None     # system message; None: the chat template's default
    student_bits: int = 3            # distill student: bits per decoder weight (harness/tasks/chat_student.py); lower => weaker
    student_group: int = 32          # weights per quantisation group (min-max, round to nearest)
    sft_target: str = "answer"       # federated SFT labels: answer ("22") | equation ("17 + 5 = 22"), then eos
    test_percent: int = 10           # held-out test split: this share of the problems (a fixed hash); larger => more test prompts
    validation_percent: int = 10     # validation split (tuning), disjoint from test and train


@dataclass
class TaskConfig:
    name: str = "distill"            # distill | reward | federated
    format: str = "synthetic"        # synthetic (the 18-token arithmetic language) | chat (task.chat, a chat model's template)
    chat: ChatConfig = field(default_factory=ChatConfig)
    digits: int = 2                  # operand digits of the synthetic arithmetic language
    ops: List[str] = field(default_factory=lambda: ["+", "-"])
    prompt_batch: int = 16           # prompts per update (sharded over workers)
    samples_per_prompt: int = 8      # completions per prompt (GRPO group size for reward)
    max_new_tokens: int = 6          # >= longest answer + eos (2-digit +/-: 4)
    temperature: float = 1.0
    eval_prompts: int = 128
    eval_batch: int = 128            # held-out prompts decoded together in an evaluation; larger => faster, more memory
    teacher_steps: int = 1500        # pretraining steps of the teacher (cached)
    student_steps: int = 200         # pretraining steps of the student base (cached)
    teacher_init: str = "scratch"    # the teacher's pretraining starts from: scratch | grow (widened from task.grow's narrow teacher)
    grow: GrowConfig = field(default_factory=GrowConfig)
    student_init: str = "teacher"    # the student's pretraining starts from: teacher (its weights) | scratch
    student_naive_frac: float = 0.7  # share of hard problems labelled column-by-column (no carry) in the student's pretraining; higher => weaker student
    student_lr: float = 1e-3         # peak learning rate of the student's pretraining
    pretrain_batch: int = 64         # problems per pretraining step
    pretrain_lr: float = 3e-3        # peak AdamW learning rate of pretraining (warm-up, cosine to 10%)
    pretrain_seed: int = 0
    reverse: bool = True             # answers least-significant digit first (small models learn carries in order)
    reward_shaping: str = "none"     # reward: none (1 exact, else 0) | digits (partial credit <= 0.5)
    clip_eps: float = 0.2            # reward: PPO/GRPO ratio clip
    kl_coef: float = 0.0             # reward: k3 KL penalty to the adapter-free policy (0: none)
    # federated data
    alpha: float = 0.5               # Dirichlet concentration over sub-distributions (lower = more non-IID)
    client_sizes: List[int] = field(default_factory=list)  # examples per client; [] = equal split
    examples: int = 2048             # total federated training examples
    eval_split: str = "test"         # evaluate on the held-out "test" problems or the "validation" ones (tuning: harness.tune)
    validation_prompts: int = 256    # federated: validation problems (training-side, disjoint from every client's data)
    batch_size: int = 16


@dataclass
class CompressorConfig:
    name: str = "spar"               # spar | powersgd | topk | randk | quant | identity
    budget: Optional[float] = 0.016  # fraction of the bf16 bytes of what is encoded; lower => more aggressive
    budget_bytes: Optional[int] = None  # absolute budget; wins over budget when set
    dtype: str = "bf16"              # factor / value dtype on the wire: bf16 | fp16 | int8 | fp32
    error_feedback: bool = True
    seed: int = 0
    options: Dict[str, Any] = field(default_factory=dict)  # compressor-specific extras


@dataclass
class MethodConfig:
    name: str = MISSING              # full_sync | lowrank | delta | hilo | patch | spra | ffa | fedit | flora | hetlora | flexlora
    kind: str = MISSING              # onpolicy | federated
    sync: Optional[str] = None       # on-policy: the module whose SYNCS declares this method (harness/onpolicy/methods.py)
    # --- on-policy (owned by harness/onpolicy) ---
    sync_dtype: str = "bf16"         # full_sync / lowrank wire dtype: bf16 | fp32
    rank: Optional[int] = None       # lowrank: training rank override (None: model.rank)
    verify_every: int = 1            # checksum compare every N updates (0: never)
    codec: str = "zstd"              # patch: byte codec of the sparse bf16 patch: zstd | none
    codec_level: int = 3             # patch: zstd level 1..22; higher => smaller payload, slower encode
    # --- federated (owned by harness/federated) ---
    lr_rule: str = "linear"          # spra: eta_k = eta_ref * f(r_k / r_ref): linear | sqrt | const
    resample_every: int = 5          # spra: T rounds between A resamples (0: never)
    a_variance: str = "rank"         # A_k = Z[:r_k] / sqrt(v): v = r_k ("rank") or r_ref ("ref"); ablation of SPRA's lr rule
    prune_gamma: float = 1.0         # hetlora: rank decay factor of self-pruning, r <- floor(gamma r); lower => prunes faster; 1: never
    prune_lambda: float = 0.0        # hetlora: weight of the tail penalty ||B_tail|| ||A_tail||; higher => tails shrink faster


@dataclass
class OnPolicyConfig:
    workers: int = 2
    steps: int = 20                  # updates
    lr: float = 1e-3
    optimizer: str = "adamw"         # adamw | adam | sgd
    weight_decay: float = 0.0
    clip_norm: float = 1.0           # clip the learner's true gradient to this global L2 norm before sync (0: off)
    eval_every: int = 5              # evaluate every N updates (0: the final evaluation only)
    eval_final: bool = True          # evaluate after the last update; false (with eval_every 0): a timing-only run, no quality
    eval_base: bool = False          # also evaluate the base model (the adapter before update 0): base_<metric> on row 0
    eval_threads: int = 1            # the learner's CPU threads while it evaluates (the workers wait then); fixed => same bits everywhere
    curve_prompts: int = 0           # >0: evaluations before the last (and not the base's) score only the first N held-out prompts
                                     #     (the learning curve), the last and the base all task.eval_prompts; 0: all, always
    policy_kl: bool = True           # record KL(worker policy || learner policy) on the rollouts
    staleness: int = 0               # 0: synchronous; 1: update t+1's rollouts use policy t while update t's payload is on the wire
    # --- fault injection (tests): flip one bit of a worker's state after it applies an update ---
    fault_flip_step: int = -1        # update at which to flip (-1: never)
    fault_flip_worker: int = 1       # which worker (0..workers-1: role worker<i>)
    fault_flip_target: str = "param"  # param (first adapter tensor) | exp_avg (its Adam first moment)


@dataclass
class FederatedConfig:
    clients: int = 3
    ranks: List[int] = field(default_factory=lambda: [16, 8, 4])  # per client (cycled)
    rounds: int = 10
    local_steps: int = 5             # E
    fraction: float = 1.0            # clients sampled per round
    lr: float = 1e-3                 # eta_ref at r_ref
    r_ref: Optional[int] = None      # None: max of ranks
    eval_every: int = 2
    eval_base: bool = True           # the server also evaluates before round 1 (the base model: every method starts at B = 0)
    drop_policy: str = "fail"        # fail | continue (a dead client is dropped from the round)
    optimizer: str = "sgd"           # client optimizer, fresh each round: sgd | adamw
    momentum: float = 0.0            # sgd momentum (0: plain SGD, what the SPRA analysis assumes)
    isolate_compute: bool = True     # clients' local trainings take turns (a compute token): isolated compute times
    aggregation: str = "column"      # spra/ffa: column (B averaged per column over its holders) | product (sum_k p_k dW_k)
    # --- a population (harness/federated/population.py); population None: `clients` processes, every round ---
    population: Optional[int] = None  # N simulated clients, each with a data shard, a rank and a link
    per_round: int = 10              # K clients sampled per round (<= population)
    executors: int = 2               # P executor processes that take on the sampled clients (<= cores)
    deadline_s: Optional[float] = None  # drop a client whose down + compute + up exceeds it (None: wait for all)
    rank_weights: List[float] = field(default_factory=list)  # weights of `ranks` for the draw ([]: equal)
    up_mbit: List[float] = field(default_factory=lambda: [1.0, 50.0])    # log-uniform [lo, hi] per client
    down_mbit: List[float] = field(default_factory=lambda: [2.0, 100.0])  # log-uniform [lo, hi] per client
    delay_ms: List[float] = field(default_factory=lambda: [5.0, 50.0])    # uniform [lo, hi], each direction
    availability: str = "always"     # always | markov (two-state chain per client)
    p_off: float = 0.1               # markov: P(on -> off) per round; higher => fewer clients available
    p_on: float = 0.5                # markov: P(off -> on) per round
    # --- fault injection (tests): from this round on, client fault_drop_client stops answering ---
    fault_drop_round: int = -1       # -1: never
    fault_drop_client: int = 0       # 0-based client index


@dataclass
class PlacementConfig:
    """Where roles run (harness/placement.py): one host (star) or several, each role's cores and GPU."""
    source: str = "star"             # star | hostfile | slurm | torchrun
    hostfile: Optional[str] = None   # with source=hostfile: NAME [addr=A] [cores=N] [gpus=N] [iface=IF] per line
    pin: bool = True                 # pin roles to disjoint cores where a host has enough
    mtu: int = 1400                  # overlay (VXLAN) MTU across hosts; the real interface's must be >= mtu + 50


@dataclass
class Config:
    scenario: str = "adhoc"
    variant: str = "default"
    seed: int = 0
    seeds: List[int] = field(default_factory=list)  # run every variant at each of these seeds ([]: just `seed`); seed=N on the command line wins
    out_dir: str = "outputs/runs"    # your runs (git-ignored); the references' runs: results/runs, results/real/runs (make bench)
    run_id: Optional[str] = None     # None: derived from scenario, variant and a content hash
    resume: bool = True              # skip a run whose results are complete
    progress: bool = True
    variants: Dict[str, List[str]] = field(default_factory=dict)  # name -> overrides; run one after another
    only: List[str] = field(default_factory=list)                 # run only these variants
    net: NetConfig = field(default_factory=NetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    compressor: CompressorConfig = field(default_factory=CompressorConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    onpolicy: OnPolicyConfig = field(default_factory=OnPolicyConfig)
    federated: FederatedConfig = field(default_factory=FederatedConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)


def register() -> None:
    from harness.tuned_lr import register_resolver

    register_resolver()                  # ${tuned_lr:SCENARIO,VARIANT}: committed tuning files (harness/tuned_lr.py)
    cs = ConfigStore.instance()
    cs.store(name="narrowband_schema", node=Config)
    cs.store(group="net", name="net_schema", node=NetConfig)
    cs.store(group="model", name="model_schema", node=ModelConfig)
    cs.store(group="task", name="task_schema", node=TaskConfig)
    cs.store(group="compressor", name="compressor_schema", node=CompressorConfig)
    cs.store(group="method", name="method_schema", node=MethodConfig)

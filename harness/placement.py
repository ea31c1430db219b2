"""Where each role runs: its host, the cores it is pinned to, its GPU (a field of the RunPlan).

    placement = resolve(cfg["placement"], names, device)     # ConfigError on a bad source or hostfile
    placement.of("worker0")        -> RolePlace(host="h1", host_index=1, cores=(0,), gpu=None)
    placement.oversubscribed       -> True when some host runs more busy roles than it has cores

Sources (``placement.source``):
  star      the default: one host (this one), every role on it, the one-host star of namespaces.
  hostfile  ``placement.hostfile``: one host a line, ``NAME [addr=A] [cores=N] [gpus=N] [iface=IF]``,
            ``#`` comments; the first host is the hub's (node rank 0).
  slurm     SLURM_JOB_NODELIST (``node[01-03],gpu7``), SLURM_CPUS_ON_NODE, SLURM_GPUS_ON_NODE;
            a host's node rank is its position in the expanded list (SLURM_NODEID on that host).
  torchrun  torchrun's environment: NNODES hosts ``node0 ... node<N-1>`` (WORLD_SIZE /
            LOCAL_WORLD_SIZE, so one agent per node: ``--nproc-per-node=1``); the node rank is
            GROUP_RANK; addresses are exchanged at start (harness.commands.node), MASTER_ADDR is node 0.
  (Ray: a driver with one actor per node writes a hostfile or sets torchrun's variables:
  docs/multihost.md.)

Roles on hosts: with one host every role is on it; with H > 1 hosts the hub (rank 0) has host 0
to itself and node k goes to host 1 + k mod (H - 1) (the learner on one node, the rollout
workers or clients on the others).

Cores: the roles of a host share its cores out, disjoint and contiguous, ``cores // n`` each,
when the host has at least as many cores as roles (n); otherwise the host is *oversubscribed*
and nobody is pinned. ``cores`` are slots (indices into the host's allowed CPU list, as
``os.sched_getaffinity`` gives it on that host), so a plan built on one host means the same on
another whose allowed CPUs are numbered differently; ``pin_cpus`` maps them. Every role counts as
busy (each runs its own model: rollouts, learning, replay), so more roles than cores means
they take turns and their times include waiting for a core: the report marks such rows as it
marks runs measured under load. The cores of a host other than this one come from the
hostfile or Slurm; torchrun gives none, so each host's own count is assumed equal to this one's
(said in ``Placement.notes``).

GPUs: when ``model.device`` is not cpu and a host has G > 0 GPUs, the i-th role of that host
gets GPU i mod G (its own when G >= n; ``gpu_shared`` says when not). A role with a GPU runs on
``cuda:<gpu>``; without one it stays on what ``model.device`` says (cpu where none exists).
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Mapping

from harness.errors import ConfigError


class Source(str, Enum):
    """``placement.source``: where the hosts come from (a closed set)."""
    STAR = "star"
    HOSTFILE = "hostfile"
    SLURM = "slurm"
    TORCHRUN = "torchrun"


LOCAL_HOST = "local"
_HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_IFNAME = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
HOST_KEYS = ("addr", "cores", "gpus", "iface")


@dataclass(frozen=True)
class Host:
    """One host: its name, address (None: resolved at start), usable cores and GPUs, real interface."""
    name: str
    addr: str | None = None
    cores: int = 1
    gpus: int = 0
    iface: str | None = None     # the real interface the overlay rides on (None: the one routing to MASTER_ADDR)


@dataclass(frozen=True)
class RolePlace:
    """Where one role runs. ``cores``: slots on its host (empty: not pinned); ``gpu``: index or None."""
    role: str
    host: str
    host_index: int
    cores: tuple[int, ...] = ()
    gpu: int | None = None

    def device(self, requested: str) -> str:
        """The role's torch device: ``cuda:<gpu>`` when it has a GPU, else what was asked for."""
        return f"cuda:{self.gpu}" if self.gpu is not None else requested


@dataclass(frozen=True)
class Placement:
    """Every role's place, the hosts, and whether any host has more busy roles than cores."""
    source: Source
    hosts: tuple[Host, ...]
    roles: tuple[RolePlace, ...]
    pin: bool = True
    notes: tuple[str, ...] = ()

    @property
    def multihost(self) -> bool:
        return len(self.hosts) > 1

    def of(self, role: str) -> RolePlace:
        for place in self.roles:
            if place.role == role:
                return place
        raise KeyError(role)

    def on(self, host_index: int) -> list[RolePlace]:
        """The roles of one host, in rank order."""
        return [p for p in self.roles if p.host_index == host_index]

    @property
    def oversubscribed_hosts(self) -> tuple[str, ...]:
        return tuple(h.name for i, h in enumerate(self.hosts) if len(self.on(i)) > h.cores)

    @property
    def oversubscribed(self) -> bool:
        return bool(self.oversubscribed_hosts)

    @property
    def gpu_shared(self) -> bool:
        """Some GPU serves two roles."""
        used = [(p.host_index, p.gpu) for p in self.roles if p.gpu is not None]
        return len(used) != len(set(used))

    def describe(self) -> dict[str, Any]:
        """run.json's ``placement``: the hosts, each role's host, cores and GPU, and the flags."""
        return {"source": self.source.value, "pin": self.pin, "oversubscribed": self.oversubscribed,
                "oversubscribed_hosts": list(self.oversubscribed_hosts), "gpu_shared": self.gpu_shared,
                "hosts": [{**asdict(h), "roles": [p.role for p in self.on(i)]} for i, h in enumerate(self.hosts)],
                "roles": [{**asdict(p), "cores": list(p.cores)} for p in self.roles], "notes": list(self.notes)}

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source.value, "pin": self.pin, "notes": list(self.notes),
                "hosts": [asdict(h) for h in self.hosts], "roles": [{**asdict(p), "cores": list(p.cores)} for p in self.roles]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Placement":
        return cls(source=Source(data["source"]), pin=bool(data["pin"]), notes=tuple(data.get("notes") or ()),
                   hosts=tuple(Host(**h) for h in data["hosts"]),
                   roles=tuple(RolePlace(**{**p, "cores": tuple(p["cores"])}) for p in data["roles"]))


# ----- building one ------------------------------------------------------------------------------
def resolve(cfg: Mapping[str, Any] | None, roles: list[str], device: str = "cpu",
            env: Mapping[str, str] | None = None) -> Placement:
    """The placement of ``roles`` (hub first) from ``cfg`` (the ``placement`` config node)."""
    cfg = dict(cfg or {})
    env = os.environ if env is None else env
    raw = str(cfg.get("source") or Source.STAR.value)
    try:
        source = Source(raw)
    except ValueError:
        raise ConfigError(f"placement.source: {raw!r} is not allowed; choose one of "
                          f"{', '.join(s.value for s in Source)}") from None
    pin = cfg.get("pin", True)
    if not isinstance(pin, bool):
        raise ConfigError(f"placement.pin: {pin!r} is not allowed; use true or false")
    notes: list[str] = []
    gpu_wanted = device not in ("", "cpu")
    if source is Source.STAR:
        hosts = [Host(LOCAL_HOST, None, local_cores(), local_gpus() if gpu_wanted else 0)]
    elif source is Source.HOSTFILE:
        if not cfg.get("hostfile"):
            raise ConfigError("placement.hostfile: None is not allowed with placement.source=hostfile; "
                              "give the path of a hostfile (NAME [addr=A] [cores=N] [gpus=N] [iface=IF] per line)")
        hosts = read_hostfile(Path(str(cfg["hostfile"])))
    elif source is Source.SLURM:
        hosts = slurm_hosts(env)
    else:
        hosts = torchrun_hosts(env)
        notes.append(f"torchrun gives no core or GPU counts of other hosts: each assumed equal to this one's "
                     f"({hosts[0].cores} cores, {hosts[0].gpus} GPUs)")
    return assign(source, hosts, roles, gpu_wanted, pin, tuple(notes))


def assign(source: Source, hosts: list[Host], roles: list[str], gpu_wanted: bool, pin: bool = True,
           notes: tuple[str, ...] = ()) -> Placement:
    """Roles onto hosts (the module docstring's rule), then cores and GPUs within each host."""
    if not hosts:
        raise ConfigError(f"placement.source: {source.value} gave no hosts; at least one is needed")
    on_host = [0] + [1 + k % (len(hosts) - 1) if len(hosts) > 1 else 0 for k in range(len(roles) - 1)]
    places = []
    for name, h in zip(roles, on_host):
        host = hosts[h]
        mine = [r for r, hh in zip(roles, on_host) if hh == h]
        i, n = mine.index(name), len(mine)
        share = host.cores // n if pin and n <= host.cores else 0
        cores = tuple(range(i * share, (i + 1) * share)) if share else ()
        gpu = i % host.gpus if gpu_wanted and host.gpus > 0 else None
        places.append(RolePlace(name, host.name, h, cores, gpu))
    return Placement(source, tuple(hosts), tuple(places), pin, notes)


def local_cores() -> int:
    """How many CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def local_gpus() -> int:
    """GPUs torch sees here (0 without torch's CUDA build)."""
    try:
        import torch

        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no torch, no driver: no GPU
        return 0


def pin_cpus(slots: tuple[int, ...] | list[int]) -> list[int]:
    """The CPU ids of core slots on this host (indices into this process's allowed CPUs, sorted)."""
    allowed = sorted(os.sched_getaffinity(0))
    return [allowed[s] for s in slots if s < len(allowed)]


def read_hostfile(path: Path) -> list[Host]:
    """Hosts of a hostfile; ConfigError naming the host (or line) and what is wrong."""
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"placement.hostfile: {str(path)!r} cannot be read ({err.strerror}); "
                          "give the path of a hostfile") from None
    hosts: list[Host] = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        name, where = words[0], f"placement.hostfile {path.name} line {number}"
        if not _HOSTNAME.match(name):
            raise ConfigError(f"{where}: host {name!r} is not a host name; use 1-63 of A-Z a-z 0-9 _ . -")
        fields: dict[str, Any] = {}
        for word in words[1:]:
            key, sep, value = word.partition("=")
            if not sep or key not in HOST_KEYS:
                raise ConfigError(f"{where}: host {name}: {word!r} is not allowed; use "
                                  f"{', '.join(k + '=...' for k in HOST_KEYS)}")
            fields[key] = value
        hosts.append(_host(name, fields, where))
    if not hosts:
        raise ConfigError(f"placement.hostfile: {str(path)!r} names no host; one host a line, the hub's first")
    names = [h.name for h in hosts]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"placement.hostfile: host {twice[0]!r} is listed twice; each host once (one agent per host)")
    return hosts


def _host(name: str, fields: dict[str, str], where: str) -> Host:
    counts = {}
    for key, least in (("cores", 1), ("gpus", 0)):
        value = fields.get(key, "1" if key == "cores" else "0")
        if not value.isdigit() or int(value) < least:
            raise ConfigError(f"{where}: host {name}: {key}={value!r} is not allowed; use an integer >= {least}")
        counts[key] = int(value)
    iface = fields.get("iface")
    if iface is not None and not _IFNAME.match(iface):
        raise ConfigError(f"{where}: host {name}: iface={iface!r} is not an interface name (1-15 characters)")
    addr = fields.get("addr")
    if addr is not None and not re.match(r"^[A-Za-z0-9_.:-]+$", addr):
        raise ConfigError(f"{where}: host {name}: addr={addr!r} is not an address or host name")
    return Host(name, addr, counts["cores"], counts["gpus"], iface)


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed host list: ``a[01-03,7],b`` -> a01 a02 a03 a7 b (zero padding kept)."""
    names: list[str] = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?(?:,|$)", text.strip()):
        stem, ranges = match.group(1), match.group(2)
        if ranges is None:
            names.append(stem)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ConfigError(f"SLURM_JOB_NODELIST: {text!r} is not a Slurm host list (bad range {part!r})")
            width = len(lo)
            names.extend(f"{stem}{i:0{width}d}" for i in range(int(lo), int(hi or lo) + 1))
    return names


def slurm_hosts(env: Mapping[str, str]) -> list[Host]:
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise ConfigError("placement.source: slurm but SLURM_JOB_NODELIST is not set; run inside an allocation "
                          "(srun --ntasks-per-node=1 ...) or choose star, hostfile or torchrun")
    cores = _count(env, "SLURM_CPUS_ON_NODE", local_cores())
    gpus = _count(env, "SLURM_GPUS_ON_NODE", len([g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]))
    return [Host(name, None, cores, gpus) for name in expand_nodelist(nodelist)]


def torchrun_hosts(env: Mapping[str, str]) -> list[Host]:
    world, local = env.get("WORLD_SIZE"), env.get("LOCAL_WORLD_SIZE", "1")
    if not world or "GROUP_RANK" not in env:
        raise ConfigError("placement.source: torchrun but WORLD_SIZE / GROUP_RANK are not set; start "
                          "python -m harness.commands.node under torchrun --nproc-per-node=1 or choose another source")
    if not (world.isdigit() and local.isdigit() and int(local) >= 1 and int(world) % int(local) == 0):
        raise ConfigError(f"WORLD_SIZE: {world!r} / LOCAL_WORLD_SIZE {local!r} is not a whole number of nodes")
    nodes = int(world) // int(local)
    return [Host(f"node{i}", env.get("MASTER_ADDR") if i == 0 else None, local_cores(), local_gpus())
            for i in range(nodes)]


def node_rank(placement: Placement, env: Mapping[str, str] | None = None) -> int:
    """This host's index in ``placement.hosts`` (the agent's node rank) from the launcher's environment."""
    env = os.environ if env is None else env
    if placement.source is Source.STAR:
        return 0
    for key in ("NARROWBAND_NODE_RANK", "SLURM_NODEID", "GROUP_RANK", "NODE_RANK"):
        value = env.get(key)
        if value is not None:
            if not value.isdigit() or int(value) >= len(placement.hosts):
                raise ConfigError(f"{key}: {value!r} is not a node rank of this placement (0-{len(placement.hosts) - 1})")
            return int(value)
    raise ConfigError(f"node rank: none of NARROWBAND_NODE_RANK, SLURM_NODEID, GROUP_RANK, NODE_RANK is set; "
                      f"each host's agent needs its rank among the {len(placement.hosts)} hosts")


def _count(env: Mapping[str, str], key: str, default: int) -> int:
    value = env.get(key)
    if value is None or value == "":
        return default
    digits = re.match(r"^(\d+)", value)       # SLURM_GPUS_ON_NODE may read "4", cpus "16(x3)"
    if not digits:
        raise ConfigError(f"{key}: {value!r} is not a count")
    return int(digits.group(1))

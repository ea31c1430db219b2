"""Command-line and output-folder checks that need neither torch nor a role: one line each.

harness/__main__.py runs them before the Hydra app starts; harness.validate calls
``check_out_dir`` and ``check_gguf_header`` so the planner (and a multirun job) applies them too.
Each failure is a ConfigError (or a returned line) naming the key, the value and what is allowed:

- ``normalise_argv``: what a user may reasonably type, in the form Hydra wants: a percentage
  for a fraction key (``compressor.budget=1.6%`` is 0.016) and ``seeds=0,1,2`` as the list
  ``seeds=[0,1,2]``; ``seed=0,1,2`` without ``-m`` is explained (a sweep needs ``-m``).
- ``unknown_key``: a key the schema lacks, with the valid keys of its section, nearest first.
- ``check_out_dir``: the runs' folder is on a real filesystem, writable, and its parent exists
  (out_dir itself is created; missing parents are created only inside the project root).
- ``check_gguf_header``: a ``.gguf`` file begins like one and its metadata names an
  architecture, read with ``struct`` in milliseconds (the full check, with transformers' list of
  architectures, waits for the planner).
- ``sweep_points``: the override lists a multirun's command line expands to, each value of
  each swept key once (not the product), so a bad value anywhere in a sweep is found up front.
"""
from __future__ import annotations

import difflib
import os
import struct
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterable

from harness.errors import ConfigError
from harness.paths import project_root

# keys whose value is a fraction in [0, 1], so a percentage means value / 100
FRACTION_KEYS = ("compressor.budget", "federated.fraction", "federated.p_off", "federated.p_on",
                 "task.student_naive_frac")
# kernel interfaces and other filesystems that hold no files of ours (/proc/self/mountinfo's type)
PSEUDO_FILESYSTEMS = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
                                "securityfs", "pstore", "bpf", "configfs", "fusectl", "mqueue", "hugetlbfs",
                                "binfmt_misc", "autofs", "efivarfs", "nsfs", "rpc_pipefs", "selinuxfs"})
MULTIRUN_FLAGS = ("-m", "--multirun")


# --- the command line ---------------------------------------------------------------------------

def _key_value(arg: str) -> tuple[str, str] | None:
    """(key without +/~ prefix, value) of a plain ``key=value`` override, else None."""
    if "=" not in arg or arg.startswith("-"):
        return None
    key, value = arg.split("=", 1)
    return key.lstrip("+~"), value


def _percent(value: str) -> str | None:
    """'1.6%' -> '0.016' (exact decimal arithmetic); None when ``value`` is not a percentage."""
    if not value.endswith("%"):
        return None
    try:
        number = Decimal(value[:-1].strip())
    except InvalidOperation:
        return None
    return format((number / 100).normalize(), "f")


def normalise_argv(argv: list[str]) -> list[str]:
    """The command line with percentages of FRACTION_KEYS as fractions (each value of a comma
    sweep too) and ``seeds=0,1,2`` as ``seeds=[0,1,2]``; ConfigError for ``seed=0,1,2`` without -m."""
    multirun = any(a in MULTIRUN_FLAGS for a in argv)
    out = []
    for arg in argv:
        kv = _key_value(arg)
        if kv is None:
            out.append(arg)
            continue
        key, value = kv
        prefix = arg[: len(arg) - len(arg.lstrip("+~"))]
        if key in FRACTION_KEYS and "%" in value:
            parts = value.split(",")
            fractions = [_percent(p) for p in parts]
            if all(f is not None for f in fractions):
                arg = f"{prefix}{key}={','.join(fractions)}"
        elif key == "seeds" and "," in value and not value.lstrip().startswith("["):
            arg = f"{prefix}seeds=[{value}]"
        elif key == "seed" and "," in value and not multirun:
            raise ConfigError(f"seed: {value!r} is several seeds; run them all in one command with seeds=[{value}] "
                              f"(or seeds={value}), or as a Hydra sweep with -m seed={value}")
        out.append(arg)
    return out


def nearest_first(name: str, valid: Iterable[str]) -> list[str]:
    """``valid`` ordered by similarity to ``name`` (difflib's ratio), most similar first; ties alphabetical."""
    return sorted(valid, key=lambda v: (-difflib.SequenceMatcher(None, name.lower(), v.lower()).ratio(), v))


def unknown_key(key: str, valid: Iterable[str], given: str | None = None) -> str:
    """The line for a key the config lacks: ``compressor.budgt: 'budgt' is not a key of compressor;
    valid keys, nearest first: budget, budget_bytes, ...``. ``key``: the missing key's full name;
    ``given``: the override's key that reached it (``ondpolicy.steps`` for a missing ``ondpolicy``)."""
    parent, _, leaf = key.rpartition(".")
    where = f"of {parent}" if parent else "of the config"
    return (f"{given or key}: {leaf!r} is not a key {where}; valid keys, nearest first: "
            f"{', '.join(nearest_first(leaf, valid))}")


def added_unknown_key(arg: str) -> str | None:
    """The line for ``+section.key=value`` where ``section`` is a schema dataclass that has no ``key``
    (Hydra adds such a key silently: struct mode does not stop ``+``), else None. A ``+`` into an open
    mapping (compressor.options, variants) is fine."""
    from dataclasses import fields, is_dataclass

    from harness.conf.schema import Config

    if not arg.startswith("+") or arg.startswith("++") or "=" not in arg:
        return None
    key = arg[1:].split("=", 1)[0]
    node: Any = Config
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not is_dataclass(node):
            return None                     # an open mapping or a list: anything may be added
        names = {f.name: f for f in fields(node)}
        if part not in names:
            return unknown_key(".".join(parts[: i + 1]), names, given=key)
        default = names[part].default_factory() if callable(names[part].default_factory) else None
        node = default if is_dataclass(default) else None
    return None


def sweep_points(argv: list[str]) -> list[list[str]]:
    """The plain override lists a multirun command line expands to, enough to try every value once:
    the first value of every sweep, then each other value of each swept key with the rest at their
    first (1 + sum(len(values) - 1) lists, not the product). Flags are dropped."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    plain = [a for a in argv if not a.startswith("-")]
    parsed = OverridesParser.create().parse_overrides(plain)
    choices = []
    for arg, override in zip(plain, parsed):
        if override.is_sweep_override():
            values = list(override.sweep_string_iterator())
            choices.append([f"{override.get_key_element()}={v}" for v in values] or [arg])
        else:
            choices.append([arg])
    first = [c[0] for c in choices]
    points = [first]
    for i, values in enumerate(choices):
        for v in values[1:]:
            points.append(first[:i] + [v] + first[i + 1:])
    return points


# --- out_dir ------------------------------------------------------------------------------------

def filesystem_type(path: Path) -> str | None:
    """The type of the filesystem ``path`` lies on (longest mount point of /proc/self/mountinfo), or None."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:  # pragma: no cover - not Linux
        return None
    best, kind = "", None
    target = str(path)
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or not tail:
            continue
        mount = fields[4].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, tail[0]
    return kind


def out_dir_problem(value: Any, root: Path | None = None) -> str | None:
    """Why runs cannot be written under ``out_dir`` (relative to the project root), or None.

    Allowed: an existing writable folder, or a new one whose parent exists; inside the project root
    missing parents are created too (the default, outputs/runs, on a fresh clone)."""
    root = (root or project_root()).resolve()
    if value is None or str(value).strip() == "":
        return "out_dir: '' is empty; nothing was started; give a folder for the runs, e.g. out_dir=outputs/runs"
    path = Path(os.path.abspath(root / Path(str(value)).expanduser()))
    existing = path
    while not existing.exists():
        existing = existing.parent
    existing = existing.resolve()
    fs = filesystem_type(existing)
    if fs in PSEUDO_FILESYSTEMS:
        return (f"out_dir: {value}: on a {fs} filesystem (a kernel interface, not storage); nothing was started; "
                "choose a folder on a disk, e.g. out_dir=outputs/runs")
    if path.exists() and not path.is_dir():
        return f"out_dir: {value}: a file, not a folder; nothing was started; choose a folder for the runs"
    inside = existing == root or root in existing.parents
    if existing != path and existing != path.parent and not inside:
        return (f"out_dir: {value}: its parent folder {path.parent} does not exist; nothing was started or created; "
                "create it first (out_dir itself is created) or check the path for a typo")
    if not os.access(existing, os.W_OK | os.X_OK):
        why = "read-only file system" if _read_only(existing) else "permission denied"
        at = "" if existing == path else f" (at {existing})"
        return (f"out_dir: {value}: {why}{at}; nothing was started; choose a writable folder, "
                "e.g. out_dir=outputs/runs")
    return None


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:  # pragma: no cover
        return False


def check_out_dir(value: Any, root: Path | None = None) -> None:
    """ConfigError with ``out_dir_problem``'s line, if any."""
    problem = out_dir_problem(value, root)
    if problem:
        raise ConfigError(problem)


# --- GGUF header --------------------------------------------------------------------------------

_GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}   # value type -> bytes
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_VERSIONS = (2, 3)          # what gguf.GGUFReader reads
_HEADERS: dict[tuple[str, int, int], dict[str, str]] = {}


class _Truncated(Exception):
    pass


def read_gguf_strings(file: Path) -> dict[str, str]:
    """The string-valued metadata of a GGUF file (``general.architecture`` ...), parsed with struct:
    magic ``GGUF``, version (2 or 3), counts, then every key/value (arrays skipped). ValueError with
    the reason for a file that is not one. Remembered per process by path, size and mtime."""
    st = file.stat()
    memo = (str(file.resolve()), st.st_size, st.st_mtime_ns)
    if memo not in _HEADERS:
        with open(file, "rb") as f:
            _HEADERS[memo] = _parse_gguf(f, st.st_size)
    return dict(_HEADERS[memo])


def _parse_gguf(f, size: int) -> dict[str, str]:
    def take(n: int) -> bytes:
        data = f.read(n)
        if len(data) != n:
            raise _Truncated
        return data

    def u32() -> int:
        return struct.unpack("<I", take(4))[0]

    def u64() -> int:
        return struct.unpack("<Q", take(8))[0]

    def string() -> bytes:
        n = u64()
        if n > size:
            raise ValueError(f"a string of {n} bytes in a file of {size}")
        return take(n)

    magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"it begins with {magic!r}, not b'GGUF'")
    try:
        version = u32()
        if version not in _GGUF_VERSIONS:
            raise ValueError(f"GGUF version {version}; readable versions are {', '.join(map(str, _GGUF_VERSIONS))}")
        _tensors, kv_count = u64(), u64()
        if kv_count > size:
            raise ValueError(f"{kv_count} metadata entries in a file of {size} bytes")
        out: dict[str, str] = {}
        for _ in range(kv_count):
            key = string().decode("utf-8", "replace")
            kind = u32()
            if kind == _GGUF_STRING:
                out[key] = string().decode("utf-8", "replace")
            elif kind in _GGUF_SCALAR:
                take(_GGUF_SCALAR[kind])
            elif kind == _GGUF_ARRAY:
                item, count = u32(), u64()
                if item == _GGUF_STRING:
                    for _ in range(count):
                        f.seek(u64(), os.SEEK_CUR)
                elif item in _GGUF_SCALAR:
                    f.seek(count * _GGUF_SCALAR[item], os.SEEK_CUR)
                else:
                    raise ValueError(f"metadata {key!r} is an array of unknown type {item}")
                if f.tell() > size:
                    raise _Truncated
            else:
                raise ValueError(f"metadata {key!r} has unknown type {kind}")
    except _Truncated:
        raise ValueError("it ends inside its metadata (a truncated or partial download?)") from None
    return out


def check_gguf_header(file: Path, key: str = "model.path") -> dict[str, str]:
    """ConfigError unless ``file`` reads as a GGUF file whose metadata names its architecture; its strings."""
    try:
        strings = read_gguf_strings(file)
    except OSError as err:
        raise ConfigError(f"{key}: {str(file)!r} is not a readable GGUF file ({err.strerror})") from None
    except ValueError as err:
        raise ConfigError(f"{key}: {str(file)!r} is not a readable GGUF file ({err}); give a .gguf model file "
                          "or a Hugging Face model folder") from None
    if "general.architecture" not in strings:
        raise ConfigError(f"{key}: {str(file)!r} is a GGUF file without general.architecture in its metadata; "
                          "transformers cannot tell which model it holds")
    return strings

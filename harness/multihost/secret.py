"""The run's secret: what every agent of one allocation holds and no one else (docs/security.md).

Agents prove to each other that they hold it (harness.multihost.auth) before any operation; the
secret itself never crosses the network. It comes from one of (first found wins):

  NARROWBAND_SECRET_FILE   a file readable by its owner only (mode 0600 or stricter), on a
                           filesystem every host of the allocation sees (home, scratch);
                           made with ``python -m harness.node --new-secret FILE``
  NARROWBAND_SECRET        the secret itself, e.g. exported in the sbatch script and passed on by
                           srun (its default ``--export=ALL``)

Either holds at least MIN_CHARS characters (``--new-secret`` writes 64 hex digits: 256 bits).
Without one, or with one that is too short or readable by others, the agent ends with one line
naming the variable, the value's problem and what is allowed, exit 2, before anything exists.
"""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from harness.errors import ConfigError

SECRET_FILE_ENV = "NARROWBAND_SECRET_FILE"
SECRET_ENV = "NARROWBAND_SECRET"
MIN_CHARS = 32                  # characters of the secret (32 hex digits: 128 bits)
MAX_BYTES = 4096                # a secret file larger than this is not a secret file
HOW = (f"make one with `python -m harness.node --new-secret FILE` on the shared filesystem and export "
       f"{SECRET_FILE_ENV}=FILE on every host (docs/security.md)")


def load_secret(environ: dict[str, str] | None = None) -> bytes:
    """The run's secret as bytes (surrounding whitespace stripped); ConfigError (one line) when absent or unfit."""
    env = os.environ if environ is None else environ
    path = env.get(SECRET_FILE_ENV, "")
    if path:
        return _check(_read_file(Path(path)), SECRET_FILE_ENV, f"{path}'s content")
    if env.get(SECRET_ENV, ""):
        return _check(env[SECRET_ENV].encode(), SECRET_ENV, "its value")
    raise ConfigError(f"{SECRET_FILE_ENV}: not set (nor {SECRET_ENV}); the agents of one run admit only each other, "
                      f"by a secret they all hold: {HOW}")


def new_secret(path: Path) -> Path:
    """Write 64 random hex digits (256 bits) to ``path``, created with mode 0600; refuses to overwrite."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(f"--new-secret: {path} exists already; remove it or choose another file") from None
    except OSError as err:
        raise ConfigError(f"--new-secret: {path} cannot be created ({err.strerror})") from None
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(32) + "\n")
    return path


def _read_file(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as err:
        raise ConfigError(f"{SECRET_FILE_ENV}: {path} cannot be read ({err.strerror}); {HOW}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{SECRET_FILE_ENV}: {path} is not a regular file; {HOW}")
        if info.st_mode & 0o077:
            raise ConfigError(f"{SECRET_FILE_ENV}: {path} has mode {stat.S_IMODE(info.st_mode):04o}, readable or "
                              f"writable by others; allowed: 0600 or stricter (chmod 600 {path})")
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{SECRET_FILE_ENV}: {path} holds more than {MAX_BYTES} bytes; a secret file holds one line")
    return data


def _check(data: bytes, key: str, what: str) -> bytes:
    value = data.strip()
    if len(value) < MIN_CHARS:
        raise ConfigError(f"{key}: {what} is {len(value)} characters long; allowed: at least {MIN_CHARS} "
                          f"(`python -m harness.node --new-secret FILE` writes 64 hex digits)")
    return value

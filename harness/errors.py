"""The project's one user-input error, in a leaf module every layer may import.

A ``ConfigError`` message names the key, the value and what is allowed, on one line; the
app prints it and exits with status 2 before any namespace or process exists (in a multirun
sweep it raises it again, as that job's failure: harness/commands/app.py).
"""
from __future__ import annotations


class ConfigError(ValueError):
    """Bad user input: the message names the key, the value and what is allowed."""


class ClusterError(ValueError):
    """Bad launch input or a backend this machine cannot run; raised before anything is created."""

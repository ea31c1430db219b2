"""Starting a role process: fork it from the warm launcher (default) or exec a fresh interpreter.

Why fork: every role imports torch, transformers and peft, about 5 s of CPU each; a federated
run with a server and 3 clients on 2 cores spent ~12 s of its ~16 s importing. The launcher
imports them once (``preload``) and forks one child per role. The child does what
``ip netns exec NS`` does for the network (setns(2) into netem.names.NETNS_DIR/NS; the mount namespace
is left alone: nothing in a role reads /sys, counters come over netlink), starts its own
session, asks for SIGKILL when the launcher dies, points stdout/stderr at its log, takes the
role's environment and runs ``harness.cluster.role.main`` exactly as ``python -m harness.cluster.role`` would.
Children are separate processes with separate address spaces, talking over gloo on their own
veth: nothing is shared but read-only pages of the imported code.

``NARROWBAND_SPAWN=exec`` restores ``ip netns exec NS python -m harness.cluster.role`` (a fresh
interpreter per role). The launcher falls back to exec by itself when forking is not safe:
when it has initialised CUDA or when other threads run in it.
"""
from __future__ import annotations

import ctypes
import importlib
import io
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from harness.cluster.role import set_parent_death_signal
from netem.names import NETNS_DIR

SPAWN_ENV = "NARROWBAND_SPAWN"
MODES = ("fork", "exec")
CLONE_NEWNET = 0x40000000
PR_SET_NAME = 15


class SpawnError(RuntimeError):
    """A bad NARROWBAND_SPAWN value or a namespace the child cannot enter."""


def mode() -> str:
    """``fork`` or ``exec`` from $NARROWBAND_SPAWN (default fork)."""
    value = os.environ.get(SPAWN_ENV, "fork").strip().lower() or "fork"
    if value not in MODES:
        raise SpawnError(f"{SPAWN_ENV}: {value!r} is not allowed; choose one of {', '.join(MODES)}")
    return value


def preload(entry: str) -> None:
    """Import the entry's module and what it names in ``PRELOAD`` (a tuple of module names)."""
    module = importlib.import_module(entry.partition(":")[0])
    for name in getattr(module, "PRELOAD", ()):
        importlib.import_module(name)


def stop_idle_helpers() -> None:
    """Stop tqdm's monitor thread, the one helper thread a launcher can be left with. A progress bar
    starts it (here: transformers' bars while a GGUF is materialised into the cache, in the planner),
    and it runs until every bar is closed, waking every 10 s to look for stalled ones. One such bar is
    left unclosed, so while the monitor ran, every run that materialised its GGUF in the launcher
    started its roles with exec (the qwen2 GGUF smoke_hilo of tests/tasks/test_gguf_e2e.py: 20 s of
    user CPU with exec, 7 s forked). A later bar starts a new monitor."""
    tqdm_std = sys.modules.get("tqdm.std")
    monitor = getattr(getattr(tqdm_std, "tqdm", None), "monitor", None)
    if monitor is not None and monitor.is_alive():
        monitor.exit()
        tqdm_std.tqdm.monitor = None


def private_tqdm_lock() -> None:
    """Give tqdm a lock of this process's own (call it in a forked child). tqdm's default write lock
    holds a multiprocessing RLock, a semaphore that a forked child shares with its launcher: a role
    that ends (os._exit) while one of its threads holds it (transformers' "Loading weights" bar, or
    tqdm's monitor thread waking every 10 s) leaves it taken for good, and the launcher's next bar
    waits forever (seen once: a beside-two-`yes`-loops run of the suite hung in supervise.watch)."""
    tqdm_std = sys.modules.get("tqdm.std")
    if tqdm_std is None:
        return
    lock = threading.RLock()
    pending = [tqdm_std.tqdm]
    while pending:
        cls = pending.pop()
        if cls is tqdm_std.tqdm or "_lock" in vars(cls):
            cls._lock = lock
        pending.extend(cls.__subclasses__())


def single_threaded_launcher() -> None:
    """Keep this process's torch on one thread before it plans and forks roles. GNU OpenMP's thread
    pool does not survive fork: once the launcher has run a parallel torch op on two threads (the
    GGUF's dequantization while it is materialised, a compressor's dry encode in the planner), a
    forked role that asks for more than one thread (onpolicy.eval_threads, or a core share > 1 on a
    larger host) waits forever in its first parallel op (seen: hilo_real's learner stuck in its base
    evaluation at 0% CPU, failed as a hang). On one thread torch never starts that pool, so the roles
    start their own. The launcher does no training; its one heavy op, a GGUF's materialisation, runs
    once per cache."""
    torch = sys.modules.get("torch")
    if torch is None:
        import torch
    torch.set_num_threads(1)


def fork_unsafe_reason() -> str:
    """Why this process must not fork role children ("" when it may)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialised in the launcher"
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread() and t.is_alive()]
    if others:
        return f"threads run in the launcher ({', '.join(sorted(others))})"
    return ""


class ForkedProcess:
    """The parent's handle on a forked child: the part of subprocess.Popen that supervise uses."""

    def __init__(self, pid: int, args: list[str]):
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._reap(os.WNOHANG)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if timeout is None:
            while self.returncode is None:
                self._reap(0)
            return self.returncode
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self.returncode

    def _reap(self, flags: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:          # reaped elsewhere: its status is lost
            self.returncode = -int(signal.SIGKILL) if self.returncode is None else self.returncode
            return
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)


def fork_role(argv: list[str], env: dict[str, str], log_path: Path, beat_fd: int,
              netns: str | None) -> ForkedProcess:
    """Fork a child that runs ``harness.cluster.role.main(argv)`` inside ``netns`` (None: stay here)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:                                      # the child never returns from here
        code = 1
        try:
            code = _child(parent, argv, env, log_path, beat_fd, netns)
        except BaseException:                         # noqa: BLE001 - reported in the role's log
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:                     # noqa: BLE001
                    pass
            os._exit(code)
    return ForkedProcess(pid, ["fork", "harness.cluster.role", *argv, f"netns={netns}"])


def _child(parent: int, argv: list[str], env: dict[str, str], log_path: Path, beat_fd: int,
           netns: str | None) -> int:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    os.setsid()
    set_parent_death_signal()                         # (role.main asks again; the window is here)
    if os.getppid() != parent:                        # the launcher died before prctl took
        return 1
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)     # as the interpreter sets it at start-up
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    private_tqdm_lock()
    _redirect(log_path, keep=beat_fd)
    if netns is not None:
        enter_netns(libc, netns)
    os.environ.clear()
    os.environ.update(env)
    name = f"nb:{env.get('NARROWBAND_ROLE', 'role')}"[:15].encode()
    libc.prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)    # what ps and top show
    for handler in logging.root.handlers[:]:          # a fresh interpreter has none
        logging.root.removeHandler(handler)
    quiet_preloaded_bars()
    torch = sys.modules.get("torch")
    if torch is not None and env.get("OMP_NUM_THREADS", "").isdigit():
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    from harness.cluster import role

    sys.argv = ["harness.cluster.role", *argv]
    try:
        role.main(list(argv))
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def quiet_preloaded_bars() -> None:
    """No progress bars in a role's log file: transformers and huggingface_hub, imported by the
    launcher before the fork, read HF_HUB_DISABLE_PROGRESS_BARS only when first imported, so a
    forked role turns their bars off itself (their 'Loading weights' bars filled the logs with
    carriage returns). A spawned role gets the variable before it imports them (launch._base_env)."""
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def _redirect(log_path: Path, keep: int) -> None:
    """stdin from /dev/null, stdout and stderr to the log; close every other inherited fd."""
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
    # New streams on fds 1 and 2: the launcher's may be something else (pytest's capture).
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False),
                                                   line_buffering=True, write_through=True)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False),
                                                   line_buffering=True, write_through=True,
                                                   errors="backslashreplace")
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))


def enter_netns(libc, netns: str) -> None:
    """Move this thread into network namespace NETNS_DIR/netns (setns(2)); the mount namespace stays."""
    path = NETNS_DIR / netns
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise SpawnError(f"cannot open network namespace {netns!r} ({path}): {err.strerror}") from err
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise SpawnError(f"setns into {netns!r} failed: {os.strerror(errno)}")
    finally:
        os.close(fd)

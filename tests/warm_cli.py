"""``python -m MODULE ARGS`` for tests, forked from the warm test process instead of a fresh interpreter.

Why: a fresh ``python -m harness`` spends about 4.7 s of CPU importing torch, transformers and peft
before it reads its first argument (measured: ``python -c "import torch, transformers, peft"``). The
suite starts dozens of such launchers, and on CI's 2 cores beside other work that import time was
about a fifth of the suite's CPU. A test process has imported all of it already, so ``popen`` and
``run`` fork it. The child is a real process (its own pid, session and signals; it forks its own role
processes, as a launcher does) and runs the module exactly as ``python -m`` does
(``runpy.run_module(MODULE, run_name="__main__")``), after putting back what a fresh interpreter has:

- argv, the environment and the working directory given; stdin/stdout/stderr on the given files;
- default signal dispositions (SIGINT raises KeyboardInterrupt, SIGPIPE ignored, the rest default),
  no signal blocked; the parent's atexit handlers dropped and the child's own run at exit; non-daemon
  threads joined at exit; an uncaught KeyboardInterrupt ends the process by SIGINT, as CPython's does;
- Python's default warning filters, no logging handlers (pytest's capture handlers dropped), no
  faulthandler, no Hydra global state, and fresh ``sys.stdout``/``sys.stderr`` on fds 1 and 2.

What differs from a fresh interpreter: modules are imported already (so a module-level constant read
from the environment would be the test process's; harness code reads such values at call time),
torch keeps the test process's one intra-op thread (a launcher computes nothing; each role sets its
own count), and /proc/PID/cmdline shows the test process's command line.

``NARROWBAND_TEST_EXEC=1`` makes every call a fresh interpreter (``subprocess``) for a full-fidelity
run of the suite; tests that are about the interpreter's own start-up (``--help``'s speed, the
one-line errors of the real command, the installed entry point) call ``subprocess`` directly.
"""
from __future__ import annotations

import ctypes
import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Mapping, Sequence

from harness.cluster.spawn import ForkedProcess, enter_netns
from netem.names import NETNS_DIR

EXEC_ENV = "NARROWBAND_TEST_EXEC"
PIPE, DEVNULL, STDOUT = subprocess.PIPE, subprocess.DEVNULL, subprocess.STDOUT


def forking() -> bool:
    """False when $NARROWBAND_TEST_EXEC asks for fresh interpreters."""
    return os.environ.get(EXEC_ENV, "").strip().lower() not in ("1", "true", "yes")


class Forked(ForkedProcess):
    """The part of subprocess.Popen the tests use, for a forked child: the launcher's own handle on a forked
    role (harness.cluster.spawn.ForkedProcess: poll, wait, reaping) plus the child's pipes and signals."""

    def __init__(self, pid: int, args: list[str], stdout: IO | None, stderr: IO | None):
        super().__init__(pid, args)
        self.stdin, self.stdout, self.stderr = None, stdout, stderr

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Read both pipes to their end (in threads, so neither fills), then wait."""
        if input is not None:
            raise ValueError("Forked children take no input")
        got: dict[str, Any] = {}
        readers = [threading.Thread(target=lambda n=n, f=f: got.__setitem__(n, f.read()), daemon=True)
                   for n, f in (("out", self.stdout), ("err", self.stderr)) if f is not None]
        for t in readers:
            t.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in readers:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        return got.get("out"), got.get("err")

    def __enter__(self) -> "Forked":
        return self

    def __exit__(self, *exc: Any) -> None:
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        self.wait()


def popen(module: str, args: Sequence[str], *, cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
          stdin: Any = DEVNULL, stdout: Any = None, stderr: Any = None, text: bool = False,
          start_new_session: bool = False, netns: str | None = None) -> "Forked | subprocess.Popen":
    """Start ``python -m MODULE ARGS``: forked from this process, or a fresh interpreter with
    $NARROWBAND_TEST_EXEC. ``stdin/stdout/stderr`` take what subprocess.Popen takes (None, PIPE,
    DEVNULL, STDOUT for stderr, a file object or an fd). ``netns``: run it in that network namespace
    (netem.names.NETNS_DIR/NETNS) and only that one, as ``nsenter --net=...`` does: the child enters it
    with setns(2), a fresh interpreter runs under nsenter."""
    argv = [sys.executable, "-m", module, *args]
    environ = dict(os.environ if env is None else env)
    if not forking():
        prefix = [] if netns is None else ["nsenter", f"--net={NETNS_DIR / netns}"]
        return subprocess.Popen([*prefix, *argv], cwd=cwd, env=environ, stdin=stdin, stdout=stdout, stderr=stderr,
                                text=text, start_new_session=start_new_session)
    fds, parent_ends, child_ends = {}, {}, []
    for fd, how in ((0, stdin), (1, stdout), (2, stderr)):
        if how is PIPE:
            r, w = os.pipe()
            fds[fd], parent_ends[fd] = (r if fd == 0 else w), (w if fd == 0 else r)
            child_ends.append(fds[fd])
        elif how is DEVNULL:
            fds[fd] = os.open(os.devnull, os.O_RDWR)
            child_ends.append(fds[fd])
        elif how is STDOUT:
            fds[fd] = -1                       # stderr onto whatever stdout became
        elif how is None:
            fds[fd] = fd
        else:
            fds[fd] = how if isinstance(how, int) else how.fileno()
    for f in (sys.stdout, sys.stderr):
        f.flush()
    pid = os.fork()
    if pid == 0:
        _child(module, argv, environ, cwd, fds, start_new_session, [*child_ends, *parent_ends.values()],
               netns)  # never returns
    for fd in child_ends:
        os.close(fd)

    def wrap(fd: int, mode: str) -> IO | None:
        if fd not in parent_ends:
            return None
        raw = open(parent_ends[fd], mode + "b")
        return io.TextIOWrapper(raw, errors="replace") if text else raw
    if 0 in parent_ends:
        os.close(parent_ends[0])               # no input is ever written: the child reads EOF
    return Forked(pid, argv, wrap(1, "r"), wrap(2, "r"))


def run(module: str, args: Sequence[str], *, capture_output: bool = False, text: bool = False,
        timeout: float | None = None, cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
        ) -> subprocess.CompletedProcess:
    """subprocess.run for ``python -m MODULE ARGS`` (see popen)."""
    how = PIPE if capture_output else None
    proc = popen(module, args, cwd=cwd, env=env, stdout=how, stderr=how, text=text)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)  # type: ignore[arg-type]


def _child(module: str, argv: list[str], env: dict[str, str], cwd: str | Path | None, fds: dict[int, int],
           new_session: bool, extra: Sequence[int], netns: str | None = None) -> None:
    """In the forked child: become what ``python -m MODULE`` would be, run it, exit with its status."""
    code = 1
    try:
        if new_session:
            os.setsid()
        if netns is not None:                                # what a role's fork does (harness.cluster.spawn)
            enter_netns(ctypes.CDLL("libc.so.6", use_errno=True), netns)
        for fd in (0, 1, 2):
            target = 1 if fds[fd] == -1 else fds[fd]        # -1: stderr onto the stdout just set
            if target != fd:
                os.dup2(target, fd)
        for fd in set(extra) - {0, 1, 2}:                    # no pipe end stays open past the launcher
            os.close(fd)
        _fresh_interpreter_state()
        if cwd is not None:
            os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [argv[0], *argv[3:]]        # runpy puts the module's file in argv[0]
        code = _run_module(module)
    except BaseException:  # noqa: BLE001 - anything that escapes the set-up itself
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def _run_module(module: str) -> int:
    """runpy as ``python -m`` does; the exit status CPython would give."""
    import atexit
    import runpy

    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as done:
        code = _exit_code(done.code)
    except KeyboardInterrupt:
        import traceback

        traceback.print_exc()
        _shutdown(atexit)
        for f in (sys.stdout, sys.stderr):
            f.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)        # CPython ends an uncaught ^C by the signal itself
        return 130
    except BaseException:  # noqa: BLE001 - printed as the interpreter prints it
        import traceback

        traceback.print_exc()
        code = 1
    _shutdown(atexit)
    return code


def _shutdown(atexit_module: Any) -> None:
    """What Py_Finalize does before exit: join non-daemon threads, run atexit handlers."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001
        pass
    atexit_module._run_exitfuncs()


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _fresh_interpreter_state() -> None:
    import atexit
    import faulthandler
    import logging
    import warnings

    atexit._clear()                                  # the test process's handlers are not the child's
    for sig in range(1, signal.NSIG):
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass
    if faulthandler.is_enabled():
        faulthandler.disable()
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", buffering=1 if os.isatty(1) else -1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    logging.disable(logging.NOTSET)
    warnings.resetwarnings()                         # CPython's default filters (no -W, no dev mode)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.filterwarnings("ignore", category=category)
    tqdm_std = sys.modules.get("tqdm.std")
    if tqdm_std is not None:                         # its monitor thread is the parent's, not here: the
        tqdm_std.tqdm.monitor = None                 # child's first bar starts its own, as a fresh one's does
    if "hydra" in sys.modules:
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()

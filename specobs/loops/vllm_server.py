"""A vLLM OpenAI API server as a child process: started, waited for, stopped and gone.

A measurement that compares servers must never have two of them busy on the same machine (two
vLLM processes on the same cores slow each other several-fold), so :meth:`VllmServer.stop`
returns only once every process of the server's group (API server, engine core, workers) has
exited, and :func:`wait_quiet` waits for other work to calm down before the next one starts.

The server is ``python -m vllm.entrypoints.openai.api_server`` (what ``vllm serve`` runs; the
``vllm`` command itself is missing or broken in some builds), bound to 127.0.0.1 only, in a
process group of its own, its stdout and stderr written verbatim to a log file. A server that
exits or never answers ``/health`` raises :class:`ServerError`: one line that names its log.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

from specobs.errors import SpecobsError

#: The module ``vllm serve`` runs.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: Every server binds here only: a measurement is no reason to listen beyond this machine.
HOST = "127.0.0.1"
#: A log line worth quoting when a server dies before it is healthy (``ValueError: ...``).
_ERROR_LINE = re.compile(r"\b\w*(?:Error|Exception)\b:\s*\S")
_MAX_QUOTED = 240


class ServerError(SpecobsError):
    """A server that did not start, or did not stop: one line naming its log."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def machine_busy(seconds: float = 3.0) -> float:
    """Cores busy on the whole machine over the next ``seconds`` (Linux ``/proc/stat``; 0.0
    where it cannot be read)."""

    def busy() -> float:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields)
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")

    try:
        before = busy()
        time.sleep(seconds)
        return (busy() - before) / seconds
    except (OSError, ValueError):
        return 0.0


def wait_quiet(
    limit_s: float = 600.0,
    cores: float = 0.5,
    *,
    on_wait: Callable[[float], None] | None = None,
    measure: Callable[[], float] = machine_busy,
    pause_s: float = 10.0,
) -> float:
    """Wait, at most ``limit_s`` seconds, until other work uses under ``cores`` cores: a server
    measured beside a busy test run measures the test run. Returns the last reading (cores busy);
    ``on_wait`` hears each reading that made it wait. ``limit_s`` 0: one reading, no wait."""
    deadline = time.monotonic() + limit_s
    while (busy := measure()) >= cores and time.monotonic() < deadline:
        if on_wait is not None:
            on_wait(busy)
        time.sleep(max(0.0, min(pause_s, deadline - time.monotonic())))
    return busy


def _get(url: str, timeout: float) -> None:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        r.read()


def last_error(log_path: Path) -> str | None:
    """The last line of a server log that names an error (``ValueError: ...``), shortened."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(max(0, log_path.stat().st_size - 64 * 1024))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    found = next((line.strip() for line in reversed(lines) if _ERROR_LINE.search(line)), None)
    if found is None:
        return None
    return found if len(found) <= _MAX_QUOTED else found[: _MAX_QUOTED - 1] + "…"


class VllmServer:
    """One vLLM OpenAI API server: ``python -m vllm.entrypoints.openai.api_server ARGS --host
    127.0.0.1 --port PORT`` in ``cwd``, its output written to ``log_path``.

    Its environment is the caller's, without the names in ``unset``, with ``environment`` on
    top (a dict the caller may still change before :meth:`start`). Use it as a context manager:
    leaving the block stops it, whatever happened inside.
    """

    def __init__(
        self,
        args: Sequence[str],
        log_path: Path,
        *,
        port: int = 0,
        cwd: Path | None = None,
        environment: Mapping[str, str] | None = None,
        unset: Iterable[str] = (),
        python: str = sys.executable,
    ) -> None:
        for flag in ("--host", "--port"):
            if any(a == flag or a.startswith(flag + "=") for a in args):
                raise SpecobsError(f"{flag}: the server's address is chosen here (127.0.0.1 and a free port)")
        self.log_path = log_path
        self.cwd = cwd
        self.port = port or free_port()
        self.base_url = f"http://{HOST}:{self.port}"
        self.args = ["-m", SERVER_MODULE, *args, "--host", HOST, "--port", str(self.port)]
        self.python = python
        self.environment: dict[str, str] = dict(environment or {})
        self.unset = tuple(unset)
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The API server's process id (also its process group's), once started."""
        return None if self.process is None else self.process.pid

    @property
    def command(self) -> str:
        """The command as a user would type it (``python``, not this machine's interpreter path)."""
        return shlex.join(["python", *self.args])

    def start(self) -> None:
        """Start the server in a process group of its own; returns at once."""
        env = {k: v for k, v in os.environ.items() if k not in self.unset}
        env.update(self.environment)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        try:
            self.process = subprocess.Popen(
                [self.python, *self.args],
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            self._log.close()
            self._log = None
            raise ServerError(f"cannot start the vLLM server ({exc.strerror or exc}); see {self.log_path}") from None

    def wait_healthy(self, timeout: float = 300) -> None:
        """Return once ``/health`` answers; :class:`ServerError` naming the log if the server
        exits first or is not healthy within ``timeout`` seconds."""
        if self.process is None:
            raise ServerError("the vLLM server was never started")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                why = last_error(self.log_path)
                raise ServerError(
                    f"vLLM server exited with {self.process.returncode} before it was ready"
                    + (f" ({why})" if why else "")
                    + f"; see {self.log_path}"
                )
            try:
                _get(self.base_url + "/health", timeout=2)
                return
            except OSError:
                time.sleep(1)
        raise ServerError(f"vLLM server not healthy after {timeout:.0f} s; see {self.log_path}")

    def stop(self, timeout: float = 60) -> int | None:
        """SIGINT (the API server then stops its engine processes), wait until no process of
        its group is left, SIGKILL the group after ``timeout`` seconds. Returns the exit status."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGINT)
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait()
            wait_gone(self.process.pid, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
        return None if self.process is None else self.process.returncode

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs. Zombies do not count: an orphaned engine
    core that has exited waits for whoever adopted it to reap it, and may wait long."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):  # gone (or the id now belongs to someone else)
        return False
    try:
        stats = list(Path("/proc").glob("[0-9]*/stat"))
    except OSError:
        return True
    if not stats:
        return True  # no /proc to look at: trust the signal
    for stat in stats:
        try:
            rest = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(rest) > 2 and rest[2] == str(pgid) and rest[0] != "Z":
            return True
    return False


def wait_gone(pgid: int, timeout: float = 30) -> bool:
    """Wait until no process of group ``pgid`` is left (an engine core outlives its API server
    by a moment); SIGKILL the group after ``timeout`` seconds. True when it left by itself."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    return False


__all__ = [
    "HOST",
    "SERVER_MODULE",
    "ServerError",
    "VllmServer",
    "free_port",
    "group_alive",
    "machine_busy",
    "wait_gone",
    "wait_quiet",
]

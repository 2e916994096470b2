"""Real vLLM engines for ``specobs tune``: one plain and one speculative engine, resident, idle in turn.

Each engine lives in its own worker process (``python -m specobs.loops.vllm_bench``) running an
offline ``vllm.LLM`` in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so the scheduler's
batch-size → k lookup (``scheduler.dynamic_sd_lookup``, the table behind
``num_speculative_tokens_per_batch_size``) can be rewritten every few steps: every k is
measured in the same process. The parent sends one JSON command per line and waits for the
answer, so only one engine works at a time; the others are blocked reading their pipes and use
no CPU (the idle CPU seconds are measured and reported). A third, plain engine (``plain-b``)
measures at the start how far two processes doing the same work differ, then stops. specobs
capture records every step of every engine into ``events/`` under the output folder; vLLM's
own log goes beside it.

At tensor or pipeline parallel size > 1 the engine process keeps the engine core (and so the
scheduler whose table is rewritten), while vLLM spawns its model-runner workers as processes of
their own: each engine runs in a process group of its own, its CPU time counts its workers', and
an engine stopped is waited for until every process of its group has gone. Data parallel ranks
are engines of their own (vLLM's offline ``LLM`` refuses data parallel > 1): the engines here are
one rank.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from specobs.advice.paired import Block, StepAttribution
from specobs.errors import InputError, SpecobsError
from specobs.loops.offline import PLAIN, SECOND_PLAIN, SPECULATIVE, Schedule, tune
from specobs.loops.parallel import ONE_DEVICE, Parallel, VllmBuild, check_speculation, cpu_binding, installed_vllm
from specobs.loops.vllm_server import wait_gone
from specobs.records import TuneResult

#: Engine arguments specobs sets unless ``--engine-args`` says otherwise.
DEFAULT_ENGINE_ARGS: dict[str, Any] = {"seed": 0, "gpu_memory_utilization": 0.4}
#: A stretch generates again until it has lasted this long.
MIN_ROUND_S = 1.0
#: Steps per block when ks are interleaved inside a generation (the first counts for nothing).
BLOCK_STEPS = 4
MAX_PROMPTS = 10_000
#: At tensor or pipeline parallel > 1, vLLM's workers keep spinning on their queue for a while after
#: the last step (1 s in vLLM 0.32's shared-memory queue) before they sleep: before another engine
#: works, the last one waits until its workers use at most this share of a core.
SETTLE_SHARE = 0.1
#: How often the workers' CPU is read while they settle, and the longest wait.
SETTLE_POLL_S = 0.1
SETTLE_MAX_S = 5.0


def read_prompts(path: str) -> tuple[list[str], list[str]]:
    """Prompts from JSON Lines (objects with a string ``prompt``) or plain text (one per line).

    Returns (prompts, skipped lines as ``FILE:LINE: reason``); blank lines are ignored. The
    format is JSON Lines when the first non-blank line starts with ``{``.
    """
    try:
        with open(path, encoding="utf-8", errors="strict") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise InputError(path, exc.strerror or str(exc)) from None
    first = next((line for line in lines if line.strip()), "")
    jsonl = first.lstrip().startswith("{")
    prompts: list[str] = []
    skipped: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not jsonl:
            prompts.append(line)
            continue
        try:
            record = json.loads(line)
        except ValueError:
            skipped.append(f"{path}:{number}: not a JSON object")
            continue
        prompt = record.get("prompt") if isinstance(record, dict) else None
        if not isinstance(prompt, str) or not prompt:
            skipped.append(f"{path}:{number}: no string 'prompt'")
            continue
        prompts.append(prompt)
    return prompts, skipped


def mixed_lengths(largest: int, max_tokens: int) -> list[int]:
    """Output lengths of the verification workload: ``largest`` requests ending one after
    another, so the batch shrinks from ``largest`` to 1 and every batch size gets steps."""
    return [max(1, round(max_tokens * (i + 1) / largest)) for i in range(largest)]


class _Worker:
    """The parent's handle on one engine process."""

    def __init__(
        self, name: str, spec: dict[str, Any], log_path: Path, environment: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 (held for the process's lifetime)
        # The engine installs its own capture (after its warm-up); its workers, at tensor or pipeline
        # parallel, need the hooks from their start to hand the steps' timing over.
        env = {**os.environ, **(environment or {}), "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "SPECOBS_ENABLE": "workers"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "specobs.loops.vllm_bench"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            text=True,
            start_new_session=True,  # its group holds the parallel workers vLLM spawns: waited for at close
        )
        self.busy_seconds = 0.0
        self.idle_cpu = 0.0
        self._last_cpu: float | None = None
        self._send(spec)
        ready = self._receive(f"the {name} engine did not start")
        self._last_cpu = ready["cpu"]

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise SpecobsError(self._failure(f"the {self.name} engine stopped")) from None

    def _receive(self, what: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(timeout=30)
            raise SpecobsError(self._failure(what))
        answer = json.loads(line)
        if "error" in answer:
            raise SpecobsError(self._failure(f"{what}: {answer['error']}"))
        return answer

    def _failure(self, what: str) -> str:
        self._log.flush()
        tail: deque[str] = deque(maxlen=1)
        with open(self.log_path, errors="replace") as log:
            for line in log:
                if line.strip():
                    tail.append(line.strip())
        last = f" (last log line: {tail[0][:300]})" if tail else ""
        return f"{what}{last}; see {self.log_path}"

    def call(self, **command: Any) -> dict[str, Any]:
        """Send one command and wait for its answer. CPU the engine used since its last answer
        is idle CPU, except before ``settle``: that comes right after its own work, and is its
        workers still spinning from it, with no other engine working meanwhile."""
        self._send(command)
        answer = self._receive(f"the {self.name} engine failed during '{command['op']}'")
        if self._last_cpu is not None and "cpu_before" in answer and command["op"] != "settle":
            self.idle_cpu += max(answer["cpu_before"] - self._last_cpu, 0.0)
        self._last_cpu = answer.get("cpu_after", self._last_cpu)
        self.busy_seconds += answer.get("seconds", 0.0)
        return answer

    def close(self) -> None:
        """Stop the engine and wait until its workers have gone too: a worker still spinning
        would slow the engine measured next."""
        if self.process.poll() is None:
            try:
                self._send({"op": "stop"})
                self.process.wait(timeout=60)
            except (SpecobsError, subprocess.TimeoutExpired, OSError):
                self.process.kill()
                self.process.wait()
        wait_gone(self.process.pid, 60)
        self._log.close()


class VllmBench:
    """The :class:`specobs.loops.offline.Bench` of real vLLM: a plain and a speculative engine."""

    def __init__(
        self,
        *,
        model: str,
        speculative_config: dict[str, Any],
        prompts: Sequence[str],
        batch_sizes: Sequence[int],
        max_tokens: int,
        engine_args: dict[str, Any],
        out: Path,
        workload: str | None = None,
        min_round_s: float = MIN_ROUND_S,
        second_plain: bool = True,
        parallel: Parallel = ONE_DEVICE,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        """``parallel``: every engine's tensor and pipeline parallel sizes (one data-parallel
        rank); ``environment``: added to the engine processes' (a CPU binding, say)."""
        self.largest = max(batch_sizes)
        #: A second plain engine process runs first, to measure how far two processes differ.
        self.second_plain = second_plain
        self.max_tokens = max_tokens
        self.events = out / "events"
        self.events.mkdir(parents=True, exist_ok=True)
        self.max_k = int(speculative_config["num_speculative_tokens"])
        spec = dict(speculative_config)
        # The dynamic table at the largest k: the worker rewrites it between rounds.
        spec["num_speculative_tokens_per_batch_size"] = [[1, self.largest, self.max_k]]
        args = {**DEFAULT_ENGINE_ARGS, **engine_args, **parallel.engine_args(data_parallel=False)}
        args["max_num_seqs"] = max(int(args.get("max_num_seqs", 0)), self.largest)
        common = {
            "model": model, "engine_args": args, "prompts": list(prompts), "max_tokens": max_tokens,
            "largest": self.largest, "min_round_s": min_round_s, "events": str(self.events), "workload": workload,
        }  # fmt: skip
        self.workers: dict[str, _Worker] = {}
        self.released: dict[str, tuple[float, float]] = {}  # busy seconds, idle CPU of stopped engines
        #: Engines with parallel workers settle before another engine works (:data:`SETTLE_SHARE`).
        self.parallel = parallel.workers > 1
        self._last: str | None = None
        started = time.monotonic()
        env = dict(environment or {})
        try:  # one after the other: two engines starting at once slow each other
            self.workers[PLAIN] = _Worker(PLAIN, {**common, "speculative_config": None, "run_id": "tune-plain"},
                                          out / "engine-plain.log", env)  # fmt: skip
            self.workers[SPECULATIVE] = _Worker(
                SPECULATIVE, {**common, "speculative_config": spec, "run_id": "tune-speculative"},
                out / "engine-speculative.log", env,
            )  # fmt: skip
            if second_plain:
                self.workers[SECOND_PLAIN] = _Worker(
                    SECOND_PLAIN, {**common, "speculative_config": None, "run_id": "tune-plain-b"},
                    out / "engine-plain-b.log", env,
                )  # fmt: skip
        except BaseException:
            self.close()
            raise
        self.start_seconds = time.monotonic() - started
        for worker in self.workers.values():  # idle CPU counts from here: starting the others is not measuring
            worker.call(op="flush")
            worker.idle_cpu = 0.0

    def stretch(
        self,
        engine: str,
        schedules: Sequence[Schedule],
        batch_size: int | None,
        round_index: int,
        seed: int,
        seconds: float | None = None,
    ) -> list[Block]:
        if self._last != engine:
            self._settle()  # the last engine's workers still spin: wait them out before this one works
        self._last = engine
        answer = self.workers[engine].call(
            op="stretch",
            schedules=[[list(r) for r in s] for s in schedules],
            batch=batch_size,
            offset=round_index,
            seed=seed,
            seconds=seconds,
        )
        return [Block(*row) for row in answer["blocks"]]

    def _settle(self) -> None:
        """Wait until the engine that worked last has its parallel workers quiet (nothing to wait
        for on one device). What they burn until then is that engine's work, not idle CPU."""
        last = self.workers.get(self._last) if self._last is not None else None
        if self.parallel and last is not None:
            last.call(op="settle")
        self._last = None

    def release(self, engine: str) -> None:
        """Stop one engine for good (the second plain process, once it has measured the bias)."""
        self._settle()
        worker = self.workers.pop(engine, None)
        if worker is not None:
            self.released[engine] = (worker.busy_seconds, worker.idle_cpu)
            worker.close()

    def steps(self) -> Any:
        """Every step captured so far, as windows (every engine still running flushed first)."""
        from specobs.ingest import load

        self._settle()  # reading the steps takes a moment: no spinning counted as idle meanwhile
        for worker in self.workers.values():
            worker.call(op="flush")
        if not any(self.events.iterdir()):
            return None
        return load([str(self.events)]).windows

    def busy_seconds(self) -> dict[str, float]:
        return {name: w.busy_seconds for name, w in self.workers.items()} | {
            name: busy for name, (busy, _) in self.released.items()
        }

    def idle_cpu_seconds(self) -> dict[str, float]:
        return {name: w.idle_cpu for name, w in self.workers.items()} | {
            name: idle for name, (_, idle) in self.released.items()
        }

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()

    def __enter__(self) -> VllmBench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: What :func:`check_tune_arguments` calls each argument (the CLI passes its flags).
ARGUMENT_NAMES = {
    "model": "model",
    "speculative_config": "speculative_config",
    "batch_sizes": "batch_sizes",
    "max_tokens": "max_tokens",
    "budget_s": "budget_s",
    "min_round_s": "min_round_s",
    "prompts": "prompts",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
}


def check_tune_arguments(
    *,
    model: str,
    speculative_config: Any,
    batch_sizes: Sequence[int],
    max_tokens: int,
    budget_s: float,
    min_round_s: float,
    prompts: Sequence[str] | None,
    names: dict[str, str] = ARGUMENT_NAMES,
    parallel: Parallel = ONE_DEVICE,
    vllm: VllmBuild | None = None,
) -> None:
    """Raise a :class:`SpecobsError` naming the first argument ``run_tune`` cannot run with
    (``names``: what to call each; the CLI passes its flags). ``prompts`` None: not read yet.
    ``vllm``: the vLLM that will run (pipeline parallel with speculation crashes in some)."""
    spec = speculative_config
    if not isinstance(spec, dict):
        raise SpecobsError(f'{names["speculative_config"]}: expected a JSON object like \'{{"method": "ngram"}}\'')
    if not spec.get("method"):
        raise SpecobsError(f'{names["speculative_config"]}: needs a "method" (ngram, draft_model, eagle3, mtp, ...)')
    k = spec.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 32:
        raise SpecobsError(
            f'{names["speculative_config"]}: needs "num_speculative_tokens", the largest k to try (1 to 32)'
        )
    sizes = list(batch_sizes)
    whole = all(isinstance(b, int) and not isinstance(b, bool) for b in sizes)
    if not sizes or not whole or min(sizes) < 1 or len(set(sizes)) != len(sizes):
        shown = ",".join(str(b) for b in sizes)
        raise SpecobsError(f"{names['batch_sizes']} {shown}: batch sizes are distinct integers of 1 or more")
    for name, value, low in (("max_tokens", max_tokens, 1), ("min_round_s", min_round_s, 0)):
        if not isinstance(value, int | float) or not math.isfinite(value) or value < low:
            shown = f"{value:g}" if isinstance(value, int | float) else repr(value)
            raise SpecobsError(f"{names[name]} {shown}: must be at least {low:g}")
    if not isinstance(budget_s, int | float) or not math.isfinite(budget_s) or budget_s <= 0:
        raise SpecobsError(f"{names['budget_s']} {budget_s}: not a duration (use e.g. 90s, 10m, 1h)")
    if not os.path.exists(model) and (model.startswith((".", "/", "~")) or "/" not in model):
        raise SpecobsError(f"{names['model']} {model}: no such model folder")
    if prompts is not None and (not prompts or any(not isinstance(t, str) for t in prompts)):
        raise SpecobsError(f"{names['prompts']}: no prompts (a list of strings)")
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        size = getattr(parallel, key)
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise SpecobsError(f"{names[key]} {size}: must be a whole number of 1 or more")
    check_speculation(parallel, True, vllm, names["pipeline_parallel_size"])


def engine_environment(parallel: Parallel, environment: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the engine processes get on top of this one's environment: ``environment`` and, on a
    CPU build of vLLM whose automatic binding cannot start the workers, a core list per worker
    (:func:`specobs.loops.parallel.cpu_binding`; a binding already set is kept)."""
    extra = dict(environment or {})
    return cpu_binding(parallel, {**os.environ, **extra}, installed_vllm(), ranks=parallel.workers) | extra


def tune_workload(batch_sizes: Sequence[int], max_tokens: int, parallel: Parallel = ONE_DEVICE) -> str:
    """The verification workload in words, with the shape it ran at when not one device."""
    largest = max(batch_sizes)
    text = (
        f"{largest} requests of {max_tokens // largest or 1}-{max_tokens} tokens, "
        "staggered (the batch shrinks from the largest size to 1)"
    )
    if parallel.workers > 1:
        text += f", on engines of {Parallel(parallel.tensor_parallel_size, parallel.pipeline_parallel_size).text()}"
    if parallel.data_parallel_size > 1:
        text += (
            f", one data-parallel rank of {parallel.data_parallel_size} (vLLM drops a batch-size schedule at data "
            "parallel > 1: one k for every batch size)"
        )
    return text


def run_tune(
    *,
    model: str,
    speculative_config: dict[str, Any],
    prompts: Sequence[str],
    batch_sizes: Sequence[int],
    max_tokens: int,
    budget_s: float,
    engine_args: dict[str, Any],
    out: Path,
    seed: int = 0,
    on_progress: Callable[[str, int], None] | None = None,
    min_round_s: float = MIN_ROUND_S,
    parallel: Parallel | None = None,
    environment: Mapping[str, str] | None = None,
) -> TuneResult:
    """``specobs tune``: start the two engines, race, choose, verify, stop the engines.

    ``parallel``: the deployment's shape (None: one device). The engines run at its tensor and
    pipeline parallel sizes; with data parallel > 1 they are one rank and the answer is one k for
    every batch size (vLLM drops a batch-size schedule there). ``environment``: added to the
    engines' (see :func:`engine_environment`)."""
    parallel = parallel or ONE_DEVICE
    check_tune_arguments(
        model=model, speculative_config=speculative_config, batch_sizes=batch_sizes, max_tokens=max_tokens,
        budget_s=budget_s, min_round_s=min_round_s, prompts=prompts, parallel=parallel, vllm=installed_vllm(),
    )  # fmt: skip
    for key in engine_args:
        if key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            raise SpecobsError(f"engine_args {key}: pass the size as parallel (one place says what ran)")
    method = speculative_config.get("method")
    with VllmBench(
        model=model,
        speculative_config=speculative_config,
        prompts=prompts,
        batch_sizes=batch_sizes,
        max_tokens=max_tokens,
        engine_args=engine_args,
        out=out,
        workload="tune",
        min_round_s=min_round_s,
        parallel=parallel,
        environment=engine_environment(parallel, environment),
    ) as bench:
        if on_progress is not None:
            on_progress("started", 0)
        return tune(
            bench,
            method=str(method) if method else None,
            base_config=speculative_config,
            batch_sizes=batch_sizes,
            max_k=bench.max_k,
            budget_s=budget_s,
            seed=seed,
            workload=tune_workload(batch_sizes, max_tokens, parallel),
            on_progress=on_progress,
            started_s=bench.start_seconds,
            static_only=parallel.data_parallel_size > 1,
            parallel=parallel,
        )


# --- the worker process ---------------------------------------------------------------------------


def _descendants_cpu() -> float:  # pragma: no cover - runs in the worker process
    """CPU seconds of this process's live descendants (vLLM's parallel workers), from Linux
    ``/proc`` (0 where it cannot be read)."""
    parents: dict[int, list[tuple[int, float]]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parent, cpu = int(fields[1]), (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(parent, []).append((int(stat.parent.name), cpu))
    total = 0.0
    todo = [os.getpid()]
    while todo:
        for child, cpu in parents.get(todo.pop(), ()):
            total += cpu
            todo.append(child)
    return total


def _cpu_seconds() -> float:  # pragma: no cover - runs in the worker process
    """CPU seconds of this engine: its process and its parallel workers (an idle worker that
    spins is CPU the other engine loses)."""
    return time.process_time() + _descendants_cpu()


def _serve() -> None:  # pragma: no cover - runs in the worker process (tests drive it for real)
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # vLLM's prints go to the log, never into the protocol
    spec = json.loads(sys.stdin.readline())

    def reply(**answer: Any) -> None:
        protocol.write(json.dumps(answer) + "\n")

    try:
        engine = _Engine(spec)
    except Exception as exc:
        reply(error=f"{type(exc).__name__}: {exc}")
        return
    reply(ready=True, cpu=_cpu_seconds())
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "stop":
            engine.capture.recorder.close()
            reply(stopped=True)
            protocol.flush()
            os._exit(0)  # vLLM's atexit hooks can hang an in-process engine
        try:
            reply(**engine.run(command))
        except Exception as exc:
            reply(error=f"{type(exc).__name__}: {exc}")


class _Engine:  # pragma: no cover - runs in the worker process
    def __init__(self, spec: dict[str, Any]) -> None:
        import vllm

        from specobs.capture.config import CaptureConfig
        from specobs.capture.sinks import JsonlSink
        from specobs.vllm.instrument import instrument_engine

        self.prompts: list[str] = spec["prompts"]
        self.max_tokens: int = spec["max_tokens"]
        self.largest: int = spec["largest"]
        self.min_round_s: float = spec["min_round_s"]
        self.vllm = vllm
        args = spec["engine_args"]
        self.parallel = int(args.get("tensor_parallel_size", 1)) * int(args.get("pipeline_parallel_size", 1)) > 1
        self.llm = vllm.LLM(model=spec["model"], speculative_config=spec["speculative_config"], **spec["engine_args"])
        self.scheduler = self.llm.llm_engine.engine_core.engine_core.scheduler
        self.max_num_seqs = self.scheduler.scheduler_config.max_num_seqs
        self.num_spec_tokens = self.scheduler.num_spec_tokens
        self.async_scheduling = bool(getattr(self.scheduler.scheduler_config, "async_scheduling", False))
        # Warm-up, not captured: first steps pay one-off costs (compilation, the ngram JIT).
        for batch in (1, self.largest):
            self._generate(batch, 0, [self.max_tokens] * batch)
        self._settle()
        config = CaptureConfig(run_id=spec["run_id"], workload=spec.get("workload"))
        self.capture = instrument_engine(self.llm, sink=JsonlSink(spec["events"], spec["run_id"]), config=config)

    def _lookup(self, schedule: list[list[int]]) -> list[int] | None:
        """The scheduler's dense batch-size → k list for ``schedule`` (None: nothing to switch)."""
        if not schedule or getattr(self.scheduler, "dynamic_sd_lookup", None) is None:
            return None
        from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

        return list(
            build_dynamic_sd_schedule_lookup(
                [tuple(row) for row in schedule],
                vllm_max_batch_size=self.max_num_seqs,
                vllm_num_speculative_tokens=self.num_spec_tokens,
            )
        )

    def _generate(self, batch: int, offset: int, lengths: list[int], min_seconds: float = 0.0) -> tuple[int, float]:
        """Generate ``batch`` requests at once (the warm-up)."""
        params = [self.vllm.SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lengths]
        prompts = [self.prompts[(offset * batch + i) % len(self.prompts)] for i in range(batch)]
        started = time.perf_counter()
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outputs), time.perf_counter() - started

    def _stretch(
        self, schedules: list[list[list[int]]], batch: int | None, offset: int, seed: int, min_seconds: float
    ) -> list[list[float]]:
        """Generate for at least ``min_seconds`` (0: once), switching the k table between ``schedules``
        every :data:`BLOCK_STEPS` steps in cycles of a random order; each block's counted steps
        (:class:`specobs.advice.paired.StepAttribution`) as [cycle, candidate, tokens, seconds,
        steps]. ``batch`` requests of ``max_tokens`` each (a step counts only while all of them
        run), or None: the mixed workload. Every stretch with the same ``offset`` gets the same
        prompts, so the engines compare on identical work. A step's seconds run from its start
        to the next step's start (the last one's, to its end)."""
        from vllm.sampling_params import RequestOutputKind

        rng = random.Random(seed)
        tables = [self._lookup(s) for s in schedules]
        lengths = mixed_lengths(self.largest, self.max_tokens) if batch is None else [self.max_tokens] * batch
        params = [
            self.vllm.SamplingParams(
                temperature=0.0, max_tokens=n, ignore_eos=True, output_kind=RequestOutputKind.DELTA
            )
            for n in lengths
        ]
        first = offset * len(lengths)
        prompts = [self.prompts[(first + i) % len(self.prompts)] for i in range(len(lengths))]
        engine = self.llm.llm_engine
        attribution = StepAttribution(2 if self.async_scheduling else 1)
        blocks: dict[tuple[int, int], list[float]] = {}
        cycle, current, left = -1, 0, 0
        queue: list[int] = []
        started = time.perf_counter()
        call = 0
        while True:
            for i, (prompt, param) in enumerate(zip(prompts, params, strict=True)):
                engine.add_request(f"stretch-{seed}-{call}-{i}", prompt, param)  # DELTA outputs: tokens per step
            call += 1
            attribution.reset()
            previous: tuple[tuple[int, int] | None, float, float] | None = None  # (block, tokens, start)
            while engine.has_unfinished_requests():
                if left == 0:
                    if not queue:
                        cycle += 1
                        queue = rng.sample(range(len(schedules)), len(schedules))
                    current, left = queue.pop(), BLOCK_STEPS
                    if tables[current] is not None:
                        self.scheduler.dynamic_sd_lookup[:] = tables[current]
                left -= 1
                start = time.perf_counter()
                if previous is not None and previous[0] is not None:
                    self._count(blocks, previous[0], previous[1], start - previous[2])
                outputs = engine.step()
                tokens = sum(len(o.outputs[0].token_ids) for o in outputs if o.outputs)
                full = batch is None or sum(1 for o in outputs if o.outputs and o.outputs[0].token_ids) == batch
                counted = attribution.add(current) and full and tokens > 0
                previous = ((cycle, current) if counted else None, tokens, start)
            if previous is not None and previous[0] is not None:
                self._count(blocks, previous[0], previous[1], time.perf_counter() - previous[2])
            if time.perf_counter() - started >= min_seconds:
                break
        return [[c, i, t, s, n] for (c, i), (t, s, n) in blocks.items()]

    @staticmethod
    def _count(blocks: dict[tuple[int, int], list[float]], key: tuple[int, int], tokens: float, seconds: float) -> None:
        block = blocks.setdefault(key, [0.0, 0.0, 0])
        block[0] += tokens
        block[1] += seconds
        block[2] += 1

    def run(self, command: dict[str, Any]) -> dict[str, Any]:
        before = _cpu_seconds()
        op = command["op"]
        if op == "flush":
            self.capture.recorder.flush()
            return {"flushed": True, "cpu_before": before, "cpu_after": _cpu_seconds()}
        if op == "settle":
            self._settle()
            return {"settled": True, "cpu_before": before, "cpu_after": _cpu_seconds()}
        if op != "stretch":
            raise ValueError(f"unknown command {op!r}")
        begun = time.perf_counter()
        batch = command.get("batch")
        seconds = command.get("seconds")
        blocks = self._stretch(
            command["schedules"],
            None if batch is None else int(batch),
            int(command["offset"]),
            int(command["seed"]),
            self.min_round_s if seconds is None else float(seconds),
        )
        if not blocks:
            raise ValueError("no step counted")
        seconds = time.perf_counter() - begun
        return {"blocks": blocks, "seconds": seconds, "cpu_before": before, "cpu_after": _cpu_seconds()}

    def _settle(self) -> None:
        """Return once the parallel workers have stopped spinning (:data:`SETTLE_SHARE`), so the
        engine that works next has the cores to itself; their CPU until then counts as this
        engine's work, not as idle."""
        if not self.parallel:
            return
        deadline = time.perf_counter() + SETTLE_MAX_S
        last = _descendants_cpu()
        while time.perf_counter() < deadline:
            time.sleep(SETTLE_POLL_S)
            now = _descendants_cpu()
            if now - last <= SETTLE_SHARE * SETTLE_POLL_S:
                return
            last = now


if __name__ == "__main__":  # pragma: no cover
    _serve()

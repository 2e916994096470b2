"""Hooks inside vLLM's engine core that turn each engine step into one ``steps`` row.

Where the numbers come from (vLLM V1; read against vLLM 0.32, see docs/vllm.md):

- acceptance: ``Scheduler.make_spec_decoding_stats`` is called once per request that
  verified drafts in the step, with the drafted and accepted counts the scheduler computes
  in ``update_from_output``; the hook sees every call (even with stats logging off) and
  sums them the way ``SpecDecodingStats.observe_draft`` does, plus per position the drafts
  tried there with every earlier position accepted (``num_drafts_accepted_before_pos``);
- the row is finished when ``Scheduler.update_from_output`` returns: batch size (requests in
  the step), tokens generated, the step's wall time since ``Scheduler.schedule`` started it;
- timing: the model runner's ``execute_model`` (target forward that scores the drafts) and
  ``_sample`` (rejection sampling) make ``verify_seconds``; ``propose_draft_token_ids`` (the
  proposer) makes ``draft_seconds``. Model Runner V2 (``VLLM_USE_V2_MODEL_RUNNER``) has
  ``execute_model``, ``sample`` and ``speculator.propose`` instead. The CPU runner inherits
  the GPU runner's methods.

Runner and scheduler meet per step, keyed by the step number the ``schedule`` hook stamps on
the step's ``SchedulerOutput`` (its identity when it cannot be stamped), so acceptance and timing
of one step land in one row even when async scheduling overlaps steps. In one process (one GPU
per engine) they meet directly; where the model runs in worker processes (tensor or pipeline
parallel), the worker that returns the step's output times it and hands the seconds over with
that output (:mod:`specobs.capture.handoff`). An engine's first step is engine start: no step
time. The hook points are a table (:mod:`specobs.vllm.hookpoints`); one that this vLLM
version lacks is skipped with one warning naming what the rows then lack; every hook runs
vLLM's own code unchanged and only guards its own work.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import logging
import os
import platform
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specobs.capture.config import SPECOBS_FRONT_END, CaptureConfig
from specobs.capture.handoff import HANDOFF_ATTR, Joiner, WorkerTiming, stamp, stamp_of
from specobs.capture.recorder import NullRecorder, Recorder
from specobs.capture.row import StepRow
from specobs.capture.timing import clock_for_device, clock_of
from specobs.formulas import draft_position_counts, position_counts
from specobs.schema import METADATA_LABELS, REQUEST_KEY, request_key
from specobs.vllm.hookpoints import HOOK_POINTS, RUNNER_V1, RUNNER_V2, SCHEDULER, VLLM_CONFIG, lost
from specobs.vllm.spec_config import MODEL_FREE

logger = logging.getLogger("specobs")

#: Steps whose timing is kept while waiting for the scheduler to finish them.
MAX_OPEN_STEPS = 256
#: The clock of an engine's first step: engine start, not a step time (its timing is left out).
_FIRST = "first"


def event_files_only(config: CaptureConfig, engine: int, health: Any, resource: dict[str, str]) -> list:
    """The capture's own sinks: event files (the exporters are added by the entry point)."""
    return [config.sink()]


@dataclass(frozen=True)
class Wiring:
    """What the entry point plugs into the capture, so that the capture imports neither the
    exporters nor the online tuner: ``sinks(config, engine, health, resource)`` gives the
    recorder's sinks (``resource``: the engine's labels and run-metadata fields as strings, by
    their :class:`specobs.records.RunMetadata` names), ``tuner(config, scheduler, labels,
    recorder)`` starts an engine's online tuner (None: off). ``specobs.vllm.wiring()`` is the full one."""

    sinks: Callable[[CaptureConfig, int, Any, dict[str, str]], list] = event_files_only
    tuner: Callable[[CaptureConfig, Any, dict[str, Any], Any], Any] | None = None


class _Step:
    """Timing of one step, collected from the runner until the scheduler finishes the step."""

    __slots__ = ("draft", "started", "verify")

    def __init__(self, started: float | None = None) -> None:
        self.started = started
        self.verify: list[Any] = []
        self.draft: list[Any] = []


class _Drafts:
    """Per-step counts of the scheduler's per-request draft observations.

    The hot path (once per request) only counts the pair (drafted, accepted) in
    ``lengths``; the step's sums and its per-position lists are built from those counts once
    per step by :func:`specobs.formulas.position_counts` (a step has a handful of distinct pairs).
    """

    __slots__ = ("context", "delivered", "lengths", "own", "requests", "sampled")

    def __init__(self) -> None:
        self.lengths: dict[tuple[int, int], int] = {}
        self.requests: list[tuple[str, int, int]] = []
        self.sampled: list[int] | None = None  # tokens sampled per request, before stops trim them
        self.delivered: dict[int, tuple[float | None, float | None, str | None]] | None = None  # workers' timing
        self.context: tuple[float | None, int | None] = (None, None)  # the step's (mean, longest) context
        self.own: dict[str, int | None] | None = None  # each request's context (per-request rows only)


def _past_end(before: list[int] | None, sampled: Any, kept: int | None) -> int | None:
    """Accepted draft tokens the scheduler counted and then cut at a stop (``max_tokens``, EOS,
    a stop string): ``update_from_output`` counts acceptance first, then trims each request's
    sampled list in place where it stops. The last sampled token (the bonus or recovered one) is
    the first cut, so a request that lost c tokens had c − 1 accepted ones among them."""
    if before is None or kept is None or not isinstance(sampled, list) or len(before) != len(sampled):
        return None
    if sum(before) == kept:  # nothing trimmed: the common step
        return 0
    return sum(b - a - 1 for b, a in zip(before, map(len, sampled), strict=True) if b > a + 1)


def _context(requests: Any, request_ids: Any) -> tuple[float | None, int | None]:
    """(mean, longest) context of the step's requests, in tokens; (None, None) when none of
    them can be read.

    Read before ``update_from_output`` appends the step's tokens (and frees the requests that
    finish in it): ``Request.num_tokens`` is then the prompt plus the output so far, the context
    the step's drafts were conditioned on. Not ``num_computed_tokens`` (tokens whose KV is in the
    cache): it runs ahead under async scheduling (``schedule`` has already added the step's
    tokens and drafts) and counts a chunked prompt only as far as it is prefilled. Once per step
    on the engine's hot path: one loop, two numbers; a request without the attribute is skipped
    and nothing here raises.
    """
    try:
        get = requests.get
        total = longest = found = 0
        for request_id in request_ids:
            n = getattr(get(request_id), "num_tokens", None)
            if type(n) is int:
                found += 1
                total += n
                if n > longest:
                    longest = n
        return (total / found, longest) if found else (None, None)
    except Exception:  # a scheduler shaped otherwise: the row goes on without its context
        return None, None


class Capture:
    """Per-process capture state shared by the hooks."""

    def __init__(
        self,
        config: CaptureConfig,
        recorder: Recorder | NullRecorder | None = None,
        clock=None,
        wiring: Wiring | None = None,
    ) -> None:
        self.config = config
        self.wiring = wiring or Wiring()
        self._recorder = recorder
        self.clock = clock or clock_for_device()
        self._steps: OrderedDict[int, _Step] = OrderedDict()
        self._local = threading.local()
        self._labels: dict[int, dict[str, Any]] = {}
        self.installed: list[str] = []
        self.missing: list[str] = []
        self.originals: list[tuple[type, str, Any]] = []
        self._tuners: dict[int, Any] = {}  # per scheduler: its OnlineTuner, or None when off
        self.requests = _Requests(config.requests == "detailed") if config.requests else None  # SPECOBS_REQUESTS
        self._metadata: dict[int, dict[str, Any]] = {}  # per scheduler: its run metadata record
        self._described: set[int] = set()  # schedulers whose metadata was recorded
        self.runner: Any = None  # the model runner of this process, once it has executed a step
        self.has_scheduler = False  # this process schedules steps (the engine core); else a worker
        self._last_step = 0  # the step number of the latest step this process scheduled
        self._timed: set[int] = set()  # schedulers past their first step (engine start: no step time)
        self.worker = WorkerTiming()  # a worker's timing on its way to the engine core
        self.joiner = Joiner()  # the engine core's timing from its workers
        self._early_errors = 0  # failures counted before this process had a recorder (a worker never has one)
        self._facts_sent = False  # a worker has put its facts on their way to the engine core

    @property
    def recorder(self) -> Recorder | NullRecorder:
        if self._recorder is None:  # created on first use: processes that never step stay thread-free
            self._recorder = self._new_recorder({})
        return self._recorder

    def _new_recorder(self, labels: dict[str, Any]) -> Recorder:
        recorder = Recorder([], capacity=self.config.queue_size)
        recorder.hook_errors += self._early_errors
        # What the engine is and runs (its labels and run-metadata fields): the exporters name and bound them.
        resource = {k: str(v) for k, v in labels.items() if isinstance(v, str | int) and not isinstance(v, bool)}
        try:
            recorder.sinks = self.wiring.sinks(
                self.config, labels.get("engine") or 0, lambda: recorder.counters, resource
            )
        except Exception as exc:  # an exporter that cannot start must not stop event files
            recorder.sinks = [self.config.sink()]
            recorder.error("starting exporters", exc)
        return recorder

    def use_recorder(self, recorder: Recorder | NullRecorder) -> None:
        self._recorder = recorder

    def error(self, where: str, exc: BaseException) -> None:
        """Count a failure of specobs' own work. A worker process has no recorder (its rows are the
        engine core's): it counts here and sends the count with its timing."""
        if self._recorder is not None or self.has_scheduler:
            self.recorder.error(where, exc)
            return
        self._early_errors += 1
        self.worker.errors += 1
        if self._early_errors == 1:
            logger.warning("specobs: %s failed and was skipped (%s: %s)", where, type(exc).__name__, exc)

    # --- step timing, keyed by the SchedulerOutput of the step ---------------------------
    def _step(self, key: int) -> _Step:
        step = self._steps.get(key)
        if step is None:
            step = self._steps[key] = _Step()
            while len(self._steps) > MAX_OPEN_STEPS:
                self._steps.popitem(last=False)
        return step

    def step_scheduled(self, scheduler_output: Any, started: float) -> None:
        self.has_scheduler = True
        self._last_step += 1
        key = self._last_step if stamp(scheduler_output, self._last_step) else id(scheduler_output)
        self._step(key).started = started

    def hand_off(self, runner: Any, output: Any) -> None:
        """In a worker, at the end of a step's ``sample_tokens``: the step's spans go with its
        output to the engine core (an async output: with the output it later gives)."""
        step = runner.__dict__.get("_specobs_step")
        spans = self._steps.pop(step, None) if step is not None else None
        self._steps.clear()  # anything older belongs to steps whose output has already left
        if not runner.__dict__.get("_specobs_stamped"):
            return  # not a step the engine core scheduled (a runner's own warm-up): nothing goes anywhere
        if spans is not None:
            self.worker.finish(step, spans.draft, spans.verify)
        if getattr(output, "__dict__", None) is None:
            return  # nothing to carry it (no output): the seconds wait for the next output
        if not self._facts_sent:  # once: the run metadata's view of this worker
            self._facts_sent = True
            from specobs.vllm.engine_metadata import worker_facts

            self.worker.facts = worker_facts(runner, self.missing)
        payload = self.worker.payload()
        if payload is None:
            return
        get_output = getattr(output, "get_output", None)
        if not callable(get_output):  # a ModelRunnerOutput: it travels as it is
            _attach(output, payload)
            return
        # An AsyncModelRunnerOutput (Model Runner V2's AsyncOutput, V1's with async scheduling): the
        # object that travels is what get_output() gives (the async one even has its own
        # sampled_token_ids), so the timing goes on that.

        def with_timing() -> Any:
            result = get_output()  # vLLM's own: its errors are vLLM's
            _guard("hand-off", _attach, result, payload)
            return result

        output.get_output = with_timing

    def add_span(self, key: int | None, kind: str, span: Any) -> None:
        if key is not None:
            getattr(self._step(key), kind).append(span)

    # --- acceptance, summed while update_from_output runs --------------------------------
    def begin_update(self, model_runner_output: Any = None, scheduler: Any = None, output: Any = None) -> None:
        drafts = self._local.drafts = _Drafts()
        if output is not None:  # before the step's tokens are appended and finished requests freed
            scheduled = getattr(output, "num_scheduled_tokens", None) or ()
            requests = getattr(scheduler, "requests", None)
            drafts.context = _context(requests, scheduled)
            if self.config.per_request:  # each sampled request's own, for its per-request rows
                drafts.own = {rid: _context(requests, (rid,))[1] for rid in scheduled}
        attrs = getattr(model_runner_output, "__dict__", None)
        payload = attrs.get(HANDOFF_ATTR) if attrs else None
        if payload is not None:  # timing from the worker that ran the step
            errors = self.joiner.errors
            drafts.delivered = self.joiner.receive(payload)
            if self.joiner.errors > errors:  # the worker's own failures, counted with this engine's
                if self._recorder is not None:
                    self._recorder.hook_errors += self.joiner.errors - errors
                else:
                    self._early_errors += self.joiner.errors - errors
        sampled = getattr(model_runner_output, "sampled_token_ids", None)
        if isinstance(sampled, list):  # the scheduler trims these lists in place at a stop
            try:
                drafts.sampled = list(map(len, sampled))
            except TypeError:  # an output the capture cannot read: the step's row says why
                drafts.sampled = None

    def observe_draft(self, num_draft_tokens: int, num_accepted: int, invalid: Any, request_id: str) -> None:
        drafts = getattr(self._local, "drafts", None)
        if drafts is None or not num_draft_tokens:  # same guard as make_spec_decoding_stats
            return
        if invalid:
            num_draft_tokens -= invalid.get(request_id, 0)
        # Inlined (this runs once per request per step): one count per (drafted, accepted) pair.
        lengths = drafts.lengths
        key = (num_draft_tokens, num_accepted)
        lengths[key] = lengths.get(key, 0) + 1
        if self.config.per_request and _sampled(request_id, self.config.per_request_sample):
            drafts.requests.append((request_id, num_draft_tokens, num_accepted))
        if self.requests is not None:
            self.requests.observe(request_id, num_draft_tokens, num_accepted)

    def end_update(self) -> _Drafts | None:
        drafts = getattr(self._local, "drafts", None)
        self._local.drafts = None
        return drafts

    def finish_step(self, scheduler: Any, scheduler_output: Any, model_runner_output: Any, drafts: _Drafts) -> None:
        """Build and record the row of one finished step."""
        num_scheduled = getattr(scheduler_output, "num_scheduled_tokens", None) or {}
        if not num_scheduled:
            self._steps.pop(id(scheduler_output), None)
            return  # an idle step: nothing ran
        now = time.perf_counter()
        key = stamp_of(scheduler_output)
        step = self._steps.pop(id(scheduler_output) if key is None else key, None) or _Step()
        draft, verify, clock = self._timing(scheduler, key, step, drafts)
        # With dynamic speculation (a batch-size → k table) the step's k is the scheduled one.
        k = getattr(scheduler_output, "num_spec_tokens_to_schedule", None)
        if k is None or getattr(scheduler, "dynamic_sd_lookup", None) is None:
            k = getattr(scheduler, "num_spec_tokens", 0)
        k = int(k or 0)
        # Drafts made at an earlier step's k can be longer than this step's: lists grow to fit.
        num_drafts, accepted_pos, drafts_pos, tried_pos = position_counts(drafts.lengths, k)
        sampled = getattr(model_runner_output, "sampled_token_ids", None)
        generated = sum(map(len, sampled)) if isinstance(sampled, list) else None
        labels = self.labels(scheduler)
        context, context_max = drafts.context
        row = StepRow(
            ts=time.time(),
            **labels,
            batch_size=len(num_scheduled),
            num_scheduled_tokens=getattr(scheduler_output, "total_num_scheduled_tokens", None),
            context_length=context,
            context_length_max=context_max,
            num_spec_tokens=k,
            num_drafts=num_drafts,
            num_draft_tokens=sum(drafts_pos),
            num_accepted_tokens=sum(accepted_pos),
            num_accepted_tokens_per_pos=accepted_pos,
            num_drafts_per_pos=drafts_pos,
            num_drafts_accepted_before_pos=tried_pos,
            num_generated_tokens=generated,
            num_accepted_tokens_past_end=_past_end(drafts.sampled, sampled, generated),
            draft_seconds=draft,
            verify_seconds=verify,
            step_seconds=(now - step.started) if step.started is not None and clock != _FIRST else None,
            timing_clock=clock if clock != _FIRST else None,
        )
        if self._recorder is None:
            self._recorder = self._new_recorder({**self.metadata(scheduler), **labels})
        recorder = self._recorder
        if verify is None and clock != _FIRST:
            recorder.untimed_steps += 1
        if id(scheduler) not in self._described:
            self._describe(scheduler, recorder)
        recorder.record(row)
        for request_id, drafted, accepted in drafts.requests:
            accepted_one, drafted_one, tried_one = draft_position_counts(drafted, accepted, k)
            own = drafts.own.get(request_id) if drafts.own else None
            recorder.record(
                StepRow(
                    ts=row.ts,
                    **labels,
                    request_id=request_id,
                    batch_size=row.batch_size,
                    context_length=None if own is None else float(own),
                    context_length_max=own,
                    num_spec_tokens=k,
                    num_drafts=1,
                    num_draft_tokens=drafted,
                    num_accepted_tokens=accepted,
                    num_accepted_tokens_per_pos=accepted_one,
                    num_drafts_per_pos=drafted_one,
                    num_drafts_accepted_before_pos=tried_one,
                )
            )
        if self.config.online_tuner:
            self._tune(scheduler, row, recorder)

    def _timing(self, scheduler: Any, key: int | None, step: _Step, drafts: _Drafts) -> tuple[Any, Any, Any]:
        """(draft, verify, clock) of a finished step: spans timed in this process, seconds a worker
        sent with the step's output, or place-holders for seconds a later output will bring.

        An engine's first step is engine start (compilation, a worker's first forward, graph
        capture): no step time, ``_FIRST`` as the clock."""
        if id(scheduler) not in self._timed:
            self._timed.add(id(scheduler))
            return None, None, _FIRST
        if step.draft or step.verify:  # the runner runs in this process
            return step.draft or None, step.verify or None, clock_of(step.draft, step.verify)
        delivered = drafts.delivered
        if key is not None and delivered and key in delivered:
            draft, verify, clock = delivered[key]
            return draft, verify, clock
        if key is not None and self.joiner.seen:  # the worker sends timing: this step's is still on its way
            late_draft, late_verify = self.joiner.wait_for(key)
            return [late_draft], [late_verify], self.joiner.clock
        return None, None, None  # no timing reaches this process (counted as untimed)

    # --- the online tuner (SPECOBS_ONLINE_TUNER) ---------------------------------------------------
    @property
    def tuner(self) -> Any:
        """The online tuner of this process's first engine, or None (off, refused or failed)."""
        return next((t for t in self._tuners.values() if t is not None), None)

    def _tune(self, scheduler: Any, row: StepRow, recorder: Recorder | NullRecorder) -> None:
        key = id(scheduler)
        if key not in self._tuners:
            self._tuners[key] = None  # stays off when starting fails
            try:
                self._tuners[key] = self._start_tuner(scheduler, recorder)
            except Exception as exc:
                recorder.error("starting the online tuner", exc)
        tuner = self._tuners[key]
        if tuner is None:
            return
        try:
            tuner.on_step(row.batch_size, row.num_spec_tokens, row.num_generated_tokens, row.step_seconds)
            while tuner.decisions:
                recorder.record(tuner.decisions.popleft().to_row())
        except Exception as exc:  # a failing tuner turns itself off; the engine goes on
            self._tuners[key] = None
            recorder.error("online tuner", exc)

    def _start_tuner(self, scheduler: Any, recorder: Recorder | NullRecorder) -> Any:
        if self.wiring.tuner is None:
            logger.warning("specobs: SPECOBS_ONLINE_TUNER needs the vLLM plugin (specobs.vllm); online tuning off")
            return None
        return self.wiring.tuner(self.config, scheduler, self.labels(scheduler), recorder)

    def labels(self, scheduler: Any) -> dict[str, Any]:
        """The labels of every row of this engine, its run metadata's low-cardinality fields too."""
        key = id(scheduler)
        labels = self._labels.get(key)
        if labels is None:
            labels = {
                **labels_from_config(getattr(scheduler, "vllm_config", None)),
                "run_id": self.config.run_id,
                "workload": self.config.workload,
            }
            metadata = self.metadata(scheduler, labels)
            labels.update({name: metadata.get(name) for name in METADATA_LABELS})
            self._labels[key] = labels
        return labels

    def metadata(self, scheduler: Any, labels: dict[str, Any] | None = None) -> dict[str, Any]:
        """This engine's run metadata record (read once; empty when it cannot be read)."""
        key = id(scheduler)
        if key not in self._metadata:
            from specobs.vllm.engine_metadata import metadata_row

            self._metadata[key] = {}
            try:
                runner = self.runner
                self._metadata[key] = metadata_row(
                    getattr(scheduler, "vllm_config", None), runner, labels or self.labels(scheduler),
                    worker=self.joiner.facts, missing=self.missing,
                )  # fmt: skip
            except Exception as exc:  # rows still count without metadata
                if self._recorder is not None:
                    self._recorder.error("reading run metadata", exc)
                else:  # the recorder is made with these labels: not before they are known
                    logger.warning("specobs: reading run metadata failed and was skipped (%s: %s)",
                                   type(exc).__name__, exc)  # fmt: skip
        return self._metadata[key]

    def _describe(self, scheduler: Any, recorder: Recorder | NullRecorder) -> None:
        """Record this engine's metadata once, beside its event files."""
        self._described.add(id(scheduler))
        record = self.metadata(scheduler)
        if record:
            recorder.record(dict(record))


def _attach(output: Any, payload: Any) -> None:
    output.__dict__[HANDOFF_ATTR] = payload


def _sampled(request_id: str, share: float) -> bool:
    """A stable choice per request id, so a sampled request keeps all its rows."""
    return share >= 1.0 or (zlib.crc32(str(request_id).encode()) % 10_000) < share * 10_000


def labels_from_config(vllm_config: Any) -> dict[str, Any]:
    """model, method, draft model, engine index, platform and device of this engine."""
    labels: dict[str, Any] = {"platform": None, "device": None}
    try:
        model_config = getattr(vllm_config, "model_config", None)
        served = getattr(model_config, "served_model_name", None)
        if isinstance(served, list | tuple):
            served = served[0] if served else None
        labels["model"] = served or getattr(model_config, "model", None)
        spec = getattr(vllm_config, "speculative_config", None)
        labels["method"] = getattr(spec, "method", None) if spec is not None else None
        draft = getattr(spec, "model", None) if spec is not None else None
        # vLLM fills speculative_config.model with the method name for model-free drafters (ngram),
        # and with the target for MTP in the target's checkpoint; a draft named like its method
        # (EAGLE's folder "eagle") is a draft.
        free = labels["method"] in MODEL_FREE
        labels["draft_model"] = draft if draft and not free and draft != labels["model"] else None
        parallel = getattr(vllm_config, "parallel_config", None)
        # The data-parallel rank: vLLM runs each rank of a dense model as its own engine with
        # data_parallel_rank 0 and keeps the rank in data_parallel_index (0.32 and later).
        rank = getattr(parallel, "data_parallel_index", None)
        if not isinstance(rank, int):
            rank = getattr(parallel, "data_parallel_rank", 0)
        labels["engine"] = int(rank or 0)
    except Exception:  # labels are best effort; rows still count
        pass
    labels.update(platform_labels())
    return labels


@functools.cache
def platform_labels() -> dict[str, str | None]:
    """``rocm`` when torch was built for HIP, ``cuda`` for CUDA, else vLLM's device type; and the device name."""
    try:
        import torch

        if torch.cuda.is_available():
            kind = "rocm" if getattr(torch.version, "hip", None) else "cuda"
            return {"platform": kind, "device": torch.cuda.get_device_name(torch.cuda.current_device())}
    except Exception:
        pass
    kind = "cpu"
    try:
        from vllm.platforms import current_platform

        kind = str(getattr(current_platform, "device_type", "cpu") or "cpu")
    except Exception:
        pass
    return {"platform": kind, "device": _cpu_name() if kind == "cpu" else None}


def _cpu_name() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


# --- installing the hooks ---------------------------------------------------------------------

_CAPTURE: Capture | None = None
_LOCK = threading.Lock()


def current() -> Capture | None:
    """The capture of this process, if hooks are installed."""
    return _CAPTURE


def install(
    config: CaptureConfig | None = None,
    recorder: Recorder | NullRecorder | None = None,
    *,
    scheduler: type | None = None,
    runners: dict[str, type] | None = None,
    vllm_config: type | None = None,
    clock: Any = None,
    wiring: Wiring | None = None,
) -> Capture:
    """Install the hooks in this process (idempotent) and return the capture state.

    ``scheduler``, ``runners`` (``{"v1": cls, "v2": cls}``, Model Runner V1 and V2) and
    ``vllm_config`` are the classes to patch, vLLM's by default; ``clock`` makes the spans (default: the device's);
    ``wiring`` plugs in the exporters and the online tuner (:func:`specobs.vllm.wiring`).
    Tests pass fakes shaped like vLLM's (tests/capture/test_capture_accounting.py).
    """
    global _CAPTURE
    with _LOCK:
        if _CAPTURE is None:
            capture = Capture(config or CaptureConfig.from_env(), recorder, clock, wiring)
            _patch_all(capture, scheduler, runners, vllm_config)
            _CAPTURE = capture
            if capture.missing:
                logger.warning(
                    "specobs: hook points missing in this vLLM, skipped: %s. Rows will lack: %s",
                    ", ".join(capture.missing), "; ".join(lost(capture.missing)) or "nothing they need",
                )  # fmt: skip
        elif recorder is not None:
            _CAPTURE.use_recorder(recorder)
        return _CAPTURE


def uninstall() -> None:
    """Remove the hooks from this process and close its recorder (vLLM runs as if never hooked)."""
    global _CAPTURE
    with _LOCK:
        capture, _CAPTURE = _CAPTURE, None
    if capture is None:
        return
    for cls, name, original in reversed(capture.originals):
        setattr(cls, name, original)
    if capture._recorder is not None:
        capture._recorder.close()


def _patch_all(
    capture: Capture,
    scheduler: type | None = None,
    runners: dict[str, type] | None = None,
    vllm_config: type | None = None,
) -> None:
    """Patch every hook point of :data:`~specobs.vllm.hookpoints.HOOK_POINTS` that this vLLM has."""
    classes: dict[str, type | None] = {"scheduler": scheduler, "config": vllm_config}
    if scheduler is None:
        classes["scheduler"] = _import_class(SCHEDULER, capture)
    if runners is None:
        classes["runner_v1"] = _import_class(RUNNER_V1, capture)
        classes["runner_v2"] = _import_class(RUNNER_V2, capture, optional=True)
    else:
        classes["runner_v1"], classes["runner_v2"] = runners.get("v1"), runners.get("v2")
    if vllm_config is None and runners is None:  # vLLM's own classes (tests pass fakes, or none)
        classes["config"] = _import_class(VLLM_CONFIG, capture)
    for point in HOOK_POINTS:
        cls = classes.get(point.role)
        if cls is None or (point.needs_requests and capture.requests is None):
            continue
        if point.needs_requests and not any(w.endswith(".make_spec_decoding_stats") for w in capture.installed):
            continue  # request rows are built from the acceptance hook's observations
        _patch(capture, cls, point.method, _WRAPPERS[point.role, point.method], params=point.params)


def _import_class(path: str, capture: Capture, optional: bool = False) -> type | None:
    module, name = path.rsplit(".", 1)
    try:
        return getattr(importlib.import_module(module), name)
    except Exception:
        if not optional:
            capture.missing.append(path)
        return None


def _patch(capture: Capture, cls: type, name: str, wrapper_factory, params: tuple[str, ...] | None = None) -> None:
    where = f"{cls.__module__}.{cls.__qualname__}.{name}"
    original = cls.__dict__.get(name)
    if original is None or not callable(original):
        capture.missing.append(where)
        return
    if getattr(original, "__specobs__", False):
        return  # already hooked in this process
    if params is not None and tuple(inspect.signature(original).parameters)[: len(params)] != params:
        capture.missing.append(f"{where} (signature changed)")
        return
    wrapper = wrapper_factory(original, where)
    functools.update_wrapper(wrapper, original)
    wrapper.__specobs__ = True
    setattr(cls, name, wrapper)
    capture.installed.append(where)
    capture.originals.append((cls, name, original))


def _guard(where: str, fn, *args) -> Any:
    """Run specobs' own work; count and swallow its failures."""
    try:
        return fn(*args)
    except Exception as exc:
        capture = _CAPTURE
        if capture is not None:
            capture.error(where, exc)
        return None


def _wrap_schedule(original, where):
    def schedule(self, *args, **kwargs):
        started = time.perf_counter()
        out = original(self, *args, **kwargs)
        capture = _CAPTURE
        if capture is not None:
            _guard(where, capture.step_scheduled, out, started)
        return out

    return schedule


def _wrap_dp_schedule(original, where):
    """``VllmConfig._maybe_disable_dynamic_sd_for_data_parallel``, in the front end: before vLLM
    drops a batch-size schedule at data parallel > 1, note it and the data parallel size for the
    engine cores this process will start (they inherit its environment)."""

    def _maybe_disable_dynamic_sd_for_data_parallel(self, *args, **kwargs):
        _guard(where, _note_front_end, self)
        return original(self, *args, **kwargs)

    return _maybe_disable_dynamic_sd_for_data_parallel


def _note_front_end(vllm_config: Any) -> None:
    """The note, signed with this process's pid, unless this process is an engine core whose front
    end (its parent) wrote one: an engine core rebuilds its config after vLLM has reset a dense
    model's data parallel size to 1 and dropped the schedule, which must not overwrite it."""
    from specobs.vllm.engine_metadata import front_end

    if front_end().get("pid") == os.getppid():
        return
    size = getattr(getattr(vllm_config, "parallel_config", None), "data_parallel_size", None)
    spec = getattr(vllm_config, "speculative_config", None)
    schedule = getattr(spec, "num_speculative_tokens_per_batch_size", None) if spec is not None else None
    os.environ[SPECOBS_FRONT_END.name] = json.dumps({
        "pid": os.getpid(),
        "data_parallel_size": size if isinstance(size, int) else None,
        "schedule_configured": [[int(x) for x in r] for r in schedule] if schedule else None,
    })  # fmt: skip


def _wrap_make_stats(original, where):
    def make_spec_decoding_stats(
        self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens, num_invalid_spec_tokens, request_id
    ):
        capture = _CAPTURE
        if capture is not None:
            _guard(
                where, capture.observe_draft, num_draft_tokens, num_accepted_tokens, num_invalid_spec_tokens, request_id
            )
        return original(
            self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens, num_invalid_spec_tokens, request_id
        )

    return make_spec_decoding_stats


def _wrap_update(original, where):
    def update_from_output(self, scheduler_output, model_runner_output, *args, **kwargs):
        capture = _CAPTURE
        if capture is None:
            return original(self, scheduler_output, model_runner_output, *args, **kwargs)
        _guard(where, capture.begin_update, model_runner_output, self, scheduler_output)
        try:
            out = original(self, scheduler_output, model_runner_output, *args, **kwargs)
        finally:
            drafts = _guard(where, capture.end_update)
        if drafts is not None:
            _guard(where, capture.finish_step, self, scheduler_output, model_runner_output, drafts)
        return out

    return update_from_output


# --- finished-request rows (SPECOBS_REQUESTS) ----------------------------------------------------


class _Requests:
    """Each running request's acceptance, from the same per-step (drafted, accepted) pairs the
    scheduler hands ``make_spec_decoding_stats`` — where vLLM's own per-request metrics
    (``RequestSpecDecodeMetrics.observe``) take theirs — and its row once it finishes.

    Per request: ``[num_draft_tokens, histogram, per_step_drafted, per_step_accepted]`` (the
    lists only when ``detailed``); the histogram grows to the largest count accepted and is
    padded to k + 1 elements, as vLLM's is, when the row is built.
    """

    __slots__ = ("detailed", "open", "randomized")

    def __init__(self, detailed: bool) -> None:
        self.detailed = detailed
        self.open: dict[str, list[Any]] = {}
        self.randomized = _request_ids_randomized()

    def observe(self, request_id: str, drafted: int, accepted: int) -> None:
        state = self.open.get(request_id)
        if state is None:
            state = self.open[request_id] = [0, [0] * (accepted + 1), [], []]
        state[0] += drafted
        histogram = state[1]
        if accepted >= len(histogram):
            histogram.extend([0] * (accepted + 1 - len(histogram)))
        histogram[accepted] += 1
        if self.detailed:
            state[2].append(drafted)
            state[3].append(accepted)

    def finished(self, scheduler: Any, request: Any, labels: dict[str, Any]) -> dict[str, Any] | None:
        """The row of a request vLLM is freeing (None for an engine that does not speculate)."""
        request_id = str(request.request_id)
        state = self.open.pop(request_id, None)
        k = int(getattr(scheduler, "num_spec_tokens", 0) or 0)
        if k <= 0 and state is None:
            return None
        drafted, histogram, per_step_drafted, per_step_accepted = state or (0, [], [], [])
        histogram = histogram + [0] * (k + 1 - len(histogram))
        reason = request.get_finished_reason()
        return {
            "ts": time.time(),
            **labels,
            REQUEST_KEY: request_key(_external_id(request_id, self.randomized)),
            "finish_reason": None if reason is None else str(reason),
            "num_prompt_tokens": request.num_prompt_tokens,
            "num_output_tokens": request.num_output_tokens,
            "num_spec_tokens": k,
            "num_spec_steps": sum(histogram),
            "num_draft_tokens": drafted,
            "num_accepted_tokens": sum(i * n for i, n in enumerate(histogram)),
            "acceptance_histogram": histogram,
            "per_step_drafted": per_step_drafted if self.detailed else None,
            "per_step_accepted": per_step_accepted if self.detailed else None,
        }


def _request_ids_randomized() -> bool:
    """vLLM appends ``-`` and 8 random hex digits to every request id (``InputProcessor.assign_request_id``)
    unless ``VLLM_DISABLE_REQUEST_ID_RANDOMIZATION`` is set."""
    try:
        import vllm.envs as envs

        return not envs.VLLM_DISABLE_REQUEST_ID_RANDOMIZATION
    except Exception:
        return True


_SUFFIX_DIGITS = frozenset("0123456789abcdef")


def _external_id(request_id: str, randomized: bool = True) -> str:
    """The id the caller gave (``RequestOutput.request_id``): the engine's id less vLLM's random suffix.

    ``_external_id("7-1a2b3c4d") == "7"``
    """
    if randomized and len(request_id) > 9 and request_id[-9] == "-" and _SUFFIX_DIGITS.issuperset(request_id[-8:]):
        return request_id[:-9]
    return request_id


def _request_finished(capture: Capture, scheduler: Any, request: Any) -> None:
    requests = capture.requests
    if requests is not None:
        row = requests.finished(scheduler, request, capture.labels(scheduler))
        if row is not None:
            capture.recorder.record(row)


def _wrap_free_request(original, where):
    def _free_request(self, request, *args, **kwargs):
        capture = _CAPTURE
        if capture is not None:
            _guard(where, _request_finished, capture, self, request)
        return original(self, request, *args, **kwargs)

    return _free_request


def _start(capture: Capture | None):
    return _guard("timing", capture.clock.start) if capture is not None else None


def _stop(span) -> None:
    if span is not None:
        _guard("timing", span.stop)


_CURRENT = threading.local()


def _wrap_sample_tokens(original, where):
    def sample_tokens(self, *args, **kwargs):
        _CURRENT.step = self.__dict__.get("_specobs_step")
        capture = _CAPTURE
        if capture is not None:
            _guard(where, _hook_v2_speculator, self, capture)
        try:
            out = original(self, *args, **kwargs)
        finally:
            _CURRENT.step = None
        if capture is not None and not capture.has_scheduler:  # a worker: the engine core is elsewhere
            _guard(where, capture.hand_off, self, out)
        return out

    return sample_tokens


def _scheduled_step(self, args: tuple, kwargs: dict) -> int:
    """The step a runner call belongs to: the step number the engine core stamped on its scheduler
    output (which a worker receives with it), else that object's identity (one process)."""
    scheduler_output = args[0] if args else kwargs.get("scheduler_output")
    key = stamp_of(scheduler_output)
    return id(scheduler_output) if key is None else key


def _executed_step(self, args: tuple, kwargs: dict) -> int | None:
    """As :func:`_scheduled_step`, remembered on the runner for the ``sample_tokens`` that follows.
    None for Model Runner V2's dummy runs (start-up, an idle data-parallel rank): no step of the engine's."""
    if kwargs.get("dummy_run"):
        return None
    scheduler_output = args[0] if args else kwargs.get("scheduler_output")
    key = stamp_of(scheduler_output)
    self.__dict__["_specobs_stamped"] = key is not None
    if key is None:
        key = id(scheduler_output)
    self.__dict__["_specobs_step"] = key
    capture = _CAPTURE
    if capture is not None and capture.runner is None:  # for the run metadata (attention backends)
        capture.runner = self
    return key


def _sampled_step(self, args: tuple, kwargs: dict) -> int | None:
    """The step being sampled (set by the ``sample_tokens`` hook)."""
    return getattr(_CURRENT, "step", None)


def _wrap_timed(kind: str, step=_sampled_step):
    """Time a runner method as part of ``kind`` (draft or verify) of the step ``step`` names."""

    def factory(original, where):
        def timed(self, *args, **kwargs):
            capture = _CAPTURE
            span = _start(capture)
            out = original(self, *args, **kwargs)
            _stop(span)
            if capture is not None:
                key = _guard(where, step, self, args, kwargs)  # remembered even when the clock failed
                if span is not None:
                    _guard(where, capture.add_span, key, kind, span)
            return out

        return timed

    return factory


_wrap_execute = _wrap_timed("verify", _executed_step)
_wrap_propose = _wrap_timed("draft", _scheduled_step)

#: The wrapper of each hook point (role, method); the table itself is in ``hookpoints``.
_WRAPPERS: dict[tuple[str, str], Callable[[Any, str], Any]] = {
    ("scheduler", "schedule"): _wrap_schedule,
    ("scheduler", "update_from_output"): _wrap_update,
    ("scheduler", "make_spec_decoding_stats"): _wrap_make_stats,
    ("scheduler", "_free_request"): _wrap_free_request,
    ("runner_v1", "execute_model"): _wrap_execute,
    ("runner_v1", "sample_tokens"): _wrap_sample_tokens,
    ("runner_v1", "_sample"): _wrap_timed("verify"),
    ("runner_v1", "propose_draft_token_ids"): _wrap_propose,
    ("runner_v2", "execute_model"): _wrap_execute,
    ("runner_v2", "sample_tokens"): _wrap_sample_tokens,
    ("runner_v2", "sample"): _wrap_timed("verify"),
    ("config", "_maybe_disable_dynamic_sd_for_data_parallel"): _wrap_dp_schedule,
}


def _hook_v2_speculator(runner: Any, capture: Capture) -> None:
    """Model Runner V2 keeps its proposer in ``runner.speculator``: time its ``propose``."""
    speculator = getattr(runner, "speculator", None)
    propose = getattr(speculator, "propose", None)
    if speculator is None or propose is None or getattr(propose, "__specobs__", False):
        return

    def timed_propose(*args, **kwargs):
        span = _start(_CAPTURE)
        out = propose(*args, **kwargs)
        _stop(span)
        if _CAPTURE is not None and span is not None:
            _guard("speculator.propose", _CAPTURE.add_span, getattr(_CURRENT, "step", None), "draft", span)
        return out

    timed_propose.__specobs__ = True  # type: ignore[attr-defined]
    speculator.propose = timed_propose


__all__ = ["Capture", "current", "install", "labels_from_config", "uninstall"]

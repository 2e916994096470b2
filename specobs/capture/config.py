"""Capture settings from the environment (read once, when capture starts).

Every variable specobs reads is an :class:`EnvironmentVariable` constant below (the OTLP ones
in :mod:`specobs.exporters.otel`), and code reads them only through those constants. The table
of names, defaults and meanings is generated from them into docs/vllm.md
(``python docs/generate.py``); it is not repeated here.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class EnvironmentVariable:
    """One environment variable: its name, the value used when it is unset, what it does.

    ``default`` is the value code falls back to (None: unset, or computed when needed, which
    ``shown_default`` then describes for the docs). Read it with :meth:`text`, :meth:`flag` or
    :meth:`number`, never with ``os.environ`` and the name spelt out again.
    """

    name: str
    default: str | None
    meaning: str
    shown_default: str | None = None
    #: Earlier names still read (deprecated), when ``name`` is unset.
    aliases: tuple[str, ...] = ()

    def raw(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The value as set (under ``name``, else an earlier name); None when unset or empty."""
        env = os.environ if environ is None else environ
        for name in (self.name, *self.aliases):
            value = env.get(name)
            if value:
                return value
        return None

    def text(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The value as set, else the default."""
        value = self.raw(environ)
        return value if value is not None else self.default

    def flag(self, environ: Mapping[str, str] | None = None) -> bool:
        """``1``/``true``/``yes``/``on`` → True, ``0``/``false``/``no``/``off`` → False (any case);
        anything else, or unset, → the default's answer."""
        for value in (self.raw(environ), self.default):
            word = (value or "").strip().lower()
            if word in _TRUE or word in _FALSE:
                return word in _TRUE
        return False

    def number(self, environ: Mapping[str, str] | None = None) -> float:
        """The value as a number; the default when unset or not a number."""
        for value in (self.raw(environ), self.default):
            try:
                return float((value or "").strip())
            except ValueError:
                continue
        raise ValueError(f"{self.name}: no numeric default")


SPECOBS_ENABLE = EnvironmentVariable(
    "SPECOBS_ENABLE",
    "0",
    "`1` (or `true`, `yes`, `on`) turns capture on in every vLLM process; `workers`: only in vLLM's worker "
    "processes (tensor/pipeline parallel), for a process that installs the capture itself with "
    "`specobs.vllm.instrument()` on an in-process engine core",
)
#: ``SPECOBS_ENABLE``'s value that installs the hooks in vLLM's worker processes only.
WORKERS_ONLY = "workers"
SPECOBS_DIR = EnvironmentVariable(
    "SPECOBS_DIR",
    "specobs-events",
    "folder for event files (one file set per process: `specobs-<run>-p<pid>-<n>.jsonl`)",
    shown_default="`./specobs-events`",
)
SPECOBS_FORMAT = EnvironmentVariable(
    "SPECOBS_FORMAT",
    "jsonl",
    "`jsonl` (flushed every second, crash-safe) or `parquet` (a part every `SPECOBS_PARQUET_SECONDS`, "
    "atomic rename); anything else means `jsonl`",
)
SPECOBS_RUN_ID = EnvironmentVariable(
    "SPECOBS_RUN_ID",
    None,
    "labels every row of the run (the front-end passes its id to the engine cores)",
    shown_default="UTC time + random",
)
SPECOBS_WORKLOAD = EnvironmentVariable("SPECOBS_WORKLOAD", None, "a label for the traffic (chat, code, …)")
SPECOBS_PER_REQUEST = EnvironmentVariable(
    "SPECOBS_PER_REQUEST",
    "0",
    "`1`: also write one row per request per step: `request_id`, drafted, accepted — never prompt text",
)
SPECOBS_PER_REQUEST_SAMPLE = EnvironmentVariable(
    "SPECOBS_PER_REQUEST_SAMPLE", "1.0", "share of requests with per-request rows (stable per request id)"
)
SPECOBS_REQUESTS = EnvironmentVariable(
    "SPECOBS_REQUESTS",
    None,
    "`summary` (or `1`): one row per finished request (hashed request id, prompt/output tokens, drafted, "
    "accepted, acceptance histogram — never prompt text) in `specobs-<run>-requests-p<pid>-<n>.jsonl`; "
    "`detailed` adds every verify step's drafted and accepted counts; off when unset",
)
SPECOBS_QUEUE_SIZE = EnvironmentVariable(
    "SPECOBS_QUEUE_SIZE", "65536", "rows held in memory before new ones are dropped and counted"
)
SPECOBS_ROTATE_MB = EnvironmentVariable("SPECOBS_ROTATE_MB", "64", "JSONL file size (MB) before rotating")
SPECOBS_ROTATE_SECONDS = EnvironmentVariable("SPECOBS_ROTATE_SECONDS", "3600", "JSONL file age before rotating")
SPECOBS_PARQUET_SECONDS = EnvironmentVariable(
    "SPECOBS_PARQUET_SECONDS", "60", "seconds per Parquet part (and the most a SIGKILL loses in Parquet)"
)
SPECOBS_PROMETHEUS = EnvironmentVariable(
    "SPECOBS_PROMETHEUS",
    None,
    "`host:port`: serve specobs metrics from each engine-core process (port + data-parallel rank)",
)
SPECOBS_OTEL = EnvironmentVariable(
    "SPECOBS_OTEL", "1", "`0` keeps OpenTelemetry export off even when `OTEL_EXPORTER_OTLP_*` is set"
)
SPECOBS_HOOKS = EnvironmentVariable(
    "SPECOBS_HOOKS",
    "1",
    "`0`: stats-only mode (no engine patching; acceptance per step from vLLM's own stats, no timing)",
)
SPECOBS_ONLINE_TUNER = EnvironmentVariable(
    "SPECOBS_ONLINE_TUNER",
    None,
    "the online tuner inside the serving engine (docs/tune.md): `observe` measures and suggests, `explore` also "
    "runs a few steps at neighbouring k, `apply` also switches a bucket's k and rolls back when it measures worse; "
    "off when unset (`SPECOBS_TUNE`, its earlier name, is still read)",
    aliases=("SPECOBS_TUNE",),
)
SPECOBS_ONLINE_TUNER_SHARE = EnvironmentVariable(
    "SPECOBS_ONLINE_TUNER_SHARE",
    "0.05",
    "with `explore` or `apply`: the most of a batch bucket's steps run at another k (earlier name: "
    "`SPECOBS_ONLINE_TUNER_SHARE`)",
    aliases=("SPECOBS_TUNE_SHARE",),
)
SPECOBS_ONLINE_TUNER_CHUNK_STEPS = EnvironmentVariable(
    "SPECOBS_ONLINE_TUNER_CHUNK_STEPS",
    "32",
    "steps of one k in one bucket per tokens/s measurement of the online tuner (earlier name: "
    "`SPECOBS_ONLINE_TUNER_CHUNK_STEPS`)",
    aliases=("SPECOBS_TUNE_CHUNK_STEPS",),
)

SPECOBS_FRONT_END = EnvironmentVariable(
    "SPECOBS_FRONT_END",
    None,
    "set by specobs in vLLM's front-end process for the engine cores it starts, not by users: JSON of what "
    "an engine core no longer sees (the data parallel size, which vLLM resets to 1 in each rank of a dense "
    "model, and a batch-size schedule vLLM dropped at data parallel > 1)",
)

#: The capture variables, in the order docs/vllm.md lists them.
VARIABLES: tuple[EnvironmentVariable, ...] = (
    SPECOBS_ENABLE,
    SPECOBS_DIR,
    SPECOBS_FORMAT,
    SPECOBS_RUN_ID,
    SPECOBS_WORKLOAD,
    SPECOBS_PER_REQUEST,
    SPECOBS_PER_REQUEST_SAMPLE,
    SPECOBS_REQUESTS,
    SPECOBS_QUEUE_SIZE,
    SPECOBS_ROTATE_MB,
    SPECOBS_ROTATE_SECONDS,
    SPECOBS_PARQUET_SECONDS,
    SPECOBS_PROMETHEUS,
    SPECOBS_OTEL,
    SPECOBS_HOOKS,
    SPECOBS_ONLINE_TUNER,
    SPECOBS_ONLINE_TUNER_SHARE,
    SPECOBS_ONLINE_TUNER_CHUNK_STEPS,
    SPECOBS_FRONT_END,
)
_FORMATS = ("jsonl", "parquet")
_MB = 1024 * 1024


#: What ``SPECOBS_REQUESTS`` may ask for.
REQUEST_LEVELS = ("summary", "detailed")


def request_rows(value: str | None) -> str | None:
    """``summary`` or ``detailed`` from ``SPECOBS_REQUESTS`` (a true flag means ``summary``), else None."""
    word = (value or "").strip().lower()
    if word in REQUEST_LEVELS:
        return word
    return "summary" if word in _TRUE else None


def default_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def _default(variable: EnvironmentVariable) -> float:
    return float(variable.default or 0)


@dataclass(frozen=True)
class CaptureConfig:
    enabled: bool = False
    workers_only: bool = False  # SPECOBS_ENABLE=workers: hooks in vLLM's worker processes only
    directory: str = str(SPECOBS_DIR.default)
    format: str = str(SPECOBS_FORMAT.default)
    run_id: str = field(default_factory=default_run_id)
    workload: str | None = None
    per_request: bool = False
    per_request_sample: float = _default(SPECOBS_PER_REQUEST_SAMPLE)
    requests: str | None = None  # summary | detailed (SPECOBS_REQUESTS): one row per finished request
    queue_size: int = int(_default(SPECOBS_QUEUE_SIZE))
    rotate_bytes: int = int(_default(SPECOBS_ROTATE_MB) * _MB)
    rotate_seconds: float = _default(SPECOBS_ROTATE_SECONDS)
    parquet_seconds: float = _default(SPECOBS_PARQUET_SECONDS)
    prometheus: str | None = None
    otel: bool = True
    hooks: bool = True  # False: stats-only mode (SPECOBS_HOOKS=0)
    online_tuner: str | None = None  # observe | explore | apply (SPECOBS_ONLINE_TUNER)
    online_tuner_share: float = _default(SPECOBS_ONLINE_TUNER_SHARE)
    online_tuner_chunk_steps: int = int(_default(SPECOBS_ONLINE_TUNER_CHUNK_STEPS))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CaptureConfig:
        """The settings the environment (``os.environ`` unless given) asks for."""
        env = os.environ if environ is None else environ
        fmt = (SPECOBS_FORMAT.text(env) or "").strip().lower()
        workers_only = (SPECOBS_ENABLE.raw(env) or "").strip().lower() == WORKERS_ONLY
        return cls(
            enabled=workers_only or SPECOBS_ENABLE.flag(env),
            workers_only=workers_only,
            directory=SPECOBS_DIR.text(env) or cls.directory,
            format=fmt if fmt in _FORMATS else cls.format,
            # The front-end and engine-core processes start apart; a run id set by the user
            # (or inherited from the parent through the environment) keeps them together.
            run_id=SPECOBS_RUN_ID.raw(env) or default_run_id(),
            workload=SPECOBS_WORKLOAD.raw(env),
            per_request=SPECOBS_PER_REQUEST.flag(env),
            per_request_sample=min(max(SPECOBS_PER_REQUEST_SAMPLE.number(env), 0.0), 1.0),
            requests=request_rows(SPECOBS_REQUESTS.text(env)),
            queue_size=int(SPECOBS_QUEUE_SIZE.number(env)),
            rotate_bytes=int(SPECOBS_ROTATE_MB.number(env) * _MB),
            rotate_seconds=SPECOBS_ROTATE_SECONDS.number(env),
            parquet_seconds=SPECOBS_PARQUET_SECONDS.number(env),
            prometheus=SPECOBS_PROMETHEUS.raw(env),
            otel=SPECOBS_OTEL.flag(env),
            hooks=SPECOBS_HOOKS.flag(env),
            online_tuner=(SPECOBS_ONLINE_TUNER.text(env) or "").strip().lower() or None,
            online_tuner_share=min(max(SPECOBS_ONLINE_TUNER_SHARE.number(env), 0.0), 0.5),
            online_tuner_chunk_steps=max(int(SPECOBS_ONLINE_TUNER_CHUNK_STEPS.number(env)), 1),
        )

    def sink(self) -> Any:
        """The event-file sink these settings ask for."""
        # Imported here, not above: the plugin reads these settings in every vLLM process, and
        # the sinks pull in polars, which a process without capture must not pay for.
        from specobs.capture.sinks import JsonlSink, ParquetSink

        if self.format == "parquet":
            return ParquetSink(self.directory, self.run_id, part_seconds=self.parquet_seconds)
        return JsonlSink(
            self.directory, self.run_id, rotate_bytes=self.rotate_bytes, rotate_seconds=self.rotate_seconds
        )

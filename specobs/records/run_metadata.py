"""Run metadata: what ran, where, and which fields make engines incomparable."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specobs.dimensions import ENVIRONMENT, ENVIRONMENT_EXTRA, fields_of
from specobs.records.result import (
    Result,
)
from specobs.schema import METADATA_KEY, METADATA_LABELS, METADATA_VERSION

#: Run-metadata fields that make two engines' numbers incomparable when they differ, in the
#: order a comparison names them (method, draft model, k and schedule are the configuration's).
ENVIRONMENT_FIELDS = (*fields_of(ENVIRONMENT), *ENVIRONMENT_EXTRA)


@dataclass(frozen=True)
class RunMetadata(Result):
    """What one engine ran on and with, captured once per engine (docs/schema.md, "Run metadata").

    Every field is optional: a value that could not be read is None, never a guess.
    ``schedule`` is vLLM's ``num_speculative_tokens_per_batch_size`` as the engine holds it
    (``(low, high, k)`` per range); ``schedule_configured`` the one the user asked for, where the
    source shows it (a log's ``non-default args``: vLLM drops the schedule with data parallel > 1);
    ``environment`` holds only the variables that change what
    the engine runs (:data:`specobs.vllm.engine_metadata.ENVIRONMENT`).
    """

    ts: float | None = None
    run_id: str | None = None
    engine: int | None = None
    pid: int | None = None
    model: str | None = None
    model_path: str | None = None  # the target as vLLM loads it (``model`` is the served name)
    method: str | None = None
    draft_model: str | None = None
    num_speculative_tokens: int | None = None
    #: The speculative config's settings as the source shows them (vLLM's field names: a log's
    #: ``non-default args``, or every non-default field of the engine's config); None when the
    #: source does not show them (a start-up line alone, an older capture).
    speculative_config: Mapping[str, Any] | None = None
    schedule: tuple[tuple[int, int, int], ...] | None = None
    schedule_configured: tuple[tuple[int, int, int], ...] | None = None  # what was asked for (logs)
    max_num_seqs: int | None = None
    rejection_sample_method: str | None = None
    draft_sample_method: str | None = None
    vllm_version: str | None = None
    platform: str | None = None
    device: str | None = None
    device_arch: str | None = None
    attention_backend: str | None = None
    draft_attention_backend: str | None = None
    graph_mode: str | None = None
    model_runner: str | None = None  # v1 | v2 (VLLM_USE_V2_MODEL_RUNNER)
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    #: Where draft and verify were timed: ``engine_core`` (the model runner runs in the engine-core
    #: process) or ``worker`` (tensor/pipeline parallel: the output rank, tensor-parallel rank 0 of
    #: the last pipeline stage, handing its timing over with each step's output).
    timing_source: str | None = None
    #: What the rows lack because this vLLM release has no such hook point (empty: nothing).
    missing_hooks: tuple[str, ...] | None = None
    source: str | None = field(default=None, metadata={"json": False}, compare=False)  # the file it came from

    def to_row(self) -> dict[str, Any]:
        """The record written beside the event files: ``specobs_metadata`` marks it."""
        return {METADATA_KEY: METADATA_VERSION, **self.to_dict()}

    def labels(self) -> dict[str, Any]:
        """The low-cardinality fields every step row carries as labels (``schema.METADATA_LABELS``)."""
        return {name: getattr(self, name) for name in METADATA_LABELS}

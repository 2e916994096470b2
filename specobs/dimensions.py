"""The dimensions specobs splits numbers by: each one named once, with everything that names it.

In the manner of OpenTelemetry's semantic conventions: a :class:`Dimension` is one thing that can
change acceptance or cost (the method, k, the batch size, the attention backend, the vLLM release,
the context length…), with the column that holds it, where that column comes from (a row label,
the run metadata joined per run, or derived from a row's numbers), its Prometheus label and
OpenTelemetry resource attribute where it is exported, its cardinality budget, and its roles.
Every key list, ``--by``, the dashboard's group-bys and filters, the exporters' labels and the
engine info metric are derived from :data:`DIMENSIONS`, never typed again::

    by_name("attention_backend").column == "attention_backend"
    [d.name for d in having(GROUP)][:4] == ["source", "run", "model", "engine"]

This module imports nothing of specobs: it is the bottom of the package, beside the schema.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Where a dimension's column comes from.
ROW = "row"  #: a label every steps/windows row carries (``schema.LABELS``) or a row column
METADATA = "metadata"  #: a run-metadata field, joined to the rows of its run and engine
DERIVED = "derived"  #: computed from a row's numbers (a bucket, an hour)

#: Roles: what a dimension is used for.
GROUP = "group"  #: offered by ``--by`` and the dashboard's group-by
CELL = "cell"  #: a key of the report's cells (so any ``--by`` is served from one pass over the rows);
#: METADATA dimensions are joined to the cells by run and engine instead (one value per engine)
TARGET = "target"  #: part of what a method's fit is keyed on (a recommendation compares methods on one target)
ENVIRONMENT = "environment"  #: two runs differing in it are not comparable (``specobs compare`` names it)
SERIES = "series"  #: a label on every exported step series (the engine's identity)
INFO = "info"  #: a label of ``specobs_engine_info`` (what the engine runs on and with)
RESOURCE = "resource"  #: an OpenTelemetry resource attribute of the engine
COMPARE = "compare"  #: a dimension the dashboard's Compare page offers to put two values side by side
FILTER = "filter"  #: a filter of the dashboard's sidebar (a row label, so every kept sum can be filtered by it)


@dataclass(frozen=True)
class Dimension:
    """One dimension: ``name`` is its ``--by`` name and its key in the JSON."""

    name: str
    column: str  #: the column rows hold it in (after the run metadata is joined)
    source: str  #: ROW, METADATA or DERIVED
    roles: frozenset[str]
    field: str | None = None  #: the :class:`specobs.records.RunMetadata` field that carries it
    prometheus: str | None = None  #: the Prometheus label, where it is exported
    otel: str | None = None  #: the OpenTelemetry resource attribute, where it is exported
    budget: int | None = None  #: distinct exported values before the rest are folded into ``other``
    description: str = ""


def _dim(
    name: str,
    source: str,
    roles: str,
    *,
    column: str | None = None,
    field: str | None = None,
    prometheus: str | None = None,
    otel: str | None = None,
    budget: int | None = None,
    description: str = "",
) -> Dimension:
    return Dimension(
        name, column or name, source, frozenset(roles.split()), field, prometheus, otel, budget, description
    )


#: Every dimension, in the order ``--by`` lists them and a comparison names them.
# fmt: off
DIMENSIONS: tuple[Dimension, ...] = (
    _dim("source", ROW, "group cell compare", description="the input file or scrape the rows came from"),
    _dim("run", ROW, "group cell compare", column="run_id", field="run_id", description="the capture's run id"),
    _dim(
        "model", ROW, "filter group cell target series resource compare", field="model", prometheus="model_name",
        otel="specobs.model", budget=32, description="the target model (served name)",
    ),
    _dim(
        "engine", ROW, "filter group cell series resource compare", field="engine", prometheus="engine",
        otel="vllm.engine.index", budget=16, description="the engine's index (data-parallel rank)",
    ),
    _dim(
        "method", ROW, "filter group cell target series resource compare", field="method", prometheus="method",
        otel="vllm.speculative.method", description="the speculative method (vLLM's name)",
    ),
    _dim(
        "draft_model", ROW, "group cell target compare", field="draft_model",
        description="the drafter's model (draft model, EAGLE heads, MTP module)",
    ),
    _dim("workload", ROW, "filter group cell compare", description="the traffic's label (SPECOBS_WORKLOAD)"),
    _dim(
        "k", ROW, "group cell compare resource", column="num_spec_tokens", field="num_speculative_tokens",
        prometheus="num_speculative_tokens", otel="vllm.speculative.num_speculative_tokens", budget=16,
        description="tokens drafted per step (the step's own k under a schedule)",
    ),
    _dim(
        "batch", DERIVED, "group", column="batch_bucket", prometheus="batch_size_bucket",
        description="the batch-size bucket (1, 2-3, 4-7, …)",
    ),
    _dim("batch_size", ROW, "group cell", description="requests scheduled in the step"),
    _dim(
        "context", DERIVED, "group cell", column="context_bucket",
        description="the context-length bucket of the step's requests (mean tokens in context: …, 512-1023, …)",
    ),
    _dim("hour", DERIVED, "group", description="the hour (UTC) the window ended in"),
    _dim(
        "platform", ROW, "filter group cell target environment info resource compare", field="platform",
        prometheus="platform", otel="specobs.platform", budget=32, description="cuda, rocm, cpu, …",
    ),
    _dim(
        "device", ROW, "group cell target environment resource compare", field="device", otel="specobs.device",
        description="the device's name",
    ),
    _dim(
        "device_arch", METADATA, "group environment info resource compare", field="device_arch",
        prometheus="device_arch", otel="specobs.device.arch", budget=32,
        description="the device's architecture (gfx942, sm_90, …)",
    ),
    _dim(
        "attention_backend", ROW, "filter group cell environment info resource compare", field="attention_backend",
        prometheus="attention_backend", otel="vllm.attention.backend", budget=32,
        description="the target's attention backend (ROCM_AITER_FA, TRITON_ATTN, FLASH_ATTN, …)",
    ),
    _dim(
        "draft_attention_backend", METADATA, "group environment info resource compare",
        field="draft_attention_backend", prometheus="draft_attention_backend",
        otel="vllm.speculative.attention.backend", budget=32, description="the drafter's attention backend",
    ),
    _dim(
        "graph_mode", ROW, "filter group cell environment info resource compare", field="graph_mode",
        prometheus="graph_mode", otel="vllm.graph_mode", budget=32,
        description="eager, or the CUDA/HIP graph mode (piecewise, full_and_piecewise, …)",
    ),
    _dim(
        "vllm_version", ROW, "filter group cell environment info resource compare", field="vllm_version",
        prometheus="vllm_version", otel="vllm.version", budget=32, description="the vLLM release",
    ),
    _dim(
        "tensor_parallel_size", METADATA, "group environment info resource compare",
        field="tensor_parallel_size", prometheus="tensor_parallel_size", otel="vllm.parallel.tensor_size", budget=32,
    ),
    _dim(
        "pipeline_parallel_size", METADATA, "group environment info resource compare",
        field="pipeline_parallel_size", prometheus="pipeline_parallel_size", otel="vllm.parallel.pipeline_size",
        budget=32,
    ),
    _dim(
        "data_parallel_size", METADATA, "group environment info resource compare",
        field="data_parallel_size", prometheus="data_parallel_size", otel="vllm.parallel.data_size", budget=32,
    ),
    _dim(
        "dtype", METADATA, "group environment info resource compare", field="dtype", prometheus="dtype",
        otel="vllm.dtype", budget=32, description="the model's dtype",
    ),
    _dim(
        "kv_cache_dtype", METADATA, "group environment info resource compare", field="kv_cache_dtype",
        prometheus="kv_cache_dtype", otel="vllm.kv_cache.dtype", budget=32,
    ),
    _dim(
        "rejection_sample_method", METADATA, "group environment compare", field="rejection_sample_method",
        description="how drafts are verified (vLLM's rejection sampler setting)",
    ),
    _dim("draft_sample_method", METADATA, "group environment compare", field="draft_sample_method"),
    _dim(
        "model_runner", METADATA, "group environment info resource compare", field="model_runner",
        prometheus="model_runner", otel="vllm.model_runner", budget=32, description="v1 or v2",
    ),
    _dim(
        "schedule", METADATA, "group compare", field="schedule",
        description="the batch-size → k schedule the engine held (low-high:k, …; none without one)",
    ),
)
# fmt: on

#: Run-metadata fields that make two runs incomparable and are no dimension (a mapping).
ENVIRONMENT_EXTRA = ("environment",)


def having(role: str) -> tuple[Dimension, ...]:
    """The dimensions with ``role``, in :data:`DIMENSIONS` order."""
    return tuple(d for d in DIMENSIONS if role in d.roles)


def by_name(name: str) -> Dimension:
    """The dimension called ``name`` (``KeyError`` for an unknown one)."""
    return _BY_NAME[name]


def columns(role: str, source: str | None = None) -> tuple[str, ...]:
    """The columns of the dimensions with ``role`` (and from ``source``)."""
    return tuple(d.column for d in having(role) if source is None or d.source == source)


def fields_of(role: str) -> tuple[str, ...]:
    """The run-metadata fields of the dimensions with ``role``."""
    return tuple(d.field for d in having(role) if d.field is not None)


def method_label(method: object, draft_model: object = None, missing: str = "plain engine") -> str:
    """How a method is named everywhere: ``eagle3 (llama/eagle3)`` with its drafter, ``ngram``
    alone (its drafter is itself), ``missing`` without a method (a plain engine)."""
    if method is None:
        return missing
    return f"{method} ({draft_model})" if draft_model and draft_model != method else str(method)


_BY_NAME = {d.name: d for d in DIMENSIONS}

__all__ = [
    "CELL",
    "COMPARE",
    "DERIVED",
    "DIMENSIONS",
    "ENVIRONMENT",
    "ENVIRONMENT_EXTRA",
    "FILTER",
    "GROUP",
    "INFO",
    "METADATA",
    "RESOURCE",
    "ROW",
    "SERIES",
    "TARGET",
    "Dimension",
    "by_name",
    "columns",
    "fields_of",
    "having",
    "method_label",
]

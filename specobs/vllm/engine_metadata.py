"""Run metadata: what one engine runs on and with, read once from its config and model runner.

Two engines' numbers are comparable only when these agree, or when a comparison says that
they do not: on ROCm the attention backend changes acceptance, not only speed; graph mode,
parallelism, dtypes and the rejection sampler change both. The capture records one
record per engine at its first step (the runner has chosen its
attention backends by then) and carries the low-cardinality fields on every step row as labels.

Every field is read on its own and left None when it cannot be: metadata never stops a step.
The record is a plain dict with the fields of :class:`specobs.records.RunMetadata` (which the
ingest side builds from it), so that the engine process never imports the analysis stack.
"""

from __future__ import annotations

import json
import os
import platform as host
import time
from typing import Any

from specobs.capture.config import SPECOBS_FRONT_END
from specobs.schema import METADATA_KEY, METADATA_VERSION
from specobs.vllm.hookpoints import lost
from specobs.vllm.spec_config import settings

#: Environment variables recorded with the metadata: the ones that change what the engine runs
#: (kernels, runner, backend), by exact name or by prefix.
ENVIRONMENT = ("VLLM_USE_V2_MODEL_RUNNER", "VLLM_ATTENTION_BACKEND", "VLLM_ROCM_CUSTOM_PAGED_ATTN",
               "VLLM_USE_TRITON_FLASH_ATTN", "VLLM_FLASH_ATTN_VERSION")  # fmt: skip
ENVIRONMENT_PREFIXES = ("VLLM_ROCM_USE_AITER",)
#: Longest value kept per environment variable (values are labels, not payloads).
MAX_VALUE_CHARS = 64


def environment(env: os._Environ[str] | dict[str, str] | None = None) -> dict[str, str]:
    """The recorded variables that are set, sorted by name."""
    env = os.environ if env is None else env
    names = [n for n in env if n in ENVIRONMENT or n.startswith(ENVIRONMENT_PREFIXES)]
    return {name: str(env[name])[:MAX_VALUE_CHARS] for name in sorted(names)}


def _read(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # one unreadable field leaves that field None
        return None


def graph_mode(vllm_config: Any) -> str | None:
    """``eager`` without CUDA/HIP graphs, else vLLM's cudagraph mode in lower case
    (``piecewise``, ``full``, ``full_decode_only``, ``full_and_piecewise``)."""
    model_config = getattr(vllm_config, "model_config", None)
    if getattr(model_config, "enforce_eager", False):
        return "eager"
    mode = getattr(getattr(vllm_config, "compilation_config", None), "cudagraph_mode", None)
    if mode is None:
        return None
    name = str(getattr(mode, "name", mode)).lower()
    return "eager" if name == "none" else name


def attention_backends(runner: Any) -> tuple[str | None, str | None]:
    """(target, drafter) attention backend names as the model runner chose them.

    The runner's attention groups cover every layer with a KV cache, the drafter's too; the
    drafter's own groups (``drafter.draft_attn_groups``) name its layers. Several backends
    in one model (sliding-window layers) are joined with ``+``.
    """
    drafter = getattr(runner, "drafter", None)
    draft_groups = list(getattr(drafter, "draft_attn_groups", None) or [])
    draft_layers = {name for g in draft_groups for name in getattr(g, "layer_names", ())}
    target: list[str] = []
    for groups in getattr(runner, "attn_groups", None) or []:
        for g in groups:
            layers = set(getattr(g, "layer_names", ()))
            if layers and layers <= draft_layers:
                continue
            name = _backend_name(g)
            if name and name not in target:
                target.append(name)
    draft = sorted({n for n in map(_backend_name, draft_groups) if n})
    return ("+".join(target) or None), ("+".join(draft) or None)


def _backend_name(group: Any) -> str | None:
    backend = getattr(group, "backend", None)
    get_name = getattr(backend, "get_name", None)
    return _read(get_name) if callable(get_name) else None


def device_arch(platform_kind: str | None) -> str | None:
    """``gfx942``-style on ROCm, ``sm90``-style on CUDA, the CPU's machine type on a CPU."""
    if platform_kind in ("cuda", "rocm"):

        def read() -> str | None:
            import torch

            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            arch = getattr(props, "gcnArchName", None)
            if platform_kind == "rocm" and arch:
                return str(arch).split(":", 1)[0]  # "gfx942:sramecc+:xnack-" → "gfx942"
            return f"sm{props.major}{props.minor}"

        return _read(read)
    return host.machine() or None


def _version() -> str | None:
    import vllm

    return str(vllm.__version__)


def worker_facts(runner: Any, missing: list[str]) -> dict[str, Any]:
    """What a worker process knows and the engine core does not: the attention backends its model
    runner chose, its ranks, and the hook points missing there (sent once with its timing)."""
    target, draft = attention_backends(runner)

    def ranks() -> tuple[int, int, int]:
        from vllm.distributed import parallel_state

        pp = parallel_state.get_pp_group()
        return parallel_state.get_tensor_model_parallel_rank(), pp.rank_in_group, pp.world_size

    tp_rank, pp_rank, pp_size = _read(ranks) or (None, None, None)
    return {"attention_backend": target, "draft_attention_backend": draft, "missing": list(missing),
            "tp_rank": tp_rank, "pp_rank": pp_rank, "pp_size": pp_size}  # fmt: skip


def engine_metadata(
    vllm_config: Any,
    runner: Any,
    labels: dict[str, Any],
    pid: int | None = None,
    *,
    worker: dict[str, Any] | None = None,
    missing: list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:
    """The metadata of the engine with ``vllm_config`` (``runner``: its model runner in this
    process, or None when it runs elsewhere; ``worker``: :func:`worker_facts` as the worker that
    times the steps sent them; ``missing``: hook points this process lacks), with the step labels
    already read."""
    spec = getattr(vllm_config, "speculative_config", None)
    model_config = getattr(vllm_config, "model_config", None)
    parallel = getattr(vllm_config, "parallel_config", None)
    target, draft = attention_backends(runner) if runner is not None else (None, None)
    if runner is None and worker is not None:  # tensor/pipeline parallel: as the worker's runner chose them
        target, draft = _str(worker.get("attention_backend")), _str(worker.get("draft_attention_backend"))
    if target is None:  # no runner seen (a worker without hooks): the configured backend, if any
        configured = getattr(getattr(vllm_config, "attention_config", None), "backend", None)
        target = None if configured is None else str(getattr(configured, "name", configured))
    schedule = getattr(spec, "num_speculative_tokens_per_batch_size", None) if spec is not None else None
    v2 = _read(lambda: bool(vllm_config.use_v2_model_runner))
    front = front_end(own=True)
    return dict(
        ts=time.time(),
        run_id=labels.get("run_id"),
        engine=labels.get("engine"),
        pid=os.getpid() if pid is None else pid,
        model=labels.get("model"),
        model_path=_str(getattr(model_config, "model", None)),
        method=labels.get("method"),
        draft_model=labels.get("draft_model"),
        num_speculative_tokens=_int(getattr(spec, "num_speculative_tokens", None)) if spec is not None else 0,
        # Every setting the engine's SpeculativeConfig holds (what a recommendation's config carries over).
        speculative_config=_read(settings, spec) if spec is not None else None,
        schedule=_read(lambda: tuple((int(a), int(b), int(k)) for a, b, k in schedule)) if schedule else None,
        # What the front end was given, where vLLM dropped it (data parallel > 1): the engine holds none.
        schedule_configured=_schedule(front.get("schedule_configured")) if not schedule else None,
        max_num_seqs=_int(getattr(getattr(vllm_config, "scheduler_config", None), "max_num_seqs", None)),
        rejection_sample_method=_str(getattr(spec, "rejection_sample_method", None)) if spec is not None else None,
        draft_sample_method=_str(getattr(spec, "draft_sample_method", None)) if spec is not None else None,
        vllm_version=_read(_version),
        platform=labels.get("platform"),
        device=labels.get("device"),
        device_arch=device_arch(labels.get("platform")),
        attention_backend=target,
        draft_attention_backend=draft,
        graph_mode=_read(graph_mode, vllm_config),
        model_runner=None if v2 is None else ("v2" if v2 else "v1"),
        tensor_parallel_size=_int(getattr(parallel, "tensor_parallel_size", None)),
        pipeline_parallel_size=_int(getattr(parallel, "pipeline_parallel_size", None)),
        data_parallel_size=max(
            _int(getattr(parallel, "data_parallel_size", None)) or 1, _int(front.get("data_parallel_size")) or 1
        )
        if parallel is not None
        else None,
        dtype=_str(getattr(model_config, "dtype", None), strip="torch."),
        kv_cache_dtype=_str(getattr(getattr(vllm_config, "cache_config", None), "cache_dtype", None)),
        environment=environment(),
        timing_source="engine_core" if runner is not None else "worker" if worker is not None else None,
        missing_hooks=lost([*missing, *((worker or {}).get("missing") or [])]),
    )


def front_end(environ: Any = None, *, own: bool = False) -> dict[str, Any]:
    """What the front end noted (:data:`SPECOBS_FRONT_END`): {} when unset or unreadable. ``own``:
    only a note written by this process or its parent (the front end that started this engine
    core); one inherited from further up (a shell, a parent that ran another vLLM) is not this
    engine's."""
    raw = SPECOBS_FRONT_END.raw(environ)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    if own and value.get("pid") not in (os.getpid(), os.getppid()):
        return {}
    return value


def _schedule(value: Any) -> tuple[tuple[int, int, int], ...] | None:
    """A ``[[low, high, k], ...]`` list as the metadata's tuples; None when it is not one."""
    if not isinstance(value, list) or not value:
        return None
    rows = [r for r in value if isinstance(r, list) and len(r) == 3 and all(type(x) is int for x in r)]
    return tuple((a, b, k) for a, b, k in rows) if len(rows) == len(value) else None


def metadata_row(vllm_config: Any, runner: Any, labels: dict[str, Any], **more: Any) -> dict[str, Any]:
    """The record the sinks write beside the event files (``specobs_metadata`` marks it); ``more``:
    :func:`engine_metadata`'s keyword arguments."""
    return {METADATA_KEY: METADATA_VERSION, **engine_metadata(vllm_config, runner, labels, **more)}


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any, strip: str = "") -> str | None:
    if value is None:
        return None
    text = str(value)
    return text[len(strip) :] if strip and text.startswith(strip) else text


__all__ = ["ENVIRONMENT", "ENVIRONMENT_PREFIXES", "attention_backends", "engine_metadata", "environment", "graph_mode",
           "metadata_row", "worker_facts"]  # fmt: skip

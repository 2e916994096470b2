"""Known pitfalls of speculative decoding in vLLM, as data: the condition on run metadata (and
on observed acceptance) under which each was reported, its public source, and the advice.

Each source was read before its entry went in (issue or pull request text, or vLLM 0.32's
code); an entry says no more than its source does. :func:`matching` checks one engine's
metadata; ``analysis.integrity`` words every match as a config-integrity issue, and
``analysis.breaks`` names a match among the likely causes of a break.

Condition language (``Pitfall.when``): field → a tuple of allowed values (``None`` in it
allows an unknown value), or ``"set"`` / ``">1"``; ``environment.NAME`` reads one environment
variable and ``speculative_config.NAME`` one setting of the speculative config; ``a|b`` is met
when either field is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from specobs.records import Pitfall, RunMetadata

EAGLE = ("eagle", "eagle3")
MTP = ("mtp", "deepseek_mtp", "mimo_mtp", "qwen3_next_mtp", "gemma4_mtp", "ernie_mtp", "glm4_moe_mtp")
#: CDNA3/CDNA4 (MI300X/MI325X, MI350X/MI355X): where AITER's flash attention applies.
CDNA = ("gfx942", "gfx950")
AITER_BACKENDS = ("ROCM_AITER_FA", "ROCM_AITER_UNIFIED_ATTN", "ROCM_AITER_MLA", "ROCM_AITER_TRITON_MLA")
#: The draft acceptance rate below which acceptance is called collapsed.
COLLAPSED_BELOW = 0.05

PITFALLS: tuple[Pitfall, ...] = (
    Pitfall(
        id="rocm_attn_over_aiter_fa",
        title="EAGLE on ROCM_ATTN where AITER flash attention applies",
        when={"platform": ("rocm",), "device_arch": CDNA, "method": EAGLE, "attention_backend": ("ROCM_ATTN",)},
        source="https://github.com/vllm-project/vllm/issues/46596",
        advice=(
            "vLLM's ROCm backend order picks ROCM_ATTN ahead of ROCM_AITER_FA on CDNA even with "
            "VLLM_ROCM_USE_AITER=1; switching to AITER FA roughly halved speculative decode TPOT on MI300X in the "
            "report: set VLLM_ROCM_USE_AITER=1 and --attention-backend ROCM_AITER_FA, then compare."
        ),
    ),
    Pitfall(
        id="aiter_fa_eagle_collapse",
        title="AITER flash attention with EAGLE, acceptance collapsed",
        when={"platform": ("rocm",), "method": EAGLE, "attention_backend|draft_attention_backend": ("ROCM_AITER_FA",)},
        acceptance_below=COLLAPSED_BELOW,
        source="https://github.com/vllm-project/vllm/issues/31625",
        advice=(
            "ROCM_AITER_FA decoded multi-token drafts with a query length of 1 (GSM8K accuracy fell to 0.05 with "
            "EAGLE-3); fixed by vllm#32877: upgrade vLLM, or verify with another attention backend, and check "
            "output quality, not only speed."
        ),
    ),
    Pitfall(
        id="aiter_mtp_k_over_1",
        title="MTP with k > 1 on an AITER attention backend",
        when={
            "platform": ("rocm",),
            "method": MTP,
            "num_speculative_tokens": ">1",
            "attention_backend": AITER_BACKENDS,
        },
        acceptance_below=0.3,
        source="https://github.com/vllm-project/vllm/issues/28222",
        advice=(
            "AITER attention metadata did not support MTP with num_speculative_tokens > 1 on ROCm (start-up "
            "ValueError: Unsupported attention metadata type); later builds run it but an AITER MLA accuracy "
            "drift with MTP was fixed separately (vllm#45227): compare acceptance at k=1 with this k, and upgrade."
        ),
    ),
    Pitfall(
        id="schedule_disabled",
        title="Batch-size schedule with data parallel > 1",
        when={"schedule_configured": "set", "schedule": (None, ()), "data_parallel_size": ">1"},
        source="https://github.com/vllm-project/vllm/pull/32374",
        advice=(
            "vLLM drops num_speculative_tokens_per_batch_size when data parallel > 1 (ranks could pick different "
            "k and deadlock): every step drafts the static k. Run one engine per rank to use a schedule."
        ),
    ),
    Pitfall(
        id="schedule_piecewise_v1",
        title="Batch-size schedule forces piecewise graphs on model runner v1",
        when={
            "platform": ("cuda", "rocm"),
            "schedule": "set",
            "model_runner": ("v1", None),
            "graph_mode": ("piecewise",),
        },
        source="https://github.com/vllm-project/vllm/pull/32374",
        advice=(
            "On model runner v1, vLLM overrides full CUDA/HIP graphs to piecewise when a batch-size schedule is "
            "set (full graphs need VLLM_USE_V2_MODEL_RUNNER=1); piecewise graphs cost single-stream speed "
            "(about 14% in vllm#49548): measure the schedule against static k on the same graph mode."
        ),
    ),
    Pitfall(
        id="synthetic_rejection",
        title="Synthetic rejection sampling",
        when={"rejection_sample_method": ("synthetic",)},
        source="https://github.com/vllm-project/vllm/pull/40662",
        advice=(
            "rejection_sample_method=synthetic accepts drafts at configured rates (for testing): acceptance "
            "measures the configuration, not the drafter; only the timing is the engine's."
        ),
    ),
    Pitfall(
        id="adaptive_verification_counts",
        title="Adaptive verification: drafts left unverified count as rejected",
        when={"speculative_config.enable_adaptive_verification": (True,)},
        source="https://github.com/vllm-project/vllm/pull/47808",
        advice=(
            "With enable_adaptive_verification (Model Runner V2, full CUDA graphs) the target verifies only a "
            "per-step budget of each request's drafts, yet vLLM's scheduler counts every drafted token (vLLM 0.32 "
            "and 0.33: Scheduler.update_from_output), so drafts never verified count as rejected: acceptance and "
            "per-position rates here are of drafted tokens, lower than the target's acceptance of what it verified. "
            "Compare configurations by tokens per step and step time, not by acceptance rate."
        ),
    ),
    Pitfall(
        id="mtp_zero_acceptance",
        title="MTP drafting but accepting nothing",
        when={"method": MTP},
        acceptance_below=0.005,
        source="https://github.com/vllm-project/vllm-ascend/issues/16980",
        advice=(
            "Drafts verified with none accepted point at wiring, not a weak drafter (Gemma 4 MTP at 0%: draft "
            "layers in several KV-cache groups shared one block table): check the drafter loads the target's "
            "KV-cache layout and the assistant checkpoint matches the target."
        ),
    ),
)

#: Public reports behind the break kinds that metadata alone cannot show.
BREAK_SOURCES = {
    "drift": "https://github.com/vllm-project/vllm/issues/41838",
    "stale_after_off": "https://github.com/NVIDIA/TensorRT-LLM/pull/16888",
}

BY_ID = {p.id: p for p in PITFALLS}


def _value(metadata: RunMetadata, name: str) -> Any:
    if name.startswith("environment."):
        return metadata.environment.get(name.removeprefix("environment."))
    if name.startswith("speculative_config."):
        return (metadata.speculative_config or {}).get(name.removeprefix("speculative_config."))
    return getattr(metadata, name)


def _meets(value: Any, test: Any) -> bool:
    if test == "set":
        return bool(value)
    if test == ">1":
        return isinstance(value, int) and value > 1
    if isinstance(test, tuple):
        return value in test
    raise ValueError(f"unknown pitfall condition {test!r}")


def metadata_meets(pitfall: Pitfall, metadata: RunMetadata) -> bool:
    """True when ``metadata`` meets every field of the pitfall's condition."""
    return all(
        any(_meets(_value(metadata, name), test) for name in names.split("|")) for names, test in pitfall.when.items()
    )


def matching(
    metadata: RunMetadata, acceptance: float | None = None, pitfalls: Sequence[Pitfall] = PITFALLS
) -> Iterator[Pitfall]:
    """The pitfalls this engine meets: its metadata meets the condition and, where the entry
    needs it, its draft acceptance rate (``acceptance``) is below the entry's bound."""
    for pitfall in pitfalls:
        if not metadata_meets(pitfall, metadata):
            continue
        if pitfall.acceptance_below is not None and (acceptance is None or acceptance >= pitfall.acceptance_below):
            continue
        yield pitfall


def field_names(pitfall: Pitfall) -> set[str]:
    """The run-metadata fields a pitfall's condition reads (``environment`` for its variables)."""
    names = {n for key in pitfall.when for n in key.split("|")}
    return {n.split(".", 1)[0] for n in names}


def as_table(pitfalls: Sequence[Pitfall] = PITFALLS) -> list[Mapping[str, Any]]:
    """The table as JSON rows (docs are generated from it)."""
    return [p.to_dict() for p in pitfalls]


__all__ = ["BREAK_SOURCES", "BY_ID", "COLLAPSED_BELOW", "PITFALLS", "as_table", "field_names", "matching",
           "metadata_meets"]  # fmt: skip

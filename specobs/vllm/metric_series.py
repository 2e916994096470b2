"""vLLM's Prometheus series that specobs reads, by sample name, in one place.

The scrape reader (:mod:`~specobs.ingest.prometheus_text`), the Prometheus API reader
(:mod:`~specobs.ingest.prometheus_api`) and the release checks
(:mod:`specobs.vllm.releases`, which look each name up among the metrics a vLLM
release registers) all take them from here, so a name vLLM renames is changed once.

A sample name is the family's name plus the suffix its kind exposes: ``_total`` for a counter,
``_sum`` / ``_count`` for a histogram, none for a gauge::

    vllm:spec_decode_num_drafts_total          counter vllm:spec_decode_num_drafts
    vllm:inter_token_latency_seconds_sum       histogram vllm:inter_token_latency_seconds
"""

from __future__ import annotations

#: Every sample name of the V1 speculative-decoding counters starts with this.
SPEC_DECODE_PREFIX = "vllm:spec_decode_"

#: The V1 speculative-decoding counters: windows column → sample name (labels ``model_name``,
#: ``engine``; the per-position one adds ``position``).
SPEC_DECODE = {
    "num_drafts": "vllm:spec_decode_num_drafts_total",
    "num_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    "per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
}

#: Serving series read beside them: sample name → windows column (counters are differenced like
#: the speculative ones; ``running`` is a gauge, read at each scrape).
SERVING = {
    "vllm:generation_tokens_total": "generated",
    "vllm:inter_token_latency_seconds_sum": "itl_sum",
    "vllm:inter_token_latency_seconds_count": "itl_count",
    "vllm:num_requests_running": "running",
}

#: Every V1 sample name specobs reads from ``/metrics``: what a release must still register.
READ = (*SPEC_DECODE.values(), *SERVING)

#: Suffix → the kind of family that exposes it (a gauge exposes the bare name).
SUFFIX_KINDS = {"_total": "counter", "_sum": "histogram", "_count": "histogram", "_bucket": "histogram"}


def family(sample: str) -> tuple[str, str]:
    """(family name, kind) of a sample name: ``vllm:generation_tokens_total`` →
    (``vllm:generation_tokens``, ``counter``); a name without a known suffix is a gauge."""
    for suffix, kind in SUFFIX_KINDS.items():
        if sample.endswith(suffix):
            return sample.removesuffix(suffix), kind
    return sample, "gauge"


__all__ = ["READ", "SERVING", "SPEC_DECODE", "SPEC_DECODE_PREFIX", "SUFFIX_KINDS", "family"]

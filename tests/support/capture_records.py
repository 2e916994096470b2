"""Records as the capture writes them beside its steps, shared by the exporter tests."""

from __future__ import annotations

#: A run-metadata record as the capture writes it (specobs.vllm.engine_metadata.metadata_row).
METADATA = {
    "specobs_metadata": 1, "ts": 1000.0, "run_id": "r1", "engine": 0, "pid": 7, "model": "tiny",
    "model_path": "/models/tiny", "method": "eagle", "num_speculative_tokens": 3, "vllm_version": "0.32.0",
    "platform": "rocm", "device": "AMD Instinct MI300X", "device_arch": "gfx942",
    "attention_backend": "ROCM_AITER_FA", "draft_attention_backend": "ROCM_AITER_FA",
    "graph_mode": "full_and_piecewise", "model_runner": "v1", "environment": {"VLLM_ROCM_USE_AITER": "1"},
}  # fmt: skip
#: A finished request's row (schema.REQUESTS) as the capture writes it: 10 verify steps, 14 accepted.
REQUEST = {
    "ts": 1001.0, "model": "tiny", "engine": 0, "method": "eagle", "request_key": "0123456789abcdef",
    "finish_reason": "stop", "num_prompt_tokens": 20, "num_output_tokens": 25, "num_spec_tokens": 3,
    "num_spec_steps": 10, "num_draft_tokens": 30, "num_accepted_tokens": 14,
    "acceptance_histogram": [2, 3, 3, 2],
}  # fmt: skip

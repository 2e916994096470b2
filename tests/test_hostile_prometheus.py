"""Prometheus input that used to give wrong numbers silently (issue 15).

Saved scrapes: a reset is decided per counter series, non-finite samples are skipped with
their line, and every assumed restart is reported where it happened. The fleet path: a
counter created inside the range counts from zero (its ``_created`` series says so); when a
baseline is assumed instead, a notice says how much may have been missed.
"""

from __future__ import annotations

import pytest
from conftest import windows_of

from specobs.ingest import load
from specobs.ingest.prometheus_text import Notice

LABELS = 'engine="0",model_name="tiny"'


def scrape(drafts, draft_tokens, accepted, per_pos, *, ts: int) -> str:
    lines = [
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f"vllm:spec_decode_num_drafts_total{{{LABELS}}} {drafts} {ts}",
        f"vllm:spec_decode_num_drafts_created{{{LABELS}}} 1.7647e+09 {ts}",
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f"vllm:spec_decode_num_draft_tokens_total{{{LABELS}}} {draft_tokens} {ts}",
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f"vllm:spec_decode_num_accepted_tokens_total{{{LABELS}}} {accepted} {ts}",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="{i}"}} {v} {ts}'
        for i, v in enumerate(per_pos)
    ]
    return "\n".join(lines) + "\n"


# Three scrapes of one engine that never restarted: the totals are those of the last scrape.
GOOD = [
    (100, 300, 200, [90, 70, 40]),
    (200, 600, 420, [185, 145, 90]),
    (300, 900, 640, [280, 220, 140]),
]
T0 = 1764472000000


def scrapes(rows) -> str:
    return "".join(scrape(*row, ts=T0 + 15000 * i) for i, row in enumerate(rows))


def totals(windows):
    return (
        windows["num_drafts"].sum(),
        windows["num_draft_tokens"].sum(),
        windows["num_accepted_tokens"].sum(),
    )


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-Inf", "-5"])
def test_a_non_finite_or_negative_counter_sample_is_skipped_with_its_line(write, bad):
    text = scrapes(GOOD)
    good_line = f"vllm:spec_decode_num_accepted_tokens_total{{{LABELS}}} 420 {T0 + 15000}"
    assert good_line in text
    text = text.replace(good_line, good_line.replace(" 420 ", f" {bad} "))
    path = write("m.txt", text)
    result = load([str(path)])
    w = result.windows.collect().sort("source_line")
    # Before: the next scrape looked like a restart of every counter (draft tokens 1,500, not 900).
    assert totals(w) == (300, 900, 640)
    assert w["num_accepted_tokens"].to_list() == [200, None, 440]
    line = text.splitlines().index(good_line.replace(" 420 ", f" {bad} ")) + 1
    assert [(s.line, type(s)) for s in result.skipped] == [(line, type(result.skipped[0]))]
    assert not isinstance(result.skipped[0], Notice)
    assert "vllm:spec_decode_num_accepted_tokens_total" in result.skipped[0].why


def test_one_counter_falling_on_its_own_restarts_only_that_series(write):
    rows = [GOOD[0], (200, 600, 20, [185, 145, 90]), GOOD[2]]  # accepted alone glitched low
    path = write("m.txt", scrapes(rows))
    result = load([str(path)])
    w = result.windows.collect().sort("source_line")
    # drafts and draft tokens keep their differences; accepted counts from its new value
    assert w["num_drafts"].to_list() == [100, 100, 100]
    assert w["num_draft_tokens"].to_list() == [300, 300, 300]
    assert w["num_accepted_tokens"].to_list() == [200, 20, 620]
    assert w["num_accepted_tokens_per_pos"].to_list() == [[90, 70, 40], [95, 75, 50], [95, 75, 50]]
    assert w["start_ts"].to_list() == [None, None, (T0 + 15000) / 1000]
    notices = [s for s in result.skipped if isinstance(s, Notice)]
    assert len(notices) == 1 and notices[0].line == w["source_line"][1]
    assert "num_accepted_tokens" in notices[0].why and "on its own" in notices[0].why
    assert "num_drafts" not in notices[0].why


def test_a_restart_of_every_counter_is_reported_where_it_happened(write):
    rows = [GOOD[0], GOOD[1], (40, 120, 70, [30, 25, 15])]
    path = write("m.txt", scrapes(rows))
    result = load([str(path)])
    w = windows_of(path)
    assert w["num_drafts"].to_list() == [100, 100, 40]  # unchanged semantics for a real restart
    (notice,) = result.skipped
    assert isinstance(notice, Notice)
    assert notice.line == w["source_line"][2]
    assert "scrape 3" in notice.why and "engine restart assumed" in notice.why
    assert "num_drafts 200 → 40" in notice.why


def test_well_formed_scrapes_have_no_notices(write):
    result = load([str(write("m.txt", scrapes(GOOD)))])
    assert result.skipped == []
    assert totals(result.windows.collect()) == (300, 900, 640)

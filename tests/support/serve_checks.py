"""Checks of a recording by ``specobs.testing.server_recording``: what its clients measured must be what the server
counted and logged. Used on a fresh recording (tests/test_vllm_serve.py) and on the bundled ones
(tests/test_bundled_serve.py); each takes the run's ``.clients.json`` as loaded."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

STATS = re.compile(
    r"(?:INFO|DEBUG) (\d\d-\d\d \d\d:\d\d:\d\d) \[[^\]]+\] Engine 000: .*Avg generation throughput: ([\d.]+)"
)


def log_stats(path: Path, year: int) -> list[tuple[str, float, float]]:
    """(stamp, unix time of the stamp, generation tokens/s) of every stats line of engine 0."""
    rows = []
    for line in path.read_text().splitlines():
        if found := STATS.search(line):
            stamp = found.group(1)
            unix = time.mktime(time.strptime(f"{year}-{stamp}", "%Y-%m-%d %H:%M:%S"))
            rows.append((stamp, unix, float(found.group(2))))
    return rows


def scrapes(path: Path) -> dict[str, dict[str, float]]:
    """phase → {sample name: value summed over label sets} (boundary phases are named once)."""
    parts = re.split(r"^# ---- scrape \d+ at .* phase=(\S+) ----\n", path.read_text(), flags=re.M)
    out: dict[str, dict[str, float]] = {}
    for phase, text in zip(parts[1::2], parts[2::2], strict=True):
        sums: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                sums[s.name] = sums.get(s.name, 0.0) + s.value
        if not phase.startswith("concurrency-"):
            assert phase not in out, phase
        out[phase] = sums
    return out


def check_clients(saved: dict[str, Any], levels: tuple[int, ...], seconds: float) -> None:
    """Each level's totals are its requests' sums; ignore_eos reached the server; the loop was closed,
    with exactly ``concurrency`` clients, for ``seconds``; the CPU accounting adds up."""
    assert saved["sampling"] == {"temperature": 0.0, "ignore_eos": True}
    assert [lv["concurrency"] for lv in saved["levels"]] == list(levels)
    for level in (saved["warmup"], *saved["levels"]):
        reqs = level["request_records"]
        assert level["requests"] == len(reqs) >= level["concurrency"]
        assert level["completion_tokens"] == sum(r["completion_tokens"] for r in reqs)
        assert level["prompt_tokens"] == sum(r["prompt_tokens"] for r in reqs)
        assert all(r["completion_tokens"] == r["max_tokens"] for r in reqs)  # ignore_eos: every request ran to its end
        start, end = min(r["sent_unix"] for r in reqs), max(r["received_unix"] for r in reqs)
        assert (level["start_unix"], level["end_unix"]) == (start, end)
        assert level["tokens_per_second"] == pytest.approx(level["completion_tokens"] / (end - start))
        assert {r["client"] for r in reqs} == set(range(level["concurrency"]))
        # Closed loop: never more requests in flight than clients, and that many at some point.
        events = sorted([(r["sent_unix"], 1) for r in reqs] + [(r["received_unix"], -1) for r in reqs])
        in_flight = [sum(d for _, d in events[: i + 1]) for i in range(len(events))]
        assert max(in_flight) == level["concurrency"]
    for level in saved["levels"]:
        assert all(r["sent_unix"] < level["start_unix"] + seconds for r in level["request_records"])
        assert seconds <= level["wall_seconds"] < seconds + 10
        # The busy server used CPU within what the cores allow; the machine's busy time covers the
        # server's and the clients' (1/100 s ticks).
        cpu = level["cpu"]
        assert 0.1 * level["wall_seconds"] < cpu["server_seconds"] <= cpu["cores"] * (level["wall_seconds"] + 0.5)
        assert 0 < cpu["clients_seconds"] < cpu["server_seconds"]
        others = cpu["machine_seconds"] - cpu["server_seconds"] - cpu["clients_seconds"]
        assert cpu["others_seconds"] == pytest.approx(others)
        assert cpu["others_seconds"] > -0.1 * cpu["cores"]


def check_stats_lines(log: Path, saved: dict[str, Any]) -> None:
    """The log's busy stats lines fall in the warm-up's and the levels' time windows, each level
    holding about one per interval of its duration; its log-format times bracket them."""
    interval = saved["log_interval_seconds"]
    lines = log_stats(log, time.localtime(saved["started_unix"]).tm_year)
    busy = [(stamp, t) for stamp, t, rate in lines if rate > 0]
    windows = [(lv["start_unix"], lv["end_unix"]) for lv in (saved["warmup"], *saved["levels"])]
    # A busy line reports the interval up to its stamp (whole seconds): it ends inside a window or
    # at most one interval after it.
    for stamp, t in busy:
        assert any(math.floor(a) <= t <= b + interval + 1 for a, b in windows), stamp
    for level in saved["levels"]:
        inside = [s for s, t in busy if math.floor(level["start_unix"]) <= t <= level["end_unix"] + interval + 1]
        expected = level["wall_seconds"] / interval
        assert math.floor(expected) - 1 <= len(inside) <= math.ceil(expected) + 1, (level["phase"], inside)
        # String order is time order within a year.
        assert level["start_log_time"] <= inside[0] and inside[-2] <= level["end_log_time"], (level["phase"], inside)


def check_scrapes(metrics: Path, saved: dict[str, Any]) -> dict[str, dict[str, float]]:
    """vLLM's counters move across each level by exactly what the clients counted."""
    by_phase = scrapes(metrics)
    tokens, requests = "vllm:generation_tokens_total", "vllm:request_success_total"
    first = f"before-concurrency-{saved['levels'][0]['concurrency']}"
    assert by_phase[first][tokens] - by_phase["start"][tokens] == saved["warmup"]["completion_tokens"]
    for level in saved["levels"]:
        before, after = by_phase[f"before-{level['phase']}"], by_phase[f"after-{level['phase']}"]
        assert after[tokens] - before[tokens] == level["completion_tokens"] > 0
        assert after[requests] - before[requests] == level["requests"]
        during = by_phase[level["phase"]]  # half-way: some, not all, of the level's tokens
        assert before[tokens] < during[tokens] < after[tokens]
    return by_phase

"""A short soak of the sidecar: a JSON Lines file appended at a high rate, rotated, truncated and
salted with bad rows, polled in-process. Every good row counts exactly once, every bad row is
counted as skipped, and memory stays flat once the recent-rows buffer is full."""

from __future__ import annotations

import json
import os
import random
import sys
import time

import pytest
from prometheus_client import CollectorRegistry
from support.paths import ROOT

from specobs.exporters.prometheus import PrometheusMetrics
from specobs.exporters.sidecar import RECENT_ROWS, Sidecar, SidecarHealth

sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_soak import bad_row as _bad  # the soak benchmark's row generators
from bench_soak import good_row as _good

ROWS_PER_POLL = 250
POLLS = 400
WARM_UP = 120  # polls: past RECENT_ROWS rows, so the recent buffer is full before RSS is taken
ROTATE_AT, TRUNCATE_AT = 150, 280


def _rss_bytes() -> int:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    pytest.skip("no way to read this process's resident memory")


@pytest.mark.slow
def test_sidecar_soak_counts_every_good_row_once_and_stays_flat(tmp_path):
    rng = random.Random(15)
    path = tmp_path / "events.jsonl"
    path.touch()
    registry = CollectorRegistry()
    sidecar = Sidecar([str(path)], PrometheusMetrics(registry), tuning_interval=3600)
    registry.register(SidecarHealth(sidecar))
    expected_drafts = expected_rows = 0
    expected_skipped = {"negative": 0, "non_finite": 0, "invalid_json": 0}
    pending = ""  # half a line, finished at the next append
    ts = 1.0e9
    baseline = None
    started = time.monotonic()
    for poll in range(POLLS):
        if poll == ROTATE_AT:  # logrotate: rename, then a new file
            os.rename(path, tmp_path / "events.jsonl.1")
            path.touch()
        if poll == TRUNCATE_AT:  # copytruncate: everything so far was read at the last poll
            assert not pending
            os.truncate(path, 0)
        lines = []
        for _ in range(ROWS_PER_POLL):
            ts += 0.01
            if rng.random() < 0.02:
                kind, line = _bad(rng, ts)
                expected_skipped[kind] += 1
            else:
                row = _good(rng, ts)
                expected_drafts += row["num_drafts"]
                expected_rows += 1
                line = json.dumps(row)
            lines.append(line)
        text = pending + "\n".join(lines) + "\n"
        # half of a line now and half at the next poll, except before a rotation or truncation
        cut = len(text) if poll + 1 in (ROTATE_AT, TRUNCATE_AT, POLLS) else len(text) - len(lines[-1]) // 2 - 1
        text, pending = text[:cut], text[cut:]
        with open(path, "a") as f:
            f.write(text)
        sidecar.poll_once()
        if poll == WARM_UP:
            assert len(sidecar.recent) == RECENT_ROWS
            baseline = _rss_bytes()
    elapsed = time.monotonic() - started
    final = _rss_bytes()
    sidecar.stop()

    drafts = sum(s.value for f in registry.collect() for s in f.samples if s.name == "specobs_drafts_total")
    assert drafts == expected_drafts
    steps = sum(s.value for f in registry.collect() for s in f.samples if s.name == "specobs_steps_total")
    assert steps == expected_rows
    for reason, count in expected_skipped.items():
        assert count > 0
        assert registry.get_sample_value("specobs_skipped_records_total", {"reason": reason}) == count, reason
    for reason in ("wrong_type", "inconsistent", "error"):
        assert registry.get_sample_value("specobs_skipped_records_total", {"reason": reason}) == 0, reason
    assert sidecar.errors == 0
    assert baseline is not None
    growth = (final - baseline) / baseline
    assert growth < 0.10, f"RSS grew {growth:.1%} after warm-up ({baseline / 2**20:.0f} -> {final / 2**20:.0f} MiB)"
    assert elapsed < 60

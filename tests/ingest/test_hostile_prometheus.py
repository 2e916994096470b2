"""Prometheus input that used to give wrong numbers silently (issue 15).

Saved scrapes: a reset is decided per counter series, non-finite samples are skipped with
their line, and every assumed restart is reported where it happened. The fleet path: a
counter created inside the range counts from zero (its ``_created`` series says so); when a
baseline is assumed instead, a notice says how much may have been missed.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from support.helpers import report_json, windows_of
from support.paths import ROOT

from specobs.errors import InputError, Notice
from specobs.ingest import load, prometheus_api

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
    notices = result.notices
    assert not any(isinstance(s, Notice) for s in result.skipped)  # a notice is never a skipped line
    assert len(notices) == 1 and notices[0].line == w["source_line"][1]
    assert "num_accepted_tokens" in notices[0].why and "on its own" in notices[0].why
    assert "num_drafts" not in notices[0].why


def test_a_restart_of_every_counter_is_reported_where_it_happened(write):
    rows = [GOOD[0], GOOD[1], (40, 120, 70, [30, 25, 15])]
    path = write("m.txt", scrapes(rows))
    result = load([str(path)])
    w = windows_of(path)
    assert w["num_drafts"].to_list() == [100, 100, 40]  # unchanged semantics for a real restart
    assert result.skipped == []
    (notice,) = result.notices
    assert isinstance(notice, Notice)
    assert notice.line == w["source_line"][2]
    assert "scrape 3" in notice.why and "engine restart assumed" in notice.why
    assert "num_drafts 200 → 40" in notice.why


def test_well_formed_scrapes_have_no_notices(write):
    result = load([str(write("m.txt", scrapes(GOOD)))])
    assert result.skipped == []
    assert totals(result.windows.collect()) == (300, 900, 640)


# --- the fleet path: what a counter held at its first sample ------------------------------------

SWEEP = ROOT / "examples" / "data" / "vllm-cpu-sweep"
DRAFTS = "specobs_drafts_total"


class RecordedPrometheus:
    """Serves ``/api/v1/query_range`` from recorded results, as Prometheus shapes them."""

    def __init__(self, results: dict[str, list[dict]]) -> None:
        self.results = results
        self.queries: list[str] = []
        recorded = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["query"][0]
                recorded.queries.append(query)
                body = {
                    "status": "success",
                    "data": {"resultType": "matrix", "result": recorded.results.get(query, [])},
                }
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorded():
    servers: list[RecordedPrometheus] = []

    def _serve(results: dict[str, list[dict]]) -> RecordedPrometheus:
        servers.append(RecordedPrometheus(results))
        return servers[-1]

    yield _serve
    for server in servers:
        server.close()


NOW = 1796126900.0
LAB = {"engine": "0", "instance": "127.0.0.1:9464", "job": "specobs", "method": "ngram", "model_name": "tiny"}


def series(name: str, points: list[tuple[float, float]]) -> dict:
    """One result series exactly as query_range returns it (values are strings)."""
    return {"metric": {"__name__": name, **LAB}, "values": [[t, repr(float(v)).removesuffix(".0")] for t, v in points]}


def ticks(values: list[float], first: float = NOW - 300) -> list[tuple[float, float]]:
    return [(first + 15 * i, v) for i, v in enumerate(values)]


def test_a_counter_created_inside_the_range_counts_from_zero(recorded):
    created = NOW - 200  # a fresh exporter: every count it holds was made inside the range
    prom = recorded(
        {
            DRAFTS: [series(DRAFTS, ticks([6590, 6590, 7000], NOW - 190))],
            "specobs_drafts_created": [series("specobs_drafts_created", ticks([created] * 3, NOW - 190))],
        }
    )
    frame, notices = prometheus_api.read(prom.url, since="5m", step="15s", now=NOW)
    assert frame["num_drafts"].sum() == 7000  # was 410: the first sample was the baseline
    first = frame.sort("end_ts").row(0, named=True)
    assert (first["start_ts"], first["end_ts"], first["num_drafts"]) == (created, NOW - 190, 6590)
    assert notices == []
    assert "specobs_drafts_created" in prom.queries


def test_a_baseline_assumed_is_reported_with_what_it_may_miss(recorded):
    old = NOW - 86400  # created a day before the range
    prom = recorded(
        {
            DRAFTS: [series(DRAFTS, ticks([5000, 5100, 5300]))],
            "specobs_drafts_created": [series("specobs_drafts_created", ticks([old] * 3))],
            "specobs_draft_tokens_total": [series("specobs_draft_tokens_total", ticks([15000, 15300, 15900]))],
        }
    )
    frame, notices = prometheus_api.read(prom.url, since="5m", step="15s", now=NOW)
    assert frame["num_drafts"].sum() == 300 and frame["num_draft_tokens"].sum() == 900  # unchanged semantics
    assert all(isinstance(n, Notice) and n.source == prom.url for n in notices)
    whys = sorted(n.why for n in notices)
    assert len(whys) == 2
    assert whys[0].startswith("specobs_draft_tokens_total:") and "no _created series" in whys[0]
    assert "up to 15,000 counted before it" in whys[0]
    assert whys[1].startswith(f"{DRAFTS}:") and "created before the range" in whys[1]
    assert "up to 5,000 counted before it" in whys[1]


def test_a_restart_seen_in_created_counts_from_the_new_value(recorded):
    # The engine restarted between the 2nd and 3rd sample and overtook its old total before the
    # next scrape: the value did not fall, but its _created time changed.
    prom = recorded(
        {
            DRAFTS: [series(DRAFTS, ticks([100, 150, 400]))],
            "specobs_drafts_created": [series("specobs_drafts_created", ticks([NOW - 900, NOW - 900, NOW - 280]))],
        }
    )
    frame, _ = prometheus_api.read(prom.url, since="5m", step="15s", now=NOW)
    assert sorted(frame["num_drafts"].to_list()) == [50, 400]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.prometheus
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus (CI installs it)")
def test_fleet_path_counts_a_fresh_exporter_whole(tmp_path):
    """The issue's reproduction: a real Prometheus scrapes `specobs exporter` on the bundled sweep;
    `specobs report --prometheus URL --since 5m` gave 0 drafts where the files hold 22,644."""
    files = report_json(str(SWEEP))["summary"]
    exporter_port, prom_port = free_port(), free_port()
    exporter = subprocess.Popen(
        [sys.executable, "-m", "specobs.cli", "exporter", str(SWEEP), "--listen", f"127.0.0.1:{exporter_port}",
         "--poll", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: specobs\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exporter_port}']\n"
    )
    prometheus = subprocess.Popen(
        [shutil.which("prometheus") or "prometheus", f"--config.file={config}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{prom_port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                got = prometheus_api.PrometheusAPI(base).query_range(DRAFTS, time.time() - 60, time.time(), 1)
                if sum(float(s["values"][-1][1]) for s in got) == files["num_drafts"]:
                    break
            except InputError:
                pass
            time.sleep(0.5)
        time.sleep(2.0)  # a few more scrapes of the same totals
        frame, notices = prometheus_api.read(base, since="5m", step="1s")
        assert frame["num_drafts"].sum() == files["num_drafts"] == 22644
        assert frame["num_accepted_tokens"].sum() == files["num_accepted_tokens"]
        assert notices == []
    finally:
        prometheus.terminate()
        exporter.terminate()
        prometheus.wait(10)
        exporter.wait(10)


def test_the_report_lists_notices_apart_from_skipped_lines(write):
    from support.helpers import report_json

    path = write("m.txt", scrapes([GOOD[0], GOOD[1], (40, 120, 70, [30, 25, 15])]))
    data = report_json(str(path))
    assert data["skipped_lines"]["total"] == 0 and data["sources"][0]["skipped"] == 0
    (notice,) = data["notices"]
    assert notice["source"] == str(path) and "engine restart assumed" in notice["why"]


def test_rich_and_markdown_say_what_was_assumed(write):
    from support.helpers import run_cli

    path = write("m.txt", scrapes([GOOD[0], GOOD[1], (40, 120, 70, [30, 25, 15])]))
    for fmt in ("rich", "markdown"):
        out = run_cli("report", str(path), "-f", fmt).stdout.decode()
        assert "Assumed while reading the inputs" in out and "engine restart assumed" in out, fmt
    json_run = run_cli("report", str(path), "-f", "json")
    assert "specobs: note: " in json_run.stderr.decode() and "engine restart assumed" in json_run.stderr.decode()


def test_a_skipped_sample_does_not_split_its_scrape(tmp_path):
    """A non-finite sample repeating a series inside one scrape is skipped and nothing else:
    it must not start a new scrape (which would cut the real scrape in two)."""
    from specobs.ingest import load

    bundled = ROOT / "examples" / "data" / "vllm-cpu-ngram-k3.metrics.txt"
    lines = bundled.read_text().splitlines(keepends=True)
    series = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny-llama"}'
    at = [i for i, line in enumerate(lines) if line.startswith(series)][4]
    dirty = tmp_path / "dirty.txt"
    dirty.write_text("".join([*lines[: at + 1], f"{series} NaN\n", *lines[at + 1 :]]))
    clean, got = load([str(bundled)]), load([str(dirty)])
    columns = ["num_drafts", "num_draft_tokens", "num_accepted_tokens"]
    assert got.windows.collect().select(columns).sum().row(0) == clean.windows.collect().select(columns).sum().row(0)
    assert got.windows.collect().height == clean.windows.collect().height
    assert [s.line for s in got.skipped] == [at + 2]
    assert not got.notices

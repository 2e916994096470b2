"""A real Prometheus scrapes `specobs exporter`, evaluates the shipped rules, fires an alert, and
`specobs report --prometheus` reads the same server back (the fleet path).

Events come from the simulator (a collapsed drafter: acceptance length ≈ 1). The shipped rules
are loaded with their `for:` durations set to 0 so the alert can fire within the test; the
`for:` behaviour itself is covered by `promtool test rules` (tests/test_prometheus_rules.py).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import polars as pl
import pytest
from support.helpers import run_cli
from support.paths import ROOT

from specobs.capture.sinks import JsonlSink
from specobs.testing import simulate as sim

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus (CI installs it)"),
]
RULES = ROOT / "exporters" / "prometheus" / "rules.yml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


def wait_for(condition, timeout: float = 60.0, every: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = condition()
            if last:
                return last
        except OSError:
            pass
        time.sleep(every)
    raise AssertionError(f"timed out; last value {last!r}")


def collapsed_steps(n: int, seed: int) -> pl.DataFrame:
    spec = sim.MethodSpec("eagle3", tuple(sim.profile("iid", 0.02)), (0.0, 0.0, 0.001, 0.00001))
    return sim.simulate_run(sim.Scenario(methods=(spec,), seed=seed), "eagle3", 3, [8], n)


@pytest.fixture
def stack(tmp_path):
    events = tmp_path / "events"
    events.mkdir()
    sink = JsonlSink(events, "live")
    sink.write(collapsed_steps(50, seed=1).to_dicts())
    exporter_port, prom_port = free_port(), free_port()
    exporter = subprocess.Popen(
        [sys.executable, "-m", "specobs.cli", "exporter", str(events), "--listen", f"127.0.0.1:{exporter_port}",
         "--poll", "0.2", "--tuning-interval", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    rules = tmp_path / "rules.yml"
    rules.write_text(re.sub(r"(\n\s*for:\s*)\S+", r"\g<1>0s", RULES.read_text()))
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {rules}\n"
        "scrape_configs:\n  - job_name: specobs\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exporter_port}']\n"
    )
    prometheus = subprocess.Popen(
        [shutil.which("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{prom_port}"
    try:
        yield {"base": base, "sink": sink, "exporter": exporter}
    finally:
        prometheus.terminate()
        exporter.terminate()
        prometheus.wait(10)
        exporter.wait(10)
        sink.close()


def test_prometheus_scrapes_the_exporter_evaluates_rules_fires_and_reads_back(stack):
    base, sink = stack["base"], stack["sink"]
    first = collapsed_steps(50, seed=1)
    # The first scrape is the baseline the fleet path measures from.
    wait_for(lambda: query(base, "sum(specobs_drafts_total)"), timeout=90)
    baseline = float(query(base, "sum(specobs_drafts_total)")[0]["value"][1])
    assert baseline == first["num_drafts"].sum()
    time.sleep(3.0)  # several scrapes of the baseline before anything new arrives
    added = []
    for seed in range(2, 8):  # events keep flowing: rates need two samples
        batch = collapsed_steps(20, seed=seed)
        sink.write(batch.to_dicts())
        added.append(batch)
        time.sleep(1.0)
    more = pl.concat(added)
    total = first["num_drafts"].sum() + more["num_drafts"].sum()
    wait_for(lambda: float(query(base, "sum(specobs_drafts_total)")[0]["value"][1]) == total)
    accepted = first["num_accepted_tokens"].sum() + more["num_accepted_tokens"].sum()
    assert float(query(base, "sum(specobs_accepted_tokens_total)")[0]["value"][1]) == accepted

    # A recording rule from the shipped rules, computed by Prometheus itself.
    length = wait_for(lambda: query(base, "specobs:acceptance_length:rate5m"))
    assert 1.0 <= float(length[0]["value"][1]) < 1.1

    # The collapse alert fires.
    def firing():
        with urllib.request.urlopen(f"{base}/api/v1/alerts", timeout=5) as r:
            alerts = json.loads(r.read())["data"]["alerts"]
        return [
            a for a in alerts if a["labels"]["alertname"] == "SpecDecodeAcceptanceCollapse" and a["state"] == "firing"
        ]

    alerts = wait_for(firing, timeout=60)
    assert alerts[0]["labels"]["severity"] == "critical"

    # The fleet path: the same server, read back by `specobs report --prometheus`.
    wait_for(lambda: query(base, "count_over_time(specobs_drafts_total[5m])"))
    time.sleep(2.0)
    result = run_cli("report", "--prometheus", base, "--since", "5m", "--step", "1s", "--format", "json")
    assert result.returncode == 0, result.stderr.decode()
    data = json.loads(result.stdout)
    # The exporter's counters were created inside the range: everything they counted, exactly.
    assert data["summary"]["num_drafts"] == total
    assert data["summary"]["num_accepted_tokens"] == accepted
    assert data["sources"][0]["format"] == "prometheus-api"
    assert data["timing"], "specobs timing histograms read back as timed windows"

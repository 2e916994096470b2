"""The app end to end in a real browser: ``specobs dashboard`` serves it, Debian's Chromium
(driven by Playwright, no browser download) renders every page, and screenshots are kept as
test artifacts (``test-artifacts/dashboard/``, or ``$SPECOBS_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from support.helpers import report_json, run_cli
from support.paths import ROOT

from specobs.dashboard.data import ARGS_ENV

CHROMIUM = "/usr/bin/chromium"
SWEEP = ROOT / "examples" / "data" / "vllm-cpu-sweep"
BENCH = ROOT / "examples" / "data" / "vllm-cpu-bench"
ARTIFACTS = Path(os.environ.get("SPECOBS_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "dashboard"
TIMEOUT_MS = 180_000
#: Charts drawn: chart elements in which Vega has put its marks (SVG or canvas).
CHARTS_DRAWN = """() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
    .filter(chart => chart.querySelector('.marks')).length"""

# CI installs both and sets SPECOBS_REQUIRE_BROWSER=1, so there a missing browser fails instead.
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not os.environ.get("SPECOBS_REQUIRE_BROWSER")
        and (not os.path.exists(CHROMIUM) or importlib.util.find_spec("playwright") is None),
        reason="needs Debian's chromium and playwright (the dev extra)",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(*paths: str, log_name: str = "server.log"):
    """``specobs dashboard [PATHS]`` on a free port: yields its URL, stops it afterwards."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != ARGS_ENV}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = open(ARTIFACTS / log_name, "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        [sys.executable, "-m", "specobs.cli", "dashboard", "--port", str(port), *paths], stdout=log,
        stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"specobs dashboard did not start (exit {proc.poll()}); see {log.name}")
        time.sleep(0.5)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def server():
    """``specobs dashboard`` with no inputs (the bundled sweep and serving results)."""
    yield from serve()


@pytest.fixture(scope="module")
def bench_server():
    """``specobs dashboard`` on the bundled ``vllm bench serve`` results and their capture."""
    yield from serve(str(BENCH), log_name="server-bench.log")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]
        )
        yield chromium
        chromium.close()


def open_page(page, name: str, *, shows: str, charts: int) -> None:
    """Click ``name`` in the sidebar; wait for the text ``shows`` (which appears once the page
    has been computed) and then for exactly ``charts`` charts to be drawn."""
    page.get_by_test_id("stSidebar").get_by_text(name, exact=True).click()
    page.locator("h2", has_text=name).first.wait_for(timeout=TIMEOUT_MS)
    page.get_by_text(shows, exact=False).first.wait_for(timeout=TIMEOUT_MS)
    wait_until_idle(page)
    page.wait_for_function(f"n => ({CHARTS_DRAWN})() === n", arg=charts, timeout=TIMEOUT_MS)


def wait_until_idle(page) -> None:
    """Streamlit shows a running indicator while the script runs; wait until it is gone."""
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=TIMEOUT_MS)
    page.wait_for_timeout(500)


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def no_traceback(page) -> None:
    body = page.locator("body").inner_text()
    assert "Traceback" not in body and "Internal error" not in body


def test_every_page_renders_in_chromium(server, browser, tmp_path):
    summary = report_json(str(SWEEP), "--by", "method,k")["summary"]
    rec = json.loads(run_cli("recommend", str(SWEEP), "--format", "json").stdout)["recommended"]
    draft = next(SWEEP.glob("specobs-sweep-draft_model-*.jsonl"))
    ngram = next(SWEEP.glob("specobs-sweep-ngram-*.jsonl"))
    verdict = json.loads(run_cli("compare", str(draft), str(ngram), "--format", "json").stdout)["verdict"]
    windows = sum(1 for path in SWEEP.glob("specobs-*") for _ in path.open())
    page = browser.new_page(viewport={"width": 1400, "height": 2600})
    page.goto(server)

    open_page(page, "Overview", shows="Acceptance by draft position", charts=3)
    metric = page.get_by_test_id("stMetric").filter(has_text="Acceptance length")
    assert f"{summary['mean_acceptance_length']:.2f}" in metric.inner_text()
    assert page.get_by_text("Acceptance over time").is_visible()
    no_traceback(page)
    shot(page, "overview")

    open_page(page, "Cost", shows="Rejected-draft share", charts=4)  # step time; cost ratio, draft and rejected shares
    no_traceback(page)
    shot(page, "cost")

    what = "a batch-size schedule (" if rec["schedule"] else f"k={rec['num_speculative_tokens']}"
    headline = f"Recommendation: {rec['method']} with {what}"
    open_page(page, "Tuning", shows=headline, charts=2)
    assert rec["speculative_config"] in page.get_by_test_id("stCode").first.inner_text()
    no_traceback(page)
    shot(page, "tuning")

    # The bundled serving results fill this page (their servers' capture is not bundled with them).
    open_page(page, "Serving under load", shows="Speculative over plain per level (measured)", charts=1)
    assert page.get_by_text("output throughput: below parity from the lowest level measured").is_visible()
    no_traceback(page)
    shot(page, "serving-default")

    open_page(page, "Compare", shows=verdict, charts=1)
    no_traceback(page)
    shot(page, "compare")

    open_page(page, "Sources", shows=f"{windows:,} of {windows:,} windows pass the filters", charts=0)
    assert page.get_by_text("Skipped lines: 0").is_visible()
    no_traceback(page)
    shot(page, "sources")

    # A bad upload: a clear message on Sources, and the rest keeps working.
    bad = tmp_path / "garbage.bin"
    bad.write_bytes(bytes(range(256)) * 8)
    page.get_by_test_id("stSidebar").get_by_text("Data", exact=True).click()
    page.locator("input[type='file']").set_input_files(str(bad))
    message = "Could not read garbage.bin: binary data, not a recognised log, scrape or event file"
    page.get_by_text(message).wait_for(timeout=TIMEOUT_MS)
    wait_until_idle(page)
    no_traceback(page)
    shot(page, "sources-bad-upload")
    open_page(page, "Overview", shows="could not be read: see the Sources page", charts=3)
    assert f"{summary['mean_acceptance_length']:.2f}" in page.get_by_test_id("stMetric").first.inner_text()
    no_traceback(page)
    page.close()


def test_serving_page_renders_in_chromium(bench_server, browser):
    """The Serving under load page on real results: its chart drawn, its tables shown, and no
    error in the page or its scripts."""
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1400, "height": 2600})
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(bench_server)
    open_page(page, "Serving under load", shows="What the engine did during each level (captured)", charts=1)
    assert page.get_by_text("Speculative over plain per level (measured)").is_visible()
    assert page.get_by_text("output throughput: below parity from the lowest level measured").is_visible()
    assert page.get_by_test_id("stDataFrame").count() == 5  # ratios, crossovers, where to draft, levels, capture
    no_traceback(page)
    assert not errors, errors
    shot(page, "serving")
    page.close()

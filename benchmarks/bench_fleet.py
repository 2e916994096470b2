"""Fleet scale: every figure of the fleet-scale targets in one run, each beside its anchor.

    python benchmarks/bench_fleet.py [--only log,parquet,folder,recommend,dashboard,exporter]
                                     [--repeat 3] [--parts 10] [--split 1] [--no-write]

Each command runs in a fresh process; the wall time is the best of ``--repeat`` runs and the
peak RSS the largest. Rows and anchors:

- ``log``: ``specobs report`` on the generated 1 GB vLLM V1 log, beside the plain-Python
  parser (benchmarks/plain_parser.py, same totals checked) and ``grep -c 'SpecDecoding metrics'``.
- ``parquet``: ``specobs report`` on 10M step rows (one Parquet file), beside one polars
  group-by of the same file (the counters summed per label set: the least any report must do).
- ``folder``: the same on 100M step rows in a folder of Parquet files: 10 copies of the 10M
  file, each shifted past the one before, each one file (or ``--split`` files of consecutive
  rows: many engine-hours). specobs reads it in parts (``ingest.PART_ROWS``).
- ``recommend``: ``specobs recommend`` (30 resamples) on the 10M rows, beside the same group-by.
- ``dashboard``: first load, the slowest page change and peak RSS of the app on the 10M steps
  (benchmarks/bench_dashboard.py's AppTest session on the ``parquet`` row's file).
- ``exporter``: one scrape of 8 engines × 3 methods, the series one engine publishes, and
  ``observe_step`` for a step with 16 positions (benchmarks/bench_exporters.py's cases).

The table is appended to benchmarks/RESULTS.md with the command and the machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

from bench_ingest import DATA, measure
from results import machine, publish

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ROWS = 10_000_000
PARTS = 10
SPECOBS = [sys.executable, "-m", "specobs.cli"]
#: The least work any report on step rows does: one pass summing the counters per label set.
GROUP_BY = (
    "import polars as pl, sys; pl.scan_parquet(sys.argv[1]).group_by("
    "'run_id', 'engine', 'model', 'method', 'batch_size', 'num_spec_tokens').agg("
    "pl.col('num_drafts', 'num_draft_tokens', 'num_accepted_tokens', 'draft_seconds', 'verify_seconds').sum(),"
    " pl.len()).collect(engine='streaming')"
)


def best(command: list[str], repeat: int) -> tuple[float, float, bytes]:
    """Best wall seconds, largest peak RSS (MiB) and the output of ``repeat`` fresh runs."""
    runs = [measure(command) for _ in range(repeat)]
    fastest = min(runs, key=lambda r: r[0])
    return fastest[0], max(r[1] for r in runs), fastest[2]


def make_folder(steps: Path, folder: Path, parts: int, split: int = 1) -> None:
    """``parts`` copies of the 10M-row file, each shifted past the one before, each written as
    ``split`` files of consecutive rows (in a child process, streaming, so the parent's peak RSS
    stays small)."""
    if folder.exists() and len(list(folder.glob("*.parquet"))) == parts * split:
        return
    folder.mkdir(parents=True, exist_ok=True)
    code = (
        "import polars as pl, sys\n"
        "src, out, parts, split = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])\n"
        "span = pl.scan_parquet(src).select(pl.col('ts').max() - pl.col('ts').min()).collect().item() + 1\n"
        "rows = pl.scan_parquet(src).select(pl.len()).collect().item()\n"
        "for i in range(parts):\n"
        "    for j in range(split):\n"
        "        lo, hi = j * rows // split, (j + 1) * rows // split\n"
        "        name = f'{out}/part-{i:02d}.parquet' if split == 1 else f'{out}/part-{i:02d}-{j:03d}.parquet'\n"
        "        pl.scan_parquet(src).slice(lo, hi - lo).with_columns(ts=pl.col('ts') + i * span).sink_parquet(\n"
        "            name, row_group_size=1_000_000)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(steps), str(folder), str(parts), str(split)], check=True)


def log_rows(repeat: int) -> list[str]:
    log = DATA / "vllm-v1-1024mb.log"
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    spec_s, spec_mb, spec_out = best([*SPECOBS, "report", str(log), "--format", "json"], repeat)
    plain_s, _, plain_out = best([sys.executable, str(HERE / "plain_parser.py"), str(log)], repeat)
    grep_s, _, _ = best(["grep", "-c", "SpecDecoding metrics", str(log)], repeat)
    report = json.loads(spec_out)["summary"]
    plain = json.loads(plain_out).values()
    agree = report["num_accepted_tokens"] == sum(v["accepted"] for v in plain) and report["num_drafts"] == sum(
        v["drafts"] for v in plain
    )
    return [
        f"| `specobs report` on a {log.stat().st_size / 2**30:.1f} GB V1 log | {spec_s:.2f} s, {spec_mb:,.0f} MiB "
        f"| parser {plain_s:.2f} s, grep {grep_s:.2f} s | {plain_s / spec_s:.1f}× faster than the parser, "
        f"{spec_s / grep_s:.1f}× grep (totals {'agree' if agree else 'DIFFER'}) | ≤ 3× grep |"
    ]


def steps_row(label: str, path: Path, command: list[str], repeat: int, target: str) -> str:
    seconds, mib, _ = best(command, repeat)
    anchor_s, anchor_mb, _ = best([sys.executable, "-c", GROUP_BY, str(path)], repeat)
    return (
        f"| {label} | {seconds:.2f} s, {mib:,.0f} MiB | polars group-by {anchor_s:.2f} s, {anchor_mb:,.0f} MiB "
        f"| {seconds / anchor_s:.1f}× the group-by | {target} |"
    )


def dashboard_row(steps: Path) -> str:
    out = subprocess.run(
        [sys.executable, str(HERE / "bench_dashboard.py"), "--child", "apptest", "--path", str(steps)],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout.strip().splitlines()[-1])
    times = dict(result["times"])
    first = times.pop("first load (Overview)")
    slowest = max(times, key=lambda k: times[k])
    cached = [v for k, v in times.items() if k.endswith("again") or "cached" in k]
    return (
        f"| dashboard on 10M steps | first load {first:.2f} s; slowest page change {times[slowest]:.2f} s "
        f"({slowest}); cached pages ≤ {max(cached):.2f} s; peak RSS {result['peak_rss_mib']:,.0f} MiB | – | – "
        "| ≤ 3 s / ≤ 0.5 s / ≤ 1.5 GB |"
    )


def exporter_row() -> str:
    out = subprocess.run(
        [sys.executable, str(HERE / "bench_exporters.py"), "--no-write", "--json"],
        capture_output=True, text=True, cwd=HERE, check=True,
    )  # fmt: skip
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return (
        f"| exporter: one scrape of 8 engines × 3 methods; `observe_step` (16 positions) "
        f"| {r['render_ms']:.2f} ms for {r['series']:,} series ({r['series_per_engine']} per engine at most); "
        f"{r['observe_step_us']:.1f} µs | `generate_latest` of as many plain samples {r['plain_ms']:.2f} ms; "
        f"by hand {r['by_hand_us']:.1f} µs | render {r['render_ms'] / r['plain_ms']:.2f}× the plain exposition; "
        f"`observe_step` {r['observe_step_us'] / r['by_hand_us']:.2f}× by hand "
        "| ≤ 5 ms, ≤ 500 series per engine; ≤ 15 µs |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="log,parquet,folder,recommend,dashboard,exporter")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parts", type=int, default=PARTS, help="10M-row parts of the folder row (10: 100M rows)")
    parser.add_argument("--split", type=int, default=1, help="files per 10M-row part of the folder row")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    only = set(args.only.split(","))
    steps = DATA / f"steps-{ROWS}.parquet"
    folder = DATA / (f"steps-{ROWS * args.parts}" + (f"-in-{args.parts * args.split}" if args.split > 1 else ""))
    if only & {"log", "parquet", "folder", "recommend"} or ("dashboard" in only and not steps.exists()):
        # the 1 GB log and the 10M rows, once
        subprocess.run([sys.executable, str(HERE / "bench_ingest.py"), "--generate", "1024", str(ROWS)], check=True)
    started = time.perf_counter()
    rows: list[str] = []
    if "log" in only:
        rows += log_rows(args.repeat)
    if "parquet" in only:
        command = [*SPECOBS, "report", str(steps), "--format", "json"]
        rows.append(
            steps_row("10M step rows (Parquet) → report", steps, command, args.repeat, "≤ 3× the group-by, ≤ 1 GB")
        )
    if "folder" in only:
        make_folder(steps, folder, args.parts, args.split)
        command = [*SPECOBS, "report", str(folder), "--format", "json"]
        rows.append(
            steps_row(
                f"{ROWS * args.parts // 1_000_000}M step rows ({args.parts * args.split} Parquet files) → report",
                folder,
                command,
                1,
                "≤ 30 s, ≤ 1.5 GB",
            )
        )
    if "recommend" in only:
        command = [*SPECOBS, "recommend", str(steps), "--format", "json", "--bootstrap", "30"]
        rows.append(
            steps_row(
                "`recommend` on 10M steps, 30 resamples", steps, command, args.repeat, "≤ 3× the group-by, ≤ 1 GB"
            )
        )
    if "dashboard" in only:
        rows.append(dashboard_row(steps))
    if "exporter" in only:
        rows.append(exporter_row())
    lines = [
        f"## {dt.date.today().isoformat()} — fleet scale, one run",
        "",
        f"Command: `python benchmarks/bench_fleet.py --only {args.only} --repeat {args.repeat} --parts {args.parts}"
        f"{f' --split {args.split}' if args.split > 1 else ''}` "
        f"({time.perf_counter() - started:.0f} s). {machine()}",
        "",
        "| figure | specobs | anchor | ratio | target |",
        "|---|---|---|---|---|",
        *rows,
    ]
    publish(lines, write=not args.no_write)


if __name__ == "__main__":
    main()

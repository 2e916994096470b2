"""Exporter soak: `specobs exporter` follows a JSON Lines file appended at a steady rate, rotated,
truncated and salted with bad rows, while a real Prometheus scrapes it every second.

    python benchmarks/bench_soak.py [--minutes 10] [--rate 1000] [--append-results]

Why: the in-process soak (tests/test_exporter_soak.py) polls the sidecar by hand; this one runs
the real processes, so the HTTP server, the poll thread and Prometheus' scrape loop contend the
way they do in a deployment. Checks (non-zero exit when one fails):

- every good row is counted exactly once: Prometheus' totals (steps, drafts, draft and accepted
  tokens, per position) equal what the writer wrote and what `specobs report -f json` reads from
  the same files (the rotated file, a copy of the truncated one, the current one), and those
  files are, byte for byte, everything that was written;
- every bad row is counted once, under its reason, in `specobs_skipped_records_total`;
- no scrape failed (`up` was 1 at every scrape, no target-level scrape errors) and nearly every
  scheduled scrape happened;
- the exporter's resident memory stays flat: the memory it keeps between refits (the median RSS
  over a refit interval) grows under 10% from the interval after the warm-up (the recent-rows
  buffer full, one refit done) to the last one. Each refit allocates and frees a frame for a
  second or two; those peaks, sampled once a second, land anywhere on the spike (±15% from run
  to run with no leak at all), so they are reported, not judged. A leak grows the median.

The writer appends a batch every 100 ms, the last line of each batch cut in half and finished
by the next write. Rotation is rename + new file. The copytruncate waits until the exporter has
read everything written so far: a real copytruncate loses whatever the follower had not read
yet (those lines survive only in the copy), which no follower can avoid, so without the wait
the count could not be exact; the pause is reported and counted in the achieved rate.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from results import machine, publish

from specobs.exporters.sidecar import RECENT_ROWS

BAD_KINDS = ("negative", "non_finite", "invalid_json")
SLOW = 0.5  # seconds: a scrape this slow is listed with its time (the timeout is 0.8 s)
#: Prometheus' own counters of scrapes that went wrong in some way (each must stay 0).
SCRAPE_ERRORS = (
    "prometheus_target_scrapes_exceeded_sample_limit_total",
    "prometheus_target_scrapes_exceeded_body_size_limit_total",
    "prometheus_target_scrapes_sample_duplicate_timestamp_total",
    "prometheus_target_scrapes_sample_out_of_bounds_total",
    "prometheus_target_scrapes_sample_out_of_order_total",
    "prometheus_target_scrape_pool_exceeded_label_limits_total",
    "prometheus_target_scrape_pool_exceeded_target_limit_total",
    "prometheus_target_scrape_pools_failed_total",
)
COUNTERS = {  # Prometheus metric -> key of `specobs report`'s summary
    "specobs_drafts_total": "num_drafts",
    "specobs_draft_tokens_total": "num_draft_tokens",
    "specobs_accepted_tokens_total": "num_accepted_tokens",
}


def good_row(rng: random.Random, ts: float) -> dict[str, Any]:
    """A consistent event-file step row (the in-process soak's generator)."""
    k = rng.choice((2, 3, 4))
    drafts = rng.randint(1, 16)
    per_pos = sorted((rng.randint(0, drafts) for _ in range(k)), reverse=True)
    accepted = sum(per_pos)
    return {
        "ts": ts, "run_id": "soak", "engine": rng.randint(0, 1), "model": rng.choice(("m-a", "m-b", "m-c")),
        "method": rng.choice(("ngram", "eagle3")), "batch_size": rng.randint(1, 64), "num_spec_tokens": k,
        "num_drafts": drafts, "num_draft_tokens": drafts * k, "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": per_pos, "num_generated_tokens": accepted + drafts,
        "draft_seconds": rng.uniform(0.0005, 0.003), "verify_seconds": rng.uniform(0.005, 0.02),
        "step_seconds": rng.uniform(0.006, 0.025),
    }  # fmt: skip


def bad_row(rng: random.Random, ts: float) -> tuple[str, str]:
    """``(reason, line)``: a negative count, a NaN/Infinity, or a line that is not JSON."""
    row = good_row(rng, ts)
    kind = rng.choice(BAD_KINDS)
    if kind == "negative":
        return kind, json.dumps({**row, rng.choice(("num_drafts", "batch_size", "num_accepted_tokens")): -5})
    if kind == "non_finite":
        text = json.dumps({**row, "step_seconds": 1.5})
        return kind, text.replace('"step_seconds": 1.5', f'"step_seconds": {rng.choice(("NaN", "Infinity"))}')
    return kind, json.dumps(row)[:-7] + "}}"


@dataclass
class Written:
    """What the writer put in the files: the reference every count is checked against."""

    lines: int = 0
    steps: int = 0
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS.values(), 0))
    per_pos: list[int] = field(default_factory=list)
    bad: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BAD_KINDS, 0))
    seconds: float = 0.0
    truncate_pause: float = 0.0

    def add(self, row: dict[str, Any]) -> None:
        self.steps += 1
        for key in self.totals:
            self.totals[key] += row[key]
        per_pos = row["num_accepted_tokens_per_pos"]
        self.per_pos += [0] * (len(per_pos) - len(self.per_pos))
        for i, v in enumerate(per_pos):
            self.per_pos[i] += v


@dataclass
class SoakResult:
    """Figures of one soak and its checks (name, passed, detail)."""

    seconds: float
    rate: int
    tuning_interval: float
    written: Written
    prometheus: dict[str, Any]
    report: dict[str, Any]
    scrapes: dict[str, Any]
    rss: dict[str, Any]
    cpu_percent: float
    machine_busy: float
    checks: list[tuple[str, bool, str]]

    @property
    def ok(self) -> bool:
        return all(passed for _, passed, _ in self.checks)

    def failed(self) -> list[str]:
        return [f"{name}: {detail}" for name, passed, detail in self.checks if not passed]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


def query(base: str, promql: str) -> list[dict[str, Any]]:
    """An instant query; the result vector."""
    data = json.loads(get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})))
    return list(data["data"]["result"])


def scalar(base: str, promql: str) -> float | None:
    """The value of a query that yields one sample (None when it yields none)."""
    result = query(base, promql)
    return float(result[0]["value"][1]) if result else None


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A /metrics page as ``(sample name, sorted labels) -> value``."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def wait_for(condition: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
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
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


class ProcSampler(threading.Thread):
    """Samples a process's resident memory and CPU time from /proc every ``every`` seconds."""

    def __init__(self, pid: int, every: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, int, float]] = []  # (monotonic, RSS bytes, CPU seconds)
        self._halt = threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK")

    def sample(self) -> tuple[float, int, float]:
        rss = 0
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
        with open(f"/proc/{self.pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        cpu = (int(fields[11]) + int(fields[12])) / self._tick  # utime + stime
        return time.monotonic(), rss, cpu

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.samples.append(self.sample())
            except OSError:
                return
            self._halt.wait(self.every)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


@contextmanager
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every process started inside is terminated (then killed) on the way out, whatever happens."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for p in reversed(started):
            if p.poll() is None:
                p.terminate()
        for p in reversed(started):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


def start_exporter(procs: list[subprocess.Popen[bytes]], events: Path, log: Path, tuning: float) -> tuple[int, str]:
    """`specobs exporter` on a free port; returns its pid and the address it says it bound."""
    with open(log, "wb") as err:
        p = subprocess.Popen(
            [sys.executable, "-m", "specobs.cli", "exporter", str(events), "--listen", "127.0.0.1:0",
             "--tuning-interval", str(tuning)],
            stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    procs.append(p)

    def bound() -> str | None:
        if p.poll() is not None:
            raise RuntimeError(f"the exporter exited ({p.returncode}): {log.read_text()[-2000:]}")
        for line in log.read_text().splitlines():
            if "serving /metrics on http://" in line:
                return line.split("http://", 1)[1].split("/metrics", 1)[0]
        return None

    return p.pid, str(wait_for(bound, 60, "the exporter to listen"))


def start_prometheus(procs: list[subprocess.Popen[bytes]], work: Path, target: str) -> str:
    """A real Prometheus scraping ``target`` every second (timeout 800 ms); returns its base URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("needs the prometheus binary on PATH (Debian: apt-get install prometheus)")
    port = free_port()
    config = work / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 800ms\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: specobs\n    static_configs:\n"
        f"      - targets: ['{target}']\n"
    )
    command = [binary, f"--config.file={config}", f"--storage.tsdb.path={work / 'tsdb'}",
               f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    with open(work / "prometheus.log", "wb") as log:
        procs.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log))
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: get(f"{base}/-/ready", timeout=2), 60, "Prometheus to be ready")
    wait_for(lambda: scalar(base, 'up{job="specobs"}') == 1.0, 60, "the first scrape of the exporter")
    return base


def exporter_consumed(address: str) -> int:
    """Lines the exporter has taken in: good rows read plus rows skipped (any reason)."""
    s = samples(get(f"http://{address}/metrics").decode())
    rows = s.get(("specobs_exporter_rows_total", ()), 0.0)
    skipped = sum(v for (name, _), v in s.items() if name == "specobs_skipped_records_total")
    return int(rows + skipped)


def write_for(
    events: Path, copy: Path, seconds: float, rate: int, seed: int, address: str, say: Callable[[str], None]
) -> Written:
    """Append ``rate`` rows/s for ``seconds``: a batch every 100 ms, ~2% bad, half a line carried to
    the next write, a rotation at 40% and a copytruncate at 70% of the time. Every byte also goes
    to ``copy``, so what was written is known after the truncation."""
    rng = random.Random(seed)
    written = Written()
    rotate_at, truncate_at = 0.4 * seconds, 0.7 * seconds
    rotated = truncated = False
    pending = ""
    ts = time.time()
    events.touch()
    started = time.monotonic()
    paused = 0.0
    tick = 0
    with open(copy, "w") as all_written:

        def put(text: str) -> None:
            with open(events, "a") as f:
                f.write(text)
            all_written.write(text)

        while True:
            tick += 1
            target = started + paused + tick * 0.1
            time.sleep(max(0.0, target - time.monotonic()))
            elapsed = time.monotonic() - started - paused
            if (not rotated and elapsed >= rotate_at) or (not truncated and elapsed >= truncate_at):
                put(pending)  # a rotation or truncation never splits a line
                pending = ""
                if not rotated:
                    rotated = True
                    os.rename(events, events.with_name(events.name + ".1"))
                    events.touch()
                    say(f"rotated at {elapsed:.0f} s ({written.lines:,} lines)")
                else:
                    truncated = True
                    t = time.monotonic()
                    caught_up = lambda n=written.lines: exporter_consumed(address) >= n  # noqa: E731
                    wait_for(caught_up, 60, "the exporter before truncation")
                    shutil.copyfile(events, events.with_name(events.name + ".2"))
                    os.truncate(events, 0)
                    written.truncate_pause = time.monotonic() - t
                    paused += written.truncate_pause
                    say(f"copytruncated at {elapsed:.0f} s (waited {written.truncate_pause:.2f} s)")
                continue
            done = elapsed >= seconds
            due = min(int(elapsed * rate), int(seconds * rate)) - written.lines
            lines = []
            for _ in range(max(0, due)):
                ts += 1.0 / rate
                if rng.random() < 0.02:
                    kind, line = bad_row(rng, ts)
                    written.bad[kind] += 1
                else:
                    row = good_row(rng, ts)
                    written.add(row)
                    line = json.dumps(row)
                lines.append(line)
            written.lines += len(lines)
            text = pending + ("\n".join(lines) + "\n" if lines else "")
            cut = len(text) if done or not lines else len(text) - len(lines[-1]) // 2 - 1
            text, pending = text[:cut], text[cut:]
            put(text)
            if done:
                break
    written.seconds = time.monotonic() - started
    return written


def rss_window(sampler: ProcSampler, start: float, end: float) -> tuple[int, int]:
    """The median and highest RSS sampled in ``[start, end]`` (monotonic seconds): what the
    exporter keeps between refits, and the peak of a refit's transient frame."""
    inside = [rss for t, rss, _ in sampler.samples if start <= t <= end]
    return (int(statistics.median(inside)), max(inside)) if inside else (0, 0)


def run_soak(
    seconds: float,
    rate: int = 1000,
    *,
    work: Path | None = None,
    seed: int = 15,
    tuning_interval: float = 60.0,
    rss_bound: float = 0.10,
    sample_every: float = 2.0,
    say: Callable[[str], None] = lambda message: print(message, file=sys.stderr, flush=True),
) -> SoakResult:
    """Run the soak for ``seconds`` at ``rate`` rows/s; the figures and checks.

    The RSS baseline is the median over one refit interval starting once the recent-rows buffer
    is full and a refit on it has run; the final figure is the median over the last refit
    interval (whole refit cycles, so each holds one refit's transient frame, which the median
    steps over). The peaks of both intervals are kept for the record."""
    if work is None:
        with tempfile.TemporaryDirectory(prefix="specobs-soak-") as tmp:
            return run_soak(seconds, rate, work=Path(tmp), seed=seed, tuning_interval=tuning_interval,
                            rss_bound=rss_bound, sample_every=sample_every, say=say)  # fmt: skip
    events = work / "events.jsonl"
    events.touch()
    warm_up = max(RECENT_ROWS / rate, tuning_interval) + 2.0
    if seconds < warm_up + 2 * tuning_interval:
        raise ValueError(f"{seconds:.0f} s is too short: the warm-up alone is {warm_up:.0f} s plus two refit intervals")
    with processes() as procs:
        pid, address = start_exporter(procs, events, work / "exporter.log", tuning_interval)
        sampler = ProcSampler(pid, sample_every)
        sampler.start()
        base = start_prometheus(procs, work, address)
        first_up = time.time()
        say(f"exporter on {address} (pid {pid}), Prometheus on {base}; writing {rate:,} rows/s for {seconds:.0f} s")
        began, began_wall, cpu_before = time.monotonic(), time.time(), machine_cpu()
        written = write_for(events, work / "written.jsonl", seconds, rate, seed, address, say)
        wait_for(lambda: exporter_consumed(address) >= written.lines, 120, "the exporter to catch up", every=0.5)
        caught = time.time()
        # one scrape after the exporter caught up: Prometheus' last sample is the final count
        wait_for(lambda: (scalar(base, "timestamp(specobs_exporter_rows_total)") or 0) > caught + 0.05, 30,
                 "a scrape after the catch-up")  # fmt: skip
        ended = time.monotonic()
        machine_busy = busy_share(cpu_before, machine_cpu())
        sampler.stop()
        window = f"{int(time.time() - first_up) + 5}s"
        prom = {metric: scalar(base, f"sum({metric})") for metric in COUNTERS}
        prom["specobs_steps_total"] = scalar(base, "sum(specobs_steps_total)")
        prom["skipped"] = {
            r["metric"]["reason"]: float(r["value"][1])
            for r in query(base, "sum by (reason) (specobs_skipped_records_total)")
        }
        prom["per_pos"] = {
            int(r["metric"]["position"]): float(r["value"][1])
            for r in query(base, "sum by (position) (specobs_accepted_tokens_per_position_total)")
        }
        prom["drafts_per_pos"] = {
            int(r["metric"]["position"]): float(r["value"][1])
            for r in query(base, "sum by (position) (specobs_drafts_per_position_total)")
        }
        prom["exporter_errors"] = scalar(base, "specobs_exporter_errors_total")
        scrapes = {
            "done": scalar(base, f'count_over_time(up{{job="specobs"}}[{window}])') or 0.0,
            "up": scalar(base, f'sum_over_time(up{{job="specobs"}}[{window}])') or 0.0,
            "expected": time.time() - first_up,
            "p50": scalar(base, f"quantile_over_time(0.5, scrape_duration_seconds[{window}])"),
            "p99": scalar(base, f"quantile_over_time(0.99, scrape_duration_seconds[{window}])"),
            "max": scalar(base, f"max_over_time(scrape_duration_seconds[{window}])"),
            "samples": scalar(base, f"max_over_time(scrape_samples_scraped[{window}])"),
        }
        # when the failed and the slow scrapes happened, in seconds after the writer started
        up = query(base, f'up{{job="specobs"}}[{window}]')[0]["values"]
        scrapes["failed_at"] = [round(float(t) - began_wall, 1) for t, v in up if float(v) == 0]
        durations = query(base, f'scrape_duration_seconds{{job="specobs"}}[{window}]')[0]["values"]
        scrapes["slow"] = [(round(float(t) - began_wall, 1), float(v)) for t, v in durations if float(v) > SLOW]
        own = samples(get(f"{base}/metrics").decode())
        scrapes["errors"] = {name: sum(v for (n, _), v in own.items() if n == name) for name in SCRAPE_ERRORS}
        targets = json.loads(get(f"{base}/api/v1/targets"))["data"]["activeTargets"]
        scrapes["last_error"] = "; ".join(t["lastError"] for t in targets if t["lastError"])
        exporter_log = (work / "exporter.log").read_text()

    on_disk = [events.with_name(events.name + ".1"), events.with_name(events.name + ".2"), events]
    same_bytes = sha256_of(*on_disk) == sha256_of(work / "written.jsonl")
    result = subprocess.run(
        [sys.executable, "-m", "specobs.cli", "report", *map(str, on_disk), "-f", "json"],
        capture_output=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"specobs report failed: {result.stderr.decode()[-2000:]}")
    data = json.loads(result.stdout)
    report = {
        **{key: data["summary"][key] for key in COUNTERS.values()},
        "steps": sum(s["windows"] for s in data["sources"]),
        "skipped": data["skipped_lines"]["total"],
        "per_pos": data["summary"]["num_accepted_tokens_per_pos"],
        "drafts_per_pos": data["summary"]["num_drafts_per_pos"],
    }

    # memory and CPU
    s = sampler.samples
    base_start = began + warm_up
    baseline, baseline_peak = rss_window(sampler, base_start, base_start + tuning_interval)
    final, final_peak = rss_window(sampler, ended - tuning_interval, ended)
    rss = {
        "baseline": baseline, "final": final, "growth": (final - baseline) / baseline if baseline else float("nan"),
        "baseline_peak": baseline_peak, "final_peak": final_peak,
        "min": min(r for _, r, _ in s), "max": max(r for _, r, _ in s), "samples": len(s), "warm_up": warm_up,
    }  # fmt: skip
    during = [(t, c) for t, _, c in s if t >= began]
    cpu = 100.0 * (during[-1][1] - during[0][1]) / (during[-1][0] - during[0][0]) if len(during) > 1 else 0.0

    checks: list[tuple[str, bool, str]] = []

    def check(name: str, passed: bool, detail: str) -> None:
        checks.append((name, bool(passed), detail))

    check("files hold exactly what was written", same_bytes, "rotated + truncated copy + current == written")
    check(
        "steps", prom["specobs_steps_total"] == written.steps == report["steps"],
        f"Prometheus {prom['specobs_steps_total']}, written {written.steps}, report {report['steps']}",
    )  # fmt: skip
    for metric, key in COUNTERS.items():
        check(
            key, prom[metric] == written.totals[key] == report[key],
            f"Prometheus {prom[metric]}, written {written.totals[key]}, report {report[key]}",
        )  # fmt: skip
    prom_pos = [prom["per_pos"].get(i, 0.0) for i in range(len(written.per_pos))]
    check("accepted per position", prom_pos == written.per_pos == report["per_pos"],
          f"Prometheus {prom_pos}, written {written.per_pos}, report {report['per_pos']}")  # fmt: skip
    prom_reached = [prom["drafts_per_pos"].get(i, 0.0) for i in range(len(report["drafts_per_pos"]))]
    check("drafts per position", prom_reached == report["drafts_per_pos"],
          f"Prometheus {prom_reached}, report {report['drafts_per_pos']}")  # fmt: skip
    for kind, count in written.bad.items():
        got = prom["skipped"].get(kind)
        check(f"skipped {kind}", got == count and count > 0, f"Prometheus {got}, written {count}")
    others = {r: v for r, v in prom["skipped"].items() if r not in BAD_KINDS and v}
    check("no other skip reason", not others, str(others or "none"))
    check("bad rows in report", report["skipped"] == sum(written.bad.values()),
          f"report {report['skipped']}, written {sum(written.bad.values())}")  # fmt: skip
    check("exporter errors", prom["exporter_errors"] == 0, f"{prom['exporter_errors']}")
    failed = scrapes["done"] - scrapes["up"]
    check("no failed scrape", failed == 0 and not scrapes["last_error"],
          f"{failed:.0f} of {scrapes['done']:.0f} had up=0; last error {scrapes['last_error']!r}")  # fmt: skip
    errors = {k: v for k, v in scrapes["errors"].items() if v}
    check("no scrape errors in Prometheus", not errors, str(errors or "none"))
    check("scrapes happened", scrapes["done"] >= 0.95 * int(scrapes["expected"]),
          f"{scrapes['done']:.0f} of ~{scrapes['expected']:.0f} scheduled")  # fmt: skip
    mib = 2**20
    check("RSS flat", rss["growth"] < rss_bound,
          f"{baseline / mib:.1f} -> {final / mib:.1f} MiB ({rss['growth']:+.1%}, bound {rss_bound:.0%})")  # fmt: skip
    check("writer kept the rate", written.lines >= 0.99 * int(seconds * rate), f"{written.lines:,} lines")
    if "Traceback" in exporter_log:
        check("exporter log", False, exporter_log[-1500:])
    return SoakResult(seconds, rate, tuning_interval, written, prom, report, scrapes, rss, cpu, machine_busy, checks)


def machine_cpu() -> tuple[int, int]:
    """``(busy, total)`` jiffies of all CPUs (/proc/stat), to tell how loaded the machine was."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """Share of all CPUs that was busy between two :func:`machine_cpu` readings."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total else 0.0


def sha256_of(*paths: Path) -> str:
    """The SHA-256 of the files' bytes one after the other."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def section(r: SoakResult, command: str) -> list[str]:
    """The RESULTS.md section of one soak."""
    w, p, rep, sc, m = r.written, r.prometheus, r.report, r.scrapes, r.rss
    bad = sum(w.bad.values())

    def same(*values: Any) -> str:
        return "equal" if len({float(v) for v in values}) == 1 else "**differ**"

    mib = 2**20
    lines = [
        f"## {dt.date.today().isoformat()} — exporter soak with a real Prometheus ({r.seconds / 60:g} min)",
        "",
        f"Command: `{command}`.",
        machine(f", {prometheus_version()}"),
        "",
        f"`specobs exporter` (poll 1 s, refit every {r.tuning_interval:g} s) follows one file appended every 100 ms "
        "(half a line carried to the next write), ~2% bad rows (negative count, NaN/Infinity, invalid JSON), "
        "renamed + recreated at 40% of the time and copytruncated at 70%; a real Prometheus scrapes it every 1 s. "
        "`report` reads the rotated file, the copy of the truncated one and the current one (together "
        "byte-identical to what was written).",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| lines written (good + bad) | {w.lines:,} in {w.seconds:.1f} s |",
        f"| rate achieved | {w.lines / w.seconds:,.0f} rows/s (asked {r.rate:,}; includes the "
        f"{w.truncate_pause:.2f} s copytruncate pause) |",
        f"| good rows / bad rows | {w.steps:,} / {bad:,} ({', '.join(f'{k} {v:,}' for k, v in w.bad.items())}) |",
        f"| steps: Prometheus / written / report | {p['specobs_steps_total']:,.0f} / {w.steps:,} / {rep['steps']:,} "
        f"({same(p['specobs_steps_total'], w.steps, rep['steps'])}) |",
    ]
    for metric, key in COUNTERS.items():
        lines.append(
            f"| {key}: Prometheus / written / report | {p[metric]:,.0f} / {w.totals[key]:,} / {rep[key]:,} "
            f"({same(p[metric], w.totals[key], rep[key])}) |"
        )
    skipped = sum(p["skipped"].get(k, 0) for k in BAD_KINDS)
    lines += [
        f"| skipped rows: Prometheus / written / report | {skipped:,.0f} / {bad:,} / {rep['skipped']:,} "
        f"({same(skipped, bad, rep['skipped'])}) |",
        f"| scrapes done / failed (up = 0) | {sc['done']:,.0f} / {sc['done'] - sc['up']:,.0f} "
        f"(~{sc['expected']:,.0f} scheduled) |",
        f"| scrape duration p50 / p99 / max | {sc['p50'] * 1000:.1f} / {sc['p99'] * 1000:.1f} / "
        f"{sc['max'] * 1000:.1f} ms (timeout 800 ms) |",
        f"| failed scrapes at (s after the writer started) | {', '.join(f'{t:g}' for t in sc['failed_at']) or '—'} |",
        f"| scrapes over {SLOW * 1000:.0f} ms | {len(sc['slow'])}"
        + (f": {', '.join(f'{t:g} s ({d * 1000:.0f} ms)' for t, d in sc['slow'][:12])}" if sc["slow"] else "")
        + (" …" if len(sc["slow"]) > 12 else "")
        + " |",
        f"| samples per scrape (max) | {sc['samples']:,.0f} |",
        f"| exporter RSS kept between refits, baseline → final (median over a refit interval) | "
        f"{m['baseline'] / mib:.1f} → {m['final'] / mib:.1f} MiB ({m['growth']:+.1%}; bound 10%) |",
        f"| exporter RSS peak during a refit, baseline → final interval | {m['baseline_peak'] / mib:.1f} → "
        f"{m['final_peak'] / mib:.1f} MiB |",
        f"| exporter RSS min–max over the run | {m['min'] / mib:.1f}–{m['max'] / mib:.1f} MiB "
        f"({m['samples']} samples) |",
        f"| exporter CPU | {r.cpu_percent:.0f}% of one core |",
        f"| whole machine busy during the run | {r.machine_busy:.0%} of {os.cpu_count()} cores |",
        f"| checks | {'all passed' if r.ok else 'FAILED: ' + '; '.join(r.failed())} |",
        "",
    ]
    return lines


def prometheus_version() -> str:
    try:
        out = subprocess.run(["prometheus", "--version"], capture_output=True, text=True, check=False, timeout=10)
        return "Prometheus " + (out.stdout or out.stderr).split()[2]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "Prometheus (version unknown)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=1000, help="rows per second")
    parser.add_argument("--tuning-interval", type=float, default=60.0, help="the exporter's refit interval")
    parser.add_argument("--append-results", action="store_true", help="append the figures to RESULTS.md")
    args = parser.parse_args()
    result = run_soak(args.minutes * 60, args.rate, tuning_interval=args.tuning_interval)
    options = (("--minutes", args.minutes, 10.0), ("--rate", args.rate, 1000),
               ("--tuning-interval", args.tuning_interval, 60.0))  # fmt: skip
    command = "python benchmarks/bench_soak.py" + "".join(f" {o} {v:g}" for o, v, d in options if v != d)
    command += " --append-results" if args.append_results else ""
    publish(section(result, command), write=args.append_results)
    for name, passed, detail in result.checks:
        print(f"{'ok  ' if passed else 'FAIL'} {name}: {detail}")
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()

"""Speed from inputs without step timing: a band where nothing was timed, a measurement where
a plain server's throughput lines sit beside a speculative server's, checked against what
closed-loop clients measured on the same real servers (examples/data/vllm-cpu-serve).

The expected numbers are computed here from the files themselves (the clients' JSON, the log
lines by regex), not by specobs's tuning code.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from support.helpers import run_cli
from support.paths import ROOT

from specobs.advice.log_speedup import SERVED_SYSTEMATIC
from specobs.advice.recommend import recommend
from specobs.analysis.intervals import t95
from specobs.ingest import load

DATA = ROOT / "examples" / "data"
SERVE = DATA / "vllm-cpu-serve"
UNTIMED = sorted([*DATA.glob("*.log"), *DATA.glob("*.metrics.txt"), *SERVE.glob("*.log"), *SERVE.glob("*.txt")])
UNTIMED = [p for p in UNTIMED if "plain" not in p.name]  # a plain server alone drafts nothing


@pytest.mark.parametrize("path", UNTIMED, ids=lambda p: p.name)
def test_no_input_without_timing_and_plain_engine_gives_a_point_speedup(path: Path) -> None:
    """A log or scrape alone: never a speedup, never a config as the answer, and a band instead."""
    rec = recommend(load([str(path)]).windows, bootstrap=0)
    assert rec is not None
    r = rec.recommended
    assert r.basis == "not measured" and r.predicted_speedup is None and r.interval is None
    assert r.speculative_config is None and not r.num_speculative_tokens
    assert not rec.predicted and not rec.by_batch_size and rec.bands
    for band in rec.bands:
        for row in band.by_k[1:]:
            assert row.speedup_low < row.speedup_high
            assert row.tokens_per_draft_low <= row.tokens_per_draft <= row.tokens_per_draft_high


def _clients(name: str | Path) -> dict[int, float]:
    """Concurrency → the clients' own tokens/s (completion tokens over the level's wall time)."""
    path = name if isinstance(name, Path) else SERVE / name
    data = json.loads(path.with_name(f"{path.name}.clients.json").read_text())
    return {level["concurrency"]: level["tokens_per_second"] for level in data["levels"]}


#: The held-out recording: the sweep's real-text prompts, 40 s levels, one repeat.
SERVE_TEXT = DATA / "vllm-cpu-serve-text"


def _runs() -> list[tuple[Path, Path]]:
    """(speculative recording, the plain recording of the same repeat), as paths without suffix."""
    out = []
    for folder in (SERVE, SERVE_TEXT):
        for spec in sorted(folder.glob("vllm-cpu-*-k3*.clients.json")):
            name = spec.name.removesuffix(".clients.json")
            repeat = name.rsplit("-", 1)[1] if name.rsplit("-", 1)[1].startswith("r") else ""
            plain = folder / ("vllm-cpu-plain" + (f"-{repeat}" if repeat else ""))
            if plain.with_name(f"{plain.name}.clients.json").exists():
                out.append((folder / name, plain))
    return out


RUNS = _runs()


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_the_band_of_a_log_alone_holds_what_the_clients_measured(method: str) -> None:
    """Each speculative server's log alone gives a band at the k it ran; the speedup its clients
    measured against the plain engine at every concurrency lies inside it: the median speculative
    server over the faster plain server (separate processes of one configuration differ by more
    than the band's own uncertainty on these machines; the slower plain process was disturbed)."""
    runs = [spec for spec, _ in RUNS if spec.parent == SERVE and spec.name.startswith(f"vllm-cpu-{method}-")]
    plains = [_clients(plain) for plain in sorted({plain for _, plain in RUNS if plain.parent == SERVE})]
    assert len(runs) >= 2 and len(plains) >= 2
    for spec in runs:
        (band,) = recommend(load([str(spec.with_name(f"{spec.name}.log"))]).windows, bootstrap=0).bands
        row = band.at(band.ran_k)
        assert band.ran_k == 3 and row is not None
        for level in (1, 4, 8):
            measured = _median([_clients(s)[level] for s in runs])
            baseline = max(p[level] for p in plains)
            assert row.speedup_low <= measured / baseline <= row.speedup_high, (spec, level, measured / baseline)


def _stats_lines(path: Path) -> list[tuple[float, int]]:
    """(generation tokens/s, running requests) of every engine stats line, in order."""
    pattern = re.compile(r"Engine 000: .*Avg generation throughput: ([0-9.]+) tokens/s, Running: ([0-9]+) reqs")
    return [(float(m.group(1)), int(m.group(2))) for m in map(pattern.search, path.read_text().splitlines()) if m]


def _by_running(path: Path) -> dict[int, list[float]]:
    """Throughputs per load of every interval inside a busy stretch (consecutive lines that
    generated or had requests running) but its first and last, at the mean of the running counts
    of the line before and its own, rounded half up, at least 1."""
    lines = _stats_lines(path)
    out: dict[int, list[float]] = {}
    for before, (rate, running), after in zip(lines, lines[1:], lines[2:], strict=False):
        if all(r > 0 or n > 0 for r, n in (before, (rate, running), after)):
            load = max(math.floor((before[1] + running) / 2 + 0.5), 1)
            out.setdefault(load, []).append(rate)
    return out


@pytest.mark.parametrize(("spec", "plain"), RUNS, ids=[f"{s.parent.name}/{s.name}" for s, _ in RUNS])
def test_beside_a_plain_log_the_speedup_is_measured_and_agrees_with_the_clients(spec: Path, plain: Path) -> None:
    spec_log, plain_log = spec.with_name(f"{spec.name}.log"), plain.with_name(f"{plain.name}.log")
    rec = recommend(load([str(spec_log), str(plain_log)]).windows, bootstrap=0)
    assert rec.recommended.basis == "measured" and rec.recommended.baseline == "plain engine"
    rows = {s.batch_size_min: s for s in rec.served if not s.overall}
    spec_rates, plain_rates = _by_running(spec_log), _by_running(plain_log)
    measured, baseline = _clients(spec), _clients(plain)
    for level in (1, 4, 8):
        bucket = 1 << (level.bit_length() - 1)
        row = rows[bucket]
        # By hand, at the level's own running count (the clients kept that many running).
        assert level in row.running
        mine = [n for n in row.running]
        weights = {n: len(spec_rates[n]) for n in mine}
        total = sum(weights.values())
        s = sum(weights[n] * sum(spec_rates[n]) / len(spec_rates[n]) for n in mine) / total
        p = sum(weights[n] * sum(plain_rates[n]) / len(plain_rates[n]) for n in mine) / total
        # (a rate the reader dropped comes back from whole generated tokens: ±0.5 token per interval)
        assert row.speedup == pytest.approx(s / p, rel=1e-3)
        assert row.interval[0] < row.speedup < row.interval[1]
        # Within 15% of what the clients measured against the plain server at that concurrency,
        # and inside the interval (the spread, and how far such figures have been from clients).
        clients = measured[level] / baseline[level]
        assert abs(row.speedup / clients - 1) <= 0.15, (level, row.speedup, clients)
        assert row.interval[0] <= clients <= row.interval[1], (level, row.interval, clients)


def test_the_interval_of_a_served_speedup_is_the_ratio_of_two_means(tmp_path: Path) -> None:
    """Four intervals each side at one running count: the interval by hand (log scale, Welch)."""
    spec_rates, plain_rates = [200.0, 220.0, 210.0, 230.0], [100.0, 104.0, 98.0, 102.0]

    def log(name: str, rates: list[float], config: str) -> Path:
        lines = [
            f"(EngineCore pid=2) INFO 11-30 04:00:00 [core.py:1] Initializing a V1 LLM engine (v0.32.0) with config: "
            f"model='m', speculative_config={config}, served_model_name=m, enforce_eager=True"
        ]
        # Idle, the stretch's first interval (began idle: left out), the rates, its last (left out), idle.
        running = [0, 4, *[4] * len(rates), 0, 0]
        for i, rate in enumerate([0.0, 50.0, *rates, 30.0, 0.0]):
            lines.append(
                f"(APIServer pid=1) INFO 11-30 04:00:{2 * i + 2:02d} [loggers.py:335] Engine 000: Avg prompt throughput: "
                f"0.0 tokens/s, Avg generation throughput: {rate} tokens/s, Running: {running[i]} reqs, Waiting: 0 reqs"
            )
            if "ngram" in config and rate:
                lines.append(
                    f"(APIServer pid=1) INFO 11-30 04:00:{2 * i + 2:02d} [metrics.py:120] SpecDecoding metrics: Mean "
                    "acceptance length: 2.00, Accepted throughput: 20.00 tokens/s, Drafted throughput: 60.00 tokens/s, "
                    "Accepted: 40 tokens, Drafted: 120 tokens, Per-position acceptance rate: 0.500, 0.300, 0.200, "
                    "Avg Draft acceptance rate: 33.3%"
                )
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n")
        return path

    spec = log("spec.log", spec_rates, "SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3)")
    plain = log("plain.log", plain_rates, "None")
    data = json.loads(run_cli("recommend", str(spec), str(plain), "--format", "json").stdout)
    (row,) = [s for s in data["served"] if not s["overall"]]

    def mean_var(values: list[float]) -> tuple[float, float]:
        m = sum(values) / len(values)
        return m, sum((v - m) ** 2 for v in values) / (len(values) - 1) / len(values)

    (s, vs), (p, vp) = mean_var(spec_rates), mean_var(plain_rates)
    a, b = vs / s**2, vp / p**2
    df = (a + b) ** 2 / (a * a / 3 + b * b / 3)
    half = math.hypot(t95(df) * math.sqrt(a + b), math.log(1 + SERVED_SYSTEMATIC))
    assert row["speedup"] == pytest.approx(s / p, rel=1e-9)
    assert row["interval"][0] == pytest.approx(s / p * math.exp(-half), rel=1e-9)
    assert row["interval"][1] == pytest.approx(s / p * math.exp(half), rel=1e-9)
    assert row["running"] == [4] and row["intervals"] == 4 and row["plain_intervals"] == 4
    assert data["recommended"]["basis"] == "measured" and data["recommended"]["num_speculative_tokens"] == 3
    assert row["measures"] == data["recommended"]["measures"] == "served throughput"

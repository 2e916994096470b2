"""Every "not measured" answer names what the input actually lacks, on real server files
(examples/data/vllm-cpu-serve) or files cut or relabelled from them here: no plain engine; a
plain engine of another model; too few steady intervals at a load both servers show (with the
counts, checked against the stats lines read by regex here); no throughput on one side.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from support.helpers import run_cli
from support.paths import ROOT

from specobs.advice.log_speedup import MIN_INTERVALS
from specobs.advice.recommend import recommend
from specobs.ingest import load
from specobs.records import Recommendation, Unmeasured
from specobs.render.sentences import headline

SERVE = ROOT / "examples" / "data" / "vllm-cpu-serve"
STATS = re.compile(r"Engine 000: .*Avg generation throughput: ([0-9.]+) tokens/s, Running: ([0-9]+) reqs")


def _recommend(*paths: Path) -> Recommendation:
    rec = recommend(load([str(p) for p in paths]).windows, bootstrap=0)
    assert rec is not None
    assert rec.recommended.predicted_speedup is None and rec.recommended.baseline == "not measured"
    assert not rec.served
    return rec


def _cut(path: Path, out: Path, busy: int) -> Path:
    """``path`` up to its ``busy``-th stats line that generated or had requests running: a server
    whose load lasted a few seconds."""
    kept, seen = [], 0
    for line in path.read_text().splitlines():
        kept.append(line)
        m = STATS.search(line)
        if m and (float(m.group(1)) > 0 or int(m.group(2)) > 0):
            seen += 1
            if seen == busy:
                break
    out.write_text("\n".join(kept) + "\n")
    return out


def _interior(path: Path) -> dict[int, int]:
    """Intervals per load inside a busy stretch (not its first or last), at the mean of the
    running counts at its two ends rounded half up: what the served speedup counts."""
    lines = [(float(m.group(1)), int(m.group(2))) for m in map(STATS.search, path.read_text().splitlines()) if m]
    out: dict[int, int] = {}
    for before, now, after in zip(lines, lines[1:], lines[2:], strict=False):
        if all(rate > 0 or running > 0 for rate, running in (before, now, after)):
            load_ = max(math.floor((before[1] + now[1]) / 2 + 0.5), 1)
            out[load_] = out.get(load_, 0) + 1
    return out


def test_a_speculative_log_alone_lacks_a_plain_engine() -> None:
    rec = _recommend(SERVE / "vllm-cpu-ngram-k3-r1.log")
    (why,) = rec.not_measured
    assert (why.method, why.reason) == ("ngram", "no step timing and no plain engine in the input")
    assert headline(rec).startswith("No recommendation: not measured (ngram: no step timing and no plain engine")


def test_levels_a_few_seconds_long_have_too_few_steady_intervals_and_say_how_many(tmp_path: Path) -> None:
    """The issue's case: a real plain log beside a real ngram log, each level a few seconds: a
    plain engine is there; what is missing is enough steady intervals at a shared load."""
    spec = _cut(SERVE / "vllm-cpu-ngram-k3-r1.log", tmp_path / "ngram.log", busy=6)
    plain = _cut(SERVE / "vllm-cpu-plain-r1.log", tmp_path / "plain.log", busy=6)
    rec = _recommend(spec, plain)
    (why,) = rec.not_measured
    mine, theirs = _interior(spec), _interior(plain)
    shared = set(mine) & set(theirs)
    assert shared and all(min(mine[n], theirs[n]) < MIN_INTERVALS for n in shared)
    closest = max(shared, key=lambda n: (min(mine[n], theirs[n]), n))
    assert why.reason == "no step timing, and too few steady intervals at a running count both engines show"
    assert (why.running, why.intervals, why.plain_intervals, why.needed) == (
        closest, mine[closest], theirs[closest], MIN_INTERVALS
    )  # fmt: skip
    text = headline(rec)
    assert "no plain engine" not in text
    assert (
        f"at most {mine[closest]} of the speculative server's and {theirs[closest]} of the plain server's at "
        f"{closest} running request(s), {MIN_INTERVALS} each needed"
    ) in text
    # The same in the JSON, and a whole recording of each measures it.
    data = json.loads(run_cli("recommend", str(spec), str(plain), "--format", "json").stdout)
    assert data["not_measured"][0]["reason"] == why.reason and data["not_measured"][0]["intervals"] == mine[closest]
    whole = recommend(load([str(SERVE / "vllm-cpu-ngram-k3-r1.log"), str(SERVE / "vllm-cpu-plain-r1.log")]).windows)
    assert whole is not None and whole.served and not whole.not_measured


def test_a_plain_engine_of_another_model_is_named(tmp_path: Path) -> None:
    text = (SERVE / "vllm-cpu-plain-r1.log").read_text()
    assert "model='target'" in text
    plain = tmp_path / "plain-other.log"
    plain.write_text(text.replace("model='target'", "model='other'").replace("tiny-llama", "other"))
    rec = _recommend(SERVE / "vllm-cpu-ngram-k3-r1.log", plain)
    (why,) = rec.not_measured
    assert why.reason == "no step timing, and the plain engine in the input runs another model, platform or device"
    assert [t.model for t in why.plain_targets] == ["other"] and why.plain_targets[0].steps > 0
    assert "runs another model, platform or device (other" in headline(rec)


def test_a_side_without_throughput_over_steady_intervals_is_said() -> None:
    """A scrape (ten samples around the levels) beside a plain server's log: a plain engine of
    the same target is there, but the scrape has no run of steady intervals to compare."""
    rec = _recommend(SERVE / "vllm-cpu-ngram-k3-r1.log", SERVE / "vllm-cpu-plain-r1.metrics.txt")
    (why,) = rec.not_measured
    assert why.reason == "no step timing, and no throughput lines to compare with the plain engine's"
    assert why.running_shown == tuple(sorted(_interior(SERVE / "vllm-cpu-ngram-k3-r1.log")))
    assert why.plain_running_shown == ()
    assert "the plain server's input prints no throughput" in headline(rec)


def test_steps_timed_whole_name_the_missing_verify_time():
    """The bundled sweep's capture times every step whole (``step_seconds``) but has no verify
    time, and its plain engine is in the input: what is missing is the draft/verify split, with
    the count of whole-timed steps (counted here from the files)."""
    capture = ROOT / "examples" / "data" / "vllm-cpu-serve-sweep" / "capture"
    rec = _recommend(capture)
    (why,) = rec.not_measured
    assert why.reason == Unmeasured.NO_VERIFY_TIMING and why.method == "ngram"
    rows = _rows(capture, "specobs-sweep-ngram*-p*.jsonl.gz")
    speculative = [r for r in rows if (r["num_spec_tokens"] or 0) > 0]
    plain = _rows(capture, "specobs-sweep-plain-*-p*.jsonl.gz")
    assert any(r["method"] is None and r["num_spec_tokens"] == 0 for r in plain)  # a plain engine
    assert all(r["verify_seconds"] is None for r in speculative) and why.verify_timed_steps == 0
    # Timed steps after warm-up and outliers are trimmed: at most every speculative step, most of them.
    assert 0.5 * len(speculative) < why.timed_steps <= len(speculative)
    said = headline(rec)
    assert f"{why.timed_steps:,} timed steps were timed whole" in said and "no plain engine" not in said


def _rows(capture: Path, pattern: str) -> list[dict]:
    """The step rows of the capture's files matching ``pattern`` (metadata files left out)."""
    import gzip

    rows = []
    for path in sorted(capture.glob(pattern)):
        if "-meta-" not in path.name:
            with gzip.open(path, "rt") as handle:
                rows += [json.loads(line) for line in handle]
    return rows

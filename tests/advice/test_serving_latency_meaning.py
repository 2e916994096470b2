"""What the serving findings say about latency and prompts, on the bundled real results.

ITL is per output event: a speculative step streams the tokens it accepted as one event, so its
percentiles compare bursts with single tokens and are never "beyond noise" evidence; TPOT is the
per-token measure. Results measured on vLLM's random dataset are named, with why.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.paths import ROOT

from specobs.advice.report_builder import analyze
from specobs.analysis.under_load import SYNTHETIC_TOKEN_DATASETS
from specobs.ingest import load
from specobs.records import FindingKind, LatencyUnit, ServingFacts, SyntheticPromptsFacts
from specobs.render.sentences import serving_findings, word

RESULTS = ROOT / "examples" / "data" / "vllm-cpu-bench" / "results"


def _report(paths: list[Path]):
    return analyze(load([str(p) for p in paths]))


def _geomean(values: list[float]) -> float:
    import math

    return math.exp(sum(math.log(v) for v in values) / len(values))


def test_itl_ratios_are_per_event_and_tpot_is_the_latency_compared():
    report = _report([RESULTS])
    assert report.serving is not None and report.serving.ratios
    (serving,) = [f for f in report.findings or () if f.kind == FindingKind.SERVING]
    facts = serving.facts
    assert isinstance(facts, ServingFacts)
    # No ITL ratio is offered as latency evidence, whatever its interval.
    assert all("itl" not in s.measure for s in facts.latency)
    for ratio in report.serving.ratios:
        units = {m.measure: m.unit for m in ratio.latency}
        assert units["p99_itl_ms"] == LatencyUnit.EVENT and units["p99_tpot_ms"] == LatencyUnit.TOKEN
        assert units["median_ttft_ms"] == LatencyUnit.REQUEST
    # The bursts carry the files' own ITL ratios (geometric means of the repeats), by hand.
    files = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    level = facts.bursts[0].level
    assert level is not None

    def at(config: str, key: str) -> list[float]:
        return [f[key] for f in files if f["config"] == config and f["max_concurrency"] == int(level)]

    for key, got in (
        ("median_itl_ms", facts.bursts[0].median_itl_ratio),
        ("p99_itl_ms", facts.bursts[0].p99_itl_ratio),
    ):
        assert got == pytest.approx(_geomean(at("ngram", key)) / _geomean(at("plain", key)), rel=1e-9), key
    assert facts.bursts[0].tpot_ratio == pytest.approx(
        _geomean(at("ngram", "mean_tpot_ms")) / _geomean(at("plain", "mean_tpot_ms")), rel=1e-9
    )
    sentence = word(serving)
    assert "ITL is per output event, not per token" in sentence and "TPOT is the per-token latency" in sentence
    assert (
        "Latency beyond noise" not in sentence or "ITL" not in sentence.split("Latency beyond noise")[1].split(".")[0]
    )
    assert report.to_dict()["serving"]["ratios"][0]["latency"][0]["unit"] in {u.value for u in LatencyUnit}


def test_results_on_random_tokens_are_named_with_why(tmp_path):
    """The same results, their metadata saying vLLM's random dataset for one configuration: the
    report names those results and says why their acceptance is not real traffic's."""
    folder = tmp_path / "results"
    shutil.copytree(RESULTS, folder)
    marked = 0
    for path in folder.glob("ngram-*.json"):
        record = json.loads(path.read_text())
        record["dataset"] = "random"
        path.write_text(json.dumps(record))
        marked += 1
    for path in folder.glob("plain-*.json"):
        record = json.loads(path.read_text())
        record["dataset"] = "specobs-text"
        path.write_text(json.dumps(record))
    report = _report([folder])
    (found,) = [f for f in report.findings or () if f.kind == FindingKind.SYNTHETIC_PROMPTS]
    assert isinstance(found.facts, SyntheticPromptsFacts)
    (use,) = found.facts.uses
    assert (use.dataset, use.client, use.configs, use.results) == ("random", "vllm bench serve", ("ngram",), marked)
    sentence = word(found)
    assert f"{marked} result(s) of ngram on dataset 'random'" in sentence and "synthetic tokens" in sentence
    assert found in [w.finding for w in serving_findings(report)]
    # Without a random dataset named, nothing is said.
    assert not [f for f in _report([RESULTS]).findings or () if f.kind == FindingKind.SYNTHETIC_PROMPTS]
    assert "random" in SYNTHETIC_TOKEN_DATASETS and "sharegpt" not in SYNTHETIC_TOKEN_DATASETS


def test_results_of_two_clients_are_never_pooled_as_repeats():
    """AIPerf and GuideLLM measured the same plain and ngram servers with their own prompts: read
    together, each client's configurations are paired with its own plain server, and the ratios
    are those each folder gives alone (pooled, they would be repeats of one configuration)."""
    data = ROOT / "examples" / "data"
    alone = {
        client: {(r.level): r.throughput_ratio for r in _report([data / folder]).serving.ratios}  # type: ignore[union-attr]
        for client, folder in (("aiperf", "aiperf-vllm-cpu"), ("guidellm", "guidellm-vllm-cpu"))
    }
    both = _report([data / "aiperf-vllm-cpu", data / "guidellm-vllm-cpu"]).serving
    assert both is not None
    got: dict[str, dict[float, float | None]] = {}
    for r in both.ratios:
        config, client = (r.config or "").split(" · ")
        assert config == "ngram-k3"
        assert r.plain_config == f"plain · {client}" and r.runs == r.plain_runs == 1
        got.setdefault(client, {})[r.level] = r.throughput_ratio
    assert got == alone and set(got) == {"aiperf", "guidellm"}
    assert all(len(lv.clients) == 1 for lv in both.levels)

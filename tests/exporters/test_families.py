"""The one family table: every name the rules, the dashboard, the docs and the Prometheus API
reader use is in it, a scrape holds every family of it and nothing else, and the sidecar's
running k is the k the rows report now."""

from __future__ import annotations

import json
import re

import polars as pl
from prometheus_client import CollectorRegistry
from support.otlp import ROW
from support.paths import ROOT

from specobs.exporters.prometheus import PrometheusMetrics
from specobs.exporters.sidecar import ARRIVAL, Sidecar, running_k
from specobs.ingest import prometheus_api
from specobs.ingest.specobs_metrics import BY_NAME, FAMILIES, SAMPLE_NAMES, family_of_sample

SWEEP = ROOT / "examples" / "data" / "vllm-cpu-sweep"
METRIC_NAME = re.compile(r"\b(specobs_[a-z_]+)\b(?!\.py)")  # not a module: specobs_metrics.py
#: Files outside the package that name specobs metrics (their content is theirs: only the names are checked).
USERS = [
    ROOT / "exporters" / "prometheus" / "rules.yml",
    ROOT / "exporters" / "prometheus" / "rules_test.yml",
    ROOT / "dashboards" / "grafana" / "specobs.json",
    ROOT / "docs" / "alerts.md",
    ROOT / "docs" / "exporters.md",
]
#: Named in docs/exporters.md as gone (the budget dropped it), or as a prefix (``specobs_exporter_*``).
NOT_METRICS = {"specobs_accepted_tokens_per_draft", "specobs_exporter_"}


def test_every_name_the_rules_dashboard_and_docs_use_is_in_the_table():
    for path in USERS:
        used = set(METRIC_NAME.findall(path.read_text())) - NOT_METRICS
        unknown = sorted(name for name in used if name not in SAMPLE_NAMES and name not in BY_NAME)
        assert used and not unknown, f"{path.relative_to(ROOT)} names metrics the family table lacks: {unknown}"


def test_the_prometheus_api_reader_reads_the_table_names():
    read = [*prometheus_api.SPECOBS.values(), *(f"{n}_{part}" for n in prometheus_api.TIMINGS.values()
                                               for part in ("sum", "count"))]  # fmt: skip
    assert [family_of_sample(name).name for name in read] == [
        "specobs_drafts", "specobs_draft_tokens", "specobs_accepted_tokens", "specobs_accepted_tokens_per_position",
        *(n for n in ("specobs_draft_seconds", "specobs_verify_seconds", "specobs_step_seconds") for _ in range(2)),
    ]  # fmt: skip
    assert family_of_sample("vllm:spec_decode_num_drafts_total") is None


def test_a_scrape_holds_every_family_of_the_table_and_only_those(tmp_path):
    """Every family, with its kind and help, from a registry fed everything; no sample outside the table."""
    path = tmp_path / "specobs-t-p1.jsonl"
    path.write_text(json.dumps(ROW) + "\n")
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, health=lambda: {"dropped_events": 1})
    sidecar = Sidecar([str(path)], metrics, tuning_interval=3600)
    sidecar.poll_once()
    sidecar.stop()
    metrics.attach_sidecar(sidecar.counts)
    scraped = {family.name: family for family in registry.collect()}
    kinds = {"counter": "counter", "timing": "summary", "gauge": "gauge", "histogram": "histogram"}
    assert [(name, f.type, f.documentation) for name, f in scraped.items()] == [
        (family.name, kinds[family.kind], family.help) for family in FAMILIES
    ]
    samples = {sample.name for family in scraped.values() for sample in family.samples}
    assert samples <= SAMPLE_NAMES, samples - SAMPLE_NAMES
    value = registry.get_sample_value
    assert value("specobs_dropped_events_total") == 1 and value("specobs_hook_errors_total") == 0
    assert value("specobs_exporter_rows_total") == 1
    assert value("specobs_drafts_total", {"model_name": "tiny", "engine": "0", "method": "eagle"}) == 4


def test_without_health_or_sidecar_their_families_are_not_published():
    registry = CollectorRegistry()
    PrometheusMetrics(registry)
    names = {family.name for family in registry.collect()}
    assert names == {f.name for f in FAMILIES if f.source not in ("recorder", "sidecar")}
    assert "specobs_dropped_events" not in names and "specobs_exporter_rows" not in names


def test_running_k_is_the_k_most_recent_rows_ran_not_the_largest_nor_the_last():
    """A batch-size schedule runs k = 6 at batch 1 and k = 2 at batch 64, the rows alternating:
    the k that runs now is the one most of the method's latest rows report (rows without a
    speculative k passed over), not the largest and not whichever bucket came last."""
    rows = pl.DataFrame(
        {
            "method": ["ngram", "ngram", "eagle", "ngram", "eagle", "ngram", "ngram"],
            "num_spec_tokens": [6, 2, 3, 2, 4, 6, 0],
            "batch_size": [1, 64, 8, 64, 8, 1, 64],
        }
    ).with_row_index(ARRIVAL)
    # ngram: 6, 2, 2, 6 → a tie, the later k (6); eagle: 3, 4 → a tie, the later (4).
    assert running_k(rows) == {"ngram": 6, "eagle": 4}
    assert running_k(rows.head(4)) == {"ngram": 2, "eagle": 3}  # 6, 2, 2: two rows ran k = 2
    assert running_k(rows, recent=2) == {"ngram": 6, "eagle": 4}  # the last two ngram rows: 2, 6
    assert running_k(rows, recent=3) == {"ngram": 2, "eagle": 4}  # 2, 2, 6
    assert running_k(rows.filter(pl.col("num_spec_tokens") == 0)) == {}
    # A long run at the largest k, then the schedule's smaller k for most recent steps.
    switched = pl.DataFrame({"method": ["ngram"] * 200, "num_spec_tokens": [6] * 100 + [3] * 100})
    assert running_k(switched.with_row_index(ARRIVAL)) == {"ngram": 3}


class _Refits(PrometheusMetrics):
    """A real exporter that also keeps what each refit published as running."""

    def __init__(self) -> None:
        super().__init__(CollectorRegistry())
        self.running: list[dict] = []

    def replace_recommendations(self, latest):
        self.running += [dict(running) for _, running in latest.values()]
        super().replace_recommendations(latest)


def test_the_sidecar_publishes_the_speedup_of_the_k_its_rows_ran_recently(tmp_path):
    """The bundled ngram run cycles k through 0 … 6; cut after a stretch at k = 4, the largest k
    seen (6) is not the one running: the speedup gauge is k = 4's."""
    (source,) = SWEEP.glob("specobs-*ngram*.jsonl")
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    ks = [row["num_spec_tokens"] for row in rows]
    cut = next(i for i in range(len(ks) - 1, 0, -1) if ks[i] == 4 and ks[i + 1] != 4) + 1
    assert max(ks[:cut]) == 6 and ks[cut - 1] == 4
    path = tmp_path / "specobs-sweep-ngram-p1-0001.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows[:cut]))
    metrics = _Refits()
    sidecar = Sidecar([str(path)], metrics, tuning_interval=0)
    sidecar.poll_once()
    sidecar.stop()
    assert metrics.running == [{"ngram": 4}]
    speedup = metrics.registry.get_sample_value(
        "specobs_predicted_speedup", {"model_name": "tiny-llama", "method": "ngram"}
    )
    assert speedup is not None and 0.5 < speedup < 3

"""Prometheus rules, their promtool unit tests, the alert runbooks and the Grafana dashboard.

promtool (Debian: ``apt-get install prometheus``) checks and unit-tests the rules and checks
every dashboard expression as PromQL; the structural checks run without it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.paths import ROOT

RULES = ROOT / "exporters" / "prometheus" / "rules.yml"
RULES_TEST = ROOT / "exporters" / "prometheus" / "rules_test.yml"
ALERTS_DOC = ROOT / "docs" / "alerts.md"
DASHBOARD = ROOT / "dashboards" / "grafana" / "specobs.json"

PROMTOOL = shutil.which("promtool")
_promtool_on_path = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not on PATH (Debian/Ubuntu: apt-get install prometheus)"
)


def needs_promtool(test):
    """A test that runs promtool: the ``prometheus`` tier, skipped when promtool is missing."""
    return pytest.mark.prometheus(_promtool_on_path(test))


# The metric contract: vLLM's counters and what the specobs exporter serves. Nothing else may be
# queried. Histograms are listed by base name (_bucket, _sum and _count are allowed).
VLLM_COUNTERS = {
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
}


def _exporter_families() -> tuple[set[str], set[str]]:
    """(counter, gauge and summary sample names, histogram base names) the exporter serves, from its own
    registry: the contract is what the code publishes, not a list kept by hand."""
    from prometheus_client import CollectorRegistry

    from specobs.exporters.prometheus import PrometheusMetrics

    registry = CollectorRegistry()
    PrometheusMetrics(registry=registry, health=dict)
    plain, histograms = set(), set()
    for family in registry.collect():
        if family.type == "histogram":
            histograms.add(family.name)
        elif family.type == "summary":  # no quantiles: only the sum and the count
            plain |= {f"{family.name}_sum", f"{family.name}_count"}
        else:
            plain.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return plain, histograms


SPECOBS_METRICS, SPECOBS_HISTOGRAMS = _exporter_families()
# Metrics without an engine label (tuning gauges), and without model_name either (health).
NO_ENGINE = {"specobs_predicted_speedup", "specobs_recommended_num_speculative_tokens"}
HEALTH = {"specobs_dropped_events_total", "specobs_hook_errors_total", "specobs_untimed_steps_total"}
# Labels an expression may aggregate by: all bounded.
BOUNDED_LABELS = {
    "model_name", "engine", "method", "position", "batch_size_bucket", "le",
    "num_speculative_tokens", "job", "instance",
    # specobs_engine_info's run-metadata labels (capped like the others: specobs.exporters.mapping.INFO_FIELDS)
    "vllm_version", "platform", "device_arch", "attention_backend", "graph_mode", "model_runner",
}  # fmt: skip
UNBOUNDED_LABELS = ("request_id", "prompt", "trace_id", "span_id", "user")

METRIC_NAME = re.compile(r"\b(vllm:[a-z_:]+|specobs_[a-z_]+)\b")


def contract_names() -> set[str]:
    names = VLLM_COUNTERS | SPECOBS_METRICS
    for base in SPECOBS_HISTOGRAMS:
        names |= {f"{base}_bucket", f"{base}_sum", f"{base}_count"}
    return names


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=600, cwd=ROOT)


def load_yaml(path: Path):
    yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read the rule files")
    return yaml.safe_load(path.read_text())


def all_rules() -> list[dict]:
    return [rule for group in load_yaml(RULES)["groups"] for rule in group["rules"]]


def github_anchor(heading: str) -> str:
    """The anchor GitHub (and most Markdown renderers) give a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# --- promtool ---------------------------------------------------------------------------------


@needs_promtool
def test_rules_pass_promtool_check():
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
def test_rules_pass_their_promtool_unit_tests():
    # The regression group evaluates a week of 1m steps (for `offset 1w`): this takes a while.
    result = promtool("test", "rules", str(RULES_TEST))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# --- rules, tests and runbooks agree ----------------------------------------------------------


def test_every_alert_is_documented_labelled_and_unit_tested():
    alerts = [rule for rule in all_rules() if "alert" in rule]
    names = {rule["alert"] for rule in alerts}
    assert names >= {
        "SpecDecodeAcceptanceCollapse", "SpecDecodeAcceptanceRegression", "SpecDecodeNotPaying",
        "SpecDecodeWastedPositions", "SpecDecodeMetricsAbsent", "SpecobsDroppingEvents",
        "SpecDecodeAcceptanceDropAfterChange",
    }  # fmt: skip

    doc = ALERTS_DOC.read_text()
    anchors = {github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", doc, flags=re.M)}
    tests = load_yaml(RULES_TEST)
    cases: dict[str, list[list]] = {}
    for group in tests["tests"]:
        for case in group.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], []).append(case.get("exp_alerts") or [])

    for rule in alerts:
        name = rule["alert"]
        assert rule.get("for"), f"{name}: no `for:` (it would flap)"
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        annotations = rule["annotations"]
        assert annotations.get("summary"), name
        assert '$value | printf "%.2f"' in annotations.get("description", ""), f"{name}: description without $value"
        anchor = name.lower()
        assert annotations.get("runbook_url") == f"docs/alerts.md#{anchor}", name
        assert anchor in anchors, f"{name}: no section in docs/alerts.md"
        assert name in cases, f"{name}: no alert_rule_test in rules_test.yml"
        assert any(cases[name]), f"{name}: no test case where it fires"
        assert any(not expected for expected in cases[name]), f"{name}: no test case where it stays quiet"
        for expected in cases[name]:
            for alert in expected:
                assert alert["exp_labels"]["severity"] == rule["labels"]["severity"], name


def test_recording_rules_are_named_and_guarded():
    records = [rule for rule in all_rules() if "record" in rule]
    assert len(records) >= 10
    for rule in records:
        assert re.fullmatch(r"specobs:[a-z0-9_]+:rate5m", rule["record"]), rule["record"]
        for window in re.findall(r"\[([^\]]+)\]", rule["expr"]):
            assert window == "5m", f"{rule['record']}: window {window}"
        assert_divisions_guarded(rule["expr"], rule["record"])
    conditional = {
        r["labels"]["position"] for r in records if r["record"] == "specobs:conditional_acceptance_rate:rate5m"
    }
    assert conditional == {str(i) for i in range(1, 16)}


def test_rules_and_dashboard_only_use_contract_metrics():
    allowed = contract_names()
    texts = [rule["expr"] for rule in all_rules()] + [expr for _, expr in dashboard_exprs()]
    used = {name for text in texts for name in METRIC_NAME.findall(text)}
    assert used <= allowed, f"not in the metric contract: {sorted(used - allowed)}"


# --- dashboard ---------------------------------------------------------------------------------


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def walk_panels(panels: list[dict]):
    for panel in panels:
        yield panel
        yield from walk_panels(panel.get("panels", []))  # rows, collapsed or not


def dashboard_exprs() -> list[tuple[str, str]]:
    """(panel title, expression) for every query target, nested rows included."""
    return [
        (panel.get("title", ""), target["expr"])
        for panel in walk_panels(load_dashboard()["panels"])
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


GRAFANA_INTERVALS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}
VARIABLE = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")  # not $1: label_replace's capture group
REGEX_MATCHER_VARIABLE = re.compile(r'=~\s*"\$\{?(\w+)\}?"')


def to_promql(expr: str) -> str:
    """Grafana variables replaced by valid PromQL: intervals by durations, template variables by
    ``.*`` (they may appear only as whole regex matchers: multi-value and All need ``=~``)."""
    expr = REGEX_MATCHER_VARIABLE.sub('=~".*"', expr)
    expr = VARIABLE.sub(lambda m: GRAFANA_INTERVALS.get(m.group(1), m.group(0)), expr)
    assert not VARIABLE.search(expr), f"a variable outside a regex matcher or an unknown interval: {expr}"
    return expr


def matching_paren(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise AssertionError(f"unbalanced parentheses: {text}")


def assert_divisions_guarded(expr: str, where: str) -> None:
    """Every ``/`` divides by a parenthesised ``… > 0``, so zero traffic gives no sample."""
    for match in re.finditer(r"/\s*(?:(?:ignoring|on)\s*\([^)]*\)\s*)?(?:group_(?:left|right)\s*\([^)]*\)\s*)?", expr):
        start = match.end()
        assert expr[start : start + 1] == "(", f"{where}: unguarded division in {expr}"
        inner = expr[start + 1 : matching_paren(expr, start)]
        assert re.search(r">\s*0\s*$", inner), f"{where}: denominator without `> 0` in {expr}"


def test_dashboard_identity_and_variables():
    dashboard = load_dashboard()
    assert dashboard["uid"] == "specobs-spec-decode"
    assert 36 <= dashboard["schemaVersion"] <= 41
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("job", "model_name", "instance", "engine"):
        var = variables[name]
        assert var["type"] == "query", name
        assert var["multi"] and var["includeAll"], name
        assert var.get("allValue") == ".*", f"{name}: All must match series without the label too"
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        assert query.startswith("label_values(") and query.rstrip(")").endswith(name), name
    panels = list(walk_panels(dashboard["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for panel in panels:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel.get("targets"), panel["title"]


def test_dashboard_panels_cover_the_brief():
    titles = " | ".join(title.lower() for title, _ in dashboard_exprs())
    for words in ("acceptance length", "draft acceptance rate", "per-position", "conditional", "draft vs verify",
                  "step time", "cost ratio", "predicted speedup", "recommended k", "accepted tokens per draft",
                  "dropped events", "1 day ago", "engine info", "engine configuration",
                  "per-request acceptance"):  # fmt: skip
        assert words in titles, words


def test_dashboard_expressions_are_filtered_bounded_and_guarded():
    for title, expr in dashboard_exprs():
        for unbounded in UNBOUNDED_LABELS:
            assert unbounded not in expr, f"{title}: unbounded label {unbounded}"
        for labels in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
            used = {label.strip() for label in labels.split(",") if label.strip()}
            assert used <= BOUNDED_LABELS, f"{title}: aggregates by {used - BOUNDED_LABELS}"
        for window in re.findall(r"\[([^\]]+)\]", expr):
            assert window in ("$__rate_interval", "$__range"), f"{title}: fixed window [{window}]"
        for match in re.finditer(r"\b(vllm:[a-z_:]+|specobs_[a-z_]+)\s*(\{[^}]*\})?", expr):
            name, selector = match.group(1), match.group(2) or ""
            required = ["job", "instance"]
            if name not in HEALTH:
                required.append("model_name")
                if name not in NO_ENGINE:
                    required.append("engine")
            for label in required:
                assert f'{label}=~"${label}"' in selector, f"{title}: {name} not filtered by ${label}"
        assert_divisions_guarded(expr, title)


@needs_promtool
def test_dashboard_expressions_are_valid_promql(tmp_path):
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    rules = {
        "groups": [{
            "name": "dashboard-expressions",
            "rules": [{"record": f"dashboard:expr_{i}:check", "expr": to_promql(expr)} for i, (_, expr) in enumerate(exprs)],
        }]
    }  # fmt: skip
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(json.dumps(rules, indent=2))  # JSON is YAML
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, (
        result.stdout
        + result.stderr
        + "\n"
        + "\n".join(f"{i}: {title}: {expr}" for i, (title, expr) in enumerate(exprs))
    )


@needs_promtool
def test_dashboard_per_position_panels_agree_with_the_rules_when_k_varies(tmp_path):
    """The per-position and conditional panels give the recording rules' values on the rules'
    own varying-k test series, so they too divide by the drafts that reached a position."""
    exprs = dashboard_exprs()
    (per_position,) = [expr for title, expr in exprs if title.startswith("Per-position")]
    conditional = [expr for title, expr in exprs if title.startswith("Conditional")]  # β1..β4, one query each
    assert len(conditional) == 4
    rules = [{"record": "dashboard:position:check", "expr": to_promql(per_position)}]
    rules += [{"record": f"dashboard:beta{i}:check", "expr": to_promql(e)} for i, e in enumerate(conditional, 1)]
    (tmp_path / "panels.yml").write_text(json.dumps({"groups": [{"name": "panels", "rules": rules}]}))

    group = next(g for g in load_yaml(RULES_TEST)["tests"] if g["name"] == "per-position rates with a varying k")
    cases = {case["expr"]: case for case in group["promql_expr_test"]}
    rates, betas = cases["specobs:position_acceptance_rate:rate5m"], cases["specobs:conditional_acceptance_rate:rate5m"]

    def relabel(sample: dict, name: str, drop_position: bool = False) -> dict:
        labels = sample["labels"].split("{", 1)[1]
        if drop_position:  # a β panel query sums by model_name and engine only
            labels = re.sub(r',\s*position="\d+"', "", labels)
        return {"labels": name + "{" + labels, "value": sample["value"]}

    tests = [{
        "expr": "dashboard:position:check", "eval_time": rates["eval_time"],
        "exp_samples": [relabel(x, "dashboard:position:check") for x in rates["exp_samples"]],
    }]  # fmt: skip
    for i in range(1, 5):
        name = f"dashboard:beta{i}:check"
        samples = [relabel(x, name, True) for x in betas["exp_samples"] if f'position="{i}"' in x["labels"]]
        tests.append({"expr": name, "eval_time": betas["eval_time"], "exp_samples": samples})
    spec = {
        "rule_files": ["panels.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": group["input_series"], "promql_expr_test": tests}],
    }
    (tmp_path / "panels_test.yml").write_text(json.dumps(spec))
    result = promtool("test", "rules", str(tmp_path / "panels_test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_dashboard_cost_ratio_and_draft_share_agree_with_the_rules(tmp_path):
    """The panel's live cost ratio and draft share are the recording rules' (worked numbers in
    rules_test.yml: c = 0.125 per drafted position, where per drafted token it would read 1/36;
    draft share 0.25), on the rules' own step-timing series."""
    (panel,) = [p for p in walk_panels(load_dashboard()["panels"]) if p.get("title") == "Cost ratio and draft share"]
    live = {t["legendFormat"].split(",")[0]: t["expr"] for t in panel["targets"] if "live" in t["legendFormat"]}
    gauges = {t["expr"].split("{")[0] for t in panel["targets"] if "gauge" in t["legendFormat"]}
    assert gauges == {"specobs_cost_ratio", "specobs_draft_share"}
    checks = {"cost ratio": "specobs:cost_ratio:rate5m", "draft share": "specobs:draft_share:rate5m"}
    rules = [{"record": f"dashboard:{name.replace(' ', '_')}:check", "expr": to_promql(live[name])} for name in checks]
    (tmp_path / "cost.yml").write_text(json.dumps({"groups": [{"name": "cost", "rules": rules}]}))
    group = next(g for g in load_yaml(RULES_TEST)["tests"] if g["name"] == "step timing")
    cases = {case["expr"]: case for case in group["promql_expr_test"]}
    tests = []
    for name, record in checks.items():
        check = f"dashboard:{name.replace(' ', '_')}:check"
        samples = [
            {"labels": check + x["labels"][len(record) :], "value": x["value"]} for x in cases[record]["exp_samples"]
        ]
        assert samples, record
        tests.append({"expr": check, "eval_time": cases[record]["eval_time"], "exp_samples": samples})
    spec = {
        "rule_files": ["cost.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": group["input_series"], "promql_expr_test": tests}],
    }
    (tmp_path / "cost_test.yml").write_text(json.dumps(spec))
    result = promtool("test", "rules", str(tmp_path / "cost_test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_dashboard_accepted_length_heatmap_follows_from_the_per_position_counters(tmp_path):
    """The heatmap's cumulative buckets, drafts with at most j tokens accepted, on two engines: one
    with k = 3 (per second 1 draft reaching position 0; 0.5, 0.2 and 0.1 accepted at positions 0-2)
    and one with k = 1 whose every draft is accepted. The second's drafts all fall at j = 1."""
    (expr,) = [expr for title, expr in dashboard_exprs() if title == "Accepted tokens per draft"]
    (tmp_path / "heatmap.yml").write_text(
        json.dumps({"groups": [{"name": "heatmap", "rules": [{"record": "dashboard:heatmap:check",
                                                               "expr": to_promql(expr)}]}]})
    )  # fmt: skip

    def series(name: str, engine: str, position: str, per_minute: int) -> dict:
        labels = f'model_name="m", engine="{engine}", method="eagle", position="{position}", job="j", instance="i"'
        return {"series": f"{name}{{{labels}}}", "values": f"0+{per_minute}x10"}

    reached, accepted = "specobs_drafts_per_position_total", "specobs_accepted_tokens_per_position_total"
    inputs = [series(reached, "0", str(j), 60) for j in range(3)]
    inputs += [series(accepted, "0", str(j), n) for j, n in enumerate((30, 12, 6))]
    inputs += [series(reached, "1", "0", 60), series(accepted, "1", "0", 60)]
    expected = {"0": 0.5, "1": 1.8, "2": 1.9, "+Inf": 2.0}
    test = {
        "expr": "dashboard:heatmap:check", "eval_time": "10m",
        "exp_samples": [{"labels": f'dashboard:heatmap:check{{le="{le}"}}', "value": v} for le, v in expected.items()],
    }  # fmt: skip
    spec = {"rule_files": ["heatmap.yml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": inputs, "promql_expr_test": [test]}]}  # fmt: skip
    (tmp_path / "heatmap_test.yml").write_text(json.dumps(spec))
    result = promtool("test", "rules", str(tmp_path / "heatmap_test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def _promtool_panel_test(tmp_path, name: str, exprs: dict[str, str], group_name: str, cases: list[dict]) -> None:
    """Run panel expressions (record name → Grafana expression) as rules on the input series of one
    rules_test.yml group, with promql_expr_test ``cases``."""
    rules = [{"record": record, "expr": to_promql(expr)} for record, expr in exprs.items()]
    (tmp_path / f"{name}.yml").write_text(json.dumps({"groups": [{"name": name, "rules": rules}]}))
    group = next(g for g in load_yaml(RULES_TEST)["tests"] if g["name"] == group_name)
    spec = {"rule_files": [f"{name}.yml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": group["input_series"], "promql_expr_test": cases}]}  # fmt: skip
    (tmp_path / f"{name}_test.yml").write_text(json.dumps(spec))
    result = promtool("test", "rules", str(tmp_path / f"{name}_test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_dashboard_engine_info_panels_list_both_sides_of_a_change(tmp_path):
    """On the rules' own change series, at minute 540 with a 1h range: m-changed and m-upgraded
    show the configuration before the restart at minute 500 and the one after, m-fell (scraped by
    two instances) one row, m-early (changed at minute 100) only its current one."""
    exprs = dict(dashboard_exprs())
    table = exprs["Engine info: every configuration in the range"]
    timeline = exprs["Engine configuration over time"]
    info = ('model_name="{m}", engine="0", method="eagle3", num_speculative_tokens="3", vllm_version="{v}", '
            'platform="rocm", device_arch="gfx942", attention_backend="{b}", graph_mode="full_and_piecewise", '
            'model_runner="v1"')  # fmt: skip
    old, new = ("0.32.0", "ROCM_AITER_FA"), ("0.33.0", "ROCM_ATTN")
    rows = [("m-changed", old), ("m-changed", new), ("m-upgraded", old), ("m-upgraded", new), ("m-fell", old),
            ("m-early", new)]  # fmt: skip

    def samples(record: str, which) -> list[dict]:
        return [{"labels": record + "{" + info.format(m=m, v=v, b=b) + "}", "value": 1} for m, (v, b) in which]

    now = [r for r in rows if r[1] == new or r[0] == "m-fell"]  # minute 540: the old series are gone (stale after 5m)
    cases = [
        {"expr": "dashboard:info_table:check", "eval_time": "540m", "exp_samples": samples("dashboard:info_table:check", rows)},
        {"expr": "dashboard:info_timeline:check", "eval_time": "540m",
         "exp_samples": samples("dashboard:info_timeline:check", now)},
    ]  # fmt: skip
    _promtool_panel_test(tmp_path, "info", {"dashboard:info_table:check": table, "dashboard:info_timeline:check": timeline},
                         "acceptance drop after a change", cases)  # fmt: skip


@needs_promtool
def test_dashboard_drift_panel_compares_with_a_day_ago(tmp_path):
    """The drift panel on the regression rule's series: m-regress fell from 3 to 2 at minute 1500;
    at minute 1560 the panel shows 2 now and 3 a day ago, the numbers the alert compares."""
    (panel,) = [
        p for p in walk_panels(load_dashboard()["panels"]) if p.get("title", "").startswith("Acceptance length now")
    ]
    now, ago = (t["expr"] for t in panel["targets"])
    assert "offset 1d" not in now and ago.count("offset 1d") == 4
    cases = [
        {"expr": f'dashboard:{name}:check{{model_name="m-regress"}}', "eval_time": "1560m",
         "exp_samples": [{"labels": f'dashboard:{name}:check{{model_name="m-regress", engine="0"}}', "value": value}]}
        for name, value in (("now", 2), ("ago", 3))
    ]  # fmt: skip
    _promtool_panel_test(tmp_path, "drift", {"dashboard:now:check": now, "dashboard:ago:check": ago},
                         "acceptance regression", cases)  # fmt: skip

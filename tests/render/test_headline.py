"""The headline answer on real data: checked against what the data itself measured.

The expected values here are computed in the tests from the raw step rows (generated tokens
over step seconds per configuration and batch bucket, against the plain engine at the same
batch sizes), not taken from specobs's own tuning code.
"""

from __future__ import annotations

import json

import polars as pl
import pytest
from support.helpers import report_json, run_cli
from support.paths import ROOT

from specobs import schema
from specobs.advice.model import fit_acceptance
from specobs.advice.recommend import recommend
from specobs.analysis import acceptance
from specobs.ingest import load
from specobs.ingest.events import steps_to_windows
from specobs.testing import simulate as sim

DATA = ROOT / "examples" / "data"
SWEEP = DATA / "vllm-cpu-sweep"
#: Round-to-round noise of one configuration inside one engine on these machines (±10%).
NOISE = 0.10


def _raw_steps() -> pl.DataFrame:
    frames = [pl.read_ndjson(p, infer_schema_length=None) for p in sorted(SWEEP.glob("specobs-*.jsonl"))]
    return pl.concat(frames, how="diagonal_relaxed")


def _bucket(batch: int) -> int:
    return 1 << (batch.bit_length() - 1)


def _measured_speedups() -> dict[tuple[str | None, int, int], tuple[float, int]]:
    """(method, k, bucket low) → (measured speedup over the plain engine, decode steps), by hand."""
    steps = _raw_steps().filter(pl.col("num_scheduled_tokens") <= pl.col("batch_size") + pl.col("num_draft_tokens"))
    per_batch = steps.group_by("method", "num_spec_tokens", "batch_size").agg(
        gen=pl.col("num_generated_tokens").sum(), sec=pl.col("step_seconds").sum(), n=pl.len()
    )
    plain = {
        r["batch_size"]: r["sec"] / r["n"] for r in per_batch.filter(pl.col("method").is_null()).iter_rows(named=True)
    }
    out: dict[tuple, list[float]] = {}
    for r in per_batch.filter(pl.col("method").is_not_null() & (pl.col("num_spec_tokens") > 0)).iter_rows(named=True):
        if r["batch_size"] not in plain:
            continue  # only batch sizes the plain engine ran: no model involved
        key = (r["method"], r["num_spec_tokens"], _bucket(r["batch_size"]))
        acc = out.setdefault(key, [0.0, 0.0, 0.0, 0.0, 0])
        acc[0] += r["gen"]
        acc[1] += r["sec"]
        acc[2] += r["n"] * r["batch_size"]
        acc[3] += r["n"] * plain[r["batch_size"]]
        acc[4] += r["n"]
    return {key: ((g / s) / (t / p), n) for key, (g, s, t, p, n) in out.items() if n >= 20}


@pytest.fixture(scope="module")
def sweep_recommendation():
    return recommend(load([str(SWEEP)]).windows, bootstrap=0)


def test_sweep_headline_is_within_noise_of_the_best_measured_config(sweep_recommendation):
    measured = _measured_speedups()
    rec = sweep_recommendation
    chosen = rec.recommended
    assert chosen.method == "ngram"  # draft_model is measured slower than plain at every batch size
    ks = {row.batch_size_min: row.num_speculative_tokens for row in rec.by_batch_size}
    weights = {row.batch_size_min: row.measured_steps for row in rec.by_batch_size}
    buckets = sorted({b for (_, _, b) in measured})  # 1, 4, 16: where the plain engine ran
    assert buckets == [1, 4, 16]

    def overall(speed_of_bucket) -> float:
        return sum(speed_of_bucket(b) * weights[b] for b in buckets) / sum(weights[b] for b in buckets)

    recommended = overall(lambda b: measured[("ngram", ks[b], b)][0])
    best_static = max(
        overall(lambda b, m=m, k=k: measured[(m, k, b)][0])
        for m in ("ngram", "draft_model")
        for k in range(1, 7)
        if all((m, k, b) in measured for b in buckets)
    )
    assert recommended >= best_static * (1 - NOISE)
    assert recommended > 1.0  # it is a speedup, measured
    # Per bucket, the chosen k is within noise of the best measured k there.
    for b in buckets:
        best = max(v for (m, k, bb), (v, _) in measured.items() if bb == b and m == "ngram")
        assert measured[("ngram", ks[b], b)][0] >= best * (1 - NOISE)
    # Every draft_model configuration was measured slower than plain: never recommended anywhere.
    assert all(v < 1 for (m, _, _), (v, _) in measured.items() if m == "draft_model")
    assert not any(row.winner == "draft_model" for row in rec.method_comparison)


def test_sweep_headline_names_the_printed_config(sweep_recommendation):
    r = sweep_recommendation.recommended
    config = json.loads(r.speculative_config)
    assert config["method"] == r.method and config["num_speculative_tokens"] == r.num_speculative_tokens
    by = sweep_recommendation.by_batch_size
    if r.schedule:
        assert config["num_speculative_tokens_per_batch_size"] == [list(row) for row in r.schedule]
        # Each bucket lies inside the one printed range of its k; equal neighbours are merged.
        for row in by:
            (held,) = [s for s in r.schedule if s[0] <= row.batch_size_min and row.batch_size_max <= s[1]]
            assert held[2] == row.num_speculative_tokens
        assert all(a[2] != b[2] for a, b in zip(r.schedule, r.schedule[1:], strict=False))
        assert r.schedule[0][0] == 1 and all(a[1] + 1 == b[0] for a, b in zip(r.schedule, r.schedule[1:], strict=False))
    else:
        assert {row.num_speculative_tokens for row in by} == {r.num_speculative_tokens}
    # The headline's speedup is the traffic-weighted mix of the ranges it prints.
    weighted = sum(row.predicted_speedup * row.measured_steps for row in by) / sum(row.measured_steps for row in by)
    assert r.predicted_speedup == pytest.approx(weighted, rel=1e-9)
    assert r.baseline == "plain engine"


def test_subsets_with_the_same_information_give_one_answer(sweep_recommendation):
    windows = load([str(SWEEP)]).windows.collect()
    # Leaving out configurations that never win (the draft model; ngram at k = 1, 2) changes nothing.
    for subset in (
        windows.filter(pl.col("method").fill_null("") != "draft_model"),
        windows.filter(~((pl.col("method") == "ngram") & pl.col("num_spec_tokens").is_in([1, 2]))),
    ):
        rec = recommend(subset, bootstrap=0)
        assert rec.recommended.speculative_config == sweep_recommendation.recommended.speculative_config
        assert rec.recommended.predicted_speedup == pytest.approx(
            sweep_recommendation.recommended.predicted_speedup, rel=0.02
        )


@pytest.mark.slow
def test_k0_steps_of_a_speculative_engine_are_not_the_baseline():
    data = report_json(str(SWEEP), "--by", "method,k")
    findings = " ".join(data["findings"])
    assert "draft_model engine still takes" in findings and "plain engine" in findings
    # By hand: the draft-model engine's k = 0 decode steps against the plain engine's, batch 1.
    steps = _raw_steps().filter((pl.col("num_spec_tokens") == 0) & (pl.col("batch_size") == 1))
    steps = steps.filter(pl.col("num_scheduled_tokens") <= 1)
    off = steps.filter(pl.col("method") == "draft_model")["step_seconds"].mean()
    plain = steps.filter(pl.col("method").is_null())["step_seconds"].mean()
    assert off > plain * 1.3  # the drafter still runs at k = 0
    rec = data["recommendation"]["recommended"]
    assert rec["method"] == "ngram" and rec["baseline"] == "plain engine"


def _steps(per_step: list[tuple[int, list[int], list[int] | None]], repeat: int = 10) -> pl.DataFrame:
    rows = []
    for k, accepted, reached in per_step:
        for _ in range(repeat):
            drafts = 10 if reached is None else reached[0]
            tokens = drafts * k if reached is None else sum(reached)
            rows.append(
                {
                    "start_ts": 0.0,
                    "end_ts": 0.0,
                    "counters": "step",
                    "batch_size": 10,
                    "num_spec_tokens": k,
                    "num_drafts": drafts,
                    "num_draft_tokens": tokens,
                    "num_accepted_tokens": sum(accepted),
                    "num_accepted_tokens_per_pos": accepted,
                    "num_drafts_per_pos": reached,
                }
            )
    return schema.conform(
        pl.DataFrame(rows, schema_overrides={"num_drafts_per_pos": pl.List(pl.Int64)}), schema.WINDOWS
    )


def test_per_position_rates_survive_mixed_k():
    # Ten k=2 steps (10 drafts each, [8, 6]) and ten k=6 steps ([8, 6, 4, 3, 2, 1]), no denominators.
    frame = _steps([(2, [8, 6], None), (6, [8, 6, 4, 3, 2, 1], None)])
    row = acceptance.summarize(frame, by=()).row(0, named=True)
    assert row["acceptance_rate_per_position"] == pytest.approx([0.8, 0.6, 0.4, 0.3, 0.2, 0.1])
    assert row["num_drafts_per_pos"] == [200, 200, 100, 100, 100, 100]
    assert row["conditional_acceptance_rate_per_position"][2] == pytest.approx(0.4 / 0.6)
    # The old denominator (all drafts) would have said 0.2 at position 3.
    assert row["num_accepted_tokens_per_pos"][2] / row["num_drafts"] == pytest.approx(0.2)
    acc = fit_acceptance(frame)
    assert acc.rates == pytest.approx((0.8, 0.6, 0.4, 0.3, 0.2, 0.1))
    assert acc.tokens_per_request_step(2) == pytest.approx(1 + 1.4)


def test_short_drafts_use_the_drafts_that_reached_each_position():
    # k = 4, 10 drafts per step, but only 6 reach position 3 and 3 reach position 4 (fill 0.775).
    frame = _steps([(4, [8, 5, 3, 1], [10, 10, 6, 3])])
    row = acceptance.summarize(frame, by=()).row(0, named=True)
    assert row["acceptance_rate_per_position"] == pytest.approx([0.8, 0.5, 0.5, 1 / 3])
    assert row["num_drafts_per_pos"] == [100, 100, 60, 30]
    acc = fit_acceptance(frame)
    # Accepted per draft that could reach the position (k > i): a_i / all drafts of the step.
    assert acc.rates == pytest.approx((0.8, 0.5, 0.3, 0.1))
    assert acc.draft_length(4) == pytest.approx(2.9)
    assert acc.fill == pytest.approx(2.9 / 4)


@pytest.mark.slow
def test_a_scrape_without_method_label_says_so_and_method_names_it():
    scrape = DATA / "vllm-cpu-ngram-k3.metrics.txt"
    result = run_cli("recommend", str(scrape), "--format", "json", "--bootstrap", "0")
    assert result.returncode == 0, result.stderr.decode()
    data = json.loads(result.stdout)
    assert data["recommended"]["method"] is None and data["recommended"]["speculative_config"] is None
    # A scrape has no timing: a band, whose drafter cost class needs the method.
    assert data["bands"][0]["method"] is None and data["bands"][0]["drafter_kind"] == "autoregressive"
    assert any("--method" in a for a in data["explanations"])
    text = run_cli("recommend", str(scrape), "--bootstrap", "0").stdout.decode()
    assert "pass --method" in text and '"method": null' not in text and "None" not in text.split("\n")[0]
    named = json.loads(run_cli("recommend", str(scrape), "-f", "json", "--bootstrap", "0", "--method", "ngram").stdout)
    assert named["bands"][0]["method"] == "ngram" and named["bands"][0]["drafter_kind"] == "lookup"
    assert named["recommended"]["speculative_config"] is None  # not measured: nothing to paste
    bad = run_cli("recommend", str(scrape), "--method", "nonsense")
    assert bad.returncode == 2 and b"unknown --method nonsense" in bad.stderr and b"Traceback" not in bad.stderr


@pytest.mark.slow
def test_simulated_headline_matches_its_config(tmp_path):
    result = run_cli("simulate", str(tmp_path), "--method", "ngram", "--k", "0,6")
    assert result.returncode == 0, result.stderr.decode()
    data = json.loads(run_cli("recommend", str(tmp_path), "-f", "json", "--bootstrap", "0").stdout)
    r = data["recommended"]
    config = json.loads(r["speculative_config"])
    assert config["num_speculative_tokens"] == r["num_speculative_tokens"]
    ks = {row["num_speculative_tokens"] for row in data["by_batch_size"]}
    if r["schedule"] is None:
        assert ks == {r["num_speculative_tokens"]} and "num_speculative_tokens_per_batch_size" not in config
        own = [p for p in data["predicted"] if p["num_speculative_tokens"] == r["num_speculative_tokens"]]
        steps = {row["batch_size_min"]: row["measured_steps"] for row in data["by_batch_size"]}
        weighted = sum(p["estimate"] * steps[p["batch_size_min"]] for p in own) / sum(steps.values())
        assert r["predicted_speedup"] == pytest.approx(weighted, rel=1e-6)
    else:
        assert max(ks) == r["num_speculative_tokens"]


def test_warm_up_steps_do_not_move_the_prediction():
    scenario = sim.Scenario(methods=(sim.PROFILES["eagle3"],), seed=4)
    frames = [sim.simulate_run(scenario, "eagle3" if k else None, k, [1, 8, 32], 150) for k in (0, 2, 5)]
    clean = steps_to_windows(pl.concat(frames).lazy(), "sim", "events-jsonl").collect()
    # The first three steps of every engine take seconds (compilation, graph capture).
    first = pl.int_range(pl.len()).over("run_id") < 3
    slow = clean.with_columns(
        step_seconds=pl.when(first).then(pl.col("step_seconds") + 2.5).otherwise(pl.col("step_seconds")),
        verify_seconds=pl.when(first).then(pl.col("verify_seconds") + 2.5).otherwise(pl.col("verify_seconds")),
    )
    a, b = recommend(clean, bootstrap=0), recommend(slow, bootstrap=0)
    assert a.recommended.speculative_config == b.recommended.speculative_config
    pa = {(p.num_speculative_tokens, p.batch_size_min): p.estimate for p in a.predicted}
    pb = {(p.num_speculative_tokens, p.batch_size_min): p.estimate for p in b.predicted}
    assert max(abs(pb[key] / pa[key] - 1) for key in pa) < 0.03
    data = {"warm-up": 0}
    from specobs.analysis.cost import unsteady_counts

    data.update(unsteady_counts(slow))
    assert data["warm-up"] == 9  # three engines × three steps, named as warm-up


def test_interval_sources_with_short_drafts_get_a_bias_finding():
    data = report_json(str(DATA / "vllm-cpu-ngram-k3.log"))
    summary = data["summary"]
    assert summary["num_draft_tokens"] < 3 * summary["num_drafts"]  # ngram drafts shorter than k=3
    assert any("underestimated" in f for f in data["findings"])
    # A draft model's drafts are always k long: no such finding.
    data = report_json(str(DATA / "vllm-cpu-draft-k3.log"))
    assert not any("underestimated" in f for f in data["findings"])


def _sim_windows(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return steps_to_windows(pl.concat(frames).lazy(), "sim", "events-jsonl").collect()


def test_a_drafter_that_never_pays_is_off_without_a_config_even_when_its_k0_steps_look_fast():
    # The plain engine's process runs slower than the speculative engine's own k=0 steps
    # (separate processes differ): "off everywhere" must still be no speculative config at all.
    slow = sim.MethodSpec("draft_model", tuple(sim.profile("iid", 0.1)), (0.0, 0.0, 0.01, 0.0001))
    plain_engine = sim.Scenario(methods=(slow,), overhead_plain=(0.0025, 0.00002), seed=1)
    spec_engine = sim.Scenario(methods=(slow,), overhead_plain=(0.0008, 0.00002), seed=2)
    batches = [1, 4, 16]
    off = sim.simulate_run(spec_engine, None, 0, batches, 100, start_ts=1.7646e9)
    frames = [
        sim.simulate_run(plain_engine, None, 0, batches, 100),
        off.with_columns(method=pl.lit("draft_model"), run_id=pl.lit("spec-off")),
        *[
            sim.simulate_run(spec_engine, "draft_model", k, batches, 100, start_ts=1.7647e9 + k * 1e4).with_columns(
                run_id=pl.lit("spec-on")
            )
            for k in (2, 4)
        ],
    ]
    windows = _sim_windows(frames)
    rec = recommend(windows, bootstrap=0)
    assert rec.recommended.speculative_config is None and rec.recommended.predicted_speedup == 1.0
    assert all(row.num_speculative_tokens == 0 for row in rec.by_batch_size)
    from specobs.analysis.cost import schedule_tax
    from specobs.analysis.findings import cost_findings
    from specobs.render.sentences import word

    (finding,) = cost_findings(schedule_tax(windows), {})
    sentence = word(finding)
    assert "no measurable k=0 tax" in sentence and "+-" not in sentence


def test_a_small_batch_drain_is_not_called_unsteady():
    # 400 steps at batch 48, then a few steps at each smaller batch as requests finish: cheap
    # per step, costly per token, and steady.
    from specobs.analysis.cost import unsteady_counts

    scenario = sim.Scenario(methods=(sim.PROFILES["ngram"],), noise=0.05)
    busy = sim.simulate_run(scenario, None, 0, [48], 400)
    drain = sim.simulate_run(scenario, None, 0, [12, 6, 3, 2, 1], 3, start_ts=1.7646e9)
    assert unsteady_counts(_sim_windows([busy, drain])) == {}


def test_the_baseline_label_is_the_chosen_methods():
    # A timed sweep beside an untimed log: whichever wins, its own baseline is named.
    windows = load([str(SWEEP), str(DATA / "vllm-cpu-eagle-k3.log")]).windows
    rec = recommend(windows, bootstrap=0)
    if rec.recommended.method == "eagle":
        assert rec.recommended.baseline.startswith("estimated: no step timing")
    else:
        assert rec.recommended.baseline == "plain engine"

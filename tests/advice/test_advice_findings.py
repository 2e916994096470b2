"""The findings decided in ``advice.report_findings``, on numbers: serving under load (the K=0 tax, beyond
noise, trends), the input, and the summary's ranking."""

from __future__ import annotations

import pytest

from specobs.advice.report_findings import (
    FINDING_RANK,
    beyond_parity,
    bursts,
    crossover_verdict,
    latency_beyond_noise,
    not_drafting,
    rank,
    serving_findings,
    taxed,
    trend,
)
from specobs.analysis.findings import finding
from specobs.analysis.under_load import MATERIAL_TREND, NOT_DRAFTING
from specobs.records import Crossover, FindingKind, LoadRatio, MeasureRatio, Serving, ServingFacts, Severity

EPS = 1e-3


def _ratio(level: float = 4.0, **values) -> LoadRatio:
    base = dict(model="m", config="spec", plain_config="plain", load="concurrency", level=level, runs=3,
                plain_runs=3, throughput_ratio=1.1, throughput_low=1.05, throughput_high=1.15, tpot_ratio=0.9,
                tpot_low=0.85, tpot_high=0.95)  # fmt: skip
    return LoadRatio(**{**base, **values})


def _crossover(how: str, metric: str = "output_throughput") -> Crossover:
    return Crossover("m", "spec", "concurrency", metric, None, how, None, None, 1.0, 8.0, True)


@pytest.mark.parametrize(("share", "idle"), [(NOT_DRAFTING - EPS, True), (NOT_DRAFTING + EPS, False), (None, False)])
def test_a_level_does_not_draft_below_the_share(share, idle):
    assert not_drafting(_ratio(drafting_share=share)) is idle


@pytest.mark.parametrize(
    ("values", "cost"),
    [({"throughput_high": 1 - EPS}, True), ({"throughput_high": 1 + EPS}, False),
     ({"tpot_low": 1 + EPS}, True), ({"tpot_low": 1 - EPS}, False)],
)  # fmt: skip
def test_the_k0_tax_is_beyond_noise_when_an_interval_excludes_parity(values, cost):
    assert taxed(_ratio(**values)) is cost


@pytest.mark.parametrize(
    ("last", "way"),
    [(1 + MATERIAL_TREND + EPS, "grew"), (1 + MATERIAL_TREND - EPS, "held"), (1 - MATERIAL_TREND + EPS, "held"),
     (1 - MATERIAL_TREND - EPS, "fell")],
)  # fmt: skip
def test_a_trend_is_named_at_the_material_move(last, way):
    assert trend(1.0, last).way == way


@pytest.mark.parametrize(
    ("low", "high", "beyond"),
    [(1 + EPS, 1.2, True), (1 - EPS, 1.2, False), (0.8, 1 - EPS, True), (0.8, 1 + EPS, False), (None, 1.2, False)],
)
def test_beyond_noise_is_an_interval_that_excludes_parity(low, high, beyond):
    assert beyond_parity(low, high) is beyond


def test_a_crossover_names_the_levels_beyond_noise():
    ratios = [_ratio(2.0, throughput_low=1 + EPS), _ratio(4.0, throughput_low=1 - EPS),
              _ratio(8.0, throughput_low=None, throughput_high=None)]  # fmt: skip
    assert crossover_verdict(_crossover("never"), ratios).beyond_noise_levels == (2.0,)
    below = [_ratio(2.0, throughput_high=1 - EPS), _ratio(4.0, throughput_high=1 + EPS)]
    assert crossover_verdict(_crossover("below"), below).beyond_noise_levels == (2.0,)
    # TPOT: lower is better
    tpot = [_ratio(2.0, tpot_high=1 - EPS), _ratio(4.0, tpot_high=1 + EPS)]
    assert crossover_verdict(_crossover("never", "mean_tpot_ms"), tpot).beyond_noise_levels == (2.0,)
    assert crossover_verdict(_crossover("crossed"), ratios).beyond_noise_levels == ()


def test_latency_beyond_noise_keeps_the_intervals_that_exclude_parity():
    r = _ratio(latency=(MeasureRatio("p99_tpot_ms", 1.3, 1 + EPS, 1.5), MeasureRatio("p90_ttft_ms", 1.1, 1 - EPS, 1.2),
                        MeasureRatio("median_itl_ms", 0.8, 0.7, 1 - EPS)))  # fmt: skip
    # ITL is per output event: a speculative step's burst against one token, never "beyond noise".
    assert [s.measure for s in latency_beyond_noise([r])] == ["p99_tpot_ms"]
    (burst,) = bursts([r])
    assert (burst.median_itl_ratio, burst.p99_itl_ratio, burst.tpot_ratio) == (0.8, None, r.tpot_ratio)
    assert [m.to_dict()["unit"] for m in r.latency] == ["per output token", "per request", "per output event"]
    assert bursts([_ratio(latency=(MeasureRatio("p99_tpot_ms", 1.3, 1.2, 1.5),))]) == ()


def test_the_serving_finding_carries_its_decisions():
    ratios = (_ratio(1.0, drafting_share=0.5, step_time_ratio=1.2, acceptance_length=2.5),
              _ratio(8.0, drafting_share=NOT_DRAFTING - EPS, throughput_high=1 - EPS, step_time_ratio=1.5,
                     acceptance_length=2.5))  # fmt: skip
    serving = Serving((), ratios, (_crossover("crossed"),))
    (found,) = serving_findings(serving)
    assert found.kind == FindingKind.SERVING and isinstance(found.facts, ServingFacts)
    facts = found.facts
    assert [r.level for r in facts.not_drafting] == [8.0] and facts.taxed_levels == (8.0,)
    assert facts.step_cost is not None and facts.step_cost.way == "grew"
    assert facts.tokens_per_draft is not None and facts.tokens_per_draft.way == "held"
    assert found.to_dict()["facts"]["plain_config"] == "plain"
    assert serving_findings(None) == []


def test_rank_orders_by_severity_one_kind_at_a_time_and_never_context():
    found = [finding("acceptance_length"), finding("schedule_tax"), finding("schedule_tax"), finding("collapse"),
             finding("conditional_trend", severity=Severity.MODEL), finding("serving"), finding("drafts_derived")]  # fmt: skip
    assert found[0].severity == Severity.CONTEXT and found[5].severity == Severity.OTHER
    assert [str(f.kind) for f in rank(found, most=10)] == [
        "collapse", "schedule_tax", "conditional_trend", "drafts_derived", "serving", "schedule_tax",
    ]  # fmt: skip
    assert [str(f.kind) for f in rank(found)] == ["collapse", "schedule_tax", "conditional_trend"]
    assert list(FINDING_RANK) == [s for s in Severity if s != Severity.CONTEXT]


# --- the decisions the recommendation, comparison and tune sentences read -------------------------


def test_the_recommendation_decides_anchoring_and_noise_beside_its_numbers():
    from specobs.advice.recommend import ANCHOR_SAID, anchored, within_noise
    from specobs.records import BucketBasis

    assert anchored(BucketBasis.MODEL, 1.2 * (1 + ANCHOR_SAID + EPS), 1.2)
    assert not anchored(BucketBasis.MODEL, 1.2 * (1 + ANCHOR_SAID - EPS), 1.2)
    assert not anchored(BucketBasis.MEASURED, 2.0, 1.2) and not anchored(BucketBasis.MODEL, 2.0, None)
    assert within_noise((1.0, 1.3)) and within_noise((0.9, 1.3))
    assert not within_noise((1.0 + EPS, 1.3)) and not within_noise(None) and not within_noise([])


def test_the_comparison_and_the_tune_carry_what_their_sentences_say():
    from specobs.records import Throughput, ThroughputBasis, ThroughputInterval, TuneVerification
    from specobs.records.comparison import STEP_TIME_MOVED

    def throughput(ratio: float | None) -> Throughput:
        basis, interval = next(iter(ThroughputBasis)), next(iter(ThroughputInterval))
        return Throughput(basis, interval, 1.0, None, None, None, ratio, None, (), (), ())

    assert throughput(1 + STEP_TIME_MOVED + EPS).steps_moved and throughput(1 - STEP_TIME_MOVED - EPS).steps_moved
    assert not throughput(1 + STEP_TIME_MOVED - EPS).steps_moved and not throughput(None).steps_moved

    def verification(low: float) -> TuneVerification:
        return TuneVerification(3, "w", 10.0, 2, 9.0, 8.0, 0.1, 0.0, 0.2, 0.2, low, 0.3)

    assert verification(EPS).verified and not verification(0.0).verified and not verification(-EPS).verified


def test_a_finding_is_of_a_known_kind():
    assert finding("serving").kind is FindingKind.SERVING
    with pytest.raises(ValueError, match="a_kind_never_decided"):
        finding("a_kind_never_decided")

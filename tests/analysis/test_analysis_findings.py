"""The findings decided in ``analysis.findings``, on numbers: each threshold just above and just below."""

from __future__ import annotations

import pytest

from specobs.analysis.acceptance import MATERIAL_IID_GAP
from specobs.analysis.findings import (
    INTERVAL_BIAS_MARGIN,
    acceptance_findings,
    cost_findings,
    iid_misleads,
    integrity_findings,
    request_findings,
)
from specobs.analysis.per_request import MATERIAL_MEAN_GAP
from specobs.records import (
    ConditionalTrendFacts,
    FindingKind,
    IntegrityIssue,
    PositionBound,
    RequestAcceptance,
    RequestGroup,
    ScheduleTax,
    Severity,
    Summary,
)

EPS = 1e-3


def _trend_summary(trend: str, gap: float) -> Summary:
    return Summary(
        num_drafts=100, mean_acceptance_length=2.5, draft_acceptance_rate=0.5,
        conditional_acceptance_rate_per_position=(0.8, 0.7, 0.6), iid_alpha=0.7, iid_max_gap=gap,
        conditional_trend=trend, supported_positions=(0, 1, 2),
    )  # fmt: skip


def _kinds(findings) -> list[str]:
    return [str(f.kind) for f in findings]


@pytest.mark.parametrize(("gap", "misleads"), [(MATERIAL_IID_GAP + EPS, True), (MATERIAL_IID_GAP - EPS, False)])
@pytest.mark.parametrize("trend", ["falling", "rising"])
def test_the_iid_model_misleads_at_the_material_gap(trend, gap, misleads):
    (found,) = [f for f in acceptance_findings(_trend_summary(trend, gap)) if f.kind == FindingKind.CONDITIONAL_TREND]
    assert isinstance(found.facts, ConditionalTrendFacts)
    assert found.facts.iid_misleads is misleads and iid_misleads(trend, gap) is misleads
    assert found.severity == (Severity.MODEL if misleads else Severity.CONTEXT)
    assert (found.facts.first_position, found.facts.first_rate, found.facts.last_rate) == (0, 0.8, 0.6)


def test_a_flat_trend_is_a_fair_model_whatever_the_gap():
    (found,) = [f for f in acceptance_findings(_trend_summary("flat", 0.2)) if f.kind == "conditional_trend"]
    assert not found.facts.iid_misleads and found.severity == Severity.CONTEXT
    assert not iid_misleads("flat", 0.2)


@pytest.mark.parametrize(("above", "found"), [(INTERVAL_BIAS_MARGIN + EPS, True), (INTERVAL_BIAS_MARGIN - EPS, False)])
def test_interval_bias_at_the_widest_bound_margin(above, found):
    bounds = (PositionBound(1, 0.7, 0.72), PositionBound(2, 0.5, 0.5 + above), PositionBound(3, 0.3, 0.3 + above / 2))
    s = Summary(num_drafts=10, mean_acceptance_length=2.0, position_bounds=bounds, draft_tokens_per_draft=2.1)
    biased = [f for f in acceptance_findings(s) if f.kind == FindingKind.INTERVAL_BIAS]
    assert bool(biased) is found
    if found:
        facts = biased[0].facts.to_dict()
        assert facts["position"] == 2 and facts["k"] == 3 and facts["rate"] == 0.5
        assert biased[0].severity == Severity.LIMIT


def test_acceptance_findings_carry_their_numbers():
    s = Summary(num_drafts=10, mean_acceptance_length=2.0, mean_acceptance_length_low=1.9,
                mean_acceptance_length_high=2.1, draft_acceptance_rate=0.4, windows_contradicting=3,
                num_drafts_derived=True)  # fmt: skip
    found = acceptance_findings(s)
    assert _kinds(found) == ["acceptance_length", "acceptance_rate", "printed_values_contradict_counts",
                             "drafts_derived"]  # fmt: skip
    assert found[0].to_dict() == {"kind": "acceptance_length", "severity": "context", "facts": {
        "mean_acceptance_length": 2.0, "low": 1.9, "high": 2.1, "reported": False}}  # fmt: skip
    assert found[2].severity == Severity.INTEGRITY and found[2].facts.to_dict() == {"windows": 3}
    # no drafts counted: the rate alone, said as such
    (rate,) = acceptance_findings(Summary(draft_acceptance_rate=0.4))
    assert rate.kind == "acceptance_rate" and rate.facts.drafts_known is False


def _tax(seconds: float) -> ScheduleTax:
    return ScheduleTax(None, None, None, "ngram", 10, 0.010 + seconds, 0.010, (1, 2), seconds, seconds / 0.010)


@pytest.mark.parametrize(("seconds", "measurable"), [(EPS, True), (0.0, False), (-EPS, False)])
def test_the_k0_tax_is_measurable_only_above_zero(seconds, measurable):
    (found,) = cost_findings([_tax(seconds)], {})
    assert found.kind == FindingKind.SCHEDULE_TAX and found.severity == Severity.TAX
    assert found.facts.measurable is measurable


def test_unsteady_steps_are_context():
    (found,) = cost_findings([], {"compilation": 3})
    assert found.kind == "unsteady_steps" and found.severity == Severity.CONTEXT
    assert found.facts.to_dict()["steps"] == {"compilation": 3}


def _requests(request_weighted: float, token_weighted: float, without: int = 0) -> RequestAcceptance:
    overall = RequestGroup(None, 10, without, 40, 120, 60, request_weighted, token_weighted, 1.5, 2.0, 2.5, 3.0,
                           100.0, 50.0)  # fmt: skip
    return RequestAcceptance(overall, (), (), (), (), ())


@pytest.mark.parametrize(
    ("token_weighted", "long_requests"),
    [(2.0 + MATERIAL_MEAN_GAP + EPS, "more"), (2.0 + MATERIAL_MEAN_GAP - EPS, "alike"),
     (2.0 - MATERIAL_MEAN_GAP + EPS, "alike"), (2.0 - MATERIAL_MEAN_GAP - EPS, "less")],
)  # fmt: skip
def test_the_two_means_differ_materially_at_the_mean_gap(token_weighted, long_requests):
    (found,) = request_findings(_requests(2.0, token_weighted))
    assert found.kind == FindingKind.REQUESTS and found.severity == Severity.SPREAD
    assert found.facts.long_requests == long_requests and found.facts.num_drafted == 10


def test_requests_that_never_drafted_are_their_own_finding():
    found = request_findings(_requests(2.0, 2.0, without=4))
    assert _kinds(found) == ["requests", "requests"]
    assert found[0].facts.num_drafted == 6 and found[1].facts.to_dict() == {"num_without_drafts": 4,
                                                                            "num_requests": 10}  # fmt: skip


def test_integrity_findings_only_for_worded_kinds_and_known_pitfalls():
    def issue(kind: str, pitfall: str | None = None, affected: int = 5, checked: int = 100) -> IntegrityIssue:
        return IntegrityIssue(kind=kind, method="ngram", run_id="r", engine=0, affected=affected, checked=checked,
                              max_k=3, observed=0.5, corrected=0.4, pitfall=pitfall)  # fmt: skip

    found = integrity_findings([issue("accepted_past_end"), issue("a_kind_never_worded"),
                                issue("known_pitfall", pitfall="no_such_pitfall")])  # fmt: skip
    assert _kinds(found) == ["accepted_past_end"]
    assert found[0].severity == Severity.INTEGRITY and found[0].facts.share == pytest.approx(0.05)
    (no_checked,) = integrity_findings([issue("accepted_past_end", checked=0)])
    assert no_checked.facts.share == 0.0

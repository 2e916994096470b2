"""The homes of the formulas (``specobs.formulas``, ``specobs.analysis.intervals``,
``specobs.validity``): numbers and polars expressions give the same results, and a zero
denominator gives None or null, never an error."""

from __future__ import annotations

import math

import polars as pl
import pytest

from specobs import formulas, validity
from specobs.analysis import intervals

ROWS = {"accepted": [7, 0, 3, 5], "drafts": [4, 0, 3, 0]}


def _column(expr: pl.Expr) -> list:
    return pl.DataFrame(ROWS).select(expr.alias("x"))["x"].to_list()


def test_acceptance_length_numbers_and_expressions_agree():
    numbers = [formulas.acceptance_length_or_none(a, d) for a, d in zip(ROWS["accepted"], ROWS["drafts"], strict=True)]
    assert numbers == [2.75, None, 2.0, None]
    assert _column(formulas.acceptance_length_or_none(pl.col("accepted"), pl.col("drafts"))) == numbers
    assert formulas.acceptance_length(7, 4) == 2.75
    assert _column(formulas.acceptance_length(pl.col("accepted"), pl.col("drafts")))[0] == 2.75


def test_zero_drafts_give_none_or_null_not_an_error():
    assert formulas.acceptance_length_or_none(3, 0) is None
    assert formulas.acceptance_length_or_none(None, 4) is None
    assert formulas.rate_or_none(3, 0) is None
    assert formulas.per_position_rates([3, 1], 0) == []
    assert _column(formulas.rate_or_none(pl.col("accepted"), pl.col("drafts"))) == [1.75, None, 1.0, None]


def test_tokens_per_step():
    assert formulas.tokens_per_step(1.5) == 2.5
    assert formulas.tokens_per_step(1.5, 0.5) == 1.75
    assert formulas.tokens_per_step_of_rates([0.5, 0.25, 0.125]) == 1.875
    assert formulas.tokens_per_step_of_rates([0.5, 0.25, 0.125], 2) == 1.75
    frame = pl.DataFrame({"a": [1.5, 0.0], "q": [0.5, 1.0]})
    out = frame.select(formulas.tokens_per_step(pl.col("a"), pl.col("q")).alias("x"))["x"].to_list()
    assert out == [formulas.tokens_per_step(1.5, 0.5), formulas.tokens_per_step(0.0, 1.0)]


def test_per_position_counts_from_lengths_and_from_one_draft_agree():
    assert formulas.position_counts({(3, 1): 2, (2, 2): 1}, 3) == (3, [3, 1, 0], [3, 3, 2], [3, 3, 0])
    for drafted in range(5):
        for accepted in range(drafted + 1):
            for k in (0, 2, 4):
                one = formulas.draft_position_counts(drafted, accepted, k)
                assert formulas.position_counts({(drafted, accepted): 1}, k)[1:] == one
                # Element i is the per-draft predicate at i, summed over one draft.
                assert one[0] == [int(formulas.accepted_past(accepted, i)) for i in range(len(one[0]))]
                assert one[1] == [int(formulas.reached(drafted, i)) for i in range(len(one[1]))]
                assert one[2] == [int(formulas.tried(drafted, accepted, i)) for i in range(len(one[2]))]
                assert sum(one[2]) == formulas.trials(drafted, accepted)


def test_per_position_predicates_as_expressions_count_what_the_numbers_count():
    steps = pl.DataFrame({"drafted": [3, 3, 2, 0], "accepted": [1, 3, 2, 0]})
    lengths: dict[tuple[int, int], int] = {}
    for d, a in steps.iter_rows():
        lengths[(d, a)] = lengths.get((d, a), 0) + 1
    _, a_i, n_i, m_i = formulas.position_counts(lengths, 3)
    drafted, accepted = pl.col("drafted"), pl.col("accepted")
    sums = steps.select(
        *[formulas.accepted_past(accepted, i).sum().alias(f"a{i}") for i in range(3)],
        *[formulas.reached(drafted, i).sum().alias(f"n{i}") for i in range(3)],
        *[formulas.tried(drafted, accepted, i).sum().alias(f"m{i}") for i in range(3)],
    ).row(0, named=True)
    assert [sums[f"a{i}"] for i in range(3)] == a_i
    assert [sums[f"n{i}"] for i in range(3)] == n_i
    assert [sums[f"m{i}"] for i in range(3)] == m_i


def test_per_position_rates_numbers_and_expressions_agree():
    frame = pl.DataFrame({"per_pos": [[3, 1, 0], [2, 2]], "drafts": [4, 0]})
    out = frame.select(formulas.per_position_rates(pl.col("per_pos"), pl.col("drafts")).alias("x"))["x"].to_list()
    assert out == [formulas.per_position_rates([3, 1, 0], 4), None]
    assert formulas.per_position_rates([3, None], 4) == [0.75, 0.0]


def test_cost_ratios_numbers_and_expressions_agree():
    values = {"draft": 0.2, "positions": 40.0, "verify": 1.0, "steps": 100.0, "step": 1.5}
    frame = pl.DataFrame({k: [v] for k, v in values.items()})
    ratio = formulas.cost_ratio(values["draft"], values["positions"], values["verify"], values["steps"])
    share = formulas.draft_share(values["draft"], values["steps"], values["step"], values["steps"])
    assert ratio == pytest.approx(0.5)
    assert share == pytest.approx(0.2 / 1.5)
    out = frame.select(
        r=formulas.cost_ratio(*map(pl.col, ("draft", "positions", "verify", "steps"))),
        s=formulas.draft_share(*map(pl.col, ("draft", "steps", "step", "steps"))),
    ).row(0)
    assert out == (ratio, share)
    assert formulas.draft_positions(24, 8) == 3


def test_welch_df():
    # Equal variances and sizes: df = 2(n − 1).
    assert intervals.welch_df([(1.0, 9), (1.0, 9)]) == pytest.approx(18.0)
    assert intervals.welch_df([(0.0, 9), (0.0, 9)]) == math.inf
    assert intervals.welch_df([(2.0, 4), (0.0, 9)]) == pytest.approx(4.0)  # a zero part adds nothing
    frame = pl.DataFrame({"v": [1.0, 2.0], "df": [3.0, 5.0]})
    terms = frame.select(intervals.welch_term(pl.col("v"), pl.col("df")).sum()).item()
    assert intervals.satterthwaite(3.0, terms) == pytest.approx(intervals.welch_df([(1.0, 3.0), (2.0, 5.0)]))


def test_mean_interval_and_standard_error():
    values = [1.0, 2.0, 3.0, 4.0]
    mean, se = intervals.mean_and_standard_error(values)
    assert mean == 2.5 and se == pytest.approx(math.sqrt(intervals.sample_variance(values) / 4))
    mean, _, high = intervals.mean_interval(values)
    assert (high - mean) == pytest.approx(intervals.t95(3) * se)
    assert intervals.mean_interval([5.0]) == (5.0, -math.inf, math.inf)
    assert math.isnan(intervals.sample_variance([1.0]))


def test_jackknife_half_width():
    leave_one_out = [0.1, 0.2, 0.3]
    mean = sum(leave_one_out) / 3
    expected = intervals.t_quantile(2, 0.95) * math.sqrt(2 / 3 * sum((x - mean) ** 2 for x in leave_one_out))
    assert intervals.jackknife_half_width(leave_one_out) == pytest.approx(expected)


GOOD = {
    "ts": 1.0,
    "num_spec_tokens": 3,
    "num_drafts": 4,
    "num_draft_tokens": 12,
    "num_accepted_tokens": 6,
    "num_accepted_tokens_per_pos": [3, 2, 1],
    "num_drafts_per_pos": [4, 4, 4],
    "step_seconds": 0.01,
}
BAD = [
    ({"num_drafts": -1}, validity.NEGATIVE),
    ({"step_seconds": math.inf}, validity.NON_FINITE),
    ({"step_seconds": -0.5}, validity.NEGATIVE),
    ({"num_accepted_tokens": 13}, validity.INCONSISTENT),
    ({"num_accepted_tokens_per_pos": [3, 2, 1, 0], "num_drafts_per_pos": None}, validity.INCONSISTENT),
    ({"num_accepted_tokens_per_pos": [3, 4, 1]}, validity.INCONSISTENT),
    ({"num_accepted_tokens_per_pos": [5, 2, 1]}, validity.INCONSISTENT),
]


def test_the_record_check_and_the_frame_check_agree():
    """One rule table: a record :func:`validity.check_record` rejects is a row
    :func:`validity.invalid` flags, with a reason from :data:`validity.REASONS`."""
    from specobs import schema

    records = [GOOD] + [{**GOOD, **change} for change, _ in BAD]
    verdicts = [validity.check_record({n: r.get(n) for n in schema.STEPS}) for r in records]
    assert verdicts[0] is None
    assert [v[0] if v else None for v in verdicts[1:]] == [reason for _, reason in BAD]
    assert all(v[0] in validity.REASONS for v in verdicts[1:] if v)
    frame = pl.DataFrame([{n: r.get(n) for n in schema.STEPS} for r in records], schema=schema.STEPS)
    flagged = frame.select(validity.invalid(validity.list_shape(frame)).alias("x"))["x"].to_list()
    assert flagged == [v is not None for v in verdicts]


def test_count_fault_names_the_reason_a_value_is_no_count():
    assert validity.count_fault(-1) == validity.NEGATIVE
    assert validity.count_fault(math.nan) == validity.NON_FINITE
    assert validity.count_fault("3") == validity.WRONG_TYPE
    assert validity.count_fault(True) == validity.WRONG_TYPE
    assert set(validity.VALUE_REASONS) < set(validity.REASONS)


def test_acceptance_rate_and_tokens_per_draft_numbers_and_expressions_agree():
    rows = {"accepted": [3, 0, 2], "draft_tokens": [4, 0, 2], "drafts": [2, 1, 1]}
    frame = pl.DataFrame(rows)
    numbers = [
        formulas.acceptance_rate_or_none(a, t) for a, t in zip(rows["accepted"], rows["draft_tokens"], strict=True)
    ]
    assert numbers == [0.75, None, 1.0]
    expr = formulas.acceptance_rate_or_none(pl.col("accepted"), pl.col("draft_tokens"))
    assert frame.select(expr.alias("x"))["x"].to_list() == numbers
    assert formulas.acceptance_rate_or_none(None, 4) is None and formulas.acceptance_rate(3, 4) == 0.75
    per_draft = frame.select(formulas.tokens_per_draft(pl.col("draft_tokens"), pl.col("drafts")).alias("x"))["x"]
    assert (
        per_draft.to_list() == [2.0, 0.0, 2.0] == [formulas.tokens_per_draft(t, d) for t, d in [(4, 2), (0, 1), (2, 1)]]
    )


def test_tokens_per_step_from_totals_and_length_of_conditional_rates():
    # 30 tokens generated, 20 of them accepted from drafts: 10 steps, 3 tokens a step.
    assert formulas.tokens_per_step_from_totals(30, 20) == 3.0
    conditional = [0.8, 0.5, 0.25]
    rates = [0.8, 0.8 * 0.5, 0.8 * 0.5 * 0.25]  # r_i = Π_{j≤i} c_j
    for k in (0, 1, 2, 3):
        assert formulas.acceptance_length_of_conditional(conditional, k) == pytest.approx(
            formulas.tokens_per_step_of_rates(rates, k)
        )
    assert formulas.acceptance_length_of_conditional(conditional) == formulas.acceptance_length_of_conditional(
        conditional, 3
    )
    assert formulas.acceptance_length_of_conditional([], 4) == 1.0


def test_variance_and_ratio_residual_from_sums_match_the_values():
    values = [2.0, 3.5, 1.25, 4.0]
    n, total, sum_sq = len(values), math.fsum(values), math.fsum(v * v for v in values)
    assert intervals.variance_from_sums(n, total, sum_sq) == pytest.approx(intervals.sample_variance(values))
    assert math.isnan(intervals.variance_from_sums(1, 2.0, 4.0))
    assert intervals.variance_from_sums(3, 3.0, 3.0 - 1e-15) == 0.0  # rounding below zero is clipped
    a, d = [3.0, 1.0, 4.0], [2.0, 2.0, 3.0]
    ratio = sum(a) / sum(d)
    direct = math.fsum((x - ratio * y) ** 2 for x, y in zip(a, d, strict=True))
    sums = (sum(x * x for x in a), sum(x * y for x, y in zip(a, d, strict=True)), sum(y * y for y in d))
    assert intervals.ratio_residual(*sums, ratio) == pytest.approx(direct)
    assert intervals.ratio_variance(direct, 3, sum(d) / 3) == pytest.approx(direct / (3 * 2 * (7 / 3) ** 2))


def test_a_request_row_contradicts_itself_by_one_rule():
    assert validity.request_contradiction(4, 3, 2, 3) == "accepted tokens 4 above drafted 3"
    assert (
        validity.request_contradiction(7, 9, 2, 3) == "accepted tokens 7 above num_spec_tokens 3 per step over 2 steps"
    )
    assert validity.request_contradiction(6, 9, 2, 3) is None
    assert validity.request_contradiction(7, None, 2, None) is None
    frame = pl.DataFrame({"accepted": [7, 6], "steps": [2, 2]})
    exceeds = validity.accepted_exceeds_steps(pl.col("accepted"), pl.col("steps"), pl.lit(3))
    assert frame.select(exceeds.alias("x"))["x"].to_list() == [True, False]

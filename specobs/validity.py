"""Row validity: the one set of rules a steps row must keep, and the one set of reason codes.

The rules are written once and read two ways: :func:`check_record` checks one typed Python record
(the JSON Lines reader, line by line) and :func:`invalid` gives the same verdict as one polars
expression over a frame (the Parquet reader, millions of rows at once). Both walk
:data:`COLUMN_RULES` (per-column rules: each a reason, a sentence, a Python predicate and a polars
one) and the cross-column predicates below (each a function that works on numbers and polars
expressions alike). The exporters name a value that is no count by :func:`count_fault`, with the
same reasons.

Reasons (``specobs_skipped_records_total{reason}``, ``specobs_dropped_values_total{reason}``):

- ``invalid_json``: not a JSON object (the JSON Lines reader only)
- ``wrong_type``: a field of the wrong type, out of range, or an empty list element
- ``negative``: a count, timing or context length below zero
- ``non_finite``: NaN or an infinity
- ``inconsistent``: counts that contradict each other (more accepted than drafted, …)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar

import polars as pl

from specobs import schema

T = TypeVar("T", int, pl.Expr)

#: Why a record is skipped or a value dropped, as a small fixed set.
INVALID_JSON = "invalid_json"
WRONG_TYPE = "wrong_type"
NEGATIVE = "negative"
NON_FINITE = "non_finite"
INCONSISTENT = "inconsistent"
REASONS = (INVALID_JSON, WRONG_TYPE, NEGATIVE, NON_FINITE, INCONSISTENT)
#: The reasons a single value (not a whole record) is left out for: every one but ``invalid_json``.
VALUE_REASONS = (NON_FINITE, NEGATIVE, WRONG_TYPE, INCONSISTENT)

#: Longest per-position lists the vectorised consistency check covers (k is far below this).
MAX_CHECKED_POSITIONS = 32
INT_COLUMNS = {n for n, t in schema.STEPS.items() if t == pl.Int64()}
FLOAT_COLUMNS = {n for n, t in schema.STEPS.items() if t == pl.Float64()}
STRING_COLUMNS = {n for n, t in schema.STEPS.items() if t == pl.String()}
LIST_COLUMNS = ("num_accepted_tokens_per_pos", "num_drafts_per_pos", "num_drafts_accepted_before_pos")
#: Float columns that cannot be negative: timings, and the context lengths (a mean of token counts).
NON_NEGATIVE_FLOATS = tuple(n for n in (*schema.TIMINGS, *schema.CONTEXT) if n in FLOAT_COLUMNS)
MAX_INT = 2**63 - 1


@dataclass(frozen=True)
class Rule:
    """One per-column rule: a value of one of ``columns`` that ``bad`` holds for breaks it, for
    ``reason``; ``why`` says so (``{name}``, ``{value}``). ``expr`` is the same test on a column
    (None where a typed frame cannot break it: an Int64 column is never past 2⁶³ − 1)."""

    reason: str
    why: str
    columns: frozenset[str]
    bad: Callable[[Any], bool]
    expr: Callable[[pl.Expr], pl.Expr] | None


def _negative(value: Any) -> Any:
    return value < 0


#: The per-column rules, in groups: a record is checked column by column within a group, each
#: column by its group's rules in order (the first broken one is the reason given).
COLUMN_RULES: tuple[tuple[Collection[str], tuple[Rule, ...]], ...] = (
    (
        INT_COLUMNS,
        (
            Rule(NEGATIVE, "{name} is negative ({value})", frozenset(INT_COLUMNS), _negative, _negative),
            Rule(WRONG_TYPE, "{name} is out of range ({value})", frozenset(INT_COLUMNS), lambda v: v > MAX_INT, None),
        ),
    ),
    (
        FLOAT_COLUMNS,
        (
            Rule(NON_FINITE, "{name} is not a finite number ({value})", frozenset(FLOAT_COLUMNS),
                 lambda v: not math.isfinite(v), lambda c: ~c.is_finite()),
            Rule(NEGATIVE, "{name} is negative ({value})", frozenset(NON_NEGATIVE_FLOATS), _negative, _negative),
        ),
    ),
)  # fmt: skip


def accepted_exceeds_drafted(accepted: T, drafted: T) -> T:
    """More tokens accepted than drafted (``inconsistent``)."""
    return accepted > drafted


def accepted_exceeds_steps(accepted: T, steps: T, k: T) -> T:
    """More tokens accepted than k per verify step, ``accepted > steps · k`` (``inconsistent``):
    a step accepts at most the k tokens it drafted."""
    return accepted > steps * k


def request_contradiction(accepted: int, drafted: int | None, steps: int, k: int | None) -> str | None:
    """Why a finished request's counts contradict each other (``inconsistent``): more tokens
    accepted than drafted (:func:`accepted_exceeds_drafted`) or than k per verify step
    (:func:`accepted_exceeds_steps`); None when they agree or the count to check against is
    unknown (None). The request reader skips such a row with this sentence; the exporter drops it."""
    if drafted is not None and accepted_exceeds_drafted(accepted, drafted):
        return f"accepted tokens {accepted} above drafted {drafted}"
    if k is not None and accepted_exceeds_steps(accepted, steps, k):
        return f"accepted tokens {accepted} above num_spec_tokens {k} per step over {steps} steps"
    return None


def longer_than_k(positions: T, k: T, reached_positions: T) -> T:
    """An accepted per-position list of ``positions`` longer than k, where no longer
    ``num_drafts_per_pos`` (``reached_positions`` long) says drafts reached past k (``inconsistent``)."""
    if isinstance(positions, pl.Expr):
        return positions > pl.max_horizontal(k, reached_positions)
    return positions > max(k, reached_positions)


def count_fault(value: Any) -> str:
    """The reason ``value`` is no count or timing (a bool, a string, a negative, NaN, …)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return WRONG_TYPE
    if not math.isfinite(value):
        return NON_FINITE
    return NEGATIVE if value < 0 else WRONG_TYPE


def check_record(record: dict[str, Any]) -> tuple[str, str] | None:
    """``(reason, why)`` when a typed steps row breaks an invariant, else None.

    Counts, timings and context lengths are non-negative, numbers finite, ``num_accepted_tokens`` at most
    ``num_draft_tokens``, the accepted per-position list no longer than k unless
    ``num_drafts_per_pos`` covers it, and the per-position counts agree with each other.
    """
    for columns, rules in COLUMN_RULES:
        for name in columns:
            value = record.get(name)
            if value is None:
                continue
            for rule in rules:
                if name in rule.columns and rule.bad(value):
                    return rule.reason, rule.why.format(name=name, value=value)
    for name in LIST_COLUMNS:
        values = record.get(name)
        for i, v in enumerate(values or []):
            if v is None:
                return WRONG_TYPE, f"{name}[{i}] is empty"
            if v < 0:
                return NEGATIVE, f"{name}[{i}] is negative ({v})"
            if v > MAX_INT:
                return WRONG_TYPE, f"{name}[{i}] is out of range ({v})"
    drafted, accepted = record.get("num_draft_tokens"), record.get("num_accepted_tokens")
    if drafted is not None and accepted is not None and accepted_exceeds_drafted(accepted, drafted):
        return INCONSISTENT, f"num_accepted_tokens ({accepted}) exceeds num_draft_tokens ({drafted})"
    k, per_pos, reached = (
        record.get(c) for c in ("num_spec_tokens", "num_accepted_tokens_per_pos", "num_drafts_per_pos")
    )
    if k is not None and per_pos is not None and longer_than_k(len(per_pos), k, len(reached or ())):
        return INCONSISTENT, f"num_accepted_tokens_per_pos has {len(per_pos)} positions, more than k ({k})"
    why = _per_position_contradiction(record)
    return (INCONSISTENT, why) if why else None


def _per_position_contradiction(record: dict[str, Any]) -> str | None:
    """Why the per-position counts of one record cannot be true, or None.

    Elements past the end of a list count as 0; a null list is not checked.
    """
    reached = record.get("num_drafts_per_pos")
    accepted = record.get("num_accepted_tokens_per_pos")
    tried = record.get("num_drafts_accepted_before_pos")
    drafts = record.get("num_drafts")
    if accepted is not None:
        # A token is accepted at position i only after positions 0..i-1 were: never rising.
        why = _rises("num_accepted_tokens_per_pos", accepted) or _exceeds_drafts(
            "num_accepted_tokens_per_pos", accepted, drafts
        )
        if why:
            return why
    if reached is not None:
        why = _rises("num_drafts_per_pos", reached) or _exceeds_drafts("num_drafts_per_pos", reached, drafts)
        if why:
            return why
        for i, a in enumerate(accepted or []):
            n = reached[i] if i < len(reached) else 0
            if a > n:
                return f"num_accepted_tokens_per_pos[{i}] ({a}) exceeds num_drafts_per_pos[{i}] ({n})"
    if tried is None:
        return None
    name = "num_drafts_accepted_before_pos"
    why = _rises(name, tried) or _exceeds_drafts(name, tried, drafts)
    if why:
        return why
    if reached is not None and (tried or reached):
        m0, n0 = (tried[0] if tried else 0), (reached[0] if reached else 0)
        if m0 != n0:
            return f"{name}[0] ({m0}) is not num_drafts_per_pos[0] ({n0})"
    for i, a in enumerate(accepted or []):
        m = tried[i] if i < len(tried) else 0
        if a > m:
            return f"num_accepted_tokens_per_pos[{i}] ({a}) exceeds {name}[{i}] ({m})"
    for i, m in enumerate(tried):
        if reached is not None:
            n = reached[i] if i < len(reached) else 0
            if m > n:
                return f"{name}[{i}] ({m}) exceeds num_drafts_per_pos[{i}] ({n})"
        if i and accepted is not None:
            a = accepted[i - 1] if i - 1 < len(accepted) else 0
            if m > a:
                return f"{name}[{i}] ({m}) exceeds num_accepted_tokens_per_pos[{i - 1}] ({a})"
    return None


def _rises(name: str, counts: list[int]) -> str | None:
    for i in range(1, len(counts)):
        if counts[i] > counts[i - 1]:
            return f"{name} rises at position {i} ({counts[i - 1]} then {counts[i]})"
    return None


def _exceeds_drafts(name: str, counts: list[int], drafts: int | None) -> str | None:
    if drafts is not None and counts and counts[0] > drafts:
        return f"{name}[0] ({counts[0]}) exceeds num_drafts ({drafts})"
    return None


#: Which per-position lists a frame holds and how many positions the checks must cover.
ListShape = tuple[int, frozenset[str]]
ALL_LISTS: ListShape = (MAX_CHECKED_POSITIONS, frozenset(LIST_COLUMNS))


def list_shape(frame: pl.LazyFrame | pl.DataFrame) -> ListShape:
    """The longest per-position list of ``frame`` (capped just past ``MAX_CHECKED_POSITIONS``;
    0 when no row has one) and the list columns holding a value in some row: checks of a list
    that is null everywhere would find nothing, and on millions of rows they cost seconds."""
    shape = (
        frame.lazy()
        .select(
            longest=pl.max_horizontal([pl.col(c).list.len().max() for c in LIST_COLUMNS]),
            **{c: pl.col(c).is_not_null().any() for c in LIST_COLUMNS},
        )
        .collect()
        .row(0, named=True)
    )
    present = frozenset(c for c in LIST_COLUMNS if shape[c])
    return (min(int(shape["longest"] or 0), MAX_CHECKED_POSITIONS + 1) if present else 0), present


def invalid(shape: ListShape = ALL_LISTS) -> pl.Expr:
    """Rows :func:`check_record` would reject, as one vectorised expression (per-position
    checks over the lists and positions of ``shape``: pass the frame's, :func:`list_shape`)."""
    bad = contradictory(shape)
    for _, rules in COLUMN_RULES:
        for rule in rules:
            if rule.expr is not None:
                for name in sorted(rule.columns):
                    bad = bad | rule.expr(pl.col(name))
    for name in shape[1]:
        bad = bad | pl.col(name).list.eval(pl.element().is_null().any()).list.first()
    bad = bad | accepted_exceeds_drafted(pl.col("num_accepted_tokens"), pl.col("num_draft_tokens"))
    if "num_accepted_tokens_per_pos" in shape[1]:
        k = pl.col("num_spec_tokens")
        reached = pl.col("num_drafts_per_pos").list.len().fill_null(0)
        bad = bad | (k.is_not_null() & longer_than_k(pl.col("num_accepted_tokens_per_pos").list.len(), k, reached))
    return bad.fill_null(False)


def contradictory(shape: ListShape = ALL_LISTS) -> pl.Expr:
    """Rows the per-position checks of :func:`check_record` would reject, as one vectorised
    expression, built only from the lists ``shape`` says are present (an absent list's checks
    are null, i.e. pass, anyway).

    Positions are compared up to ``MAX_CHECKED_POSITIONS``; a file with longer lists takes the
    line-by-line path.
    """
    positions, present = shape
    has_r = "num_drafts_per_pos" in present
    has_a = "num_accepted_tokens_per_pos" in present
    has_t = "num_drafts_accepted_before_pos" in present
    reached, accepted = pl.col("num_drafts_per_pos"), pl.col("num_accepted_tokens_per_pos")
    tried = pl.col("num_drafts_accepted_before_pos")
    drafts = pl.col("num_drafts")

    def at(column: pl.Expr, i: int) -> pl.Expr:
        return column.list.get(i, null_on_oob=True)

    def at_or_0(column: pl.Expr, i: int) -> pl.Expr:
        return at(column, i).fill_null(0)

    terms: list[pl.Expr] = []
    for has, column in ((has_r, reached), (has_a, accepted), (has_t, tried)):
        if has:
            terms += [column.list.min() < 0, column.list.first() > drafts]
    if has_r or has_t:
        longest = pl.max_horizontal(reached.list.len(), accepted.list.len(), tried.list.len()).fill_null(0)
        terms.append((reached.is_not_null() | tried.is_not_null()) & (longest > MAX_CHECKED_POSITIONS))
    if has_r and has_t:
        terms.append(reached.is_not_null() & tried.is_not_null() & (at_or_0(tried, 0) != at_or_0(reached, 0)))
    for i in range(min(positions, MAX_CHECKED_POSITIONS)):
        n, m = at(reached, i), at(tried, i)
        if i:
            terms += [n > at(reached, i - 1)] if has_r else []
            terms += [m > at(tried, i - 1)] if has_t else []
            terms += [at(accepted, i) > at(accepted, i - 1)] if has_a else []
            terms += [accepted.is_not_null() & (m > at_or_0(accepted, i - 1))] if has_a and has_t else []
        terms += [reached.is_not_null() & (at(accepted, i) > n.fill_null(0))] if has_r and has_a else []
        terms += [tried.is_not_null() & (at(accepted, i) > m.fill_null(0))] if has_t and has_a else []
        terms += [reached.is_not_null() & (m > n.fill_null(0))] if has_r and has_t else []
    return pl.any_horizontal(terms).fill_null(False) if terms else pl.lit(False)

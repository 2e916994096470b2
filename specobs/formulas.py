"""The core formulas of speculative decoding, each written once, for plain numbers and polars
expressions alike.

Every function here is one formula. Called with floats (or ints) it returns a float; called with
``pl.Expr`` it returns the expression that computes the same thing column-wise (and with numpy
arrays, element-wise). The ``*_or_none`` forms guard the denominator: ``None`` for numbers, a null
for expressions, never a division error. Everything else in specobs calls these instead of writing
the formula out again (``tests/project/test_formula_homes.py`` fails when one is).

Definitions (vLLM's conventions; ``D`` drafts, ``A`` accepted tokens):

- mean acceptance length  ``L = 1 + A / D`` (counts the bonus token)
  PromQL: ``1 + rate(vllm:spec_decode_num_accepted_tokens_total[5m]) / rate(vllm:spec_decode_num_drafts_total[5m])``
- tokens per step  ``E = 1 + q · Σ_{i<k} r_i`` (q: drafts per request-step, 1 by default;
  ``Σ r_i``: accepted tokens per draft)
- per-position counts of one draft drafted ``d`` long with ``a`` accepted: it is accepted past
  position i when ``a > i`` (``a_i``), reached it when ``d > i`` (``n_i``), and was tried there
  (reached it with every earlier position accepted: the trials of the conditional rate) when
  ``d > i`` and ``a >= i`` (``m_i``)
- draft acceptance rate  ``A / draft tokens``; draft tokens per draft  ``draft tokens / D``
- acceptance length of conditional rates ``c_j``: ``1 + Σ_{i<k} Π_{j≤i} c_j``
- cost ratio (Leviathan's c): draft seconds per drafted position over verify seconds per step

Imports only the standard library and polars (the bottom layer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar, overload

import polars as pl

if TYPE_CHECKING:
    import numpy as np

#: A number, a polars expression, or (for the vectorised change search) a numpy array.
T = TypeVar("T", float, pl.Expr, "np.ndarray")


# --- acceptance length and tokens per step ------------------------------------------------------


def acceptance_length(accepted: T, drafts: T) -> T:
    """Mean acceptance length ``1 + accepted / drafts`` (the bonus token counted), unguarded:
    a zero ``drafts`` divides by zero as the type does (use :func:`acceptance_length_or_none`
    where a row may have none).

    >>> acceptance_length(7, 4)
    2.75
    """
    return 1 + accepted / drafts


@overload
def acceptance_length_or_none(accepted: pl.Expr, drafts: pl.Expr) -> pl.Expr: ...
@overload
def acceptance_length_or_none(accepted: float | None, drafts: float | None) -> float | None: ...
def acceptance_length_or_none(
    accepted: float | pl.Expr | None, drafts: float | pl.Expr | None
) -> float | pl.Expr | None:
    """:func:`acceptance_length` where ``drafts > 0``; else None (numbers) or null (expressions).

    >>> acceptance_length_or_none(3, 0) is None
    True
    """
    if isinstance(drafts, pl.Expr) or isinstance(accepted, pl.Expr):
        d, a = _expr(drafts), _expr(accepted)
        return pl.when(d > 0).then(acceptance_length(a, d))
    if accepted is None or drafts is None or not drafts > 0:
        return None
    return acceptance_length(accepted, drafts)


def tokens_per_step(accepted_per_draft: T, drafts_per_step: T | None = None) -> T:
    """Tokens one request gains per verify step: ``1 + q · Σ_{i<k} r_i`` with ``accepted_per_draft``
    = Σ r_i and ``drafts_per_step`` = q (drafts per request-step; omitted: every step drafts).
    With q omitted it is the acceptance length of drafts that accept ``accepted_per_draft``.

    >>> tokens_per_step(1.5), tokens_per_step(1.5, 0.5)
    (2.5, 1.75)
    """
    if drafts_per_step is None:
        return 1 + accepted_per_draft
    return 1 + drafts_per_step * accepted_per_draft


def tokens_per_step_of_rates(rates: Sequence[float], k: int | None = None) -> float:
    """:func:`tokens_per_step` of per-position rates ``r_i``, drafting stopped after ``k`` of them
    (all when None): ``1 + Σ_{i<k} r_i``.

    >>> tokens_per_step_of_rates([0.5, 0.25, 0.125], 2)
    1.75
    """
    return tokens_per_step(sum(rates if k is None else rates[:k]))


def tokens_per_step_from_totals(generated: float, accepted: float) -> float:
    """Tokens per verify step from a run's totals: ``generated / (generated − accepted)`` (every
    step emits one token of its own, so the steps are the tokens not accepted from a draft).

    >>> tokens_per_step_from_totals(30, 20)
    3.0
    """
    return generated / (generated - accepted)


def acceptance_length_of_conditional(conditional: Sequence[float], k: int | None = None) -> float:
    """The acceptance length of drafts ``k`` long (all of ``conditional`` when None) from
    conditional rates ``c_j``: ``1 + Σ_{i<k} Π_{j≤i} c_j`` (position i is reached with every
    earlier one accepted, so its per-position rate is the running product).

    >>> acceptance_length_of_conditional([0.5, 0.5, 0.5], 2)
    1.75
    """
    total, reach = 1.0, 1.0
    for c in conditional if k is None else conditional[:k]:
        reach *= c
        total += reach
    return total


def acceptance_rate(accepted: T, draft_tokens: T) -> T:
    """The draft acceptance rate ``accepted / draft_tokens`` (accepted tokens over draft tokens,
    vLLM's ``Draft acceptance rate``), unguarded (see :func:`acceptance_rate_or_none`).

    >>> acceptance_rate(3, 4)
    0.75
    """
    return accepted / draft_tokens


@overload
def acceptance_rate_or_none(accepted: pl.Expr, draft_tokens: pl.Expr) -> pl.Expr: ...
@overload
def acceptance_rate_or_none(accepted: float | None, draft_tokens: float | None) -> float | None: ...
def acceptance_rate_or_none(
    accepted: float | pl.Expr | None, draft_tokens: float | pl.Expr | None
) -> float | pl.Expr | None:
    """:func:`acceptance_rate` where ``draft_tokens > 0``; else None (numbers) or null (expressions).

    >>> acceptance_rate_or_none(3, 0) is None
    True
    """
    if isinstance(accepted, pl.Expr) or isinstance(draft_tokens, pl.Expr):
        return rate_or_none(_expr(accepted), _expr(draft_tokens))
    if accepted is None or draft_tokens is None:
        return None
    return rate_or_none(accepted, draft_tokens)


def tokens_per_draft(draft_tokens: T, drafts: T) -> T:
    """Draft tokens per draft: ``draft_tokens / drafts`` (k for a drafter that always drafts k;
    less for a lookup that finds shorter matches), unguarded.

    >>> tokens_per_draft(10, 4)
    2.5
    """
    return draft_tokens / drafts


def rate_or_none(successes: T, trials: T) -> T | None:
    """``successes / trials`` where ``trials > 0``; None (numbers) or null (expressions) else:
    the draft acceptance rate (accepted / draft tokens), a per-position rate (a_i / n_i) or a
    conditional one (a_i / m_i)."""
    if isinstance(trials, pl.Expr) or isinstance(successes, pl.Expr):
        return pl.when(_expr(trials) > 0).then(_expr(successes) / _expr(trials))
    if trials is None or not trials > 0:
        return None
    return successes / trials


# --- per-position counts ----------------------------------------------------------------------


def accepted_past(accepted: T, position: int) -> T:
    """Whether a draft with ``accepted`` tokens accepted counts in ``a_i`` at 0-based ``position``:
    ``accepted > i`` (a bool, or a boolean expression)."""
    return accepted > position


def reached(drafted: T, position: int) -> T:
    """Whether a draft ``drafted`` tokens long reached ``position`` (counts in ``n_i``): ``drafted > i``."""
    return drafted > position


def tried(drafted: T, accepted: T, position: int) -> T:
    """Whether a draft was tried at ``position`` (counts in ``m_i``, the trials of the conditional
    rate): it reached it (``drafted > i``) with every earlier position accepted (``accepted >= i``)."""
    return (drafted > position) & (accepted >= position)


def trials(drafted: int, accepted: int) -> int:
    """Positions one draft was tried at: ``Σ_i`` :func:`tried` = ``min(accepted + 1, drafted)`` (≥ 0)."""
    return max(min(accepted + 1, drafted), 0)


def position_counts(lengths: Mapping[tuple[int, int], int], k: int) -> tuple[int, list[int], list[int], list[int]]:
    """Drafts and, per position, ``a_i``, ``n_i`` and ``m_i`` of drafts counted by length.

    ``lengths`` counts drafts by (drafted, accepted) length. Element i of the lists counts
    drafts accepted past i (:func:`accepted_past`), drafted past i (:func:`reached`), and drafted
    past i with positions 0..i-1 accepted (:func:`tried`). The lists are at least ``k`` long,
    longer when a draft is (a draft made at an earlier, larger k). Their sums are the drafts'
    accepted and drafted tokens.

    One histogram per list (drafts ending at each length), then one pass of suffix sums (the
    engine's hot path: a step has a handful of distinct pairs)::

        position_counts({(3, 1): 2, (2, 2): 1}, 3) == (3, [3, 1, 0], [3, 3, 2], [3, 3, 0])
    """
    positions = k
    for drafted, accepted in lengths:
        if drafted > positions:
            positions = drafted
        if accepted > positions:
            positions = accepted
    size = positions + 1
    accepted_len, drafted_len, tried_len = [0] * size, [0] * size, [0] * size
    drafts = 0
    for (drafted, accepted), count in lengths.items():
        drafts += count
        accepted_len[accepted] += count
        if accepted < drafted:  # rejected at position `accepted`: tried up to there
            drafted_len[drafted] += count
            tried_len[accepted + 1] += count
        else:  # all accepted: tried at every drafted position
            drafted = max(drafted, 0)
            drafted_len[drafted] += count
            tried_len[drafted] += count
    accepted_pos, drafts_pos, tried_pos = [0] * positions, [0] * positions, [0] * positions
    a = n = m = 0
    for i in range(positions - 1, -1, -1):  # element i: observations longer than i
        a += accepted_len[i + 1]
        n += drafted_len[i + 1]
        m += tried_len[i + 1]
        accepted_pos[i], drafts_pos[i], tried_pos[i] = a, n, m
    return drafts, accepted_pos, drafts_pos, tried_pos


def draft_position_counts(drafted: int, accepted: int, k: int) -> tuple[list[int], list[int], list[int]]:
    """:func:`position_counts` of a single draft: (``a_i``, ``n_i``, ``m_i``) as 0/1 lists, each
    ``max(k, drafted, accepted)`` long.

    >>> draft_position_counts(3, 1, 4)
    ([1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0])
    """
    length = max(k, drafted, accepted)
    tries = trials(drafted, accepted)
    return (
        [1] * accepted + [0] * (length - accepted),
        [1] * drafted + [0] * (length - drafted),
        [1] * tries + [0] * (length - tries),
    )


@overload
def per_position_rates(accepted_per_pos: pl.Expr, drafts: pl.Expr) -> pl.Expr: ...
@overload
def per_position_rates(accepted_per_pos: Sequence[int | None] | None, drafts: float | None) -> list[float]: ...
def per_position_rates(
    accepted_per_pos: Sequence[int | None] | pl.Expr | None, drafts: float | pl.Expr | None
) -> list[float] | pl.Expr:
    """``a_i / D`` for every position (a missing count is 0): an empty list without drafts, for
    numbers; a Float64 list where ``drafts > 0`` (else null), for expressions.

    >>> per_position_rates([3, 1, None], 4)
    [0.75, 0.25, 0.0]
    """
    if isinstance(accepted_per_pos, pl.Expr) or isinstance(drafts, pl.Expr):
        d = _expr(drafts)
        return pl.when(d > 0).then(_expr(accepted_per_pos).list.eval(pl.element().cast(pl.Float64)) / d)
    if not drafts:
        return []
    return [(a or 0) / drafts for a in (accepted_per_pos or [])]


# --- cost -------------------------------------------------------------------------------------


def draft_positions(draft_tokens: T, batch_size: T) -> T:
    """Drafted positions per request of a step: its draft tokens over its batch size. A drafter
    pass over the batch makes one position for every drafting request, so this counts the
    passes' positions (k for a batch that drafted k tokens each, whatever its size)."""
    return draft_tokens / batch_size


def cost_ratio(draft_seconds: T, positions: T, verify_seconds: T, verify_steps: T) -> T:
    """The cost ratio, Leviathan's c: draft seconds per drafted position per request
    (:func:`draft_positions`, summed) over verify seconds per step — what one drafter pass
    costs against one target forward. The one definition, for sums held as floats (the
    exporter's running totals) or as polars expressions (the report); the recording rule
    ``specobs:cost_ratio:rate5m`` writes it in PromQL."""
    return (draft_seconds / positions) / (verify_seconds / verify_steps)


def draft_share(draft_seconds: T, draft_steps: T, step_seconds: T, step_steps: T) -> T:
    """Share of step time spent drafting: mean draft seconds per step over mean step seconds
    (shown beside the cost ratio everywhere: the ratio prices a pass, the share says how much
    of the step drafting takes)."""
    return (draft_seconds / draft_steps) / (step_seconds / step_steps)


def _expr(value: object) -> pl.Expr:
    return value if isinstance(value, pl.Expr) else pl.lit(value)


__all__ = [
    "acceptance_length",
    "acceptance_length_of_conditional",
    "acceptance_length_or_none",
    "acceptance_rate",
    "acceptance_rate_or_none",
    "accepted_past",
    "cost_ratio",
    "draft_position_counts",
    "draft_positions",
    "draft_share",
    "per_position_rates",
    "position_counts",
    "rate_or_none",
    "reached",
    "tokens_per_draft",
    "tokens_per_step",
    "tokens_per_step_from_totals",
    "tokens_per_step_of_rates",
    "trials",
    "tried",
]

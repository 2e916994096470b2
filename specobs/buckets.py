"""Batch-size buckets: the one vocabulary every layer uses.

A bucket is a power-of-two range of batch sizes (running requests in a step): ``1``, ``2-3``,
``4-7``, ``8-15``, … Its bounds are ``(low, high)`` with ``low`` a power of two and ``high =
2·low − 1``; its label is ``"low-high"`` (``"1"`` for the first). The report groups by these
labels, the recommendation and ``specobs tune`` choose a k per bucket (vLLM's
``num_speculative_tokens_per_batch_size`` table takes the bounds, the last one ending at the
engine's largest batch), and the exporters publish them as the ``batch_size_bucket`` label
(bounded: up to :data:`LARGEST`, then ``2048+``; ``unknown`` without a batch size).

Context lengths are bucketed the same way (:func:`context_expr`: tokens in context, ``512-1023``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import polars as pl

#: The first bucket the exporters fold into one label (``2048+``): label values stay bounded.
LARGEST = 2048
#: The exporters' label for a step without a batch size.
UNKNOWN = "unknown"


def label(low: int, high: int) -> str:
    """The label of the bucket ``low``–``high``."""
    return str(low) if low == high else f"{low}-{high}"


#: Labels by the bucket's lowest batch size (a lookup is 4× faster than building strings).
_LABELS = {2**e: label(2**e, 2 ** (e + 1) - 1) for e in range(62)}
#: Every label the exporters can publish, in increasing batch size.
BOUNDED_LABELS = (*(_LABELS[2**e] for e in range(LARGEST.bit_length() - 1)), f"{LARGEST}+", UNKNOWN)


def low_of(batch_size: int) -> int:
    """The lowest batch size of the bucket holding ``batch_size`` (≥ 1)."""
    return 1 << (int(batch_size).bit_length() - 1)


def bounds_of(batch_size: int) -> tuple[int, int]:
    """``(low, high)`` of the bucket holding ``batch_size`` (≥ 1)."""
    low = low_of(batch_size)
    return low, 2 * low - 1


def label_of(batch_size: int | None) -> str | None:
    """The label of one batch size (None for an unknown or empty batch)."""
    if not batch_size or batch_size < 1:
        return None
    return _LABELS[low_of(batch_size)]


def bounded_label(batch_size: Any) -> str:
    """The exporters' label: :func:`label_of` up to ``LARGEST - 1``, then ``2048+``; ``unknown``
    for a missing, non-finite or non-positive batch size."""
    if type(batch_size) is not int and not (isinstance(batch_size, float) and math.isfinite(batch_size)):
        return UNKNOWN
    if batch_size < 1:
        return UNKNOWN
    if batch_size >= LARGEST:
        return BOUNDED_LABELS[-2]
    return _LABELS[low_of(int(batch_size))]


def expr(batch_size: pl.Expr) -> pl.Expr:
    """:func:`label_of` as a polars expression (null stays null)."""
    exponent = batch_size.clip(lower_bound=1).cast(pl.Float64).log(2).floor().cast(pl.Int64)
    return pl.lit(2, pl.Int64).pow(exponent).replace_strict(_LABELS, return_dtype=pl.String)


def context_expr(length: pl.Expr) -> pl.Expr:
    """The context-length bucket of a mean context length in tokens: the same power-of-two ranges
    (``256-511``, ``512-1023``, …) of tokens in context; null stays null (unknown, never 0)."""
    return expr(length.floor().cast(pl.Int64))


def spans(largest: int, *, capped: bool = True) -> list[tuple[int, int]]:
    """The buckets from 1 up to ``largest``, contiguous: ``capped`` ends the last at ``largest``
    (vLLM's table for an engine of that many sequences), else at its own ``high``."""
    out = []
    low = 1
    while low <= largest:
        out.append((low, min(2 * low - 1, largest) if capped else 2 * low - 1))
        low *= 2
    return out


def low_of_label(text: str) -> int:
    """The lowest batch size a label names (``"16-31"`` → 16, ``"2048+"`` → 2048)."""
    return int(text.split("-")[0].rstrip("+"))


def ordered(labels: Iterable[str | None]) -> list[str]:
    """Distinct labels in increasing batch size (``unknown`` last)."""
    known = {t for t in labels if t}
    return sorted(known, key=lambda t: (t == UNKNOWN, low_of_label(t) if t != UNKNOWN else 0))


__all__ = [
    "BOUNDED_LABELS",
    "LARGEST",
    "UNKNOWN",
    "bounded_label",
    "bounds_of",
    "context_expr",
    "expr",
    "label",
    "label_of",
    "low_of",
    "low_of_label",
    "ordered",
    "spans",
]

"""Column-wise helpers shared by the text parsers: cleaning, field extraction, timestamps,
process prefixes and the conversion of cumulative counters into per-interval windows.

Parsers work on a frame with one row per found line (``line`` number, ``text``) and add
columns with these expressions, so a million lines cost a few vectorised regex passes.
"""

from __future__ import annotations

import datetime as dt

import polars as pl

from specobs import schema

# Engines print numbers with %d / %.Nf (and "nan"); a simple class keeps the regexes on the fast path.
NUMBER = r"-?[\d.]+|nan|inf"

# Prefixes that several processes or containers put before vLLM's own "LEVEL MM-DD ..." prefix:
#   "(APIServer pid=3617069) ", "(EngineCore_DP0 pid=12) ", "vllm-1  | " (docker compose).
COMPOSE_SERVICE = r"^([A-Za-z][\w.-]*)\s+\|\s"
# A full date somewhere in the prefix: collector timestamps "2026-04-19 17:36:42.061 | ",
# SGLang's "[2026-07-21 15:00:13 TP0 EP0]" and Python logging's "2026-07-21 15:00:13,123".
FULL_DATE = r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
# Full dates are at the start of a line (after an optional compose service and "["); anchoring
# the regex keeps it fast on large inputs.
LEADING_FULL_DATE = r"^(?:[A-Za-z][\w.-]*\s+\|\s)?\[?(" + FULL_DATE + ")"


#: Markdown that wraps a line pasted into an issue or a chat (``**...**``, `` `...` ``, ``_..._``):
#: allowed after the line's last field, where it ends nothing but the markup.
MARKUP = r"[*_`]*"
#: A field ends at the next comma or at the end of the line (V0 ends its lines with a period),
#: where pasted markup may close the line.
END = r"(?:,|\.?" + MARKUP + r"\s*$)"
#: A number as engines print it with %d / %.Nf, or ``nan``; nothing else (no sign, exponent, ``inf``).
DECIMAL = r"(?:nan|[0-9]+(?:\.[0-9]+)?)"


def malformed(text: pl.Expr, checks: list[tuple[str, str]]) -> pl.Expr:
    """The first ``label: why`` for a field whose label is on the line but whose value does not
    match its anchored pattern (``checks`` are ``(label, pattern)``; null when all are fine).

    A record is taken whole or not at all, so such a line is skipped, never half-read.
    """
    out = pl.lit(None, pl.String)
    for label, pattern in reversed(checks):
        present = text.str.contains(label, literal=True)
        out = (
            pl.when(present & ~text.str.contains(pattern))
            .then(pl.lit(f"'{label}' is not followed by a complete number"))
            .otherwise(out)
        )
    return out


def field_int(text: pl.Expr, pattern: str) -> pl.Expr:
    """The first capture group of ``pattern`` as an integer (null when absent or not a number)."""
    return text.str.extract(pattern, 1).cast(pl.Int64, strict=False)


def field_float(text: pl.Expr, pattern: str) -> pl.Expr:
    """The first capture group of ``pattern`` as a float; ``nan`` and junk become null."""
    return text.str.extract(pattern, 1).cast(pl.Float64, strict=False).fill_nan(None)


def float_list(text: pl.Expr, pattern: str) -> pl.Expr:
    """A comma-separated list of numbers captured by ``pattern`` (``0.877, 0.807, nan``)."""
    return (
        text.str.extract(pattern, 1)
        .str.split(",")
        .list.eval(pl.element().str.strip_chars().cast(pl.Float64, strict=False).fill_nan(None))
    )


def reference_year(mtime: float | None) -> int:
    """The year assumed for vLLM's year-less timestamps: that of the file's last change."""
    moment = dt.datetime.fromtimestamp(mtime, dt.UTC) if mtime else dt.datetime.now(dt.UTC)
    return moment.year


def with_vllm_timestamp(lines: pl.DataFrame, *, year: int, reference: float | None) -> pl.DataFrame:
    """Add ``ts`` (unix seconds) from the ``stamp`` column (vLLM's ``MM-DD HH:MM:SS``), or
    from ``full_ts`` (a full date before it) where there is one.

    vLLM prints no year or zone. specobs reads the times as UTC in ``year`` (the year the
    file was last written); a jump back of more than half a year (December → January)
    moves the following lines into the next year, and when the last line would lie after
    the file was written, everything moves back one year.
    """

    def at(years: pl.Expr) -> pl.Expr:
        stamp = pl.concat_str([years.cast(pl.String), pl.lit("-"), pl.col("stamp")])
        parsed = stamp.str.to_datetime("%Y-%m-%d %H:%M:%S", time_unit="us", strict=False, cache=True)
        return parsed.dt.epoch("s").cast(pl.Float64)

    guess = lines.select(at(pl.lit(year))).to_series()
    rolled = ((guess - guess.forward_fill().shift(1)) < -183 * 86400).fill_null(False).cum_sum()
    latest = guess.max()  # a float, or None when no line has a time
    shift = -1 if reference is not None and isinstance(latest, float) and latest > reference + 2 * 86400 else 0
    if rolled.max() or shift:
        years = pl.lit(rolled, pl.Int64) + year + shift
        guess = lines.select(at(years)).to_series()
    full = pl.col("full_ts") if "full_ts" in lines.columns else pl.lit(None, pl.Float64)
    return lines.with_columns(ts=pl.coalesce(full, pl.lit(guess)))


def full_date_timestamp(text: pl.Expr) -> pl.Expr:
    """Unix seconds (UTC) from a full ``YYYY-MM-DD HH:MM:SS[.fff]`` at the start of the line."""
    return _full_date(text)


def _full_date(text: pl.Expr) -> pl.Expr:
    stamp = text.str.extract(LEADING_FULL_DATE, 1)
    parsed = (
        stamp.str.replace("T", " ", literal=True)
        .str.replace(",", ".", literal=True)
        .str.slice(0, 26)
        .str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S%.f", strict=False)
    )
    return parsed.dt.epoch("us").cast(pl.Float64) / 1e6


def windows_from_cumulative(frame: pl.DataFrame, keys: list[str], counters: list[str]) -> pl.DataFrame:
    """Turn running totals into per-interval differences, per ``keys``, in row order.

    A total that falls means the engine restarted: the window after a restart is the new
    total itself (counted from zero). The first row of each key is the total since the
    engine started, so its ``start_ts`` stays null.

    Example (one engine)::

        num_drafts  10, 25, 40, 5     (restart before the last row)
        window      10, 15, 15, 5
    """
    if frame.is_empty() or not counters:
        return frame.with_columns(start_ts=pl.lit(None, pl.Float64))
    over = keys or None
    previous = {c: pl.col(c).shift(1).over(over) if over else pl.col(c).shift(1) for c in counters}
    restart = pl.any_horizontal([pl.col(c) < previous[c] for c in counters]).fill_null(False)
    first = pl.int_range(pl.len()).over(over) == 0 if over else pl.int_range(pl.len()) == 0
    prev_end = pl.col("end_ts").shift(1).over(over) if over else pl.col("end_ts").shift(1)
    return frame.with_columns(
        [pl.when(first | restart).then(pl.col(c)).otherwise(pl.col(c) - previous[c]).alias(c) for c in counters]
        + [pl.when(first | restart).then(None).otherwise(prev_end).alias("start_ts")]
    )


def per_pos_list(frame: pl.DataFrame, prefix: str = "pos_") -> pl.Expr:
    """Pack columns ``pos_0, pos_1, ...`` into ``num_accepted_tokens_per_pos`` (null when all null)."""
    cols = sorted((c for c in frame.columns if c.startswith(prefix)), key=lambda c: int(c[len(prefix) :]))
    if not cols:
        return pl.lit(None, dtype=pl.List(pl.Int64)).alias("num_accepted_tokens_per_pos")
    packed = pl.concat_list([pl.col(c).cast(pl.Int64) for c in cols])
    return (
        pl.when(pl.all_horizontal([pl.col(c).is_null() for c in cols]))
        .then(None)
        .otherwise(packed)
        .alias("num_accepted_tokens_per_pos")
    )


def finish(frame: pl.DataFrame) -> pl.DataFrame:
    """Conform a parser's result to the windows schema."""
    return schema.conform(frame, schema.WINDOWS)

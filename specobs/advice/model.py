"""The throughput model: acceptance per position × measured cost → tokens/s at any (k, batch).

See docs/model.md for the math. In short, for a method with accepted share per allowed draft
u_i = a_i / A_i, drafts per request-step q and draft tokens per draft L(k) (measured at
measured k, ``f · k`` beyond them):

    tokens per request-step   E(k)   = 1 + q · Σ_{i<k} u_i
    tokens scored per request  s(k)   = 1 + q · L(k)
    step time                  t(k,B) = draft(k, B) + verify(B · s(k)) + overhead(B, B · s(k))
    throughput                 X(k,B) = B · E(k) / t(k,B)
    baseline                   X(0,B) = B / base(B)
        base(B): the plain engine (no speculative config) on the same model/platform/device;
        else this engine's k = 0 steps less their drafting; else verify(B) + overhead(B, B)
    a schedule's k = 0 range   B / off(B)  (the engine's own k = 0 steps: the k = 0 tax)

``verify`` is a hinge in tokens scored (flat-ish while memory-bound, steeper once compute-bound),
``draft`` follows the drafter's kind (autoregressive: ∝ k; parallel heads and lookups: flat in
k), ``overhead`` is linear in B (and in tokens scored, when k = 0 steps of the same engine
show how it grows). Each is fitted by least squares on per-configuration means of the steps
(means, not medians: throughput is total tokens over total time).
For k beyond the measured k, the acceptance of the extra positions is extrapolated from the
conditional rates and flagged.

Fits read :func:`step_blocks`, not rows: everything they need is a sum or a per-configuration value,
so merging the rows of one configuration into a bounded number of blocks changes no estimate
and makes a fit on ten million steps cost what one on a few thousand does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from specobs.analysis import acceptance
from specobs.analysis.acceptance import Term, grouped_terms
from specobs.analysis.cost import is_decode
from specobs.analysis.intervals import wilson_bounds
from specobs.formulas import tokens_per_draft, tokens_per_step
from specobs.records import Baseline, ModelNote, NoteKind

#: One drafter pass per drafted token. MTP is here: the models that ship it (DeepSeek-V3, MiMo,
#: Qwen3-Next, GLM, Gemma 4's assistant) have one MTP layer, which vLLM runs k times.
AUTOREGRESSIVE = {
    "draft_model", "eagle", "eagle3", "mlp_speculator",
    "mtp", "deepseek_mtp", "qwen3_next_mtp", "mimo_mtp", "glm4_moe_mtp", "ernie_mtp", "longcat_flash_mtp",
}  # fmt: skip
#: One pass for all k: parallel heads and block drafters.
PARALLEL = {"medusa", "dflash", "dspark"}
LOOKUP = {"ngram", "ngram_gpu", "suffix"}
#: With draft times at two or more k, a drafter whose time from the smallest to the largest
#: measured k grows by more than this share of what k ∝ cost would add is taken as one pass per
#: token; otherwise as flat in k.
GROWS_WITH_K = 0.25


def drafter_kind(method: str | None) -> str:
    if method in LOOKUP:
        return "lookup"
    if method in PARALLEL:
        return "parallel"
    return "autoregressive"  # the conservative default: cost grows with k


# --- blocks of steps --------------------------------------------------------------------------

#: Most blocks the rows of one configuration are merged into.
BLOCKS_PER_CONFIGURATION = 64
#: Columns whose nulls a fit tells apart (a block never mixes a known value with an unknown one).
_NULLABLE = (
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "num_accepted_tokens_per_pos",
    "num_drafts_per_pos",
    "num_drafts_accepted_before_pos",
    "num_generated_tokens",
    "draft_seconds",
    "verify_seconds",
    "step_seconds",
    "num_timed_steps",
)
_LISTS = ("num_accepted_tokens_per_pos", "num_drafts_per_pos", "num_drafts_accepted_before_pos")
_SUMMED = tuple(c for c in _NULLABLE if c not in _LISTS)
_PRINTED = ("reported_mean_acceptance_length", "reported_draft_acceptance_rate")


def _config_hash(config: Sequence[str]) -> pl.Expr:
    return acceptance.key_hash(config)


def step_blocks(frame: pl.DataFrame | pl.LazyFrame, labels: Sequence[str]) -> pl.DataFrame:
    """Step rows merged into blocks: consecutive rows of one configuration (``labels``, k, batch
    size, tokens scored, decode or not, which values are known), counters and times summed,
    ``num_rows`` counting them. At most :data:`BLOCKS_PER_CONFIGURATION` blocks per configuration
    and source (an input file); smaller ones keep one row per block. Rows that are not steps (log
    intervals, scrape pairs) merge the same way, consecutive intervals of their source; a row
    that carries only a printed rate (SGLang, V0 gauges) is a block alone, as its printed rate
    cannot be summed. A bootstrap over blocks is a block bootstrap over steps or intervals.
    """
    lazy = frame.lazy()
    names = lazy.collect_schema().names()
    if "num_rows" in names:
        return frame if isinstance(frame, pl.DataFrame) else frame.collect()
    if "generation_tokens_per_second" not in names:
        lazy = lazy.with_columns(generation_tokens_per_second=pl.lit(None, pl.Float64))
    nulls = pl.sum_horizontal([pl.col(c).is_null().cast(pl.Int64) * (1 << i) for i, c in enumerate(_NULLABLE)])
    scored = pl.coalesce(pl.col("num_scheduled_tokens"), pl.col("batch_size") + pl.col("num_draft_tokens").fill_null(0))
    # Tokens scored per step: for a step, or a timed window (the cost fit's points); an untimed
    # interval's draft tokens are the interval's sum, which would make each interval a
    # configuration of its own.
    timed = (pl.col("counters") == "step") | pl.any_horizontal(pl.col("verify_seconds", "step_seconds").is_not_null())
    scored = pl.when(timed.fill_null(False)).then(scored)
    config = [*labels, "num_spec_tokens", "batch_size", "scored", "decode", "nulls"]
    carried = [*config, "num_scheduled_tokens", *_PRINTED]
    index = pl.int_range(pl.len(), dtype=pl.Int64)
    # Grouping on one hash of the configuration is several times faster than on its columns. A
    # second, independent hash must agree within every block; if it does not (two configurations
    # share the first hash: odds ~n²/2⁶⁴), the merge is redone on the columns themselves.
    positions = int(lazy.select(pl.max_horizontal(pl.col(c).list.len().max() for c in _LISTS)).collect().item() or 0)
    keyed = lazy.with_columns(scored.alias("scored"), is_decode().alias("decode"), nulls.alias("nulls")).with_columns(
        _config_hash(config).alias("config_hash"),
        acceptance.key_hash(config, seed=1).alias("config_check"),
        index.alias("first_row"),
    )

    def merge(keys: list[str]) -> pl.DataFrame:
        # Blocks within one source: consecutive steps of one engine's capture, never a block
        # that joins the end of one file to the start of another (so each input file, or part of
        # a partitioned folder, makes its blocks alone).
        # Intervals merge as steps do (a long log's bootstrap then resamples blocks, not each of
        # its hundreds of thousands of intervals), except a row whose counts are unknown and whose
        # acceptance is a printed rate: that rate cannot be summed, so the row stays alone.
        printed_only = (
            pl.any_horizontal(pl.col(_PRINTED).is_not_null())
            & pl.any_horizontal(pl.col("num_drafts", "num_accepted_tokens", "num_draft_tokens").is_null())
        ).alias("_printed_only")
        within = [*keys, "source", "_printed_only"]
        block = pl.when(~pl.col("_printed_only")).then(
            index.over(within) * BLOCKS_PER_CONFIGURATION // pl.len().over(within)
        ).otherwise(-1 - index)  # fmt: skip

        def at(name: str, i: int) -> pl.Expr:
            return pl.col(name).list.get(i, null_on_oob=True)

        terms = [
            Term("first_row", pl.col("first_row"), "min"),
            Term("check_min", pl.col("config_check"), "min"),
            Term("check_max", pl.col("config_check"), "max"),
            Term("num_rows", None, "len"),
            Term("start_ts", pl.col("start_ts"), "min"),
            Term("end_ts", pl.col("end_ts"), "max"),
            Term("num_drafts_derived", pl.col("num_drafts_derived"), "any"),
            *[Term(c, pl.col(c), "sum") for c in _SUMMED],
            # A served interval's own throughput: its count, sum and sum of squares, so that the
            # mean and spread per configuration and batch size come from blocks too (``served``).
            Term("throughput_n", pl.col("generation_tokens_per_second"), "count"),
            Term("throughput_sum", pl.col("generation_tokens_per_second"), "sum"),
            Term("throughput_sumsq", pl.col("generation_tokens_per_second") ** 2, "sum"),
            *[Term(f"{c}_len", pl.col(c).list.len(), "max") for c in _LISTS],
            *[Term(f"{c}_{i}", at(c, i), "sum") for c in _LISTS for i in range(positions)],
        ]
        blocked = keyed.with_columns(printed_only).with_columns(block.alias("block"))
        steps = (
            grouped_terms(blocked.filter(pl.col("block") >= 0), [*within, "block"], terms)
            .with_columns(collided=pl.col("check_min") != pl.col("check_max"))
            .select(pl.exclude(*config, "config_hash", "source", "_printed_only", "block", "check_min", "check_max"))
        )
        # A row with a printed rate is a block of its own: its values are its block's sums.
        others = blocked.filter(pl.col("block") < 0).select(
            *[t.of_one_row() for t in terms if t.name not in ("check_min", "check_max")], collided=pl.lit(False)
        )
        return pl.concat([steps, others]).sort("first_row").collect()

    merged = merge(["config_hash"])
    if merged["collided"].any():
        merged = merge(config)
    # Labels and the other per-configuration values: from each block's first row.
    firsts = (
        keyed.filter(pl.col("first_row").is_in(merged["first_row"].implode())).select(*carried, "counters").collect()
    )  # in first_row order, as ``merged``
    known = {c: (pl.col("nulls") & (1 << i)) == 0 for i, c in enumerate(_NULLABLE)}

    def summed_list(name: str) -> pl.Expr:
        if not positions:
            return pl.lit([], pl.List(pl.Int64))
        return pl.concat_list([f"{name}_{i}" for i in range(positions)]).list.head(pl.col(f"{name}_len"))

    return (
        pl.concat([firsts, merged], how="horizontal")
        .with_columns(
            *[pl.when(known[c]).then(pl.col(c)).alias(c) for c in _SUMMED],
            *[pl.when(known[c]).then(summed_list(c)).alias(c) for c in _LISTS],
            # A printed rate is one interval's: a block of several has its counts instead.
            *[pl.when(pl.col("num_rows") == 1).then(pl.col(c)).alias(c) for c in _PRINTED],
        )
        .drop(
            "collided",
            "first_row",
            *[f"{c}_len" for c in _LISTS],
            *[f"{c}_{i}" for c in _LISTS for i in range(positions)],
        )
    )


# --- acceptance ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Acceptance:
    """Per-position acceptance of one method, and how often and how long requests draft.

    ``rates`` are accepted shares per draft that *could* reach the position (its k exceeded
    i): ``u_i = a_i / drafts with k > i``. Mixing steps of several k cannot bias them, and a
    draft cut short (ngram finding a shorter match) counts as not accepted there, as it is.
    ``draft_lengths`` holds the measured draft tokens per draft at each measured k.
    """

    rates: tuple[float, ...]
    conditional_tail: float  # β used for positions beyond the measured k
    conditional_tail_low: float
    conditional_tail_high: float
    drafts_per_request_step: float = 1.0  # q over every k
    draft_lengths: tuple[tuple[int, float], ...] = ()  # (k, draft tokens per draft) as measured
    drafts_per_request_step_by_k: tuple[tuple[int, float], ...] = ()  # (k, q) as measured
    rates_low: tuple[float, ...] = ()  # 95% Wilson bounds of ``rates`` (empty: unknown)
    rates_high: tuple[float, ...] = ()

    @property
    def measured_k(self) -> int:
        return len(self.rates)

    @property
    def fill(self) -> float:
        """Draft tokens per draft over k at the largest measured k (1 for full-length drafters)."""
        if not self.draft_lengths:
            return 1.0
        k, length = max(self.draft_lengths)
        return min(max(length / k, 0.0), 1.0) if k else 1.0

    def accepted_per_draft(self, k: int, bound: str = "mid") -> float:
        """Σ_{i<k} u_i; beyond the measured k, u continues as u_{K−1}·β^j (``bound``: low/mid/high β)."""
        rates = self.rates
        if k <= len(rates):
            return float(sum(rates[:k]))
        beta = {"low": self.conditional_tail_low, "high": self.conditional_tail_high}.get(bound, self.conditional_tail)
        last = rates[-1] if rates else 0.0
        extra = sum(last * beta**j for j in range(1, k - len(rates) + 1))
        return float(sum(rates)) + extra

    def accepted_per_draft_bounds(self, k: int) -> tuple[float, float]:
        """Σ_{i<k} u_i at the low and high ends of each measured rate's interval, continued
        beyond the measured k with the low and high conditional tail: the sampling and the
        extrapolation uncertainty of tokens per draft."""
        low_rates, high_rates = self.rates_low or self.rates, self.rates_high or self.rates
        low = replace(self, rates=low_rates, conditional_tail=self.conditional_tail_low)
        high = replace(self, rates=high_rates, conditional_tail=self.conditional_tail_high)
        return low.accepted_per_draft(k), high.accepted_per_draft(k)

    @property
    def drafts_measured(self) -> bool:
        """Whether q (drafts per request-step) was measured; when not, it is taken as 1."""
        return bool(self.drafts_per_request_step_by_k)

    def draft_length(self, k: int) -> float:
        """Draft tokens per draft at k: measured where k was measured, else k × the fill of the
        nearest measured k (draft-model drafts are always k long; lookups are often shorter)."""
        if k <= 0:
            return 0.0
        lengths = dict(self.draft_lengths)
        if k in lengths:
            return lengths[k]
        if not lengths:
            return float(k)
        nearest = min(lengths, key=lambda m: (abs(m - k), -m))
        return k * min(lengths[nearest] / nearest, 1.0)

    def drafts_at(self, k: int) -> float:
        """q at k: measured there, else at the nearest measured k (a lookup drafter finds a
        match less often at larger k on looping text), else over all k."""
        by_k = dict(self.drafts_per_request_step_by_k)
        if k in by_k or not by_k:
            return by_k.get(k, self.drafts_per_request_step)
        return by_k[min(by_k, key=lambda m: (abs(m - k), -m))]

    def tokens_per_request_step(self, k: int, bound: str = "mid") -> float:
        return tokens_per_step(self.accepted_per_draft(k, bound), self.drafts_at(k)) if k else 1.0

    def scored_per_request_step(self, k: int) -> float:
        return 1.0 + self.drafts_at(k) * self.draft_length(k) if k else 1.0


def fit_acceptance(steps: pl.DataFrame) -> Acceptance | None:
    """From the speculative steps (windows or :func:`step_blocks`) of one method: rates, tail β, q and draft lengths."""
    return fit_acceptance_groups(steps, ()).get(())


#: The values of a grouping's ``by`` columns, in order (``()`` without grouping).
GroupKey = tuple[Any, ...]


def fit_acceptance_groups(steps: pl.DataFrame, by: Sequence[str]) -> dict[GroupKey, Acceptance]:
    """:func:`fit_acceptance` per value of the columns ``by`` (batch size, a resample's
    number…), keyed by the tuple of values, from one grouped pass; groups with a null key or
    without per-position counts are left out."""
    steps = step_blocks(steps, ())
    q = _drafts_per_request_step(steps, by)
    q_by_k: dict[GroupKey, list[tuple[int, float]]] = {}
    for key, value in _drafts_per_request_step(
        steps.filter(pl.col("num_spec_tokens") > 0), [*by, "num_spec_tokens"]
    ).items():
        q_by_k.setdefault(key[:-1], []).append((int(key[-1]), value))
    lengths = _draft_lengths(steps, by)
    out: dict[GroupKey, Acceptance] = {}
    for row in acceptance.summarize(steps, by=(), columns=by).iter_rows(named=True):
        key = tuple(row[c] for c in by)
        fitted = None if None in key else _acceptance_from(row, q.get(key, 1.0), lengths.get(key, ()))
        if fitted is not None:
            out[key] = replace(fitted, drafts_per_request_step_by_k=tuple(sorted(q_by_k.get(key, []))))
    return out


def _draft_lengths(steps: pl.DataFrame, by: Sequence[str]) -> dict[GroupKey, tuple[tuple[int, float], ...]]:
    """Draft tokens per draft at each k, per value of ``by``."""
    known = steps.filter(
        (pl.col("num_spec_tokens") > 0) & (pl.col("num_drafts") > 0) & pl.col("num_draft_tokens").is_not_null()
    )
    rows = known.group_by([*by, "num_spec_tokens"]).agg(
        length=tokens_per_draft(pl.col("num_draft_tokens").sum(), pl.col("num_drafts").sum())
    )
    out: dict[GroupKey, list[tuple[int, float]]] = {}
    for row in rows.iter_rows(named=True):
        out.setdefault(tuple(row[c] for c in by), []).append((int(row["num_spec_tokens"]), float(row["length"])))
    return {key: tuple(sorted(v)) for key, v in out.items()}


def _acceptance_from(summary: Mapping[str, Any], q: float, lengths: tuple[tuple[int, float], ...]) -> Acceptance | None:
    accepted = summary.get("num_accepted_tokens_per_pos")
    allowed = summary.get("num_drafts_allowed_per_pos")
    if not accepted or not allowed:
        return None
    rates = [(a or 0) / n if n else 0.0 for a, n in zip(accepted, allowed, strict=False)]
    # Conditional rates of u: successes a_i, trials a_{i−1} scaled to the drafts allowed at i.
    trials = [allowed[0] or 0] + [
        (accepted[i - 1] or 0) * (allowed[i] or 0) / allowed[i - 1] if allowed[i - 1] else 0.0
        for i in range(1, len(accepted))
    ]
    supported = [i for i, n in enumerate(trials) if n >= acceptance.MIN_SUPPORT]
    tail = supported[-min(3, len(supported)) :] if supported else []
    if tail:
        beta = float(np.mean([(accepted[i] or 0) / trials[i] for i in tail]))
        bounds = [wilson_bounds(accepted[i] or 0, trials[i]) for i in tail]
        beta_low = float(min(b[0] for b in bounds))
        beta_high = float(max(b[1] for b in bounds))
    else:
        beta = beta_low = beta_high = 0.0
    bounds = [wilson_bounds(a or 0, n) if n else (0.0, 1.0) for a, n in zip(accepted, allowed, strict=False)]
    return Acceptance(
        tuple(rates), beta, beta_low, beta_high, q, lengths,
        rates_low=tuple(b[0] for b in bounds), rates_high=tuple(b[1] for b in bounds),
    )  # fmt: skip


def request_steps() -> pl.Expr:
    """Request-steps a row (a block of steps, or an interval) stands for: batch size × steps for
    steps; for an interval of a log or scrape, its generated tokens less its accepted draft
    tokens (every request-step yields one token besides what it accepts); null when unknown."""
    of_steps = pl.col("batch_size") * pl.col("num_rows")
    of_interval = pl.col("num_generated_tokens") - pl.col("num_accepted_tokens")
    return pl.when(pl.col("counters") == "step").then(of_steps).otherwise(of_interval)


def _drafts_per_request_step(steps: pl.DataFrame, by: Sequence[str]) -> dict[GroupKey, float]:
    """q per value of ``by``: drafts per request per decode step (lookup drafters skip requests
    without a match); groups where it is unknown are left out (the caller's default is 1).

    Steps count their request-steps directly; intervals count them from their generated tokens
    (:func:`request_steps`), prefill steps included: their share is small on long outputs.
    """
    is_step = pl.col("counters") == "step"
    known = pl.col("num_drafts").is_not_null() & request_steps().is_not_null() & (request_steps() > 0)
    rows = steps.filter(known & (pl.col("decode") | ~is_step) & (pl.col("batch_size") > 0).fill_null(~is_step))
    if rows.is_empty():
        return {}
    q = (pl.col("num_drafts").sum() / request_steps().sum()).clip(0.0, 1.0).alias("q")
    out = rows.group_by(list(by)).agg(q) if by else rows.select(q)
    return {tuple(row[c] for c in by): float(row["q"]) for row in out.iter_rows(named=True) if row["q"] is not None}


# --- cost -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hinge:
    """y = a + b·x + c·max(0, x − knee): flat-ish, then steeper (memory- then compute-bound)."""

    a: float
    b: float
    c: float = 0.0
    knee: float = 0.0

    def __call__(self, x: float) -> float:
        return self.a + self.b * x + self.c * max(0.0, x - self.knee)


def fit_hinge(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> Hinge:
    """Least squares on relative error over a fine grid of knees; slopes kept non-negative.

    Relative error, because throughput predictions need small steps as right as large ones;
    a grid finer than the data, because the knee usually lies between measured points.
    """
    w = np.ones_like(y) if w is None else w
    w = w / np.maximum(y, 1e-9) ** 2
    best: tuple[float, Hinge] | None = None
    distinct = np.unique(x)
    candidates: list[float | None] = [None]
    if len(distinct) > 3:
        candidates += list(np.geomspace(max(distinct[1], 1e-9), distinct[-2], 60))
    for knee in candidates:
        cols = [np.ones_like(x), x] + ([np.maximum(0.0, x - knee)] if knee is not None else [])
        coef = _nonneg_lstsq(np.column_stack(cols), y, w, nonneg_from=1)
        pred = np.column_stack(cols) @ coef
        sse = float(np.sum(w * (y - pred) ** 2))
        if knee is not None:
            sse *= 1.05  # a knee must earn its keep
        model = Hinge(float(coef[0]), float(coef[1]), float(coef[2]) if knee is not None else 0.0, float(knee or 0))
        if best is None or sse < best[0]:
            best = (sse, model)
    assert best is not None
    return best[1]


def _nonneg_lstsq(a: np.ndarray, y: np.ndarray, w: np.ndarray, nonneg_from: int = 0) -> np.ndarray:
    """Weighted least squares; coefficients from ``nonneg_from`` on are clipped at 0 by refitting."""
    sw = np.sqrt(w)
    active = list(range(a.shape[1]))
    while True:
        coef_active, *_ = np.linalg.lstsq(a[:, active] * sw[:, None], y * sw, rcond=None)
        coef = np.zeros(a.shape[1])
        coef[active] = coef_active
        negative = [j for j in active if j >= nonneg_from and coef[j] < 0]
        if not negative:
            return coef
        active.remove(negative[0])


@dataclass(frozen=True)
class DraftCost:
    """draft(k, B) seconds per step: d0 + d1·B + d2·k + d3·k·B (unused terms are 0)."""

    d0: float
    d1: float
    d2: float
    d3: float

    def __call__(self, k: int, batch: float) -> float:
        return 0.0 if k == 0 else max(self.d0 + self.d1 * batch + self.d2 * k + self.d3 * k * batch, 0.0)


@dataclass(frozen=True)
class Overhead:
    """Step time outside draft and verify: o0 + o1·B + o2·T (T = tokens scored)."""

    o0: float
    o1: float
    o2: float = 0.0

    def __call__(self, batch: float, tokens: float) -> float:
        return self.o0 + self.o1 * batch + self.o2 * tokens


@dataclass(frozen=True)
class CostModel:
    """Fitted step-time parts of one method on one platform, the plain-decoding step time and
    the step time of its own engine with drafting switched off (k = 0 in a schedule)."""

    verify: Hinge
    draft: DraftCost
    overhead: Overhead
    base: Hinge | None  # plain step time in batch size; None: verify + overhead
    kind: str
    notes: tuple[ModelNote, ...] = field(default_factory=tuple)
    off: Hinge | None = None  # k = 0 step time of the speculative engine, when measured
    baseline: Baseline = Baseline.PLAIN

    def spec_step_seconds(self, k: int, batch: float, acc: Acceptance) -> float:
        scored = batch * acc.scored_per_request_step(k)
        return self.draft(k, batch) + self.verify(scored) + self.overhead(batch, scored)

    def base_step_seconds(self, batch: float) -> float:
        if self.base is not None:
            return self.base(batch)
        return self.verify(batch) + self.overhead(batch, batch)

    def off_step_seconds(self, batch: float) -> float:
        """A k = 0 step of the speculative engine: measured, else plain plus the k-independent
        part of drafting (the proposer still runs)."""
        if self.off is not None:
            return self.off(batch)
        return self.base_step_seconds(batch) + max(self.draft.d0 + self.draft.d1 * batch, 0.0)


def _means(frame: pl.DataFrame, keys: list[str], value: str) -> tuple[np.ndarray, ...]:
    """Per ``keys``: the mean per step of ``value`` (total time over timed steps) and the rows behind it.

    Robust because the rows come through :func:`specobs.analysis.cost.steady_state`: warm-up
    and outlier steps carry no timing, so these are trimmed means.
    """
    steps = pl.coalesce("num_timed_steps", "num_rows").filter(pl.col(value).is_not_null())
    grouped = (
        frame.group_by(keys)
        .agg((pl.col(value).sum() / steps.sum()).alias("y"), pl.col("num_rows").sum().alias("n"))
        .filter(pl.col("y").is_not_null())
        .sort(keys)
    )
    return (*(grouped[k].to_numpy().astype(float) for k in keys), grouped["y"].to_numpy(), grouped["n"].to_numpy())


def _timed_decode(frame: pl.DataFrame | None, value: str = "step_seconds") -> pl.DataFrame | None:
    if frame is None:
        return None
    frame = step_blocks(frame, ())
    frame = frame.filter(pl.col(value).is_not_null() & pl.col("batch_size").is_not_null() & pl.col("decode"))
    return None if frame.is_empty() else frame


def fit_cost(
    spec: pl.DataFrame, plain: pl.DataFrame | None, method: str | None, off: pl.DataFrame | None = None
) -> CostModel | None:
    """Fit the cost model from timed speculative steps, the plain engine's steps (``plain``)
    and the same engine's k = 0 steps (``off``), when there are any."""
    timed_spec = _timed_decode(spec, "verify_seconds")
    if timed_spec is None:
        return None
    spec = timed_spec
    plain, off = _timed_decode(plain), _timed_decode(off)
    notes: list[ModelNote] = []
    weights = ("num_timed_steps", "num_rows")
    # Verification and overhead come from the speculative engine itself when it has k = 0 steps
    # (they show how both grow with tokens; another engine's speed is not this one's). Without
    # them the plain engine's steps join the verify fit: the only k = 0 evidence there is.
    own = [f for f in (spec, off) if f is not None]
    verify_from = own if off is not None else [spec, *([plain] if plain is not None else [])]
    verify_frames = [
        f.filter(pl.col("verify_seconds").is_not_null()).select("scored", "verify_seconds", *weights)
        for f in verify_from
    ]
    x, y, n = _means(pl.concat(verify_frames), ["scored"], "verify_seconds")
    verify = fit_hinge(x, y, n)

    kind = drafter_kind(method)
    timed = spec.filter(pl.col("draft_seconds").is_not_null() & (pl.col("num_spec_tokens") > 0))
    if timed.is_empty():
        draft = DraftCost(0.0, 0.0, 0.0, 0.0)
        notes.append(ModelNote(NoteKind.NO_DRAFT_TIMING))
    else:
        k, b, d, n = _means(timed, ["num_spec_tokens", "batch_size"], "draft_seconds")
        if len(np.unique(k)) >= 2:
            cols = np.column_stack([np.ones_like(b), b, k, k * b])
            coef = _nonneg_lstsq(cols, d, n)
            draft = DraftCost(*map(float, coef))
            measured, note = _measured_kind(draft, k, b, n, kind)
            kind = measured
            notes.append(note)
        elif kind == "autoregressive":  # one k: cost per drafted token grows with batch, × k
            coef = _nonneg_lstsq(np.column_stack([b * k, k]), d, n)
            draft = DraftCost(0.0, 0.0, float(coef[1]), float(coef[0]))
            notes.append(ModelNote(NoteKind.DRAFT_SCALED, drafter=kind, k_low=int(k[0])))
        else:
            coef = _nonneg_lstsq(np.column_stack([np.ones_like(b), b]), d, n)
            draft = DraftCost(float(coef[0]), float(coef[1]), 0.0, 0.0)
            notes.append(ModelNote(NoteKind.DRAFT_FLAT, drafter=kind, k_low=int(k[0])))

    rest = (pl.col("step_seconds") - pl.col("verify_seconds") - pl.col("draft_seconds").fill_null(0.0)).alias("rest")
    parts = [
        f.filter(pl.col("step_seconds").is_not_null() & pl.col("verify_seconds").is_not_null()).select(
            "batch_size", "scored", rest, *weights
        )
        for f in own
    ]
    b, t, r, n = _means(pl.concat(parts, how="vertical_relaxed"), ["batch_size", "scored"], "rest")
    grows = off is not None
    features = [np.ones_like(b), b] + ([t] if grows else [])
    coef = _nonneg_lstsq(np.column_stack(features), r, n, nonneg_from=1)
    overhead = Overhead(float(coef[0]), float(coef[1]), float(coef[2]) if grows else 0.0)

    off_model = _step_model(off, "step_seconds") if off is not None else None
    if plain is not None:
        base_model, baseline = _step_model(plain, "step_seconds"), Baseline.PLAIN
    elif off is not None:
        plain_like = off.with_columns(
            plain_seconds=pl.col("step_seconds") - pl.col("draft_seconds").fill_null(0.0)
        ).filter(pl.col("plain_seconds") > 0)
        base_model, baseline = _step_model(plain_like, "plain_seconds"), Baseline.OFF_MINUS_DRAFT
    else:
        base_model, baseline = None, Baseline.VERIFY
    if baseline != Baseline.PLAIN:
        notes.append(ModelNote(NoteKind.NO_PLAIN_ENGINE, baseline=baseline))
    return CostModel(verify, draft, overhead, base_model, kind, tuple(notes), off_model, baseline)


def _measured_kind(
    draft: DraftCost, k: np.ndarray, b: np.ndarray, n: np.ndarray, default: str
) -> tuple[str, ModelNote]:
    """The drafter kind the fitted draft time shows across the measured k (at the steps'
    typical batch size), and the note the assumptions word. A lookup stays a lookup."""
    k_low, k_high = int(k.min()), int(k.max())
    batch = float(np.average(b, weights=n))
    low, high = draft(k_low, batch), draft(k_high, batch)
    proportional = low * (k_high / k_low - 1)  # what one pass per token would add
    grows = proportional > 0 and (high - low) > GROWS_WITH_K * proportional
    kind = default if default == "lookup" else "autoregressive" if grows else "parallel"
    note = ModelNote(
        NoteKind.DRAFT_MEASURED, drafter=default, measured_drafter=kind, k_low=k_low, k_high=k_high, batch=batch,
        growth=high / low if low > 0 else None, grows=bool(grows),
    )  # fmt: skip
    return kind, note


def _step_model(frame: pl.DataFrame, value: str) -> Hinge:
    """Step time against batch size: a line for few batch sizes, a hinge for more."""
    b, s, n = _means(frame, ["batch_size"], value)
    return _linear(b, s, n) if len(b) < 4 else fit_hinge(b, s, n)


def _linear(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> Hinge:
    if len(x) == 1:
        return Hinge(float(y[0]), 0.0)
    coef = _nonneg_lstsq(np.column_stack([np.ones_like(x), x]), y, w, nonneg_from=1)
    return Hinge(float(coef[0]), float(coef[1]))


# --- predictions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    method: str | None
    k: int
    batch_size: float
    tokens_per_second: float
    speedup: float
    tokens_per_step: float
    step_seconds: float
    extrapolated: bool


def predict(acc: Acceptance, cost: CostModel, k: int, batch: float, method: str | None = None) -> Prediction:
    """Throughput and speedup over plain decoding at k and batch size (k = 0: plain decoding)."""
    base = batch / cost.base_step_seconds(batch)
    if k == 0:
        return Prediction(method, 0, batch, base, 1.0, 1.0, cost.base_step_seconds(batch), False)
    step = cost.spec_step_seconds(k, batch, acc)
    tokens = acc.tokens_per_request_step(k)
    rate = batch * tokens / step
    return Prediction(method, k, batch, rate, rate / base, tokens, step, k > acc.measured_k)


def predict_off(cost: CostModel, batch: float, method: str | None = None) -> Prediction:
    """The speculative engine at k = 0 (drafting switched off by its schedule) against plain decoding."""
    step = cost.off_step_seconds(batch)
    return Prediction(method, 0, batch, batch / step, cost.base_step_seconds(batch) / step, 1.0, step, False)

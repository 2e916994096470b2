"""The recommendation: predictions, bucket choices, the recommended config and its checks, bands,
the options every surface uses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specobs.records.context_split import Split
from specobs.records.result import (
    Baseline,
    Basis,
    BucketBasis,
    Measures,
    NoteKind,
    Result,
    Unmeasured,
    internal,
    jsonable,
    rounded,
)
from specobs.records.serving_load import LoadAdvice

# --- recommendation -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction(Result):
    """One method at one k in one batch bucket: the model's speedup, the measured one, the estimate used."""

    method: str | None
    draft_model: str | None
    num_speculative_tokens: int
    batch_size: float  # where the model is evaluated
    batch_size_min: int
    batch_size_max: int
    tokens_per_second: float | None
    speedup: float  # the model's
    measured_speedup: float | None
    estimate: float  # what the recommendation compares: measured where measured, else the anchored model
    basis: BucketBasis
    interval: tuple[float, float] | None
    extrapolated: bool
    steps: int = field(default=0, metadata={"json": False})  # traffic steps in the bucket (the weight)


@dataclass(frozen=True)
class BucketChoice(Result):
    """The k chosen for one batch bucket (0 = off) and what it is predicted or measured to give."""

    method: str | None
    batch_size_min: int
    batch_size_max: int
    num_speculative_tokens: int
    predicted_speedup: float
    interval: tuple[float, float] | None
    basis: BucketBasis
    measured_steps: int
    # For the explanation: the k a bucket is judged by (its own; for "off", the best k ≥ 1) and
    # that k's speedup, tokens per step and step time against a plain step.
    reference_k: int | None = internal()
    reference_method: str | None = internal()  # the method judged (for "off" overall: the best one tried)
    reference_speedup: float | None = internal()
    reference_basis: BucketBasis | None = internal()  # noqa: RUF009 - measured or modelled factors below
    tokens_per_step: float | None = internal()
    step_ratio: float | None = internal()  # the k's step / a plain step (None without timing)
    off_ratio: float | None = internal()  # a k = 0 step / a plain step
    off_measured: bool = field(default=False, metadata={"json": False})
    in_schedule: bool = field(default=False, metadata={"json": False})  # off through a schedule, not overall
    measured_k: int = field(default=0, metadata={"json": False})
    model_speedup: float | None = internal()  # the model alone at this k (before anchoring to a measured k)
    #: The model's speedup was scaled (beyond ``advice.recommend.ANCHOR_SAID``) to agree with the k
    #: measured in this bucket: the explanation gives both.
    anchored: bool = field(default=False, metadata={"json": False})


@dataclass(frozen=True)
class Recommended(Result):
    """The headline: one method with one k or a batch-size schedule, or no speculative config."""

    method: str | None
    draft_model: str | None
    num_speculative_tokens: int
    schedule: tuple[tuple[int, int, int], ...] | None  # (batch low, batch high, k)
    predicted_speedup: float | None  # None: not measured (see ``Recommendation.bands``)
    interval: tuple[float, float] | None
    speculative_config: str | None
    baseline: Baseline
    #: What the number rests on (:class:`Basis`).
    basis: Basis = Basis.MEASURED
    #: Fields the config needs that the input does not show (or shows with several values): it
    #: is not ready to paste until they are added. Empty: ready.
    missing_fields: tuple[str, ...] = ()
    #: The config checked against the installed vLLM; None without one (or with the check off).
    config_check: ConfigCheck | None = None
    #: Of ``missing_fields``, those whose engines ran with different values: field -> the values.
    differing: Mapping[str, tuple[str, ...]] = field(default_factory=dict, metadata={"json": False}, compare=False)
    #: The 95% interval of ``predicted_speedup`` reaches parity (1×): a gain not shown beyond noise
    #: (decided in ``advice.recommend``).
    within_noise: bool = field(default=False, metadata={"json": False})
    #: What ``predicted_speedup`` measures where measured (:class:`Measures`); None: not measured.
    measures: Measures | None = None

    @property
    def ready(self) -> bool:
        """Whether ``speculative_config`` can be pasted as it is: nothing missing, and the
        installed vLLM (when checked) takes it."""
        refused = self.config_check is not None and bool(self.config_check.problems)
        return self.speculative_config is not None and not self.missing_fields and not refused


@dataclass(frozen=True)
class ConfigCheck(Result):
    """A ``--speculative-config`` checked against the installed vLLM (its ``SpeculativeConfig``).

    ``fields_checked``: its field names, types and bounds against the fields vLLM's source
    declares; ``built``: vLLM built the whole config with the target's (and draft's) model
    config, as at start-up; ``problems``: what vLLM refuses (empty: nothing). It is built only
    when complete and when ``target_path`` (the target as the input's engines loaded it, None
    when the input does not show it) and the draft are model folders on this machine:
    ``folders_not_found`` lists those that are not; ``load_error`` is why vLLM could not be
    tried with them (the target's config did not load)."""

    vllm_version: str | None
    fields_checked: bool
    built: bool
    problems: tuple[str, ...] = ()
    target_path: str | None = None
    folders_not_found: tuple[str, ...] = ()
    load_error: str | None = None


@dataclass(frozen=True)
class Target(Result):
    """What a recommendation is for: a target model on a platform and device. Methods on
    different targets are never compared: their speedups answer different questions."""

    model: str | None
    platform: str | None
    device: str | None
    steps: int  # traffic steps of its speculative engines in the input


@dataclass(frozen=True)
class MethodWin(Result):
    """Which method wins a batch bucket (each at its best k there), when there are several."""

    batch_size_min: int
    batch_size_max: int
    winner: str | None
    draft_model: str | None
    num_speculative_tokens: int
    speedups: Mapping[str, float]
    labels: Mapping[str, Any]


@dataclass(frozen=True)
class ModelNote(Result):
    """One thing a method's cost fit rests on, as numbers (``render.sentences.model_note`` words it)."""

    kind: NoteKind
    drafter: str | None = None  # the method's usual drafter kind: lookup | autoregressive | parallel
    measured_drafter: str | None = None  # the kind the measured draft time shows
    k_low: int | None = None  # the ks the draft time was measured at
    k_high: int | None = None
    batch: float | None = None  # the typical batch size it was judged at
    growth: float | None = None  # draft time at k_high over k_low (None: from 0)
    grows: bool | None = None  # grows with k (one pass per token) or flat (one pass)
    baseline: Baseline | None = None  # how plain decoding was estimated without a plain engine


@dataclass(frozen=True)
class MethodFacts(Result):
    """What a method's fit rests on, for the assumptions."""

    method: str | None
    timed: bool
    cost_ratio: float | None
    cost_ratio_source: str | None
    model_notes: tuple[ModelNote, ...]
    plain_measured: bool
    drafts_per_request_step: float
    drafts_per_request_step_by_k: tuple[tuple[int, float], ...]
    measured_k: int
    conditional_tail: float
    conditional_tail_low: float
    conditional_tail_high: float
    #: Not every request-step drafts (the share is below ``advice.recommend.ALL_DRAFT``): the
    #: assumptions say the measured share.
    partial_drafting: bool = field(default=False, metadata={"json": False})


@dataclass(frozen=True)
class KBand(Result):
    """One k of a :class:`SpeedupBand`: tokens per draft (1 + accepted per draft, with its 95%
    interval) and the modelled speedup between the two cost regimes."""

    num_speculative_tokens: int
    tokens_per_draft: float
    tokens_per_draft_low: float
    tokens_per_draft_high: float
    speedup_low: float  # compute-bound: verification grows with tokens scored, drafter at its class's high cost
    speedup_high: float  # memory-bound: verification flat, drafter at its class's low cost
    extrapolated: bool  # k above the measured one: acceptance of the extra positions extrapolated


@dataclass(frozen=True)
class SpeedupBand(Result):
    """What an input without step timing says about one method's speed: not measured, a band
    per k between two stated cost regimes (``specobs.advice.band``), and the k each favours."""

    method: str | None
    draft_model: str | None
    drafter_kind: str  # lookup | autoregressive | parallel
    per_position_cost: tuple[float, float]  # drafter cost per drafted position, in plain steps
    per_step_cost: tuple[float, float]  # drafter cost per drafting step, whatever k is
    overhead: tuple[float, float]  # a speculative engine's extra cost per step
    cost_ratio_given: bool  # the per-position cost is the user's --cost-ratio
    drafts_per_request_step: float | None  # q as measured; None: unknown, taken as 1
    measured_k: int
    ran_k: int | None  # the largest k the input ran
    best_k_memory_bound: int
    best_k_compute_bound: int
    by_k: tuple[KBand, ...]
    #: The config that ran (at ``ran_k``), completed from the run metadata: what to measure
    #: against (with the capture, ``specobs tune`` or a plain server), not a recommendation.
    speculative_config: str | None = None
    missing_fields: tuple[str, ...] = ()  # what the input does not show of it (see Recommended)
    config_check: ConfigCheck | None = None

    def at(self, k: int) -> KBand | None:
        return next((b for b in self.by_k if b.num_speculative_tokens == k), None)


@dataclass(frozen=True)
class ServedSpeedup(Result):
    """A speculative server against a plain one, measured from their own throughput lines at
    matched running requests (``specobs.advice.log_speedup``): one batch bucket, or all of them."""

    method: str | None
    draft_model: str | None
    num_speculative_tokens: int
    batch_size_min: int
    batch_size_max: int
    running: tuple[int, ...]  # the running-request counts both engines showed
    overall: bool  # every matched count, not one bucket
    speedup: float
    #: 95%: the spread of the intervals' throughputs, and how far such figures have been from
    #: the clients' (``specobs.advice.log_speedup.SERVED_SYSTEMATIC``)
    interval: tuple[float, float]
    tokens_per_second: float  # the speculative engine's, weighted by its intervals at each count
    plain_tokens_per_second: float
    intervals: int
    plain_intervals: int
    tokens_per_step: float | None  # generated / (generated − accepted): tokens per request-step
    measures: Measures = Measures.SERVED


@dataclass(frozen=True)
class NotMeasured(Result):
    """Why one method's speed was not measured: what the input lacks (``reason``), with the counts
    that decided it (``specobs.advice.recommend``)."""

    method: str | None
    draft_model: str | None
    reason: Unmeasured
    #: FEW_INTERVALS: the running count both engines show that came closest (None: none shared),
    #: and the steady intervals each engine has there; otherwise 0.
    running: int | None = None
    intervals: int = 0
    plain_intervals: int = 0
    needed: int = 0  # steady intervals each engine needs at a running count
    running_shown: tuple[int, ...] = ()  # running counts of the speculative engine's steady intervals
    plain_running_shown: tuple[int, ...] = ()  # and of the plain engine's
    #: PLAIN_OTHER_TARGET: the plain engines the input holds (none on this method's target).
    plain_targets: tuple[Target, ...] = ()
    #: NO_VERIFY_TIMING: the speculative steps timed whole, and those with a verify time (0).
    timed_steps: int = 0
    verify_timed_steps: int = 0


@dataclass(frozen=True)
class Recommendation(Result):
    """What ``specobs recommend`` returns."""

    recommended: Recommended
    by_batch_size: tuple[BucketChoice, ...]
    predicted: tuple[Prediction, ...]
    method_comparison: tuple[MethodWin, ...] = ()
    methods: tuple[MethodFacts, ...] = field(default=(), metadata={"json": False})
    unknown_method: bool = field(default=False, metadata={"json": False})  # chosen but unlabelled
    #: The target this is for, and the input's other targets (each needs its own recommendation).
    target: Target | None = None
    other_targets: tuple[Target, ...] = ()
    #: Methods whose input has no step timing: what it can say without measuring (never a point).
    bands: tuple[SpeedupBand, ...] = ()
    #: Speculative servers measured against a plain one from their throughput lines.
    served: tuple[ServedSpeedup, ...] = ()
    #: Methods whose speed was not measured, each with why (the thing the input lacks).
    not_measured: tuple[NotMeasured, ...] = ()
    #: Where each configuration should draft, from its measured crossover under load.
    under_load: tuple[LoadAdvice, ...] = ()
    #: The best k by context length, measured (None: no step knows its context). Advice only: no
    #: vLLM release up to 0.33 takes a per-context k (``by_context.vllm_option``).
    by_context: Split | None = None

    @property
    def method(self) -> str | None:
        """The method the buckets are about (the recommended one, else the best that was tried)."""
        return self.by_batch_size[0].method if self.by_batch_size else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommended": self.recommended.to_dict(),
            "by_batch_size": jsonable(self.by_batch_size),
            "predicted": jsonable(self.predicted),
            "method_comparison": jsonable(self.method_comparison),
            "target": jsonable(self.target),
            "other_targets": jsonable(self.other_targets),
            "bands": jsonable(self.bands),
            "served": jsonable(self.served),
            "not_measured": jsonable(self.not_measured),
            "under_load": jsonable(self.under_load),
            "by_context": rounded(self.by_context.to_dict()) if self.by_context is not None else None,
        }


@dataclass(frozen=True)
class RecommendOptions(Result):
    """The recommendation's settings, with the defaults every surface uses (CLI, API, dashboard,
    ``specobs tune``): one place to change them."""

    max_k: int | None = None  #: the largest k considered (None: what the data supports)
    margin: float = 0.02  #: speedup a k must beat plain decoding by
    cost_ratio: float | None = None  #: a drafter's cost ratio to use instead of the measured one
    bootstrap: int = 30  #: resamples for the intervals (0: none)
    seed: int = 0


#: The defaults (``RecommendOptions()``), named once.
RECOMMEND_DEFAULTS = RecommendOptions()

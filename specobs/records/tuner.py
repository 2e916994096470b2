"""The online tuner's decision log."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from specobs.records.result import Result

#: What the online tuner can decide (``TunerDecision.action``).
TUNER_ACTIONS = ("suggest", "apply", "confirm", "rollback", "refuse")


class TunerReason(StrEnum):
    """Why the online tuner decided what it did (``TunerDecision.reason``; worded by
    ``specobs.render.sentences.tuner_reason``). The numbers behind a reason are the decision's
    own fields (``predicted_*``, ``measured_gain``)."""

    #: suggest, apply: another k measured faster than the current one, its gain's interval above the margin.
    MEASURED_FASTER = "measured_faster"
    #: apply: switched by an operator or a test (``OnlineTuner.switch``).
    FORCED = "forced"
    #: confirm: nothing was measured before the switch, so there is nothing to compare with.
    NO_EARLIER_MEASUREMENT = "no_earlier_measurement"
    #: confirm, rollback: the window after the switch measured ``measured_gain`` against before it.
    WINDOW_MEASURED = "window_measured"
    #: refuse: the engine does not draft.
    NO_SPECULATIVE_DECODING = "no_speculative_decoding"
    #: refuse: data parallel > 1, where vLLM disables the batch-size schedule.
    DATA_PARALLEL = "data_parallel"
    #: refuse: Model Runner V2, reported to ignore the batch-size schedule.
    MODEL_RUNNER_V2 = "model_runner_v2"
    #: refuse: the engine was started without a batch-size schedule.
    NO_SCHEDULE = "no_schedule"
    #: Any other reason, in ``reason_text`` (decision logs written before reasons were typed hold free text).
    OTHER = "other"


#: The sentences logs written before reasons were typed hold, by the start of their text: read
#: as the reason they said (the numbers they quoted are the decision's own fields).
LEGACY_REASONS: tuple[tuple[str, TunerReason], ...] = (
    ("measured faster than the current k", TunerReason.MEASURED_FASTER),
    ("no earlier measurement to compare with", TunerReason.NO_EARLIER_MEASUREMENT),
    ("the window after the switch measured", TunerReason.WINDOW_MEASURED),
    ("no speculative decoding in this engine", TunerReason.NO_SPECULATIVE_DECODING),
    ("data parallel > 1", TunerReason.DATA_PARALLEL),
    ("Model Runner V2", TunerReason.MODEL_RUNNER_V2),
    ("the engine has no batch-size schedule", TunerReason.NO_SCHEDULE),
)


def reason_of(value: TunerReason | str) -> tuple[TunerReason, str | None]:
    """A reason read from a decision log: a :class:`TunerReason` value, one of the sentences
    older logs hold (:data:`LEGACY_REASONS`), or other free text, kept as ``other`` with its text.

    ``"forced"`` → ``(FORCED, None)``; ``"no earlier measurement to compare with"`` →
    ``(NO_EARLIER_MEASUREMENT, None)``; ``"operator"`` → ``(OTHER, "operator")``.
    """
    if isinstance(value, TunerReason):
        return value, None
    try:
        return TunerReason(value), None
    except ValueError:
        pass
    for start, reason in LEGACY_REASONS:
        if value.startswith(start):
            return reason, None
    return TunerReason.OTHER, value


@dataclass(frozen=True)
class TunerDecision(Result):
    """One decision of the online tuner (``SPECOBS_ONLINE_TUNER``): a row of its decision log."""

    ts: float
    batch_size_min: int
    batch_size_max: int
    action: str  # suggest | apply | confirm | rollback | refuse
    from_k: int
    to_k: int
    predicted_gain: float | None  # the measured gain that triggered it, with its 95% interval
    predicted_low: float | None
    predicted_high: float | None
    measured_gain: float | None  # for confirm / rollback: the window after the switch vs before
    reason: TunerReason  # free text given here is kept as ``other`` with ``reason_text``
    run_id: str | None = None
    engine: int | None = None
    reason_text: str | None = None  # the reason in words, for ``other`` alone

    def __post_init__(self) -> None:
        if not isinstance(self.reason, TunerReason):
            reason, text = reason_of(self.reason)
            object.__setattr__(self, "reason", reason)
            if text is not None and self.reason_text is None:
                object.__setattr__(self, "reason_text", text)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["reason"] = str(self.reason)
        return out

    def to_row(self) -> dict[str, Any]:
        """The event-file row: ``tuner_action`` marks it apart from step rows."""
        row = self.to_dict()
        return {"tuner_action": row.pop("action"), **row}

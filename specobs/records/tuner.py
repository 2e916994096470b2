"""The online tuner's decision log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specobs.records.result import Result

#: What the online tuner can decide (``TunerDecision.action``).
TUNER_ACTIONS = ("suggest", "apply", "confirm", "rollback", "refuse")


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
    reason: str
    run_id: str | None = None
    engine: int | None = None

    def to_row(self) -> dict[str, Any]:
        """The event-file row: ``tuner_action`` marks it apart from step rows."""
        row = self.to_dict()
        return {"tuner_action": row.pop("action"), **row}

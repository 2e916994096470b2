"""What the analysis concludes, as data: a finding's kind and its facts (worded in render)."""

from __future__ import annotations

from dataclasses import dataclass

from specobs.records.result import Result


@dataclass(frozen=True)
class Finding(Result):
    """One plain-language finding: what it is about (``kind``) and its sentence."""

    kind: str
    text: str

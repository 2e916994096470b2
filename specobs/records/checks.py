"""Integrity issues and known pitfalls, as data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specobs.records.result import Result


@dataclass(frozen=True)
class IntegrityIssue(Result):
    """Where the numbers do not measure what the configuration says (``analysis.integrity``).

    ``affected`` of ``checked`` per kind: ``schedule_ignored``: steps drafting more than the
    schedule allows, of the steps where it allows less than the maximum (``observed``: their
    mean draft length, ``corrected``: the mean k allowed); ``short_drafts``: draft tokens, of
    drafts × k (``observed``: the fill); ``accepted_past_end``: accepted tokens cut off by a
    stop, of all accepted (``observed``/``corrected``: the draft acceptance rate with and
    without them); ``host_timed``: GPU steps timed on the host clock, of GPU steps timed;
    ``schedule_disabled``: ``affected`` is the data-parallel size;
    ``synthetic_rejection``: nothing counted; ``missing_hooks``: the vLLM release lacks hook points
    specobs uses, and ``lost`` names what the rows then lack.
    """

    kind: str  # schedule_ignored | schedule_disabled | synthetic_rejection | short_drafts | accepted_past_end |
    # host_timed | known_pitfall | missing_hooks
    run_id: str | None = None
    engine: int | None = None
    method: str | None = None
    affected: int = 0
    checked: int = 0
    observed: float | None = None
    corrected: float | None = None
    max_k: int | None = None
    pitfall: str | None = None  # known_pitfall (and the table's own checks): the pitfall's id
    lost: tuple[str, ...] = ()  # missing_hooks: what the rows lack
    vllm_version: str | None = None  # missing_hooks: the release


@dataclass(frozen=True)
class Pitfall(Result):
    """A known way speculative decoding goes wrong, as data (``specobs.analysis.pitfalls``).

    ``when`` is a condition on run metadata: field → allowed values (a tuple), or one of the
    tests ``"set"`` / ``"unset"`` / ``">1"``; ``environment`` fields are named
    ``environment.NAME``. ``acceptance_below``: the pitfall shows only when the run's draft
    acceptance rate is below it (None: the metadata alone meets it). ``source`` is the public
    report it comes from, checked before it went in."""

    id: str
    title: str
    when: Mapping[str, Any]
    source: str
    advice: str
    acceptance_below: float | None = None

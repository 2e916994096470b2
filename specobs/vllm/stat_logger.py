"""Stat loggers: per-step acceptance from vLLM's own ``SchedulerStats``, without engine hooks.

``StatLogger`` is for code that builds engines itself and does not want the engine patched:
``LLMEngine.from_engine_args(args, stat_loggers=[specobs.vllm.StatLogger])``. It writes one
row per step with vLLM's ``SpecDecodingStats`` (acceptance, drafts per position where vLLM
counts them; no timing, and ``num_drafts_accepted_before_pos`` stays null) — unless the hooks
are capturing in this process or capture is enabled by environment, in which case the engine
core already writes complete rows and this logger stays quiet (no double counting).

``PluginStatLogger`` is what the ``vllm.stat_logger_plugins`` entry point registers for the
async server: it only records in stats-only mode (``SPECOBS_ENABLE=1 SPECOBS_HOOKS=0``).
"""

from __future__ import annotations

import time
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from specobs.capture.config import SPECOBS_HOOKS, CaptureConfig
from specobs.capture.recorder import Recorder
from specobs.capture.row import StepRow
from specobs.vllm import hooks


class StatLogger(StatLoggerBase):
    """One acceptance row per engine step from vLLM's stats (see the module docstring)."""

    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.config = CaptureConfig.from_env()
        self.engine_index = engine_index
        self.labels = {**hooks.labels_from_config(vllm_config), "run_id": self.config.run_id}
        self.labels["workload"] = self.config.workload
        self._recorder: Recorder | None = None
        self.active = self._should_record()

    def _should_record(self) -> bool:
        hooked = hooks.current() is not None or (self.config.enabled and _hooks_on())
        return not hooked

    @property
    def recorder(self) -> Recorder:
        if self._recorder is None:
            self._recorder = Recorder([self.config.sink()], capacity=self.config.queue_size)
        return self._recorder

    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0):
        if not self.active or scheduler_stats is None:
            return
        try:
            stats = getattr(scheduler_stats, "spec_decoding_stats", None)
            if stats is None:
                return
            # vLLM 0.32 also counts drafts per position (drafted more than i tokens); older ones do not.
            reached = getattr(stats, "num_draft_tokens_per_pos", None)
            row = StepRow(
                ts=time.time(),
                **{**self.labels, "engine": engine_idx},
                batch_size=getattr(scheduler_stats, "num_running_reqs", None),
                num_spec_tokens=stats.num_spec_tokens,
                num_drafts=stats.num_drafts,
                num_draft_tokens=stats.num_draft_tokens,
                num_accepted_tokens=stats.num_accepted_tokens,
                num_accepted_tokens_per_pos=list(stats.num_accepted_tokens_per_pos),
                num_drafts_per_pos=list(reached) if reached is not None else None,
                # num_drafts_accepted_before_pos needs each draft's drafted and accepted length
                # together, which SpecDecodingStats does not keep: it stays null here.
                num_generated_tokens=(
                    getattr(iteration_stats, "num_generation_tokens", None) if iteration_stats is not None else None
                ),
            )
            self.recorder.record(row)
        except Exception as exc:
            self.recorder.error("StatLogger.record", exc)

    def log_engine_initialized(self) -> None:
        pass

    def log(self) -> None:
        pass


class PluginStatLogger(StatLogger):
    """Entry-point stat logger: records only in stats-only mode (``SPECOBS_HOOKS=0``)."""

    def _should_record(self) -> bool:
        return self.config.enabled and not _hooks_on() and hooks.current() is None


def _hooks_on() -> bool:
    return SPECOBS_HOOKS.flag()

"""Every place in vLLM the capture hooks, as data: where it is, the parameters it must have, and
which numbers are absent without it.

One table serves three readers: the hooks (:mod:`specobs.vllm.hooks` patches exactly
these), the start-up warning and the run metadata of a release that lacks one (``missing`` names
the numbers lost, not only the method), and the release checks that read a vLLM release's
source without installing it (specobs/vllm/releases.py; tests/project/test_release_checks.py,
tests/vllm/test_vllm_releases.py; docs/vllm.md's release table).

Read against vLLM 0.32 (installed) and 0.33 (source from its wheel)::

    [p.where for p in HOOK_POINTS if p.role == "scheduler"][0]
    # 'vllm.v1.core.sched.scheduler.Scheduler.schedule'
"""

from __future__ import annotations

from dataclasses import dataclass

#: The scheduler of vLLM's V1 engine core (one per engine; data parallel: one per rank).
SCHEDULER = "vllm.v1.core.sched.scheduler.Scheduler"
#: Model Runner V1 (the CPU runner inherits it).
RUNNER_V1 = "vllm.v1.worker.gpu_model_runner.GPUModelRunner"
#: Model Runner V2 (``VLLM_USE_V2_MODEL_RUNNER``); optional: a release may not have it.
RUNNER_V2 = "vllm.v1.worker.gpu.model_runner.GPUModelRunner"
#: The engine's whole config, built in the front-end process (the API server, an ``LLM``).
VLLM_CONFIG = "vllm.config.vllm.VllmConfig"


@dataclass(frozen=True)
class HookPoint:
    """One method the capture wraps."""

    owner: str
    """The class, by its dotted path (module and class name)."""
    method: str
    """The method wrapped on that class."""
    role: str
    """``scheduler``, ``runner_v1``, ``runner_v2`` or ``config`` (the front end's config): which
    process and object it lives in."""
    without: str
    """What the rows lack when a release does not have it (said at start-up and in the report)."""
    params: tuple[str, ...] | None = None
    """The leading parameter names the hook relies on (checked before patching); None: any."""
    needs_requests: bool = False
    """Only hooked when finished-request rows are on (``SPECOBS_REQUESTS``)."""

    @property
    def module(self) -> str:
        return self.owner.rsplit(".", 1)[0]

    @property
    def cls(self) -> str:
        return self.owner.rsplit(".", 1)[1]

    @property
    def where(self) -> str:
        return f"{self.owner}.{self.method}"


HOOK_POINTS: tuple[HookPoint, ...] = (
    HookPoint(SCHEDULER, "schedule", "scheduler", "step_seconds (no step start)"),
    HookPoint(SCHEDULER, "update_from_output", "scheduler", "every row (no step is finished)"),
    HookPoint(
        SCHEDULER,
        "make_spec_decoding_stats",
        "scheduler",
        "acceptance counts (num_drafts, num_draft_tokens, num_accepted_tokens, per position)",
        params=(
            "self",
            "spec_decoding_stats",
            "num_draft_tokens",
            "num_accepted_tokens",
            "num_invalid_spec_tokens",
            "request_id",
        ),
    ),
    HookPoint(
        SCHEDULER,
        "_free_request",
        "scheduler",
        "finished-request rows",
        params=("self", "request"),
        needs_requests=True,
    ),
    HookPoint(RUNNER_V1, "execute_model", "runner_v1", "verify_seconds (the target forward)"),
    HookPoint(
        RUNNER_V1,
        "sample_tokens",
        "runner_v1",
        "draft timing, and at tensor/pipeline parallel all timing (its hand-off to the engine core)",
    ),
    HookPoint(RUNNER_V1, "_sample", "runner_v1", "verify_seconds (rejection sampling)"),
    HookPoint(RUNNER_V1, "propose_draft_token_ids", "runner_v1", "draft_seconds"),
    HookPoint(RUNNER_V2, "execute_model", "runner_v2", "verify_seconds under Model Runner V2 (the target forward)"),
    HookPoint(
        RUNNER_V2, "sample_tokens", "runner_v2", "draft_seconds and the step's timing hand-off under Model Runner V2"
    ),
    HookPoint(RUNNER_V2, "sample", "runner_v2", "verify_seconds under Model Runner V2 (rejection sampling)"),
    HookPoint(
        VLLM_CONFIG,
        "_maybe_disable_dynamic_sd_for_data_parallel",
        "config",
        "data_parallel_size and a dropped schedule in the run metadata at data parallel > 1",
    ),
)

#: Model Runner V2 keeps its proposer on the runner instance: ``self.speculator.propose(...)`` in
#: ``sample_tokens``. The hooks wrap it per instance, so the release checks look for this call.
V2_SPECULATOR_CALL = "self.speculator.propose"

#: Roles that are optional in a release: their absence is not a missing hook point.
OPTIONAL_ROLES = frozenset({"runner_v2"})


def lost(missing: list[str]) -> list[str]:
    """What the rows lack, one entry per missing hook point (by its ``where``; a signature change
    is reported as ``where (signature changed)``).

    ``lost(["vllm.v1.core.sched.scheduler.Scheduler.schedule"]) == ["step_seconds (no step start)"]``
    """
    by_where = {p.where: p.without for p in HOOK_POINTS}
    out = []
    for item in missing:
        without = by_where.get(item.split(" (", 1)[0])
        if without and without not in out:
            out.append(without)
    return out


__all__ = ["HOOK_POINTS", "OPTIONAL_ROLES", "RUNNER_V1", "RUNNER_V2", "SCHEDULER", "V2_SPECULATOR_CALL", "VLLM_CONFIG",
           "HookPoint", "lost"]  # fmt: skip

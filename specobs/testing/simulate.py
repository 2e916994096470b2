"""A documented generative model of speculative decoding, for tests (a known oracle) and "what if".

One step of a batch of B requests at k drafted tokens:

- each request drafts with probability q (lookup drafters find no match sometimes);
- a drafting request accepts position i given all earlier ones with probability β_i (the
  acceptance profile: ``iid`` β_i = α, ``falling`` β_i = β_0 − δ·i, ``rising`` β_i = β_0 + δ·i);
- draft time  = (d0 + d1·B + d2·k + d3·k·B) · noise          (per method kind, see PROFILES)
- verify time = (a + b·T + c·max(0, T − knee)) · noise, T = B + drafted tokens
- other time  = (o0 + o1·B) · noise;  noise is log-normal with σ = ``noise``.
k = 0 steps are plain decoding: verify(B) + other(B).

The expected throughput at (k, B) — the oracle recommendations are scored against — is
B·(1 + q·Σ_{i<k} Π_{j≤i} β_j) / E[step time].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from specobs import schema
from specobs.formulas import acceptance_length_of_conditional, tokens_per_step


def profile(kind: str, start: float, slope: float = 0.0, length: int = 16) -> list[float]:
    """Conditional acceptance per position: ``iid``, ``falling`` or ``rising``."""
    sign = {"iid": 0.0, "falling": -1.0, "rising": 1.0}[kind]
    return [min(max(start + sign * slope * i, 0.0), 0.98) for i in range(length)]


@dataclass(frozen=True)
class MethodSpec:
    """One drafter: acceptance profile, how often it drafts, and its cost."""

    method: str
    betas: tuple[float, ...]
    draft: tuple[float, float, float, float]  # d0, d1, d2, d3 (seconds)
    drafts_per_request_step: float = 1.0


@dataclass(frozen=True)
class Scenario:
    """A target model on a device, and the drafters to try on it."""

    methods: tuple[MethodSpec, ...]
    verify: tuple[float, float, float, float] = (0.010, 0.00004, 0.0008, 64.0)  # a, b, c, knee
    overhead: tuple[float, float] = (0.0008, 0.00002)  # o0, o1 (speculative engine)
    overhead_plain: tuple[float, float] = (0.0006, 0.00002)  # o0, o1 (plain engine)
    noise: float = 0.05
    model: str = "sim-target"
    platform: str = "sim"
    seed: int = 0
    extra_labels: dict[str, str] = field(default_factory=dict)  # "device", "workload"

    def verify_seconds(self, tokens: float) -> float:
        a, b, c, knee = self.verify
        return a + b * tokens + c * max(0.0, tokens - knee)

    def draft_seconds(self, spec: MethodSpec, k: int, batch: float) -> float:
        d0, d1, d2, d3 = spec.draft
        return 0.0 if k == 0 else d0 + d1 * batch + d2 * k + d3 * k * batch

    def method(self, name: str) -> MethodSpec:
        return next(m for m in self.methods if m.method == name)


def expected_accepted(spec: MethodSpec, k: int) -> float:
    """Σ_{i<k} Π_{j≤i} β_j: accepted tokens per draft (the acceptance length of the β's, less the
    target's own token)."""
    return acceptance_length_of_conditional(spec.betas, k) - 1


def oracle_throughput(scenario: Scenario, method: str | None, k: int, batch: float) -> float:
    """Expected tokens per second at (method, k, batch); k = 0 is the plain engine."""
    mean_noise = math.exp(scenario.noise**2 / 2)
    if k == 0 or method is None:
        o0, o1 = scenario.overhead_plain
        return batch / ((scenario.verify_seconds(batch) + o0 + o1 * batch) * mean_noise)
    spec = scenario.method(method)
    q = spec.drafts_per_request_step
    tokens = batch * tokens_per_step(expected_accepted(spec, k), q)
    o0, o1 = scenario.overhead
    step = scenario.draft_seconds(spec, k, batch) + scenario.verify_seconds(batch * (1 + q * k)) + o0 + o1 * batch
    return tokens / (step * mean_noise)


def simulate_run(
    scenario: Scenario, method: str | None, k: int, batch_sizes: list[int], steps: int, *, start_ts: float = 1.7645e9
) -> pl.DataFrame:
    """``steps`` engine steps at each batch size, as a steps frame."""
    seed = scenario.seed + 7919 * k + sum(map(ord, method or "plain"))
    rng = np.random.default_rng(seed)
    spec = scenario.method(method) if method and k else None
    rows: list[dict[str, object]] = []
    ts = start_ts
    for batch in batch_sizes:
        for _ in range(steps):
            noise = rng.lognormal(0.0, scenario.noise, size=3)
            if spec is None:
                o0, o1 = scenario.overhead_plain
                verify = scenario.verify_seconds(batch) * noise[1]
                step = verify + (o0 + o1 * batch) * noise[2]
                ts += step
                rows.append(_row(scenario, None, 0, batch, 0, 0, [], None, verify, step, batch, batch, ts))
                continue
            drafting = rng.random(batch) < spec.drafts_per_request_step
            n_drafts = int(drafting.sum())
            per_pos = [0] * k
            accepted = 0
            betas = np.array(spec.betas[:k])
            for _ in range(n_drafts):
                passed = rng.random(k) < betas
                length = int(np.argmin(passed)) if not passed.all() else k
                accepted += length
                for i in range(length):
                    per_pos[i] += 1
            drafted = n_drafts * k
            scheduled = batch + drafted
            draft = scenario.draft_seconds(spec, k, batch) * noise[0]
            verify = scenario.verify_seconds(scheduled) * noise[1]
            o0, o1 = scenario.overhead
            step = draft + verify + (o0 + o1 * batch) * noise[2]
            ts += step
            rows.append(
                _row(
                    scenario,
                    spec.method,
                    k,
                    batch,
                    n_drafts,
                    drafted,
                    per_pos,
                    draft,
                    verify,
                    step,
                    batch + accepted,
                    scheduled,
                    ts,
                    accepted,
                )
            )
    return pl.DataFrame(rows, schema=schema.STEPS)


def _row(
    scenario: Scenario, method: str | None, k: int, batch: int, drafts: int, drafted: int, per_pos: list[int],
    draft: float | None, verify: float, step: float, generated: int, scheduled: int, ts: float, accepted: int = 0,
) -> dict[str, object]:  # fmt: skip
    return {
        "ts": ts,
        "run_id": f"sim-{method or 'plain'}-k{k}",
        "engine": 0,
        "model": scenario.model,
        "method": method,
        "platform": scenario.platform,
        "device": scenario.extra_labels.get("device", "simulated"),
        "workload": scenario.extra_labels.get("workload"),
        "batch_size": batch,
        "num_scheduled_tokens": scheduled,
        "num_spec_tokens": k,
        "num_drafts": drafts,
        "num_draft_tokens": drafted,
        "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": per_pos,
        "num_generated_tokens": generated,
        "draft_seconds": draft,
        "verify_seconds": verify,
        "step_seconds": step,
    }


#: Drafter kinds with typical shapes (seconds; a target step of ~10–40 ms).
PROFILES = {
    "ngram": MethodSpec("ngram", tuple(profile("falling", 0.85, 0.05)), (0.0002, 0.000005, 0.0, 0.0), 0.7),
    "draft_model": MethodSpec("draft_model", tuple(profile("iid", 0.7)), (0.0, 0.0, 0.0015, 0.00002)),
    "eagle3": MethodSpec("eagle3", tuple(profile("falling", 0.85, 0.04)), (0.0, 0.0, 0.0006, 0.00001)),
    # One MTP layer run k times (as vLLM runs MiMo's, DeepSeek-V3's, Gemma 4's assistant): ∝ k.
    "mtp": MethodSpec("mtp", tuple(profile("rising", 0.6, 0.05)), (0.0001, 0.0, 0.0007, 0.00001)),
    # A block drafter: one pass for every k.
    "dflash": MethodSpec("dflash", tuple(profile("falling", 0.8, 0.06)), (0.0012, 0.00003, 0.0, 0.0)),
}


def simulate(
    method: str = "draft_model",
    ks: Sequence[int] = (0, 4),
    batch_sizes: Sequence[int] = (1, 4, 16, 64),
    steps: int = 200,
    *,
    seed: int = 0,
    betas: Sequence[float] | None = None,
) -> pl.DataFrame:
    """Engine steps from the documented generative model (docs/model.md): ``steps`` steps at each
    batch size for each k (k = 0: a plain engine), with one of :data:`PROFILES`' drafters
    (``betas``: its conditional acceptance per position instead). One steps frame, k by k."""
    if method not in PROFILES:
        raise ValueError(f"unknown method {method} (choose from {', '.join(PROFILES)})")
    spec = PROFILES[method] if betas is None else replace(PROFILES[method], betas=tuple(betas))
    scenario = Scenario(methods=(spec,), seed=seed)
    frames = [simulate_run(scenario, method if k else None, k, list(batch_sizes), steps) for k in ks]
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema.STEPS)

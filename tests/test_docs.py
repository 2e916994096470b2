"""The tables in docs/ are generated from the code (docs/generate.py) and must match it."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from specobs.capture import config

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("specobs_docs_generate", ROOT / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_generated_tables_match_the_code():
    generate = _generator()
    stale, problems = generate.update(check=True)
    lines = [*problems]
    if stale:
        lines += ["stale generated tables (the code changed; the docs did not):", *(f"  {s}" for s in stale)]
        lines.append(f"regenerate them with: {generate.REGENERATE}")
    assert not lines, "\n" + "\n".join(lines)


def test_json_keys_are_walked_into_dotted_paths():
    generate = _generator()
    data = {
        "recommended": {"method": "ngram", "schedule": [[1, 3, 2]]},
        "by_batch_size": [{"basis": "measured"}, {"basis": "model", "interval": None}],
        "findings": ["a sentence"],
        "speedups": {"ngram": 1.2},
    }
    assert list(generate.walk(data, {"speedups"})) == [
        "recommended",
        "recommended.method",
        "recommended.schedule",
        "by_batch_size[]",
        "by_batch_size[].basis",
        "by_batch_size[].basis",
        "by_batch_size[].interval",
        "findings",
        "speedups",
    ]


def test_the_documented_capture_defaults_are_the_defaults():
    """docs/vllm.md shows each variable's ``default``: it must be what an unset variable gives."""
    unset = config.CaptureConfig.from_env({})
    assert dataclasses.replace(unset, run_id="x") == config.CaptureConfig(run_id="x")
    assert unset.directory == config.SPECOBS_DIR.default
    assert unset.rotate_bytes == float(config.SPECOBS_ROTATE_MB.default) * 1024 * 1024
    assert not unset.enabled and unset.otel and unset.hooks


def test_flags_and_numbers_fall_back_to_the_default():
    env = {
        "SPECOBS_ENABLE": "Yes",
        "SPECOBS_OTEL": "maybe",  # neither true nor false: the default (on)
        "SPECOBS_HOOKS": "off",
        "SPECOBS_QUEUE_SIZE": "lots",  # not a number: the default
        "SPECOBS_ROTATE_MB": " 2 ",
        "SPECOBS_FORMAT": "Parquet",
        "SPECOBS_WORKLOAD": "",
    }
    got = config.CaptureConfig.from_env(env)
    assert (got.enabled, got.otel, got.hooks) == (True, True, False)
    assert got.queue_size == 65536 and got.rotate_bytes == 2 * 1024 * 1024
    assert got.format == "parquet" and got.workload is None

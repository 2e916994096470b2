"""Fixtures the tests share (helpers are in tests/support/), and the test tiers."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
from support.helpers import SERVE_LEVELS, SERVE_METHODS, SERVE_SECONDS


@pytest.fixture
def write(tmp_path: Path):
    """Write text (or bytes) to a file under tmp_path; ``gz=True`` compresses it."""

    def _write(name: str, content: str | bytes, *, gz: bool = False) -> Path:
        data = content.encode() if isinstance(content, str) else content
        path = tmp_path / name
        path.write_bytes(gzip.compress(data) if gz else data)
        return path

    return _write


@pytest.fixture(scope="session")
def serve_recording(tmp_path_factory):
    """(the tiny models' folder, the recordings' folder, name → ClientRecord): a plain, an ngram
    (k=3, lookup 2–3), a draft-model (k=3) and a second plain vLLM server, in that order, under
    greedy closed-loop clients. Two plain processes, first and last: separate processes of one
    configuration differ by 20–40% on these machines, and the faster is the less disturbed."""
    from specobs.testing.server_recording import record_server, speculative_config
    from specobs.testing.tiny_llama import build

    models = tmp_path_factory.mktemp("models")
    build(models)
    out = tmp_path_factory.mktemp("serve")
    records = {
        name: record_server(
            models,
            out,
            name,
            speculative_config(name.rstrip("2")),
            levels=SERVE_LEVELS,
            seconds_per_level=SERVE_SECONDS,
        )
        for name in SERVE_METHODS
    }
    return models, out, records


#: Test tiers (docs/testing.md): heavy or tool-bound tests that a ``-m`` selection must name.
TIERS = ("vllm", "parallel", "browser", "prometheus", "slow")


def pytest_collection_modifyitems(config, items):
    """Tiers are opt-in under ``-m``: with no ``-m`` every test runs (the README's command); with
    one, a tiered test runs only if the expression names its tier. So the fast tier,
    ``-m "not vllm and not browser"``, is the untiered tests, and ``-m "prometheus"`` or
    ``-m "slow or prometheus"`` picks tiers by name."""
    expression = config.getoption("markexpr") or ""
    if not expression.strip():
        return
    named = set(re.findall(r"\w+", expression))
    keep, dropped = [], []
    for item in items:
        tiers = {m.name for m in item.iter_markers() if m.name in TIERS}
        (dropped if tiers - named else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep

"""Properties: aggregation does not depend on how counts were split into intervals, and no input
crashes the parsers (bad input is skipped or rejected with an InputError, nothing else)."""

from __future__ import annotations

import gzip
import itertools
import tempfile
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.log_lines import CURRENT, DP_PAIRS, GEN0, GEN1, V0

from specobs import schema
from specobs.analysis import acceptance
from specobs.errors import InputError
from specobs.ingest import load

K = 4


def _window(lengths: list[int]) -> dict:
    return {
        "source": "s",
        "num_drafts": len(lengths),
        "num_draft_tokens": len(lengths) * K,
        "num_accepted_tokens": sum(lengths),
        "num_accepted_tokens_per_pos": [sum(1 for x in lengths if x > i) for i in range(K)],
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=K), min_size=2, max_size=300),
    data=st.data(),
)
@pytest.mark.slow
def test_any_interval_split_aggregates_to_the_same_summary(lengths, data):
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(lengths) - 1), max_size=20))))
    bounds = [0, *cuts, len(lengths)]
    split = [_window(lengths[a:b]) for a, b in itertools.pairwise(bounds) if b > a]
    whole = [_window(lengths)]
    keys = ["num_drafts", "num_accepted_tokens", "mean_acceptance_length", "draft_acceptance_rate"]
    a = acceptance.summarize(schema.conform(pl.DataFrame(split), schema.WINDOWS), by=()).row(0, named=True)
    b = acceptance.summarize(schema.conform(pl.DataFrame(whole), schema.WINDOWS), by=()).row(0, named=True)
    for key in keys:
        assert a[key] == pytest.approx(b[key])
    assert a["acceptance_rate_per_position"] == pytest.approx(b["acceptance_rate_per_position"])
    assert a["conditional_acceptance_rate_per_position"] == pytest.approx(
        b["conditional_acceptance_rate_per_position"], nan_ok=True
    )
    # And the numbers are the direct ones.
    assert b["mean_acceptance_length"] == pytest.approx(1 + sum(lengths) / len(lengths))


REAL_LINES = [CURRENT, GEN0, GEN1, *DP_PAIRS.splitlines(), *V0.splitlines()]


def _load_bytes(content: bytes, suffix: str = ".log") -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"input{suffix}"
        path.write_bytes(content)
        try:
            result = load([str(path)])
            result.windows.collect()
            acceptance.summarize(result.windows, by=())
        except InputError:
            pass


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=2000))
def test_random_bytes_never_crash(content):
    _load_bytes(content)


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(st.sampled_from(REAL_LINES), min_size=1, max_size=8),
    cuts=st.lists(st.tuples(st.integers(0, 400), st.text(max_size=12)), max_size=6),
    gz=st.booleans(),
)
@pytest.mark.slow
def test_mangled_real_lines_never_crash(lines, cuts, gz):
    text = "\n".join(lines)
    for position, insert in cuts:
        position = min(position, len(text))
        text = text[:position] + insert + text[position + len(insert) // 2 :]
    data = text.encode("utf-8", "surrogatepass") if text else b"x"
    _load_bytes(gzip.compress(data) if gz else data, ".log.gz" if gz else ".log")

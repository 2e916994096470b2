"""The two line-finding backends (grep and Python) must find exactly the same lines."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from test_vllm_log import CURRENT, DP_PAIRS, GEN0, GEN1, V0

from specobs.ingest import vllm_log
from specobs.ingest.scan import find_lines
from specobs.ingest.source import open_source

pytestmark = pytest.mark.skipif(shutil.which("grep") is None, reason="needs a grep program")

NOISE = '(APIServer pid=1) INFO:     127.0.0.1:50000 - "POST /v1/completions HTTP/1.1" 200 OK'


def both(path):
    src = open_source(str(path))
    py = find_lines(src, vllm_log.NEEDLES, backend="python")
    gr = find_lines(src, vllm_log.NEEDLES, backend="grep")
    return py, gr


def assert_same(py, gr):
    assert_frame_equal(py.frame, gr.frame)
    assert py.total_lines == gr.total_lines
    assert [(s.line, s.why) for s in py.skipped] == [(s.line, s.why) for s in gr.skipped]


def test_backends_agree_on_real_lines(write):
    text = "\n".join([NOISE, *DP_PAIRS.splitlines(), NOISE, CURRENT + "\r", GEN0, NOISE, GEN1, *V0.splitlines()])
    text += "\nINFO 11-30 03:13:16 [x.py:1] SpecDecoding metrics: " + "B" * 100_000 + "\n" + CURRENT  # no final newline
    py, gr = both(write("a.log", text))
    assert_same(py, gr)
    assert py.frame.height == 13 and py.total_lines == 17
    assert py.frame["needle"].to_list()[:4] == [2, 0, 2, 0]
    assert py.skipped[0].line == 16 and "longer than 64 KiB" in py.skipped[0].why


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from([CURRENT, GEN0, GEN1, NOISE, *DP_PAIRS.splitlines(), *V0.splitlines()]),
            st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\n"), max_size=80),
        ),
        max_size=30,
    ),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
)
def test_backends_agree_on_any_text(tmp_path_factory, lines, newline, final_newline):
    path = tmp_path_factory.mktemp("scan") / "x.log"
    path.write_bytes((newline.join(lines) + (newline if final_newline and lines else "")).encode())
    py, gr = both(path)
    assert_same(py, gr)

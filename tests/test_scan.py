"""Line finding: exact line numbers and needles, whatever the line endings, lengths and encoding."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_vllm_log import CURRENT, DP_PAIRS, GEN0, GEN1, V0

from specobs.ingest import vllm_log
from specobs.ingest.scan import find_lines
from specobs.ingest.source import open_source

NOISE = '(APIServer pid=1) INFO:     127.0.0.1:50000 - "POST /v1/completions HTTP/1.1" 200 OK'
REAL = [CURRENT, GEN0, GEN1, NOISE, *DP_PAIRS.splitlines(), *V0.splitlines()]


def expected(lines: list[str]) -> list[tuple[int, str, int]]:
    """What a slow, obviously right line-by-line search finds."""
    out = []
    for number, line in enumerate(lines, start=1):
        for index, needle in enumerate(vllm_log.NEEDLES):
            if needle.decode() in line:
                out.append((number, line, index))
                break
    return out


def test_real_lines_with_blank_lines_crlf_and_a_long_line(write):
    lines = [NOISE, "", *DP_PAIRS.splitlines(), "", "", CURRENT, GEN0, NOISE, GEN1, *V0.splitlines()]
    long_line = "INFO 11-30 03:13:16 [x.py:1] SpecDecoding metrics: " + "B" * 100_000
    text = "\r\n".join([*lines, long_line, CURRENT])  # CRLF endings, no final newline
    found = find_lines(open_source(str(write("a.log", text))), vllm_log.NEEDLES)
    want = [row for row in expected([*lines, long_line, CURRENT]) if row[1] != long_line]
    assert found.frame.rows() == want
    assert found.total_lines == len(lines) + 2
    assert [(s.line, s.why) for s in found.skipped] == [(len(lines) + 1, "line longer than 64 KiB")]
    assert found.frame["needle"].to_list()[:4] == [2, 0, 2, 0]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(REAL),
            st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n\x00"), max_size=80),
        ),
        max_size=30,
    ),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
    st.booleans(),
)
def test_same_lines_as_a_line_by_line_search(tmp_path_factory, lines, newline, final_newline, gz):
    import gzip

    path = tmp_path_factory.mktemp("scan") / "x.log"
    data = (newline.join(lines) + (newline if final_newline and lines else "")).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    found = find_lines(open_source(str(path)), vllm_log.NEEDLES)
    assert found.frame.rows() == expected(lines)

"""Line finding: exact line numbers and needles, whatever the line endings, lengths and encoding."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.log_lines import CURRENT, DP_PAIRS, GEN0, GEN1, V0
from support.paths import ROOT

from specobs.ingest import scan, vllm_log
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


BUNDLED_LOGS = sorted((ROOT / "examples" / "data").glob("*.log"))


def _found_both_ways(src_name: str, monkeypatch) -> tuple:
    """find_lines through polars' line reader and through the CSV reader it replaced."""
    fast = find_lines(open_source(src_name), vllm_log.NEEDLES, fields=vllm_log.scan_fields(b""))
    with monkeypatch.context() as patched:
        patched.setattr(scan, "_scan_lines", scan._scan_lines_lossy)
        slow = find_lines(open_source(src_name), vllm_log.NEEDLES, fields=vllm_log.scan_fields(b""))
    return fast, slow


@pytest.mark.parametrize("log", BUNDLED_LOGS, ids=lambda p: p.name)
def test_bundled_logs_read_the_same_by_both_line_readers(log, monkeypatch):
    fast, slow = _found_both_ways(str(log), monkeypatch)
    assert fast.frame.height > 0
    assert fast.frame.equals(slow.frame)
    assert fast.total_lines == slow.total_lines == log.read_bytes().count(b"\n")
    windows_fast, skipped_fast = vllm_log.parse(fast, log.name, year=2026, reference=None)
    windows_slow, skipped_slow = vllm_log.parse(slow, log.name, year=2026, reference=None)
    assert windows_fast.equals(windows_slow)
    assert skipped_fast == skipped_slow


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(REAL),
            st.sampled_from(["", " ", "\x1b[32mINFO\x1b[0m " + CURRENT, CURRENT + "\r", "\r"]),
            st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\n\x00"), max_size=60),
        ),
        min_size=1,
        max_size=25,
    ),
    st.sampled_from(["\n", "\r\n"]),
)
def test_generated_logs_read_the_same_by_both_line_readers(tmp_path_factory, lines, newline):
    path = tmp_path_factory.mktemp("diff") / "x.log"
    path.write_bytes(newline.join(lines).encode())
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, slow = _found_both_ways(str(path), monkeypatch)
    assert fast.frame.equals(slow.frame)
    assert fast.total_lines == slow.total_lines
    assert [(s.line, s.why) for s in fast.skipped] == [(s.line, s.why) for s in slow.skipped]


def test_invalid_utf8_is_replaced_and_the_line_numbers_hold(write):
    data = (
        "\n".join([NOISE, CURRENT, NOISE]).encode() + b"\n\xff\xfe broken " + CURRENT.encode() + b"\n" + GEN1.encode()
    )
    found = find_lines(open_source(str(write("bad.log", data))), vllm_log.NEEDLES)
    assert found.frame.select("line", "needle").rows() == [(2, 0), (4, 0), (5, 0)]
    assert found.frame["text"][1].startswith("\ufffd\ufffd broken ")
    assert found.total_lines == 5


def test_nul_bytes_inside_a_line_do_not_split_it(write):
    text = NOISE + "\x00\x00tail\n" + CURRENT + "\n"
    found = find_lines(open_source(str(write("nul.log", text))), vllm_log.NEEDLES)
    assert found.frame.select("line", "text").rows() == [(2, CURRENT)]
    assert found.total_lines == 2


def test_a_polars_without_the_line_reader_reads_the_same_lines(monkeypatch):
    log = BUNDLED_LOGS[0]
    want = find_lines(open_source(str(log)), vllm_log.NEEDLES)
    monkeypatch.delattr(scan.pl, "scan_lines")
    got = find_lines(open_source(str(log)), vllm_log.NEEDLES)
    assert got.frame.equals(want.frame) and got.total_lines == want.total_lines > 0


def _hostile_lines(count: int) -> list[str]:
    """``count`` lines of every kind the scanner must number right: metric lines of each needle,
    noise, blank lines, a lone CR, an over-long metric line, one with a NUL byte."""
    kinds = [*REAL, "", "\r", NOISE + "\x00tail", "INFO 11-30 03:13:16 [x.py:1] SpecDecoding metrics: " + "B" * 70_000]
    return [kinds[(i * 7 + i // 5) % len(kinds)] for i in range(count)]


@pytest.mark.parametrize("chunk_rows", [1, 3, 64])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("gz", [False, True])
def test_line_numbers_hold_across_the_streaming_readers_morsels(write, chunk_rows, newline, gz):
    """The file is read in morsels of ``chunk_rows`` lines: a morsel may end inside a CRLF pair's
    line, before a blank line or just before a metric line; numbering must not notice."""
    lines = _hostile_lines(200)
    path = write("m.log", newline.join(lines), gz=gz)  # no final newline
    with pl.Config(streaming_chunk_size=chunk_rows):
        found = find_lines(open_source(str(path)), vllm_log.NEEDLES)
    kept = [row for row in expected(lines) if len(row[1].encode()) <= scan.MAX_LINE_BYTES]
    assert found.frame.rows() == kept
    assert found.total_lines == len(lines)
    too_long = [n for n, line in enumerate(lines, 1) if vllm_log.NEEDLES[0].decode() in line and len(line) > 65536]
    assert [s.line for s in found.skipped] == too_long and too_long[-1] > 150


def test_a_log_of_many_megabytes_is_numbered_like_a_line_by_line_read(write):
    """Large enough (≈ 24 MB) for the reader to cut the file into several byte ranges: lines of
    every length, CRLF endings, metric lines close together."""
    lines = [f"{NOISE} {'x' * (i % 997)}" if i % 13 else REAL[i % len(REAL)] for i in range(120_000)]
    lines[60_000:60_003] = ["", CURRENT, ""]
    path = write("big.log", "\r\n".join(lines) + "\r\n")
    found = find_lines(open_source(str(path)), vllm_log.NEEDLES)
    assert found.frame.rows() == expected(lines)
    assert found.total_lines == len(lines)


def test_invalid_utf8_in_a_large_log_keeps_the_line_numbers(write):
    """Invalid UTF-8 sends the whole input to the lossy reader; numbering there must agree too."""
    lines = [NOISE if i % 11 else CURRENT for i in range(50_000)]
    data = "\n".join(lines).encode().replace(NOISE.encode(), b"\xff" + NOISE.encode(), 1) + b"\n"
    found = find_lines(open_source(str(write("bad.log", data))), vllm_log.NEEDLES)
    assert found.frame["line"].to_list() == [i + 1 for i in range(50_000) if i % 11 == 0]
    assert found.total_lines == 50_000

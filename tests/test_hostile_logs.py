"""Hostile input (issue 15): malformed metric lines, cut gzip streams, pipes and FIFOs, UTF-16."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import pytest

from specobs.errors import InputError
from specobs.ingest import load
from tests.conftest import run_cli, windows_of

DATA = Path(__file__).parent.parent / "examples" / "data"
SWEEP = DATA / "vllm-cpu-sweep.log"


# --- 2. a gzip stream cut short keeps every complete line before the cut ---------------------


def _windows_lines(path: Path) -> list[int]:
    return windows_of(path)["source_line"].to_list()


@pytest.mark.parametrize("fraction", [0.15, 0.4, 0.63, 0.9])
def test_cut_gzip_keeps_every_complete_line_before_the_cut(tmp_path: Path, fraction: float) -> None:
    raw = SWEEP.read_bytes()
    packed = gzip.compress(raw, compresslevel=9)
    cut = packed[: int(len(packed) * fraction)]
    # What the cut stream decompresses to, and the complete lines in it.
    inflater = zlib.decompressobj(wbits=31)
    prefix = inflater.decompress(cut)
    complete = prefix[: prefix.rfind(b"\n") + 1]
    assert complete, "the cut must leave at least one complete line"
    expected_path = tmp_path / "prefix.log"
    expected_path.write_bytes(complete)
    os.utime(expected_path, (SWEEP.stat().st_mtime, SWEEP.stat().st_mtime))
    cut_path = tmp_path / "cut.log.gz"
    cut_path.write_bytes(cut)
    os.utime(cut_path, (SWEEP.stat().st_mtime, SWEEP.stat().st_mtime))
    expected = _windows_lines(expected_path)
    result = load([str(cut_path)], None)
    got = result.windows.collect().sort("source_line")["source_line"].to_list()
    assert got == expected
    notices = [s for s in result.skipped if s.line is None and "gzip" in s.why]
    assert len(notices) == 1
    lines = complete.count(b"\n")
    assert f"the {lines} complete lines before it are kept" in notices[0].why


def test_whole_gzip_has_no_notice(tmp_path: Path) -> None:
    path = tmp_path / "whole.log.gz"
    path.write_bytes(gzip.compress(SWEEP.read_bytes()))
    result = load([str(path)], None)
    assert not [s for s in result.skipped if "gzip" in s.why]
    assert result.windows.collect().height == windows_of(SWEEP).height


def test_multi_member_gzip_is_read_whole(tmp_path: Path) -> None:
    raw = SWEEP.read_bytes()
    half = raw.rfind(b"\n", 0, len(raw) // 2) + 1
    path = tmp_path / "two.log.gz"
    path.write_bytes(gzip.compress(raw[:half]) + gzip.compress(raw[half:]))
    assert load([str(path)], None).windows.collect().height == windows_of(SWEEP).height


def test_gzip_cut_before_the_first_line_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "tiny.log.gz"
    path.write_bytes(gzip.compress(SWEEP.read_bytes())[:12])
    result = run_cli("report", str(path))
    assert result.returncode == 2
    assert "corrupt or truncated gzip" in result.stderr.decode()


# --- 4. UTF-16 ------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_is_refused_with_a_hint(tmp_path: Path, encoding: str) -> None:
    bom = b"\xff\xfe" if encoding.endswith("le") else b"\xfe\xff"
    path = tmp_path / "utf16.log"
    path.write_bytes(bom + SWEEP.read_text().encode(encoding))
    with pytest.raises(InputError, match="UTF-16"):
        load([str(path)], None)
    result = run_cli("report", str(path))
    assert result.returncode == 2
    err = result.stderr.decode().strip()
    assert len(err.splitlines()) == 1
    assert "iconv -f UTF-16 -t UTF-8" in err

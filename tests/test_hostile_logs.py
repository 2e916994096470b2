"""Hostile input (issue 15): malformed metric lines, cut gzip streams, pipes and FIFOs, UTF-16."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

from specobs.errors import InputError
from specobs.ingest import load, source
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


# --- 3. pipes, FIFOs and process substitution are read as streams --------------------------


def _report_from_fd(args: list[str], data: bytes) -> subprocess.CompletedProcess:
    """``specobs report /dev/fd/N`` with N the read end of a real pipe (as ``<(cat log)`` gives)."""
    read_end, write_end = os.pipe()
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "specobs.cli", "report", f"/dev/fd/{read_end}", *args],
        pass_fds=(read_end,),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(read_end)
    with os.fdopen(write_end, "wb") as writer:
        writer.write(data)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_report_reads_a_pipe_as_a_stream() -> None:
    result = _report_from_fd(["--format", "json"], SWEEP.read_bytes())
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert b"panicked" not in result.stderr
    report = json.loads(result.stdout)
    expected = json.loads(run_cli("report", str(SWEEP), "--format", "json").stdout)
    assert report["summary"] == expected["summary"]


def test_report_reads_a_gzip_pipe() -> None:
    result = _report_from_fd(["--format", "json"], gzip.compress(SWEEP.read_bytes()))
    assert result.returncode == 0, result.stderr.decode()[-2000:]


def test_fifo_with_a_writer_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)

    def writer() -> None:
        with open(fifo, "wb") as f:
            f.write(SWEEP.read_bytes())

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    result = run_cli("report", str(fifo), "--format", "json")
    thread.join(5)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert (
        json.loads(result.stdout)["summary"]
        == json.loads(run_cli("report", str(SWEEP), "--format", "json").stdout)["summary"]
    )


def test_fifo_without_a_writer_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fifo = tmp_path / "silent.fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(source, "STREAM_READ_TIMEOUT_S", 0.3)
    started = time.monotonic()
    with pytest.raises(InputError, match=r"nothing to read for 0\.3 s"):
        load([str(fifo)], None)
    assert time.monotonic() - started < 5


@pytest.mark.slow
def test_cli_fifo_without_a_writer_fails_in_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "silent.fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    result = run_cli("report", str(fifo))
    elapsed = time.monotonic() - started
    assert result.returncode == 2
    err = result.stderr.decode().strip()
    assert len(err.splitlines()) == 1, err
    assert "nothing to read" in err
    assert source.STREAM_READ_TIMEOUT_S <= elapsed < source.STREAM_READ_TIMEOUT_S + 30

"""Hostile input (issue 15): malformed metric lines, cut gzip streams, pipes and FIFOs, UTF-16."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import polars as pl
import pytest
from support.helpers import run_cli, windows_of
from support.paths import ROOT

from specobs.errors import InputError
from specobs.ingest import load, source

DATA = ROOT / "examples" / "data"
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
    notices = [s for s in result.notices if s.line is None and "gzip" in s.why]
    assert not [s for s in result.skipped if "gzip" in s.why]
    assert len(notices) == 1
    lines = complete.count(b"\n")
    assert f"the {lines} complete lines before it are kept" in notices[0].why


def test_whole_gzip_has_no_notice(tmp_path: Path) -> None:
    path = tmp_path / "whole.log.gz"
    path.write_bytes(gzip.compress(SWEEP.read_bytes()))
    result = load([str(path)], None)
    assert not [s for s in result.skipped if "gzip" in s.why]
    assert not result.notices
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


# --- 1. a metrics line is counted whole or not at all --------------------------------------

V1 = (
    "INFO 11-30 03:13:{s:02d} [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 3.46, "
    "Accepted throughput: 564.02 tokens/s, Drafted throughput: 662.37 tokens/s, Accepted: {acc} tokens, "
    "Drafted: {dra} tokens, Per-position acceptance rate: {pos}, Avg Draft acceptance rate: {rate}"
)
GOOD = {"acc": "1124", "dra": "1320", "pos": "0.877, 0.807, 0.781", "rate": "85.2%"}
CONFIG = (
    "(EngineCore_DP0 pid=9) INFO 11-30 03:10:00 [core.py:77] Initializing a V1 LLM engine (v0.32.0) with config: "
    "model='/models/tiny', speculative_config=SpeculativeConfig(method='draft_model', model='/models/draft', "
    "num_spec_tokens=3), served_model_name=tiny"
)


def _v1(second: int, **fields: str) -> str:
    return V1.format(s=second, **{**GOOD, **fields})


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"acc": "11x4"}, "accepted and drafted"),
        ({"acc": "11.5"}, "accepted and drafted"),
        ({"dra": "1320abc"}, "accepted and drafted"),
        ({"dra": "99999999999999999999999"}, "accepted and drafted"),
        ({"pos": "0.877, ,"}, "Per-position"),
        ({"pos": "0.877, 0.8x07, 0.781"}, "Per-position"),
        ({"pos": "0.877, inf, 0.781"}, "Per-position"),
        ({"pos": "0.877, -0.807"}, "Per-position"),
        ({"pos": "0.877, 1.807"}, "outside [0, 1]"),
        ({"pos": "1.877, 0.807"}, "outside [0, 1]"),
        ({"pos": "0.577, 0.807, 0.781"}, "rise"),
        ({"pos": "0.877, 0.807, 0.781, 0.5"}, "4 per-position rates for k = 3"),
        ({"acc": "1500"}, "exceed drafted"),
    ],
)
def test_a_malformed_v1_line_is_skipped_whole(write, fields: dict[str, str], why: str) -> None:
    bad = _v1(17, **fields)
    path = write("hostile.log", "\n".join([CONFIG, _v1(7), bad, _v1(27)]) + "\n")
    result = load([str(path)], None)
    windows = result.windows.collect()
    assert windows["source_line"].to_list() == [2, 4]
    assert windows["num_accepted_tokens"].to_list() == [1124, 1124]
    assert [(s.source, s.line) for s in result.skipped] == [(str(path), 3)]
    assert why in result.skipped[0].why


def test_mean_acceptance_length_must_be_a_number_of_at_least_one(write) -> None:
    for mal in ("3.4.6", "0.5", "3.46abc"):
        bad = _v1(17).replace("Mean acceptance length: 3.46", f"Mean acceptance length: {mal}")
        path = write("mal.log", "\n".join([_v1(7), bad]) + "\n")
        result = load([str(path)], None)
        assert result.windows.collect()["source_line"].to_list() == [1], mal
        assert [s.line for s in result.skipped] == [2], mal


def test_good_v1_lines_still_read(write) -> None:
    lines = [
        _v1(7),
        # The list last on the line, with a trailing comma (vLLM 0.11); no k known here.
        _v1(8, pos="0.600, 0.385, 0.215, 0.000, 0.000, ").split(", Avg Draft")[0],
        _v1(9, acc="0", dra="0", pos="nan, nan, nan", rate="nan%"),
        _v1(10, acc="1320", rate="100.0%"),
    ]
    path = write("good.log", "\r\n".join(lines) + "\r\n")
    result = load([str(path)], None)
    assert result.windows.collect().height == 4
    assert result.skipped == []


def test_the_report_counts_the_skipped_line(tmp_path: Path) -> None:
    path = tmp_path / "hostile.log"
    path.write_text("\n".join([_v1(7), _v1(17, acc="11x4"), _v1(27)]) + "\n")
    data = json.loads(run_cli("report", str(path), "--format", "json").stdout)
    assert data["summary"]["num_accepted_tokens"] == 2 * 1124
    assert data["skipped_lines"]["examples"][0]["why"].startswith("speculative metrics line without")


V0_LINE = (
    "INFO 10-16 19:05:{s:02d} metrics.py:367] Speculative metrics: Draft acceptance rate: 0.642, System efficiency: "
    "0.598, Number of speculative tokens: {k}, Number of accepted tokens: {acc}, Number of draft tokens: 13311, "
    "Number of emitted tokens: 10616."
)


@pytest.mark.parametrize(("k", "acc"), [("3x", "8547"), ("3", "85 47"), ("3", "20000")])
def test_a_malformed_v0_line_is_skipped_whole(write, k: str, acc: str) -> None:
    good = V0_LINE.format(s=47, k=3, acc=8547)
    later = V0_LINE.format(s=57, k=3, acc=8547).replace("13311", "26622").replace("10616", "21232")
    bad = V0_LINE.format(s=52, k=k, acc=acc)
    path = write("v0.log", "\n".join([good, bad, later]) + "\n")
    result = load([str(path)], None)
    assert result.windows.collect()["source_line"].to_list() == [1, 3]
    assert [s.line for s in result.skipped] == [2]


#: The V0 line of a public vLLM issue, verbatim, as its reporter pasted it (markdown bold).
V0_BOLD = (
    "INFO 10-16 19:05:47 metrics.py:367] **Speculative metrics: Draft acceptance rate: 0.642, System efficiency: "
    "0.598, Number of speculative tokens: 3, Number of accepted tokens: 8547, Number of draft tokens: 13311, "
    "Number of emitted tokens: 10616.**"
)


@pytest.mark.parametrize("wrap", ["**{}**", "`{}`", "{}**", "_{}_", "**{}**  "])
def test_metrics_lines_wrapped_in_markdown_are_read(write, wrap: str) -> None:
    """Markup after a line's last number ends the line, not the number: the counts are read as
    from the bare line (V1 lines ending in a count, in a per-position list; V0 with its period)."""
    bare_v1 = [_v1(7), _v1(8, pos="0.600, 0.385, 0.215").split(", Avg Draft")[0], _v1(9).split(", Per-position")[0]]
    bare_v0 = [V0_BOLD.replace("**", ""), V0_LINE.format(s=57, k=3, acc=9000).replace("13311", "26622")]
    for name, bare in (("v1", bare_v1), ("v0", bare_v0)):
        plain = load([str(write(f"{name}.log", "\n".join(bare) + "\n"))], None)
        wrapped = load([str(write(f"{name}-md.log", "\n".join(wrap.format(line) for line in bare) + "\n"))], None)
        assert wrapped.skipped == [] and plain.skipped == []
        got, expected = wrapped.windows.collect(), plain.windows.collect()
        assert got.height == len(bare)
        for column in ("num_accepted_tokens", "num_draft_tokens", "num_drafts", "num_accepted_tokens_per_pos"):
            assert got[column].to_list() == expected[column].to_list(), (name, column)


def test_the_issue_v0_line_in_bold_is_read(write) -> None:
    result = load([str(write("v0.log", V0_BOLD + "\n"))], None)
    windows = result.windows.collect()
    assert result.skipped == []
    # V0 stores the accepted prefix: drafts = 13311 / 3, accepted = emitted − drafts.
    assert windows["num_drafts"].to_list() == [13311 // 3]
    assert windows["num_accepted_tokens"].to_list() == [10616 - 13311 // 3]


@pytest.mark.parametrize(
    "line",
    [
        _v1(17, dra="1320abc**").split(", Per-position")[0],
        _v1(17, acc="11x4**"),
        _v1(17, pos="0.877, 0.8x07**"),
        _v1(17, pos="0.877, ,**"),
        V0_BOLD.replace("10616.**", "106x16.**"),
        V0_BOLD.replace("10616.**", "10616.5**"),
        V0_BOLD.replace("10616.**", "10616.** and more"),
    ],
)
def test_markup_does_not_make_a_malformed_number_complete(write, line: str) -> None:
    path = write("bad.log", "\n".join([_v1(7), line]) + "\n")
    result = load([str(path)], None)
    assert result.windows.collect()["source_line"].to_list() == [1]
    assert [s.line for s in result.skipped] == [2]
    assert "complete number" in result.skipped[0].why or "without" in result.skipped[0].why


SGLANG = (
    "[2026-07-21 15:00:{s:02d} TP0] Decode batch, #running-req: {run}, #token: 233600, token usage: 0.66, "
    "accept len: {alen}, accept rate: {rate}, cuda graph: True, gen throughput (token/s): 239.06, #queue-req: 2"
)


def _sglang(second: int, run: str = "24", alen: str = "3.05", rate: str = "0.68") -> str:
    return SGLANG.format(s=second, run=run, alen=alen, rate=rate)


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"alen": "3.0.5"}, "accept len"),
        ({"alen": "3x05"}, "accept len"),
        ({"alen": "-3.05"}, "accept len"),
        ({"alen": "inf"}, "accept len"),
        ({"alen": "0.5"}, "accept len below 1"),
        ({"rate": "1.68"}, "accept rate outside"),
        ({"rate": "0.6.8"}, "accept rate"),
        ({"run": "24x"}, "#running-req"),
    ],
)
def test_a_malformed_sglang_line_is_skipped_whole(write, fields: dict[str, str], why: str) -> None:
    path = write("sglang.log", "\n".join([_sglang(10), _sglang(20, **fields), _sglang(30)]) + "\n")
    result = load([str(path)], None)
    assert result.windows.collect()["source_line"].to_list() == [1, 3]
    assert [s.line for s in result.skipped] == [2]
    assert why in result.skipped[0].why


def test_good_sglang_lines_still_read(write) -> None:
    lines = [_sglang(10), _sglang(20, alen="1.00", rate="0.00"), _sglang(30, alen="nan", rate="nan")]
    path = write("sglang.log", "\r\n".join(lines) + "\r\n")
    result = load([str(path)], None)
    assert result.windows.collect()["source_line"].to_list() == [1, 2]
    assert result.skipped == []


def test_a_throughput_no_engine_prints_counts_no_tokens_and_crashes_nothing(tmp_path: Path) -> None:
    """A damaged stats line whose generation throughput overflows a token count (1.8e22 tokens/s
    over its interval) leaves that interval's generated tokens unknown; every other interval keeps
    its count, and the report runs."""
    source = ROOT / "examples" / "data" / "vllm-cpu-serve" / "vllm-cpu-plain-r1.log"
    lines = source.read_text().splitlines()
    stats = [i for i, line in enumerate(lines) if "Avg generation throughput: " in line and "Running: 1 reqs" in line]
    damaged = stats[len(stats) // 2]
    lines[damaged] = re.sub(
        r"Avg generation throughput: [0-9.]+", "Avg generation throughput: 18000000000000000000000.0", lines[damaged]
    )
    path = tmp_path / "damaged.log"
    path.write_text("\n".join(lines) + "\n")
    whole = load([str(source)], None).windows.collect()
    windows = load([str(path)], None).windows.collect()
    row = windows.filter(pl.col("source_line") == damaged + 1)
    assert row.height == 1 and row["num_generated_tokens"].to_list() == [None]
    others = windows.filter(pl.col("source_line") != damaged + 1)
    kept = whole.filter(pl.col("source_line") != damaged + 1)
    assert others["num_generated_tokens"].to_list() == kept["num_generated_tokens"].to_list()
    done = run_cli("report", str(path), "--format", "json")
    assert done.returncode == 0 and "Traceback" not in done.stderr.decode()

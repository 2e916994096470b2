"""The ``specobs`` command as a user runs it: output formats, bad input, exit statuses."""

from __future__ import annotations

import gzip
import json
import os

import pytest
from conftest import report_json, run_cli
from test_vllm_log import CURRENT, DP_PAIRS, GEN1

from specobs import __version__
from specobs.results import SUMMARY_KEYS


def test_version_and_help_show_examples():
    assert run_cli("--version").stdout.decode().strip() == f"specobs {__version__}"
    top = run_cli("--help")
    assert top.returncode == 0 and "report" in top.stdout.decode()
    help_text = run_cli("report", "--help").stdout.decode()
    assert "Examples" in help_text and "specobs report examples/data/" in help_text


def test_report_without_paths_explains_what_it_reads():
    result = run_cli("report")
    assert result.returncode == 2
    text = result.stderr.decode()
    assert "vLLM server logs" in text and "Prometheus scrapes" in text and "event files" in text


def test_json_report_keys_and_numbers(write):
    path = write("dp.log", DP_PAIRS)
    data = report_json(str(path))
    assert list(data["summary"]) == list(SUMMARY_KEYS)
    s = data["summary"]
    # Engines 0 and 1: drafts 22 + 15, accepted 17 + 27, drafted 110 + 75.
    assert (s["num_drafts"], s["num_accepted_tokens"], s["num_draft_tokens"]) == (37, 44, 185)
    assert s["mean_acceptance_length"] == pytest.approx(1 + 44 / 37, abs=1e-6)
    assert s["draft_acceptance_rate"] == pytest.approx(44 / 185, abs=1e-6)
    assert s["acceptance_rate_per_position"][0] == pytest.approx((7 + 8) / 37, abs=1e-6)
    assert s["conditional_acceptance_rate_per_position"][1] == pytest.approx((4 + 5) / (7 + 8), abs=1e-6)
    assert [g["engine"] for g in data["groups"]] == [0, 1]
    for group in data["groups"]:
        assert set(group) == {"source", "engine", "model", "method", *SUMMARY_KEYS}
    assert data["sources"][0]["format"] == "vllm-log" and data["sources"][0]["windows"] == 2
    assert data["skipped_lines"]["total"] == 0


def test_markdown_and_rich_outputs(write):
    path = write("a.log", CURRENT + "\n")
    md = run_cli("report", str(path), "--format", "markdown")
    assert md.returncode == 0
    text = md.stdout.decode()
    assert "| acceptance length [95%] |" in text.replace(
        "acceptance length [95%] | accept rate", "acceptance length [95%] |"
    )
    assert "3.46" in text and "Each draft yields 3.46 tokens" in text
    rich = run_cli("report", str(path))
    assert rich.returncode == 0 and "What this means" not in rich.stderr.decode()
    assert "Each draft yields 3.46 tokens" in rich.stdout.decode()


def test_by_option_groups(write):
    path = write("dp.log", DP_PAIRS)
    data = report_json(str(path), "--by", "batch")
    assert sorted(g["batch_bucket"] for g in data["groups"]) == ["2-3", "4-7"]
    bad = run_cli("report", str(path), "--by", "colour")
    assert bad.returncode == 2 and bad.stderr.decode().startswith("specobs: unknown --by colour")


@pytest.mark.slow
def test_stdin_plain_and_gzip(write):
    data = report_json("-", stdin=(CURRENT + "\n").encode())
    assert data["summary"]["num_accepted_tokens"] == 1124
    data = report_json("-", stdin=gzip.compress((CURRENT + "\n" + GEN1 + "\n").encode()))
    assert data["summary"]["num_accepted_tokens"] == 1124 + 91
    assert data["sources"][0]["source"] == "<stdin>"


def test_unrecognised_file_exits_2_with_one_line(write):
    path = write("notes.txt", "hello\nthis is not a log\n")
    result = run_cli("report", str(path))
    assert result.returncode == 2
    assert result.stderr.decode() == f"specobs: {path}: not a recognised log, scrape or event file\n"
    assert result.stdout == b""


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "empty input"),
        (b"\n\n  \n", "empty input"),
        (os.urandom(4096) + b"\x00" * 10, "binary data"),
    ],
)
def test_empty_and_binary_inputs(write, content, why):
    path = write("x.log", content)
    result = run_cli("report", str(path))
    assert result.returncode == 2
    err = result.stderr.decode()
    assert err.startswith(f"specobs: {path}: {why}") and "Traceback" not in err and err.count("\n") == 1


def test_missing_file(tmp_path):
    result = run_cli("report", str(tmp_path / "nope.log"))
    assert result.returncode == 2 and result.stderr.decode().endswith("nope.log: no such file\n")


def test_log_without_metrics_says_so(write):
    path = write("quiet.log", "INFO 11-30 03:13:17 [api_server.py:1] Starting vLLM API server on http://0.0.0.0:8000\n")
    result = run_cli("report", str(path))
    assert result.returncode == 1
    assert result.stderr.decode() == f"specobs: {path}: no speculative decoding metrics found\n"


def test_ten_megabyte_line_is_skipped_and_the_rest_kept(write):
    huge = "INFO 11-30 03:13:16 [x.py:1] SpecDecoding metrics: " + "A" * (10 * 1024 * 1024)
    path = write("long.log", CURRENT + "\n" + huge + "\n" + GEN1 + "\n")
    result = run_cli("report", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr.decode()
    data = json.loads(result.stdout)
    assert data["summary"]["num_accepted_tokens"] == 1124 + 91
    assert data["skipped_lines"]["total"] == 1
    assert data["skipped_lines"]["examples"][0]["line"] == 2
    assert "longer than" in data["skipped_lines"]["examples"][0]["why"]
    assert f"specobs: skipped {path}:2: line longer than" in result.stderr.decode()


def test_truncated_gzip_keeps_what_was_read(write, tmp_path):
    noise = "INFO 11-30 03:13:16 [x.py:1] some noise line that pads the file out a little\n" * 20000
    text = CURRENT + "\n" + noise + GEN1 + "\n"
    full = gzip.compress(text.encode())
    path = tmp_path / "cut.log.gz"
    path.write_bytes(full[: len(full) // 2])
    result = run_cli("report", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr.decode()
    data = json.loads(result.stdout)
    assert data["summary"]["num_accepted_tokens"] == 1124  # the first line survived, the last was cut off
    assert "gzip stream truncated" in data["skipped_lines"]["examples"][0]["why"]


def test_garbage_gzip_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.gz"
    path.write_bytes(b"\x1f\x8b" + os.urandom(200))
    result = run_cli("report", str(path))
    assert result.returncode == 2
    assert result.stderr.decode().startswith(f"specobs: {path}: corrupt or truncated gzip file")


@pytest.mark.slow
def test_simulate_acceptance_profile_takes_a_length(tmp_path):
    out = tmp_path / "sim"
    args = ("simulate", str(out), "--k", "0,8", "--batch", "1,4", "--steps", "50")
    result = run_cli(*args, "--acceptance", "falling:0.9:0.05:8")
    assert result.returncode == 0, result.stderr.decode()
    s = report_json(str(out))["summary"]
    assert len(s["num_accepted_tokens_per_pos"]) == len(s["acceptance_rate_per_position"]) == 8
    # A k past the profile's positions is a user error, not a crash; so is a length that is no count.
    longer = run_cli("simulate", str(tmp_path / "longer"), "--k", "9", "--acceptance", "falling:0.9:0.05:8")
    assert longer.returncode == 2 and "has 8 positions" in longer.stderr.decode()
    fractional = run_cli(*args, "--acceptance", "falling:0.9:0.05:8.5")
    assert fractional.returncode == 2 and "--acceptance falling:0.9:0.05:8.5" in fractional.stderr.decode()

"""The ``specobs`` command as a user runs it: output formats, bad input, exit statuses."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from support.helpers import report_json, run_cli
from support.log_lines import CURRENT, DP_PAIRS, GEN1
from support.paths import DATA, ROOT

from specobs import __version__
from specobs.records import SUMMARY_KEYS


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
        # Seeded: random bytes now and then open with a UTF-16 byte-order mark, which is said instead.
        (random.Random(4).randbytes(4096) + b"\x00" * 10, "binary data"),
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
    assert data["skipped_lines"]["total"] == 0  # nothing was skipped: the rest is missing
    (notice,) = data["notices"]
    assert "gzip stream truncated" in notice["why"] and notice["source"] == str(path)
    assert f"specobs: note: {path}: gzip stream truncated" in result.stderr.decode()


def test_truncated_gzip_event_file_keeps_every_complete_line(tmp_path):
    """An event file cut mid-stream: the complete lines before the cut count exactly, with a
    notice (not an 'interrupted' exit: the gzip reader's EOFError is not a Ctrl-C)."""
    source = Path(SWEEP) / "specobs-sweep-ngram-p29587-0001.jsonl"
    packed = gzip.compress(source.read_bytes())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(packed[: len(packed) // 2])
    result = run_cli("report", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr.decode()
    data = json.loads(result.stdout)
    (notice,) = data["notices"]
    kept = int(re.search(r"the (\d+) complete lines before it are kept", notice["why"]).group(1))
    lines = [json.loads(line) for line in source.read_text().splitlines()[:kept]]
    assert 0 < kept < len(source.read_text().splitlines())
    assert data["summary"]["num_drafts"] == sum(row["num_drafts"] for row in lines)
    assert data["summary"]["num_accepted_tokens"] == sum(row["num_accepted_tokens"] for row in lines)


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


# --- issue 15: every option checked up front, output that never crashes and fits -------------------

EXAMPLES = str(DATA)
NGRAM_LOG = os.path.join(EXAMPLES, "vllm-cpu-ngram-k3.log")
SWEEP = os.path.join(EXAMPLES, "vllm-cpu-sweep")


def _one_usage_line(result, *words: str) -> str:
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert err.startswith("specobs: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("report", NGRAM_LOG, "--by", ""), ("--by needs at least one of",)),
        (("report", NGRAM_LOG, "--by", " , "), ("--by needs at least one of",)),
        (("report", NGRAM_LOG, "--by", "k,k"), ("--by k,k", "more than once")),
        (("report", NGRAM_LOG, "--since", "garbage"), ("--since garbage", "not a duration")),
        (("report", NGRAM_LOG, "--since", "0s"), ("--since 0s",)),
        (("recommend", SWEEP, "--step", "soon"), ("--step soon",)),
        (("recommend", SWEEP, "--bootstrap", "-1"), ("--bootstrap -1",)),
        (("recommend", SWEEP, "--margin", "-0.5"), ("--margin -0.5",)),
        (("recommend", SWEEP, "--margin", "nan"), ("--margin nan",)),
        (("recommend", SWEEP, "--max-k", "0"), ("--max-k 0",)),
        (("recommend", SWEEP, "--max-k", "-3"), ("--max-k -3",)),
        (("recommend", SWEEP, "--cost-ratio", "-0.1"), ("--cost-ratio -0.1",)),
        (("exporter", SWEEP, "--listen", "localhost"), ("--listen localhost", "host:port")),
        (("exporter", SWEEP, "--listen", ":99999"), ("--listen :99999",)),
        (("exporter", SWEEP, "--listen", "127.0.0.1:http"), ("--listen 127.0.0.1:http",)),
        (("exporter", SWEEP, "--poll", "0"), ("--poll 0",)),
        (("simulate", "{tmp}/sim", "--k", "-1"), ("--k -1",)),
        (("simulate", "{tmp}/sim", "--k", "4,4"), ("--k 4,4",)),
        (("simulate", "{tmp}/sim", "--batch", "0"), ("--batch 0",)),
        (("simulate", "{tmp}/sim", "--steps", "0"), ("--steps 0",)),
        (("recommend", SWEEP, "--max-k", "x"), ("'--max-k'", "recommend --help")),
        (("report", NGRAM_LOG, "--format", "yaml"), ("'--format'", "yaml")),
        (("report", NGRAM_LOG, "--no-such-option"), ("--no-such-option",)),
        # Prometheus-only options without --prometheus would change nothing: refused, not ignored.
        (("report", NGRAM_LOG, "--since", "2h"), ("--since 2h", "only with --prometheus")),
        (("report", NGRAM_LOG, "--step", "30s"), ("--step 30s", "only with --prometheus")),
        (("recommend", SWEEP, "--match", '{{model_name="m"}}'), ('--match {model_name="m"}', "only with --prometheus")),
        (("recommend", SWEEP, "--since", "6h"), ("--since 6h", "only with --prometheus")),  # the default, named
        (("dashboard", "--since", "24h"), ("--since 24h", "only with --prometheus")),
        (("dashboard", "--since", "soon"), ("--since soon", "not a duration")),
        (("report", NGRAM_LOG, "--input-format", "nope"), ("--input-format nope", "vllm-outputs")),
        # --acceptance: every malformed profile names its bad part.
        (("simulate", "{tmp}/sim", "--acceptance", "iid:1.5"), ("--acceptance iid:1.5", "'1.5'", "[0, 1]")),
        (("simulate", "{tmp}/sim", "--acceptance", "iid:-0.2"), ("'-0.2'", "[0, 1]")),
        (("simulate", "{tmp}/sim", "--acceptance", "iid:nan"), ("'nan'",)),
        (("simulate", "{tmp}/sim", "--acceptance", "rising:0.6:1.5"), ("'1.5'", "step per position")),
        (("simulate", "{tmp}/sim", "--acceptance", "falling:0.9:-0.05"), ("'-0.05'",)),
        (("simulate", "{tmp}/sim", "--acceptance", "falling:0.9"), ("expected falling:B0:D",)),
        (("simulate", "{tmp}/sim", "--acceptance", "iid:0.8:0.05"), ("positions '0.05'",)),
        (("simulate", "{tmp}/sim", "--acceptance", "iid:0.8:99999999"), ("positions '99999999'",)),
        (("simulate", "{tmp}/sim", "--acceptance", "uniform:0.5"), ("unknown profile 'uniform'",)),
    ],
)
def test_bad_options_are_one_line_and_exit_2(tmp_path, args, words):
    result = run_cli(*(a.format(tmp=tmp_path) for a in args))
    _one_usage_line(result, *words)
    assert result.stdout == b""


def test_by_empty_is_an_error_not_a_shifted_table():
    # `--by ''` used to group by nothing and shift every column of the group table one place left.
    _one_usage_line(run_cli("report", NGRAM_LOG, "--by", "", "--format", "markdown"), "--by")


def test_simulate_into_an_existing_file_names_it(tmp_path):
    target = tmp_path / "taken.jsonl"
    target.write_text("keep me\n")
    result = run_cli("simulate", str(target), "--steps", "5", "--batch", "1")
    _one_usage_line(result, str(target), "not a folder")
    assert target.read_text() == "keep me\n"  # left alone
    below = run_cli("simulate", str(target / "sub"), "--steps", "5", "--batch", "1")
    _one_usage_line(below, "cannot write")


def test_json_writer_turns_non_finite_floats_into_null():
    import dataclasses
    import math

    from specobs.advice.recommend import recommend
    from specobs.ingest import load
    from specobs.render import to_json

    result = recommend(load([SWEEP]).windows, bootstrap=0)
    assert result is not None
    headline = dataclasses.replace(result.recommended, predicted_speedup=math.nan, interval=(math.nan, math.inf))
    data = json.loads(to_json(dataclasses.replace(result, recommended=headline)))
    assert data["recommended"]["predicted_speedup"] is None
    assert data["recommended"]["interval"] == [None, None]
    assert data["recommended"]["num_speculative_tokens"] == result.recommended.num_speculative_tokens


def _cli_with_patched_command(code: str) -> subprocess.CompletedProcess:
    """The real entry point, ``specobs.cli.main()``, after ``code`` patched something in it."""
    script = (
        f"import sys\nimport specobs.cli as cli\n{code}\nsys.argv = ['specobs', 'report', {NGRAM_LOG!r}]\ncli.main()\n"
    )
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("SPECOBS_DEBUG", None)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, env=env, timeout=120)


def test_a_panic_in_a_compiled_library_is_one_line_exit_70():
    import polars as pl

    # polars' own PanicException (pyo3_runtime), raised where the command analyzes its input.
    assert not issubclass(pl.exceptions.PanicException, Exception)
    result = _cli_with_patched_command(
        "import polars as pl\n"
        "import specobs.api as api\n"
        "def boom(*a, **k):\n    raise pl.exceptions.PanicException('index out of bounds: the len is 0')\n"
        "api.Session.report = boom"
    )
    err = result.stderr.decode()
    assert result.returncode == 70, err
    assert err == (
        "specobs: internal error: PanicException: index out of bounds: the len is 0 "
        "(set SPECOBS_DEBUG=1 for the traceback)\n"
    )


def test_exporter_prints_the_port_it_bound(tmp_path):
    env = {**os.environ, "NO_COLOR": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "specobs.cli", "exporter", SWEEP, "--listen", "127.0.0.1:0", "--poll", "0.2"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline().decode()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        assert match, line
        port = int(match.group(1))
        assert port != 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert response.status == 200
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_rich_tables_on_a_pipe_are_wide_not_80_columns():
    from specobs.render import PIPE_WIDTH

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["NO_COLOR"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "specobs.cli", "report", SWEEP], capture_output=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr.decode()
    widths = [len(line) for line in result.stdout.decode().splitlines()]
    assert max(widths) > 80 and max(widths) <= PIPE_WIDTH
    assert "sweep-ngram" in result.stdout.decode()  # the source column is not cut to a few letters


@pytest.mark.parametrize("fmt", ["rich", "markdown", "json"])
def test_output_into_a_closed_pipe_exits_quietly(fmt):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["NO_COLOR"] = "1"
    command = [sys.executable, "-m", "specobs.cli", "report", SWEEP, "--format", fmt]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.readline()  # `| head -1`: read one line, then go away
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 0, err
    assert "BrokenPipe" not in err and "Traceback" not in err and "Exception ignored" not in err, err


@pytest.mark.parametrize("fmt", ["rich", "markdown"])
def test_groups_without_drafts_are_named_once_not_printed(fmt):
    """The plain engine and k=0 steps have no acceptance: no row, no empty section, one line
    naming them; grouping by k does not print k twice. JSON keeps every group."""
    result = run_cli("report", SWEEP, "--by", "method,k", "--format", fmt)
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode()
    groups = report_json(SWEEP, "--by", "method,k")["groups"]
    empty = [g for g in groups if not g["num_drafts"]]
    assert len(empty) == 3 and len(groups) == 15
    import polars as pl

    steps = pl.concat([pl.read_ndjson(f) for f in sorted(Path(SWEEP).glob("specobs-*.jsonl"))], how="diagonal_relaxed")
    per_group = steps.group_by("method", "num_spec_tokens").agg(pl.len(), pl.col("num_drafts").sum())
    windows = per_group.filter(pl.col("num_drafts") == 0)["len"].sum()
    assert f"Not shown: 3 group(s) without drafts ({windows:,} windows): draft_model · 0, ngram · 0, – · 0" in out
    assert "draft_model · 1" in out and "draft_model · 0\n" not in out
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if "windows" in line and "accepted" in line)
    assert re.findall(r"\bk\b", lines[at]) == ["k"], lines[at]
    end = next(i for i in range(at, len(lines)) if re.match(r"\|? ?all\b", lines[i]))
    rows = [line for line in lines[at:end] if re.match(r"\|? ?(draft_model|ngram|–) +[│|] +\d", line)]
    assert len(rows) == 12, rows  # 6 k each for two methods; the three empty groups left out


# --- the docs and the program agree (formats, exit codes, per-group findings) ---------------------


def test_every_format_the_docs_name_is_an_input_format():
    """docs/formats.md names each format in its headings (``## Title (`name`, …)``): each is an
    ``--input-format`` the command takes, and the command takes no other."""
    from specobs.ingest import FORMATS

    text = (ROOT / "docs" / "formats.md").read_text()
    named = {n for heading in re.findall(r"^## .*\((.*)\)$", text, re.M) for n in re.findall(r"`([\w-]+)`", heading)}
    assert named - {"prometheus-api"} == set(FORMATS)  # --prometheus URL, not a file


def test_input_format_reads_saved_offline_outputs(tmp_path):
    path = tmp_path / "outputs.txt"  # no name hint: the format is forced
    record = {
        "request_id": "7",
        "num_prompt_tokens": 12,
        "outputs": [
            {
                "index": 0,
                "num_output_tokens": 48,
                "spec_decode_metrics": {
                    "acceptance_histogram": [3, 5, 9, 12],
                    "num_spec_steps": 29,
                    "num_accepted_draft_tokens": 59,
                    "num_draft_tokens": 87,
                    "num_spec_tokens": 3,
                },
            }
        ],
    }
    path.write_text(json.dumps(record) + "\n")  # fmt: skip
    data = report_json(str(path), "--input-format", "vllm-outputs")
    assert data["sources"][0]["format"] == "vllm-outputs"
    assert data["requests"]["overall"]["num_spec_steps"] == 29  # 3 + 5 + 9 + 12
    assert data["summary"]["num_accepted_tokens"] == 59  # 5 + 2·9 + 3·12


def _plain_capture(tmp_path: Path) -> Path:
    out = tmp_path / "plain"
    result = run_cli("simulate", str(out), "--k", "0", "--batch", "1,4", "--steps", "30")
    assert result.returncode == 0, result.stderr.decode()
    return out


def test_a_plain_engines_capture_alone_is_a_report_that_says_so(tmp_path):
    """A plain engine's steps are a valid input (the plain baseline): exit 0, and the report's
    first finding says the input holds no speculative decoding and what it holds."""
    out = _plain_capture(tmp_path)
    data = report_json(str(out))
    assert data["summary"]["num_drafts"] == 0 and data["details"]["summary"]["num_windows"] == 60  # 2 batches × 30
    expected = "The input holds no speculative decoding: a plain engine's 60 steps (k = 0, nothing drafted)"
    assert data["findings"][0].startswith(expected)
    rich = run_cli("report", str(out))
    assert rich.returncode == 0 and expected in " ".join(rich.stdout.decode().split())


def test_recommend_on_a_plain_capture_says_nothing_was_drafted(tmp_path):
    out = _plain_capture(tmp_path)
    result = run_cli("recommend", str(out), "--bootstrap", "0")
    err = result.stderr.decode()
    assert result.returncode == 1 and err.count("\n") == 1, err
    assert "no speculative decoding to tune (60 step(s) or interval(s) read, none with drafts)" in err


def test_group_findings_in_json_are_the_bullets_under_each_group(tmp_path):
    """JSON ``group_findings`` holds, per group, the sentences the Markdown report prints under
    that group's per-position table (``groups`` keep exactly the summary keys)."""
    data = report_json(SWEEP, "--by", "method")
    assert [{k: v for k, v in g.items() if k != "findings"} for g in data["group_findings"]] == [
        {"method": g["method"]} for g in data["groups"]
    ]
    for group in data["groups"]:
        assert set(group) == {"method", *SUMMARY_KEYS}
    markdown = run_cli("report", SWEEP, "--by", "method", "--format", "markdown").stdout.decode()
    sections = dict(re.findall(r"^### (.+?)\n(.*?)(?=^### |\Z)", markdown, re.M | re.S))
    drafted = [g for g in data["group_findings"] if g["findings"]]
    assert {g["method"] for g in drafted} == {"ngram", "draft_model"}
    for group in drafted:
        bullets = re.findall(r"^- (.+)$", sections[group["method"]], re.M)
        assert bullets == group["findings"]
    plain = next(g for g in data["group_findings"] if g["method"] is None)
    assert plain["findings"] == []  # the plain engine drafted nothing

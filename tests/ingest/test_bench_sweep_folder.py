"""A real ``vllm bench sweep serve`` experiment folder (examples/data/vllm-cpu-bench-sweep, vLLM
0.32's own sweep code): read as vLLM lays it out — one row per run file, configurations named by
the sweep's server parameters, ``summary.json`` not counted twice, warm-ups left out — and damaged
copies of its real files named and skipped while every whole result is kept. Expected values are
computed here from the files with plain ``json``."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.helpers import report_json
from support.paths import DATA

import specobs
from specobs.ingest.bench_serve import sweep_server

EXPERIMENT = DATA / "vllm-cpu-bench-sweep" / "tiny-llama"
COMBINATIONS = ("SERVE--ngram-BENCH--max_concurrency=1", "SERVE--ngram-BENCH--max_concurrency=4",
                "SERVE--plain-BENCH--max_concurrency=1", "SERVE--plain-BENCH--max_concurrency=4")  # fmt: skip


def raw(path: Path) -> Any:
    return json.loads(path.read_text())


def expected(experiment: Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    """(server name, concurrency, run) → the run file's record, the name and level read from the
    folder name as vLLM builds it: ``"-".join(("SERVE-", serve, "BENCH-", bench))``."""
    out = {}
    for folder in sorted(experiment.glob("SERVE--*")):
        serve, bench = folder.name.removeprefix("SERVE--").split("-BENCH--")
        level = int(bench.removeprefix("max_concurrency="))
        for path in sorted(folder.glob("run=*.json")):
            record = raw(path)
            assert record["run_number"] == int(path.stem.removeprefix("run="))
            out[(serve, level, record["run_number"])] = record
    return out


def check_row(row: dict[str, Any], record: dict[str, Any]) -> None:
    """A row has the record's values (by hand: the share is vLLM's percentage / 100)."""
    for key in ("output_throughput", "duration", "request_throughput", "mean_tpot_ms", "median_tpot_ms",
                "p99_tpot_ms", "mean_ttft_ms", "p90_e2el_ms", "completed", "failed", "num_prompts", "date"):  # fmt: skip
        assert row[key] == record[key], key
    assert row["request_latency_s"] == record["latencies"]
    spec = record.get("speculative_config")
    assert row["speculative"] is (spec is not None) is ("spec_decode_acceptance_length" in record)
    assert row["num_spec_tokens"] == (spec["num_speculative_tokens"] if spec else 0)
    assert row["method"] == (spec["method"] if spec else None)
    if spec:
        assert row["spec_decode_acceptance_rate"] == pytest.approx(record["spec_decode_acceptance_rate"] / 100)
        assert row["spec_decode_acceptance_length"] == record["spec_decode_acceptance_length"]
        assert row["spec_decode_accepted_tokens"] == record["spec_decode_accepted_tokens"]
        assert row["spec_decode_per_position"] == record["spec_decode_per_position_acceptance_rates"]


def by_key(rows: list[dict[str, Any]]) -> dict[tuple[str, int, int], dict[str, Any]]:
    keyed = {(r["config"], r["max_concurrency"], r["run_number"]): r for r in rows}
    assert len(keyed) == len(rows), "a result counted twice"
    return keyed


def test_what_vllm_wrote_is_the_layout_the_reader_expects():
    """vLLM 0.32's sweep: a folder per combination with run=0/1, warmup.json and summary.json
    (the run files' records, in order), summary.csv beside them; each run file carries
    ``run_number``, the server combination's ``_benchmark_name`` and its parameters."""
    assert sorted(p.name for p in EXPERIMENT.iterdir()) == [*COMBINATIONS, "summary.csv"]
    for name in COMBINATIONS:
        folder = EXPERIMENT / name
        assert sorted(p.name for p in folder.iterdir()) == ["run=0.json", "run=1.json", "summary.json", "warmup.json"]
        runs = [raw(folder / f"run={n}.json") for n in (0, 1)]
        assert raw(folder / "summary.json") == runs
        assert raw(folder / "warmup.json")["run_number"] == -1 and raw(folder / "warmup.json")["num_prompts"] == 2
        assert {r["_benchmark_name"] for r in runs} == {name.split("-BENCH--")[0].removeprefix("SERVE--")}
        assert ("speculative_config" in runs[0]) is ("ngram" in name)


def test_one_row_per_run_named_by_the_sweeps_server_parameters():
    want = expected(EXPERIMENT)
    ingested = specobs.load(str(EXPERIMENT))
    rows = by_key(ingested.bench.to_dicts())
    assert set(rows) == set(want) and len(want) == 8  # 2 servers × concurrency 1, 4 × 2 runs
    for key, record in want.items():
        check_row(rows[key], record)
        assert Path(rows[key]["source"]).name == f"run={key[2]}.json"
    assert {(r["config"], r["speculative"]) for r in rows.values()} == {("plain", False), ("ngram", True)}
    assert ingested.skipped == []
    # summary.json repeats the run files: counted once, and said; warm-ups and the CSV are notes.
    notes = [(Path(n.source).name, n.line, n.why) for n in ingested.notices]
    assert (
        sorted(n for n in notes if n[0] == "summary.json")
        == [("summary.json", None, "2 result(s) also read from another file (a sweep's run=N.json): counted once")] * 4
    )
    assert sum(n[0] == "warmup.json" and n[1] == 1 and "warm-up" in n[2] for n in notes) == 4
    assert sum(n[0] == "summary.csv" for n in notes) == 1
    assert {s.format for s in ingested.sources} == {"vllm-bench-serve", "vllm-bench-sweep-csv"}


def test_a_summary_read_alone_counts_whole():
    folder = EXPERIMENT / "SERVE--ngram-BENCH--max_concurrency=4"
    ingested = specobs.load(str(folder / "summary.json"))
    assert ingested.bench["source_line"].to_list() == [1, 2] and ingested.notices == []
    for row, record in zip(ingested.bench.to_dicts(), raw(folder / "summary.json"), strict=True):
        check_row(row, record)
        assert row["config"] == "ngram"


def test_the_report_compares_ngram_with_plain_per_level_as_by_hand():
    want = expected(EXPERIMENT)
    doc = report_json(str(EXPERIMENT))
    ratios = {r["level"]: r for r in doc["serving"]["ratios"]}
    assert set(ratios) == {1.0, 4.0}
    for level, r in ratios.items():
        assert (r["config"], r["plain_config"], r["load"], r["runs"], r["plain_runs"]) == (
            "ngram", "plain", "concurrency", 2, 2)  # fmt: skip

        def geo(config: str, key: str, level: float = level) -> float:
            values = [want[(config, int(level), n)][key] for n in (0, 1)]
            return math.exp(sum(map(math.log, values)) / 2)

        assert r["throughput_ratio"] == pytest.approx(
            geo("ngram", "output_throughput") / geo("plain", "output_throughput"), rel=1e-5
        )
        assert r["tpot_ratio"] == pytest.approx(geo("ngram", "mean_tpot_ms") / geo("plain", "mean_tpot_ms"), rel=1e-5)
    assert doc["skipped_lines"]["total"] == 0


def damage(tmp_path: Path) -> Path:
    """A copy of the experiment with real files damaged as a crash, a bad edit or a bad merge would."""
    copy = tmp_path / "tiny-llama"
    shutil.copytree(EXPERIMENT, copy)

    def cut(path: Path) -> None:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])

    # ngram c=1: run 1 and the summary both cut short: run 1 is lost, run 0 is kept from its file.
    cut(copy / COMBINATIONS[0] / "run=1.json")
    cut(copy / COMBINATIONS[0] / "summary.json")
    # ngram c=4: run 1 cut short, still whole in summary.json (item 2): kept from there.
    cut(copy / COMBINATIONS[1] / "run=1.json")
    # plain c=1: run 0 without its output throughput, still whole in summary.json (item 1).
    record = raw(copy / COMBINATIONS[2] / "run=0.json")
    del record["output_throughput"]
    (copy / COMBINATIONS[2] / "run=0.json").write_text(json.dumps(record, indent=4))
    # plain c=4: summary.json's item 2 not an object; run=1.json still whole.
    summary = raw(copy / COMBINATIONS[3] / "summary.json")
    summary[1] = "run 1 went here"
    (copy / COMBINATIONS[3] / "summary.json").write_text(json.dumps(summary, indent=4))
    return copy


def test_damaged_real_files_are_named_and_skipped_and_every_whole_result_kept(tmp_path):
    copy = damage(tmp_path)
    want = expected(EXPERIMENT)
    ingested = specobs.load(str(copy))
    rows = by_key(ingested.bench.to_dicts())
    assert set(rows) == set(want) - {("ngram", 1, 1)}
    for key, row in rows.items():
        check_row(row, want[key])
    # Where each kept result was read: its run file, or the summary where the run file is damaged.
    where = {key: (Path(r["source"]).parent.name, Path(r["source"]).name, r["source_line"]) for key, r in rows.items()}
    assert where[("ngram", 4, 1)] == (COMBINATIONS[1], "summary.json", 2)
    assert where[("plain", 1, 0)] == (COMBINATIONS[2], "summary.json", 1)
    assert where[("plain", 4, 1)] == (COMBINATIONS[3], "run=1.json", 1)
    skipped = sorted((Path(s.source).parent.name, Path(s.source).name, s.line, s.why) for s in ingested.skipped)
    cut_short = ": a result cut short?"
    assert [(f, n, line) for f, n, line, _ in skipped] == [
        (COMBINATIONS[0], "run=1.json", None), (COMBINATIONS[0], "summary.json", None),
        (COMBINATIONS[1], "run=1.json", None), (COMBINATIONS[2], "run=0.json", 1),
        (COMBINATIONS[3], "summary.json", 2)]  # fmt: skip
    whys = [why for *_, why in skipped]
    assert all(why.startswith("not complete JSON (line ") and why.endswith(cut_short) for why in whys[:3])
    assert whys[3:] == ["output_throughput is missing or not a number", "not a JSON object"]
    # A pretty-printed file cut short is one unreadable file, not a line skipped per printed line.
    assert len(ingested.skipped) == 5
    counts = {Path(s.name).parent.name + "/" + Path(s.name).name: s.skipped for s in ingested.sources}
    assert counts[f"{COMBINATIONS[2]}/run=0.json"] == 1 and counts[f"{COMBINATIONS[3]}/summary.json"] == 1
    assert f"{COMBINATIONS[0]}/run=1.json" not in counts  # unreadable: no source
    doc = report_json(str(copy))
    assert doc["skipped_lines"]["total"] == 5
    assert {(r["level"], r["runs"], r["plain_runs"]) for r in doc["serving"]["ratios"]} == {(1.0, 1, 2), (4.0, 2, 2)}


def test_failed_runs_of_a_sweep_that_went_on_are_named_with_vllms_error(tmp_path):
    """``--continue-on-error``: vLLM writes ``run=N.failure.json`` instead of the run (and leaves it
    out of summary.json), ``SERVE-<name>-failure.json`` for a server that did not start, as
    ``json.dumps(..., indent=2) + "\\n"`` in ``vllm/benchmarks/sweep/serve.py``."""
    copy = tmp_path / "tiny-llama"
    shutil.copytree(EXPERIMENT, copy)
    folder = copy / COMBINATIONS[1]
    (folder / "run=1.json").unlink()
    (folder / "summary.json").write_text(json.dumps(raw(folder / "summary.json")[:1], indent=4))
    failure = {"run_number": 1, "error_type": "CalledProcessError",
               "error": "Command '['python', '-c', '...']' returned non-zero exit status 1.",
               "serve_overrides": {"_benchmark_name": "ngram"}, "bench_overrides": {"max_concurrency": 4}}  # fmt: skip
    (folder / "run=1.failure.json").write_text(json.dumps(failure, indent=2) + "\n")
    server = {"error_type": "RuntimeError", "error": "Server process crashed with return code 1",
              "serve_overrides": {"_benchmark_name": "eagle"}}  # fmt: skip
    (copy / "SERVE-eagle-failure.json").write_text(json.dumps(server, indent=2) + "\n")
    ingested = specobs.load(str(copy))
    assert set(by_key(ingested.bench.to_dicts())) == set(expected(EXPERIMENT)) - {("ngram", 4, 1)}
    assert sorted((Path(s.source).name, s.line, s.why) for s in ingested.skipped) == [
        ("SERVE-eagle-failure.json", None,
         "a sweep's failed server, no result: RuntimeError: Server process crashed with return code 1"),
        ("run=1.failure.json", None, "a sweep's failed run 1, no result: CalledProcessError: Command "
         "'['python', '-c', '...']' returned non-zero exit status 1."),
    ]  # fmt: skip
    formats = {Path(s.name).name: (s.format, s.skipped) for s in ingested.sources}
    assert formats["run=1.failure.json"] == ("vllm-bench-sweep-failure", 1)


def test_a_label_in_the_sweeps_bench_command_does_not_merge_its_servers(tmp_path):
    """``--label`` in ``--bench-cmd`` is the same for every server: the folder's combination names
    the configuration; ``--metadata config=…`` (specobs's own key) still wins."""
    for name in COMBINATIONS:
        record = raw(EXPERIMENT / name / "run=0.json") | {"label": "nightly"}
        (tmp_path / name).mkdir()
        (tmp_path / name / "run=0.json").write_text(json.dumps(record, indent=4))
    bench = specobs.load(str(tmp_path)).bench
    assert sorted(bench["config"].to_list()) == ["ngram", "ngram", "plain", "plain"]
    assert set(bench["label"].to_list()) == {"nightly"}
    record = raw(EXPERIMENT / COMBINATIONS[0] / "run=0.json") | {"config": "ngram-k3"}
    (tmp_path / COMBINATIONS[0] / "run=0.json").write_text(json.dumps(record, indent=4))
    assert "ngram-k3" in specobs.load(str(tmp_path)).bench["config"].to_list()


@pytest.mark.parametrize(
    ("folder", "server"),
    [
        ("SERVE--plain-BENCH--max_concurrency=4", "plain"),
        (
            "SERVE--max_num_seqs=8-speculative_config={'method': 'ngram'}-BENCH--max_concurrency=4",
            "max_num_seqs=8-speculative_config={'method': 'ngram'}",
        ),
        ("SERVE--plain", "plain"),  # no bench parameters
        ("BENCH--max_concurrency=4", None),  # no server parameters: the serve command as given
        ("SERVE-plain-BENCH-c4", "plain"),
    ],
)
def test_server_names_from_sweep_folder_names(folder, server):
    assert sweep_server(f"results/exp/{folder}/run=0.json") == server


def test_folder_names_are_vllms_own():
    """Where vLLM is installed: its sweep's own folder names give the server names back."""
    sweep = pytest.importorskip("vllm.benchmarks.sweep.serve")
    from vllm.benchmarks.sweep.param_sweep import ParameterSweep

    serve = ParameterSweep.read_from_dict({"plain": {}}) + ParameterSweep.from_records(
        [{"max_num_seqs": 8, "speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}]
    )
    bench = ParameterSweep.from_records([{"max_concurrency": 4}, {}])
    for s in serve:
        for b in bench:
            path = sweep._get_comb_base_path(Path("exp"), s, b) / "run=0.json"
            assert sweep_server(str(path)) == s.name

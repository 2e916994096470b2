"""The public API: docs/api.md's example runs, ``__all__`` resolves, and the CLI's JSON is ``to_dict()``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import polars as pl
import pytest
from support.helpers import assert_same_json, run_cli
from support.paths import ROOT

import specobs
from specobs.ingest import load
from specobs.records import Comparison, Recommendation, Report

SWEEP = ROOT / "examples" / "data" / "vllm-cpu-sweep"


@pytest.mark.slow
def test_the_worked_example_in_docs_api_runs(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(), re.S)
    assert len(blocks) >= 4
    namespace: dict = {}
    for block in blocks:  # one namespace: later blocks use what earlier ones defined
        exec(compile(block, "docs/api.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "ngram:" in out and "acceptance length" in out


def test_every_public_name_resolves_and_import_is_cheap():
    assert set(specobs.__all__) == {"__version__", *specobs._EXPORTS}
    for name in specobs.__all__:
        assert getattr(specobs, name) is not None, name
    assert callable(specobs.analyze) and callable(specobs.recommend)
    assert (ROOT / "specobs" / "py.typed").exists()
    # Importing the package must not import polars: the vLLM plugin imports it in every process.
    code = "import sys, specobs; assert 'polars' not in sys.modules, 'polars imported'"
    assert run_cli_python(code) == 0


def _documented_signatures() -> dict[str, str]:
    """``name → parameters`` of every ``name(...)`` in the first column of docs/api.md's table."""
    rows = re.findall(r"^\| `(\w+)\((.*?)\)` \|", (ROOT / "docs" / "api.md").read_text(), re.M)
    return dict(rows)


def _parameters(text: str) -> list[tuple[str, str, object]]:
    """``(name, kind, default)`` of a documented parameter list (``...``: no default)."""
    import ast

    from specobs.analysis.acceptance import DEFAULT_BY

    args = ast.parse(f"def f({text}): pass").body[0].args  # type: ignore[attr-defined]

    def value(node: ast.expr | None) -> object:
        if node is None:
            return ...
        if isinstance(node, ast.Name) and node.id == "DEFAULT_BY":
            return DEFAULT_BY
        return ast.literal_eval(node)

    positional = [None] * (len(args.args) - len(args.defaults)) + list(args.defaults)
    return [(a.arg, "POSITIONAL_OR_KEYWORD", value(d)) for a, d in zip(args.args, positional, strict=True)] + [
        (a.arg, "KEYWORD_ONLY", value(d)) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]


def test_docs_api_signatures_are_the_functions_own():
    """Every public function is in docs/api.md's table with every parameter, in order, of the
    right kind (after ``*``: keyword-only) and with its real default."""
    import inspect

    documented = _documented_signatures()
    functions = {n for n in specobs.__all__ if inspect.isfunction(getattr(specobs, n))}
    assert set(documented) == functions
    for name, text in documented.items():
        real = [
            (p.name, p.kind.name, ... if p.default is inspect.Parameter.empty else p.default)
            for p in inspect.signature(getattr(specobs, name)).parameters.values()
        ]
        assert _parameters(text) == real, name


def run_cli_python(code: str) -> int:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], capture_output=True, env=dict(os.environ)).returncode


def _cli_json(*args: str) -> dict:
    result = run_cli(*args, "--format", "json")
    assert result.returncode in (0, 3), result.stderr.decode()
    return json.loads(result.stdout)


@pytest.mark.slow
def test_cli_json_is_the_document_of_every_verb():
    sweep = str(SWEEP)
    data = load(sweep)
    report = specobs.analyze(data, by="method,k")
    assert isinstance(report, Report)
    # Floats to their last bits: the CLI's process sums them on other threads.
    assert_same_json(json.loads(json.dumps(specobs.document(report))), _cli_json("report", sweep, "--by", "method,k"))

    rec = specobs.recommend(data, bootstrap=0)
    assert isinstance(rec, Recommendation)
    assert_same_json(json.loads(json.dumps(specobs.document(rec))), _cli_json("recommend", sweep, "--bootstrap", "0"))

    a, b = (
        sorted(str(p) for p in SWEEP.glob("*ngram*")),
        sorted(str(p) for p in SWEEP.glob("*draft_model*")),
    )
    cmp = specobs.compare(a, b)
    assert isinstance(cmp, Comparison)
    cli = _cli_json("compare", a[0], b[0])
    # The CLI reads one file per side here (no metadata beside it): so does the API given the same.
    assert_same_json(json.loads(json.dumps(specobs.document(specobs.compare(a[0], b[0])))), cli)


def _with_backend(folder: Path, backend: str) -> Path:
    """A copy of the bundled ngram engine whose run metadata says it ran on ``backend``."""
    folder.mkdir()
    for path in SWEEP.glob("*ngram*"):
        text = path.read_text()
        if path.name.startswith("run-metadata"):
            record = json.loads(text)
            record["attention_backend"] = backend
            text = json.dumps(record) + "\n"
        (folder / path.name).write_text(text)
    return folder


def test_every_verb_takes_what_load_returns_paths_and_frames(tmp_path):
    data = load(str(SWEEP))
    frame = data.windows.collect()
    by_load = specobs.analyze(data, by=["method"])
    assert specobs.analyze(str(SWEEP), by="method").summary == by_load.summary
    assert specobs.analyze([SWEEP], by="method").summary == by_load.summary
    assert specobs.analyze(frame, by="method").summary == by_load.summary
    # A string is one path, never its characters; by as a string is names, never letters.
    assert [s.name for s in load(str(SWEEP)).sources] == [s.name for s in load([str(SWEEP)]).sources]
    assert [g.labels["method"] for g in by_load.groups] == [
        g.labels["method"] for g in specobs.analyze(data, by=("method",)).groups
    ]
    for verb in (specobs.summarize, lambda d: specobs.recommend(d, bootstrap=0)):
        results = [verb(d) for d in (data, str(SWEEP), frame)]
        assert all(r is not None for r in results)
    assert specobs.summarize(data, by="method").equals(specobs.summarize(frame, by="method"))
    with pytest.raises(specobs.SpecobsError, match="got int"):
        specobs.recommend(42)  # type: ignore[arg-type]
    with pytest.raises(specobs.SpecobsError, match="unknown --by"):
        specobs.analyze(data, by="method,colour")
    with pytest.raises(specobs.SpecobsError, match="expected a path"):
        load([1, 2])  # type: ignore[list-item]


def test_compare_through_the_api_sees_the_run_metadata_the_cli_sees(tmp_path):
    a = _with_backend(tmp_path / "a", "CPU_ATTN")
    b = _with_backend(tmp_path / "b", "ROCM_AITER_FA")
    api = specobs.compare(load(str(a)), load(str(b)))
    assert [d.field for d in api.configuration.environment] == ["attention_backend"]
    assert api.kind == "configuration_changed"
    cli = _cli_json("compare", str(a), str(b))
    assert cli["kind"] == api.kind and cli["verdict"] == specobs.document(api)["verdict"]
    assert "CPU_ATTN" in cli["verdict"] and "ROCM_AITER_FA" in cli["verdict"]


def test_every_verb_reads_an_input_in_parts_as_the_whole(tmp_path):
    """``part_rows`` defers large Parquet inputs to parts: every verb must still see all rows."""
    sim = specobs.simulate("ngram", ks=[0, 3], batch_sizes=[1, 8], steps=300, seed=2)
    for i, part in enumerate(sim.iter_slices(400)):
        part.write_parquet(tmp_path / f"specobs-sim-{i:04d}.parquet")
    whole = load(str(tmp_path))
    parts = load(str(tmp_path), part_rows=500)
    assert parts.deferred and not whole.deferred
    assert specobs.analyze(parts).summary == specobs.analyze(whole).summary
    from polars.testing import assert_frame_equal

    assert_frame_equal(specobs.summarize(parts), specobs.summarize(whole), check_row_order=False, rel_tol=1e-9)
    rec_whole, rec_parts = specobs.recommend(whole, bootstrap=0), specobs.recommend(parts, bootstrap=0)
    assert rec_parts is not None and rec_whole is not None
    a, b = rec_parts.recommended, rec_whole.recommended
    assert (a.method, a.num_speculative_tokens, a.schedule, a.basis) == (
        b.method,
        b.num_speculative_tokens,
        b.schedule,
        b.basis,
    )
    assert a.predicted_speedup == pytest.approx(b.predicted_speedup, rel=1e-9)  # sums in another order
    cmp = specobs.compare(parts, whole)
    assert cmp.a == cmp.b and cmp.kind == "unchanged"


def test_results_are_frozen_and_typed():
    rec = specobs.recommend(load(str(SWEEP)), bootstrap=0)
    with pytest.raises(AttributeError):
        rec.recommended.method = "eagle"  # type: ignore[misc]
    # Internal fields a renderer reads never leak into the JSON.
    row = rec.by_batch_size[0]
    assert row.tokens_per_step is not None and "tokens_per_step" not in row.to_dict()
    assert set(row.to_dict()) == {
        "method", "batch_size_min", "batch_size_max", "num_speculative_tokens", "predicted_speedup", "interval",
        "basis", "measured_steps",
    }  # fmt: skip


def test_a_format_a_command_cannot_write_is_refused():
    from specobs.records import Finding
    from specobs.render import emit

    with pytest.raises(specobs.SpecobsError, match="--format markdown is not available"):
        emit(Finding("x", "y"), "markdown")  # type: ignore[arg-type]
    result = run_cli(
        "compare", str(next(SWEEP.glob("specobs-*ngram*"))), str(next(SWEEP.glob("specobs-*plain*"))), "-f", "markdown"
    )
    assert result.returncode == 0 and result.stdout.decode().startswith("**A and B differ")
    assert "|---|---|---|" in result.stdout.decode()


@pytest.mark.slow
def test_missing_inputs_are_handled_one_way():
    for command in ("report", "recommend"):
        result = run_cli(command)
        assert result.returncode == 2
        assert f"specobs {command} reads what operators already have" in result.stderr.decode()
    for args in (("report", "nope.log"), ("recommend", "nope.log"), ("compare", "nope.log", "nope2.log")):
        result = run_cli(*args)
        assert result.returncode == 2 and result.stderr.decode() == "specobs: nope.log: no such file\n", args


def test_simulate_is_deterministic_and_plain_at_k0():
    steps = specobs.simulate("ngram", ks=[0, 3], batch_sizes=[2], steps=30, seed=5)
    again = specobs.simulate("ngram", ks=[0, 3], batch_sizes=[2], steps=30, seed=5)
    assert steps.equals(again)
    plain = steps.filter(pl.col("num_spec_tokens") == 0)
    assert plain.height == 30 and plain["method"].null_count() == 30 and plain["num_drafts"].sum() == 0


# --- the session: the CLI's and the dashboard's -------------------------------------------------


def _counting_reads(monkeypatch) -> list[str]:
    """The inputs ``load`` reads from now on, by name (one entry per read)."""
    import specobs.ingest

    reads: list[str] = []
    real = specobs.ingest.read_source

    def counted(src, *args, **kwargs):
        reads.append(src.name)
        return real(src, *args, **kwargs)

    monkeypatch.setattr(specobs.ingest, "read_source", counted)
    return reads


def test_a_session_reads_its_inputs_once_and_keeps_every_answer(monkeypatch):
    from specobs.api import Inputs, Session

    reads = _counting_reads(monkeypatch)
    session = Session.open(Inputs((str(SWEEP),)))
    read_once = len(reads)
    assert read_once == len([p for p in SWEEP.iterdir() if p.is_file()])
    report = session.report("method,k")
    assert session.report("method,k") is report  # kept: not summed again
    rec = session.recommend(bootstrap=0)
    assert session.recommend(bootstrap=0) is rec
    assert session.report("method") is not report
    assert len(reads) == read_once  # no verb read an input again
    assert specobs.analyze(session, by="method,k") is report  # the module's verbs take a session too


def test_a_summed_session_answers_filters_from_its_sums(monkeypatch):
    from specobs.api import Filters, Inputs, Session

    reads = _counting_reads(monkeypatch)
    session = Session.summed(Inputs((str(SWEEP),)))
    read_once = len(reads)
    parquet: list[str] = []
    real_read_parquet = pl.read_parquet

    def counted_parquet(source, *args, **kwargs):
        parquet.append(str(source))
        return real_read_parquet(source, *args, **kwargs)

    monkeypatch.setattr(pl, "read_parquet", counted_parquet)
    ngram = Filters((("method", ("ngram",)),))
    whole, only = session.report(("method", "k")), session.report(("method", "k"), filters=ngram)
    assert {g.labels["method"] for g in only.groups} == {"ngram", None}  # the plain baseline stays
    assert only.summary.num_drafts < whole.summary.num_drafts
    assert session.report(("method", "k"), filters=ngram) is only
    assert session.count_windows(ngram) < session.count_windows()
    assert session.recommend(bootstrap=0) is not None and session.recommend(bootstrap=0, filters=ngram) is not None
    spilled = len(parquet)  # the rows on disk, read back once for the recommendation cells
    assert spilled >= 1
    session.recommend(bootstrap=0, filters=Filters((("method", ("draft_model",)),)))
    session.measured(ngram)
    assert len(parquet) == spilled and len(reads) == read_once  # every filter from what is held


def test_filters_are_refused_where_no_sums_are_kept():
    from specobs.api import Filters, Inputs, Session
    from specobs.errors import SpecobsError

    session = Session.open(Inputs((str(SWEEP),)))
    with pytest.raises(SpecobsError, match="summed session"):
        session.report(filters=Filters((("method", ("ngram",)),)))


def test_the_cli_and_a_session_give_the_same_json():
    from specobs.api import Inputs, Session

    path = str(ROOT / "examples" / "data" / "vllm-cpu-ngram-k3.log")
    session = Session.open(Inputs((path,)))
    cli = run_cli("report", path, "--format", "json")
    assert cli.returncode == 0, cli.stderr.decode()
    assert json.dumps(specobs.document(session.report()), indent=2) + "\n" == cli.stdout.decode()
    assert_same_json(json.loads(json.dumps(specobs.document(session.recommend()))), _cli_json("recommend", path))


def test_one_slow_answer_holds_up_neither_another_key_nor_a_second_computation():
    """The dashboard shares one session across browser tabs: while one key is computed, another
    key is answered at once, and a second thread asking the same key waits for that answer
    instead of computing it again."""
    import threading

    from specobs.api import Session
    from specobs.ingest import Ingested

    session = Session(Ingested())
    started, release = threading.Event(), threading.Event()
    computed: list[str] = []

    def slow() -> str:
        computed.append("slow")
        started.set()
        assert release.wait(10)
        return "slow answer"

    answers: dict[str, str] = {}
    first = threading.Thread(target=lambda: answers.setdefault("first", session._answer("slow", slow)))
    second = threading.Thread(target=lambda: answers.setdefault("second", session._answer("slow", slow)))
    first.start()
    assert started.wait(10)
    second.start()
    assert session._answer("quick", lambda: "quick answer") == "quick answer"  # not held up
    release.set()
    first.join(10)
    second.join(10)
    assert answers == {"first": "slow answer", "second": "slow answer"} and computed == ["slow"]
    assert session._answer("slow", slow) == "slow answer" and computed == ["slow"]


def test_an_answer_that_fails_is_not_kept():
    from specobs.api import Session
    from specobs.ingest import Ingested

    session = Session(Ingested())

    def broken() -> str:
        raise ValueError("no")

    with pytest.raises(ValueError):
        session._answer("k", broken)
    assert session._answer("k", lambda: "now") == "now"

"""The public API: docs/api.md's example runs, ``__all__`` resolves, and the CLI's JSON is ``to_dict()``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import polars as pl
import pytest
from conftest import assert_same_json, run_cli

import specobs
from specobs.ingest import load
from specobs.records import Comparison, Recommendation, Report

ROOT = Path(__file__).resolve().parents[1]
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
def test_cli_json_is_to_dict_for_every_command():
    sweep = str(SWEEP)
    data = load([sweep])
    report = specobs.analyze(data, by=["method", "k"])
    assert isinstance(report, Report)
    # Floats to their last bits: the CLI's process sums them on other threads.
    assert_same_json(json.loads(json.dumps(report.to_dict())), _cli_json("report", sweep, "--by", "method,k"))

    rec = specobs.recommend(data.windows, bootstrap=0, metadata=data.metadata)
    assert isinstance(rec, Recommendation)
    assert_same_json(json.loads(json.dumps(rec.to_dict())), _cli_json("recommend", sweep, "--bootstrap", "0"))

    a, b = (
        sorted(str(p) for p in SWEEP.glob("specobs-*ngram*")),
        sorted(str(p) for p in SWEEP.glob("specobs-*draft_model*")),
    )
    cmp = specobs.compare(load(a).windows, load(b).windows)
    assert isinstance(cmp, Comparison)
    assert_same_json(json.loads(json.dumps(cmp.to_dict())), _cli_json("compare", a[0], b[0]))


def test_results_are_frozen_and_typed():
    rec = specobs.recommend(load([str(SWEEP)]).windows, bootstrap=0)
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

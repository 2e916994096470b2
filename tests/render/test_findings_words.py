"""Render only words: every finding is decided in analysis or advice, and worded here from its facts."""

from __future__ import annotations

import ast
import json

import pytest
from support.paths import ROOT

from specobs.advice.report_builder import analyze
from specobs.ingest import load
from specobs.records import AcceptanceLengthFacts, Finding, FindingKind, NoFacts, Severity
from specobs.render import document, sentences

RENDER = ROOT / "specobs" / "render"
DATA = ROOT / "examples" / "data"


def test_no_finding_is_constructed_in_render():
    for path in sorted(RENDER.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        named = [getattr(c.func, "id", None) or getattr(c.func, "attr", None) for c in calls]
        assert "Finding" not in named, f"{path.relative_to(ROOT)} constructs a Finding: decide it in analysis/advice"


#: Modules that decide findings: render reads what they decided (``Report.findings``, ``group_findings``,
#: ``key_findings``), never asks them.
DECIDERS = {"specobs.analysis.findings", "specobs.advice.report_findings"}


def _imported(tree: ast.AST) -> set[str]:
    """Every module a tree imports (``from a import b`` names both ``a`` and ``a.b``)."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out |= {alias.name for alias in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module:
            out |= {n.module} | {f"{n.module}.{alias.name}" for alias in n.names}
    return out


def test_render_and_the_dashboard_never_ask_the_modules_that_decide_findings():
    paths = sorted(RENDER.glob("*.py")) + sorted((ROOT / "specobs" / "dashboard").glob("*.py"))
    for path in paths:
        asked = _imported(ast.parse(path.read_text(encoding="utf-8"))) & DECIDERS
        assert not asked, f"{path.relative_to(ROOT)} imports {sorted(asked)}: read the findings the record carries"


def _float(node: ast.expr) -> float | None:
    inner = node.operand if isinstance(node, ast.UnaryOp) else node
    value = inner.value if isinstance(inner, ast.Constant) else None
    return value if isinstance(value, float) else None


def test_render_compares_no_number_against_a_threshold():
    """A comparison against a float (``share < 0.999``, ``abs(r - 1) >= 0.005``, ``low <= 1.0``) is a
    threshold: it is decided beside the numbers and carried as a field or property of the record.
    Render compares only to say which way a number went (``> 1``, ``> 0``) or to count rows."""
    for path in sorted(RENDER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            for operand in (node.left, *node.comparators):
                value = _float(operand)
                assert value is None, (
                    f"{path.relative_to(ROOT)}:{node.lineno} compares against {value} ({ast.unparse(node)}): "
                    "decide it where the numbers are and read the decision"
                )


def test_word_says_a_finding_from_its_facts():
    f = Finding(FindingKind.ACCEPTANCE_LENGTH, Severity.CONTEXT, AcceptanceLengthFacts(2.5, 2.4, 2.6, False))
    assert sentences.word(f) == (
        "Each draft yields 2.50 tokens per verification on average (95% interval 2.40–2.60): 1.50 accepted draft "
        "tokens plus the one token the target model adds (requests that did not draft in a step add one token)."
    )
    assert sentences.word(Finding(FindingKind.DRAFTS_DERIVED, Severity.PROVENANCE, NoFacts())).startswith(
        "The number of drafts is derived"
    )


@pytest.mark.parametrize("path", ["vllm-cpu-sweep", "vllm-cpu-sweep.log", "vllm-cpu-serve-sweep"])
def test_the_json_findings_and_their_facts_align(path):
    report = analyze(load([str(DATA / path)]))
    data = json.loads(json.dumps(document(report)))
    assert report.findings is not None and len(data["findings"]) == len(data["finding_facts"]) == len(report.findings)
    assert [f["kind"] for f in data["finding_facts"]] == [str(f.kind) for f in report.findings]
    assert data["findings"] == [sentences.word(f) for f in report.findings]
    assert all(set(f) == {"kind", "severity", "facts"} for f in data["finding_facts"])
    for group, facts in zip(data["group_findings"], data["group_finding_facts"], strict=True):
        assert len(group["findings"]) == len(facts["finding_facts"])
        assert {k: v for k, v in group.items() if k != "findings"} == {
            k: v for k, v in facts.items() if k != "finding_facts"
        }
    keys = list(data)
    assert keys.index("finding_facts") == keys.index("findings") + 1
    assert keys.index("group_finding_facts") == keys.index("group_findings") + 1

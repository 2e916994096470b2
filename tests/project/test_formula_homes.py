"""One home per formula: the core formulas are written out only in their home, and called
everywhere else (issue 37).

Homes: acceptance length (of counts and of conditional rates), tokens per step (of rates and
of totals), the draft acceptance rate, draft tokens per draft, per-position counts and rates and
the cost ratios in ``specobs/formulas.py``; the interval estimators (sample variance, of values
or of running sums, the ratio estimator's residual and variance, the t interval of a mean,
Welch–Satterthwaite, the jackknife) in ``specobs/analysis/intervals.py``; the row-validity rules
(more accepted than drafted, or than k per verify step) and their reason codes in
``specobs/validity.py``.

The scan reads every module's syntax tree and names each copy it finds by file and line. Each
detector is shown to catch a synthetic copy (the ``test_the_scan_catches_*`` tests), so a scan
that finds nothing is a scan that would have found one.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "specobs"

FORMULAS = "formulas.py"
INTERVALS = "analysis/intervals.py"
VALIDITY = "validity.py"

#: Copies in modules another change owns, each to be replaced by a call to its home (then removed
#: from here: :func:`test_every_known_copy_is_still_there` fails once one is gone).
KNOWN_COPIES: dict[tuple[str, str], str] = {}


def _text(node: ast.AST) -> str:
    return ast.unparse(node).lower()


def _is_one(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in (1, 1.0) and not isinstance(node.value, bool)


def _acceptance_length(node: ast.AST) -> bool:
    """``1 + accepted / drafts`` (or ``/ steps``): a one plus a quotient of an accepted count
    over drafts or steps."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and _is_one(node.left)):
        return False
    right = node.right
    if not (isinstance(right, ast.BinOp) and isinstance(right.op, ast.Div)):
        return False
    top, bottom = _text(right.left), _text(right.right)
    return ("acc" in top) and any(w in bottom for w in ("draft", "step", "_d"))


def _tokens_per_step(node: ast.AST) -> bool:
    """``1 + sum(rates…)`` or ``1 + q * accepted_per_draft…``: tokens per step written out."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and _is_one(node.left)):
        return False
    right = node.right
    if isinstance(right, ast.Call) and isinstance(right.func, ast.Name) and right.func.id in ("sum", "fsum"):
        return "rate" in _text(right)
    if isinstance(right, ast.BinOp) and isinstance(right.op, ast.Mult):
        return "accepted_per_draft" in _text(right)
    return False


def _squared(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return isinstance(node.right, ast.Constant) and node.right.value == 2
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):  # v * v
        return ast.dump(node.left) == ast.dump(node.right)
    return False


def _minus_one(node: ast.AST) -> bool:
    """Whether ``node`` divides by some ``n - 1`` (an index such as ``x[i - 1]`` is not one)."""
    indices = {id(n) for s in ast.walk(node) if isinstance(s, ast.Subscript) for n in ast.walk(s.slice)}
    return any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub) and _is_one(n.right) and id(n) not in indices
        for n in ast.walk(node)
    )


def _welch(node: ast.AST) -> bool:
    """Welch–Satterthwaite: ``(a + b) ** 2 / (…)``, ``v ** 2 / (n - 1)`` or ``variance ** 2 / welch``."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _squared(node.left)):
        return False
    squared = node.left.left if isinstance(node.left, ast.BinOp) else node.left
    if isinstance(squared, ast.BinOp) and isinstance(squared.op, ast.Add):
        return True  # the square of a sum of variances
    return _minus_one(node.right) or any(w in _text(node.right) for w in ("welch", "df"))


def _sample_variance(node: ast.AST) -> bool:
    """A sum of squared deviations from a mean: ``Σ (x − mean) ** 2`` (a sample variance, a
    t interval of a mean, a jackknife), in a generator or comprehension."""
    if not isinstance(node, ast.GeneratorExp | ast.ListComp):
        return False
    element = node.elt
    if not (isinstance(element, ast.BinOp) and _squared(element)):
        return False
    base = element.left
    return isinstance(base, ast.BinOp) and isinstance(base.op, ast.Sub) and "m" in _text(base.right)


def _repeats_a_factor(node: ast.AST) -> bool:
    """Whether ``node`` holds a square: ``x ** 2``, or a product with one factor twice (``n * m * m``)."""
    for sub in ast.walk(node):
        if _squared(sub):
            return True
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mult):
            factors: list[str] = []
            stack: list[ast.AST] = [sub]
            while stack:
                part = stack.pop()
                if isinstance(part, ast.BinOp) and isinstance(part.op, ast.Mult):
                    stack += [part.left, part.right]
                else:
                    factors.append(ast.dump(part))
            if len(set(factors)) < len(factors):
                return True
    return False


def _variance_from_sums(node: ast.AST) -> bool:
    """A sample variance from a count, a sum and a sum of squares: ``(ss − n·mean²) / (n − 1)``
    (a square subtracted from a sum, over some ``n − 1``), or the ratio estimator's residual sum of
    squares from sums: ``Σa² − 2·r·Σad + r²·Σd²``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        top = node.left
        return (
            isinstance(top, ast.BinOp)
            and isinstance(top.op, ast.Sub)
            and _repeats_a_factor(top.right)
            and _minus_one(node.right)
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and isinstance(node.left, ast.BinOp):
        cross = node.left
        return (
            isinstance(cross.op, ast.Sub)
            and _text(cross.right).startswith("2 *")
            and isinstance(node.right, ast.BinOp)
            and isinstance(node.right.op, ast.Mult)
            and _repeats_a_factor(node.right)
        )
    return False


def _ratio_variance(node: ast.AST) -> bool:
    """The ratio estimator's variance from its residual: ``resid / (n · (n − 1) · d̄²)`` (a
    quotient over a product of some ``n − 1`` and a square)."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
        return False
    bottom = node.right
    return (
        isinstance(bottom, ast.BinOp)
        and isinstance(bottom.op, ast.Mult)
        and _minus_one(bottom)
        and _repeats_a_factor(bottom)
    )


def _quotient(node: ast.AST) -> tuple[str, str] | None:
    """(numerator, denominator) of a division, as lower-case text (None for anything else)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _text(node.left), _text(node.right)
    return None


def _draft_tokens(text: str) -> bool:
    """Whether ``text`` names draft tokens (``num_draft_tokens``, ``drafted``, ``tokens_for_rate``)."""
    return (
        "draft_token" in text or "drafted" in text or text in ("tokens", "tokens_for_rate") or "tokens_for_rate" in text
    )


def _acceptance_rate(node: ast.AST) -> bool:
    """The draft acceptance rate ``accepted / draft tokens`` (not accepted per draft: ``/ drafts``)."""
    parts = _quotient(node)
    if parts is None:
        return False
    top, bottom = parts
    return "acc" in top and "draft_token" not in top and _draft_tokens(bottom.removeprefix("pl.col(").strip("')\""))


def _tokens_per_draft(node: ast.AST) -> bool:
    """Draft tokens per draft: ``num_draft_tokens / num_drafts``."""
    parts = _quotient(node)
    if parts is None:
        return False
    top, bottom = parts
    return _draft_tokens(top) and "acc" not in top and "drafts" in bottom and not _draft_tokens(bottom)


def _tokens_per_step_from_totals(node: ast.AST) -> bool:
    """Tokens per step from totals: ``generated / (generated − accepted)``."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
        return False
    bottom = node.right
    return (
        isinstance(bottom, ast.BinOp)
        and isinstance(bottom.op, ast.Sub)
        and ast.dump(bottom.left) == ast.dump(node.left)
        and "acc" in _text(bottom.right)
    )


def _length_of_conditional(node: ast.AST) -> bool:
    """A sum of running products over a sequence (``reach *= c; total += reach``): the acceptance
    length, or accepted tokens per draft, of conditional rates, ``1 + Σ_i Π_{j≤i} c_j``."""
    if not isinstance(node, ast.For):
        return False
    steps = [s for s in node.body if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name)]
    products = {s.target.id for s in steps if isinstance(s.op, ast.Mult)}
    return any(isinstance(s.op, ast.Add) and isinstance(s.value, ast.Name) and s.value.id in products for s in steps)


def _steps_times_k(node: ast.AST) -> bool:
    """A request-row validity rule: more accepted than ``steps * k`` (k per verify step)."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Gt)):
        return False
    right = node.comparators[0]
    return (
        "acc" in _text(node.left)
        and isinstance(right, ast.BinOp)
        and isinstance(right.op, ast.Mult)
        and "step" in _text(right)
    )


def _reason_codes(node: ast.AST) -> bool:
    """A reason code typed as a string (``"non_finite"``, ``"inconsistent"``, …)."""
    return isinstance(node, ast.Constant) and node.value in ("non_finite", "negative", "wrong_type", "inconsistent")


#: name → (detector, home modules where the formula is written out)
DETECTORS: dict[str, tuple[Callable[[ast.AST], bool], frozenset[str]]] = {
    "acceptance length": (_acceptance_length, frozenset({FORMULAS})),
    "tokens per step": (_tokens_per_step, frozenset({FORMULAS})),
    "Welch–Satterthwaite": (_welch, frozenset({INTERVALS})),
    "sample variance": (_sample_variance, frozenset({INTERVALS})),
    "reason codes": (_reason_codes, frozenset({VALIDITY})),
    "variance from sums": (_variance_from_sums, frozenset({INTERVALS})),
    "ratio variance": (_ratio_variance, frozenset({INTERVALS})),
    "acceptance rate": (_acceptance_rate, frozenset({FORMULAS})),
    "tokens per draft": (_tokens_per_draft, frozenset({FORMULAS})),
    "tokens per step from totals": (_tokens_per_step_from_totals, frozenset({FORMULAS})),
    "length of conditional rates": (_length_of_conditional, frozenset({FORMULAS})),
    "accepted beyond k per step": (_steps_times_k, frozenset({VALIDITY})),
}


def copies(source: str) -> Iterator[tuple[str, int]]:
    """(formula, line) of every copy of a formula in ``source``; docstrings and comments are not code."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if id(node) in docstrings:
            continue
        for name, (detect, _) in DETECTORS.items():
            if detect(node):
                yield name, getattr(node, "lineno", 0)


def found_in_package(package: Path = PACKAGE) -> dict[tuple[str, str], list[int]]:
    """(module, formula) → lines, for every copy outside the formula's home."""
    out: dict[tuple[str, str], list[int]] = {}
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        for name, line in copies(path.read_text()):
            if module not in DETECTORS[name][1]:
                out.setdefault((module, name), []).append(line)
    return out


def test_no_formula_is_written_out_outside_its_home():
    found = found_in_package()
    unexpected = {f"specobs/{m}:{lines} writes out {name}" for (m, name), lines in found.items()
                  if (m, name) not in KNOWN_COPIES}  # fmt: skip
    assert not unexpected, "call the formula's home instead:\n" + "\n".join(sorted(unexpected))


def test_every_known_copy_is_still_there():
    """A known copy that has gone (replaced by a call) leaves :data:`KNOWN_COPIES`."""
    found = found_in_package()
    gone = [key for key in KNOWN_COPIES if key not in found and (PACKAGE / key[0]).exists()]
    assert not gone, f"remove from KNOWN_COPIES: {gone}"


def test_each_home_holds_its_formula():
    """The detectors recognise the homes' own definitions (so they would recognise a copy)."""
    found = {(name, module) for module in (FORMULAS, INTERVALS, VALIDITY)
             for name, _ in copies((PACKAGE / module).read_text())}  # fmt: skip
    for name, (_, homes) in DETECTORS.items():
        assert any((name, home) in found for home in homes), name


SYNTHETIC = {
    "acceptance length": [
        "x = 1 + accepted / drafts",
        "x = 1.0 + row['num_accepted_tokens'] / row['num_spec_steps']",
        "x = pl.when(d > 0).then(1 + pl.col('_accepted') / pl.col('_drafts'))",
        "lengths = 1 + accepted / drafts",
    ],
    "tokens per step": [
        "e = 1.0 + sum(rates[:k])",
        "e = 1.0 + q * self.accepted_per_draft(k)",
    ],
    "Welch–Satterthwaite": [
        "df = (sb + sa) ** 2 / (sb * sb / (nb - 1) + sa * sa / (na - 1))",
        "df = (a + b) ** 2 / ((a * a / s_df if a else 0.0) + (b * b / p_df if b else 0.0))",
        "w = (pl.col('_var_a') ** 2 / (pl.col('runs_a') - 1)).sum()",
        "df = combined['variance'] ** 2 / combined['welch']",
        "t = v * v / s_df",
    ],
    "sample variance": [
        "sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))",
        "v = (n - 1) / n * math.fsum((x - mean) ** 2 for x in leave_one_out)",
        "v = math.fsum((x - mb) ** 2 for x in lb) / (len(lb) - 1)",
    ],
    "reason codes": ['NEGATIVE = "negative"', 'reasons = ("non_finite", "wrong_type")'],
    "variance from sums": [
        "variance = max((ss - n * mean * mean) / (n - 1), 0.0)",
        "v = (sum_sq - total ** 2 / n) / (n - 1)",
        "resid = row['acc_sq'] - 2 * ratio * row['acc_drafts'] + ratio * ratio * row['drafts_sq']",
        "resid = p['aa'] - 2 * r * p['ad'] + r ** 2 * p['dd']",
    ],
    "ratio variance": [
        "var = max(resid, 0.0) / (n * (n - 1) * mean_d * mean_d)",
        "v = ((pl.col('g') - r * pl.col('s')) ** 2).sum() / (n * (n - 1) * mean_s ** 2)",
    ],
    "acceptance rate": [
        "r = accepted / draft_tokens",
        "r = pl.col('num_accepted_tokens') / pl.col('num_draft_tokens')",
        "x = pl.when(pl.col('drafted') > 0).then(pl.col('accepted_raw') / pl.col('drafted'))",
        "bad = (accepted / tokens - printed_rate).abs() > 0.0006",
        "rate = pl.col('acc_for_rate') / pl.col('tokens_for_rate')",
        "corrected = (r['accepted'] - r['past']) / r['drafted']",
    ],
    "tokens per draft": [
        "length = pl.col('num_draft_tokens').sum() / pl.col('num_drafts').sum()",
        "per_draft = row['num_draft_tokens'] / row['num_drafts']",
        "per_draft = drafted / drafts",
    ],
    "tokens per step from totals": [
        "e = generated / (generated - accepted)",
        "e = row['num_generated_tokens'] / (row['num_generated_tokens'] - row['num_accepted_tokens'])",
    ],
    "length of conditional rates": [
        "for c in rates[:depth]:\n    reach *= c\n    total += reach",
        "for beta in betas[:k]:\n    reach *= beta\n    total += reach",
    ],
    "accepted beyond k per step": [
        "bad = accepted > steps * k",
        "if k is not None and row['num_accepted_tokens'] > row['num_spec_steps'] * k: pass",
    ],
}


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_the_scan_catches_a_copy(name):
    for snippet in SYNTHETIC[name]:
        assert (name, 1) in set(copies(snippet)), snippet


def test_the_scan_catches_a_copy_reintroduced_in_a_package(tmp_path):
    """A module that writes a formula out again fails the scan; calling the home does not."""
    package = tmp_path / "specobs"
    (package / "analysis").mkdir(parents=True)
    (package / FORMULAS).write_text("def acceptance_length(a, d):\n    return 1 + a / d\n")
    (package / "analysis" / "fine.py").write_text(
        "from specobs.formulas import acceptance_length\nx = acceptance_length(3, 2)\n"
    )
    (package / "analysis" / "copy.py").write_text(
        textwrap.dedent('''
        """Docstrings may say 1 + accepted / drafts."""
        def length(accepted, drafts):
            return 1 + accepted / drafts
    ''')
    )
    assert found_in_package(package) == {("analysis/copy.py", "acceptance length"): [4]}


def test_the_scan_leaves_other_arithmetic_alone():
    for snippet in (
        "x = 1 + z * z / n",  # Wilson
        "y = (1 + rho) / (1 - rho)",
        "share = running / total",
        "rate = accepted / drafts",
        "s = 1 + q * length",  # tokens scored, not gained
        "r = (x - mean) * 2",
        "left = swyy[idx - 1] - swy[idx - 1] ** 2 / sw[idx - 1]",  # a residual sum of squares
        "per_draft = accepted / drafts",  # accepted per draft, not the acceptance rate
        "share = generated / (generated + prompt)",
        "for c in rates:\n    total += c",  # a plain sum
        "late = accepted > deadline",
        "x = (a - b) / (n - 1)",  # a difference over n − 1, no square
    ):
        assert list(copies(snippet)) == [], snippet

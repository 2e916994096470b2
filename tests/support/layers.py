"""The import rule of docs/architecture.md, checked from the source: every ``specobs`` import
(module level and inside functions alike; only ``if TYPE_CHECKING:`` blocks are left out) must
point to the importer's own layer or one below it, and no two rooms may import each other
through any chain. Surfaces (the CLI, the dashboard) compute nothing: below their own layer they
import only the API and what it speaks in (records, render, errors, the vocabularies).

    python -m tests.support.layers      # prints every violation; exit 1 when there is one
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "specobs"

#: Bottom to top. A module belongs to the first layer one of whose prefixes it starts with.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "records",
        (
            "specobs.errors",
            "specobs.dimensions",
            "specobs.schema",
            "specobs.records",
            "specobs.buckets",
            "specobs.formulas",
            "specobs.validity",
        ),
    ),
    ("sources", ("specobs.ingest", "specobs.capture", "specobs.vllm")),
    ("analysis", ("specobs.analysis",)),
    ("advice", ("specobs.advice",)),
    ("loops", ("specobs.loops",)),
    ("render", ("specobs.render",)),
    (
        "entry",
        (
            "specobs.api",
            "specobs.cli",
            "specobs.dashboard",
            "specobs.exporters",
            "specobs.testing",
            "specobs.__main__",
            "specobs",
        ),
    ),
)


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = importer.split(".") if is_package else importer.split(".")[:-1]
        if node.level:
            base = base[: len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in known else stem for a in node.names]
    resolved = []
    for name in names:
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in known and name != importer:
            resolved.append(name)
    return resolved


def imports(package: Path = PACKAGE) -> list[Import]:
    """Every import of a specobs module by another, with its line."""
    found = modules(package)
    known = set(found)
    out = []
    for name, path in found.items():
        tree = ast.parse(path.read_text(), str(path))
        skipped = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skipped:
                for target in _targets(node, name, path.name == "__init__.py", known):
                    out.append(Import(name, target, node.lineno))
    return out


#: Modules whose layer is not their room's: ``specobs.vllm`` (the package's ``__init__``) is the
#: plugin vLLM loads, an entry point, while the rest of the room (hooks, vLLM's config and
#: metrics knowledge) produces rows like ``capture``. It is its own room for the cycle check.
ENTRY_MODULES = frozenset({"specobs.vllm"})


def layer_of(module: str) -> int:
    if module in ENTRY_MODULES:
        return len(LAYERS) - 1
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    raise LookupError(f"{module} is in no layer: add it to LAYERS (tests/support/layers.py)")


def room_of(module: str) -> str:
    """``specobs.ingest.events`` → ``specobs.ingest``; a top-level module is its own room, and so is
    an entry module inside a room (:data:`ENTRY_MODULES`)."""
    if module in ENTRY_MODULES:
        return f"{module} (entry)"
    return ".".join(module.split(".")[:2])


def upward(package: Path = PACKAGE) -> list[Import]:
    """Imports that point to a higher layer."""
    return [i for i in imports(package) if layer_of(i.imported) > layer_of(i.importer)]


def room_cycles(package: Path = PACKAGE) -> list[tuple[str, ...]]:
    """Rooms that reach each other through imports (strongly connected, more than one room)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for i in imports(package):
        a, b = room_of(i.importer), room_of(i.imported)
        if a != b:
            graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(tuple(sorted(component)))

    for v in list(graph):
        if v not in index:
            visit(v)
    return cycles


#: Entry points that only present (docs/architecture.md, "surfaces compute nothing"): they ask
#: ``specobs.api`` and render its records. The exporters are left out: they are a pipeline of their
#: own (steps mapped to metrics as they arrive, ``exporters/mapping.py``), not a view of a report.
#: The vLLM plugin (``specobs.vllm``) is left out too: it wires the capture into the engine.
SURFACES = ("specobs.cli", "specobs.dashboard", "specobs.__main__")
#: What a surface may import below the entry layer: the API and what its answers are made of.
#: Other entry points are allowed (the CLI starts the dashboard and the exporters).
SURFACE_IMPORTS = (
    "specobs.api",
    "specobs.records",
    "specobs.render",
    "specobs.errors",
    "specobs.dimensions",
    "specobs.schema",
    "specobs.buckets",
)
#: Imports a surface still makes past the API, each with why (importer room, imported room).
SURFACE_EXCEPTIONS: dict[tuple[str, str], str] = {
    # `specobs tune` and `specobs sweep` drive engines and servers (the loops); the API has no
    # verb for them yet.
    ("specobs.cli", "specobs.loops"): "tune and sweep run the loops",
    # `specobs simulate` writes event files through the capture's own sink.
    ("specobs.cli", "specobs.capture"): "simulate writes event files with the capture's sink",
}


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def surface_imports(package: Path = PACKAGE, surfaces: tuple[str, ...] = SURFACES) -> list[Import]:
    """Imports by a surface of anything below the entry layer but the API's vocabulary
    (:data:`SURFACE_IMPORTS`), less the :data:`SURFACE_EXCEPTIONS`."""
    entry = len(LAYERS) - 1
    return [
        i
        for i in imports(package)
        if _under(i.importer, surfaces)
        and layer_of(i.imported) < entry
        and not _under(i.imported, SURFACE_IMPORTS)
        and (room_of(i.importer), room_of(i.imported)) not in SURFACE_EXCEPTIONS
    ]


def main() -> int:
    problems = [
        f"{i.importer} (line {i.line}) imports {i.imported}: layer {LAYERS[layer_of(i.importer)][0]} "
        f"below {LAYERS[layer_of(i.imported)][0]}"
        for i in upward()
    ]
    problems += [f"rooms import each other: {' ⇄ '.join(c)}" for c in room_cycles()]
    problems += [
        f"{i.importer} (line {i.line}) imports {i.imported}: a surface asks specobs.api" for i in surface_imports()
    ]
    print("\n".join(problems) or "no upward import, no cycle between rooms, no surface past the API")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

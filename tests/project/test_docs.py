"""The tables in docs/ are generated from the code (docs/generate.py) and must match it."""

from __future__ import annotations

import dataclasses
import importlib.util
import re

import pytest
from support.paths import ROOT

from specobs.capture import config


def _generator():
    spec = importlib.util.spec_from_file_location("specobs_docs_generate", ROOT / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_generated_tables_match_the_code():
    generate = _generator()
    stale, problems = generate.update(check=True)
    lines = [*problems]
    if stale:
        lines += ["stale generated tables (the code changed; the docs did not):", *(f"  {s}" for s in stale)]
        lines.append(f"regenerate them with: {generate.REGENERATE}")
    assert not lines, "\n" + "\n".join(lines)


def test_json_keys_are_walked_into_dotted_paths():
    generate = _generator()
    data = {
        "recommended": {"method": "ngram", "schedule": [[1, 3, 2]]},
        "by_batch_size": [{"basis": "measured"}, {"basis": "model", "interval": None}],
        "findings": ["a sentence"],
        "speedups": {"ngram": 1.2},
    }
    assert list(generate.walk(data, {"speedups"})) == [
        "recommended",
        "recommended.method",
        "recommended.schedule",
        "by_batch_size[]",
        "by_batch_size[].basis",
        "by_batch_size[].basis",
        "by_batch_size[].interval",
        "findings",
        "speedups",
    ]


def test_the_documented_capture_defaults_are_the_defaults():
    """docs/vllm.md shows each variable's ``default``: it must be what an unset variable gives."""
    unset = config.CaptureConfig.from_env({})
    assert dataclasses.replace(unset, run_id="x") == config.CaptureConfig(run_id="x")
    assert unset.directory == config.SPECOBS_DIR.default
    assert unset.rotate_bytes == float(config.SPECOBS_ROTATE_MB.default) * 1024 * 1024
    assert not unset.enabled and unset.otel and unset.hooks


def test_flags_and_numbers_fall_back_to_the_default():
    env = {
        "SPECOBS_ENABLE": "Yes",
        "SPECOBS_OTEL": "maybe",  # neither true nor false: the default (on)
        "SPECOBS_HOOKS": "off",
        "SPECOBS_QUEUE_SIZE": "lots",  # not a number: the default
        "SPECOBS_ROTATE_MB": " 2 ",
        "SPECOBS_FORMAT": "Parquet",
        "SPECOBS_WORKLOAD": "",
    }
    got = config.CaptureConfig.from_env(env)
    assert (got.enabled, got.otel, got.hooks) == (True, True, False)
    assert got.queue_size == 65536 and got.rotate_bytes == 2 * 1024 * 1024
    assert got.format == "parquet" and got.workload is None


# --- the example commands in the docs, the README and --help run as written ------------------------

#: Where example commands are written for users.
EXAMPLE_SOURCES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "examples" / "data" / "README.md"]
_SEPARATORS = re.compile(r"\s(?:#|\|\||\||&&|>|2>)\s|\s{2,}\(")


def _commands_in(text: str) -> list[str]:
    """Every ``specobs COMMAND ...`` in ``text``: from code blocks (continued lines joined) and
    inline code, cut at a comment, a pipe, ``&&`` or a redirection."""
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        found += block.replace("\\\n", " ").splitlines()
    found += re.findall(r"`(specobs [a-z][^`]*)`", text)
    commands = []
    for line in found:
        for match in re.finditer(r"(?<![\w/.-])specobs (?=[a-z])", line):
            command = _SEPARATORS.split(line[match.start() :])[0].split("`")[0].strip()
            if len(command.split()) > 1:
                commands.append(command)
    return commands


def _example_commands() -> list[tuple[str, str]]:
    """``(where, command)`` of every example: the docs, the README and each command's --help."""
    from specobs.cli import app

    out = [(path.relative_to(ROOT).as_posix(), c) for path in EXAMPLE_SOURCES for c in _commands_in(path.read_text())]
    for command in app.registered_commands:
        for line in (command.epilog or "").splitlines():
            out += [(f"specobs {command.callback.__name__} --help", c) for c in _commands_in(f"```\n{line}\n```")]
    return out


def _click_command(name: str):
    import typer.main

    from specobs.cli import app

    return typer.main.get_command(app).commands.get(name)  # type: ignore[attr-defined]


def _problems(command: str) -> list[str]:
    """Why ``command`` would not run as written: an unknown command or option, or a value its
    option refuses (values that are placeholders, ``KEYS`` or ``…``, are not checked)."""
    import shlex

    from specobs.analysis.acceptance import parse_by
    from specobs.cli import (
        OutputFormat,
        _acceptance_profile,
        _check_prometheus_options,
    )
    from specobs.errors import SpecobsError
    from specobs.ingest import check_format

    words = command.split()
    click = _click_command(words[1])
    if click is None:
        return [f"unknown command {words[1]}"]
    known = {opt for p in click.params for opt in [*p.opts, *p.secondary_opts]}
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "''", command)  # a quoted value may hold another program's flags
    problems = [
        f"unknown option {o}" for o in re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", unquoted) if o not in known
    ]
    if "[" in command or "…" in command:  # a synopsis: the options exist, the values are placeholders
        return problems
    tokens = shlex.split(command)[2:]
    values = {tokens[i]: tokens[i + 1] for i in range(len(tokens) - 1) if tokens[i].startswith("-")}
    checks = {
        "--by": parse_by,
        "--input-format": check_format,
        "--format": OutputFormat,
        "-f": OutputFormat,
        "--acceptance": _acceptance_profile,
        "--since": lambda v: _check_prometheus_options(v, None),
        "--step": lambda v: _check_prometheus_options("6h", v),
    }
    for option, check in checks.items():
        if option in values and not values[option].isupper():
            try:
                check(values[option])
            except (SpecobsError, ValueError) as exc:
                problems.append(f"{option} {values[option]}: {exc}")
    needs_url = [o for o in ("--since", "--match", "--step") if o in values]
    if needs_url and "--prometheus" not in values:
        problems.append(f"{', '.join(needs_url)} without --prometheus")
    return problems


def test_example_commands_name_real_commands_options_and_values():
    examples = _example_commands()
    assert len(examples) > 40  # the docs, the README and every --help have examples
    bad = [f"{where}: {command}: {'; '.join(p)}" for where, command in examples if (p := _problems(command))]
    assert not bad, "\n" + "\n".join(bad)


def test_the_example_check_catches_what_users_met():
    """What the docs once said: a --by key that does not exist and an input format the command
    refused."""
    (by,) = _problems("specobs report specobs-tune/events --by run_id,k")
    assert by.startswith("--by run_id,k: unknown --by run_id (choose from source,")
    (fmt,) = _problems("specobs report outputs.jsonl --input-format nope")
    assert fmt.startswith("--input-format nope: unknown input format 'nope'")
    assert _problems("specobs report outputs.jsonl --input-format vllm-outputs") == []
    assert _problems("specobs report x.log --since 2h") == ["--since without --prometheus"]
    assert _problems("specobs report x.log --colour") == ["unknown option --colour"]
    assert _problems("specobs sweep --model m --config plain --server-args '--dtype bfloat16' --out o") == []
    assert _problems("specobs sweep --model m --server-arg '--dtype bfloat16'") == ["unknown option --server-arg"]


@pytest.mark.slow
def test_example_commands_on_bundled_data_run(tmp_path):
    """The examples that read only what the repository bundles run and exit 0 (the simulate
    examples write into a scratch folder first)."""
    import os
    import shlex
    import subprocess
    import sys

    runnable = []
    for _, command in _example_commands():
        if "[" in command or "…" in command:
            continue
        words = shlex.split(command)
        paths = [w for w in words[2:] if not w.startswith("-") and ("/" in w or "." in w)]
        if words[1] in ("report", "recommend", "compare") and paths and all((ROOT / p).exists() for p in paths):
            runnable.append((ROOT, words))
    assert len(runnable) >= 3, runnable
    sim = tmp_path / "sim"
    runnable += [
        (tmp_path, ["specobs", "simulate", str(sim), "--method", "ngram", "--k", "0,6", "--steps", "60"]),
        (tmp_path, ["specobs", "recommend", str(sim), "--bootstrap", "0"]),
    ]
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    for cwd, words in dict.fromkeys((c, tuple(w)) for c, w in runnable):
        if words[1] == "recommend" and "--bootstrap" not in words:
            words = (*words, "--bootstrap", "0")  # the intervals are not what is checked here
        result = subprocess.run([sys.executable, "-m", "specobs.cli", *words[1:]], cwd=cwd, env=env,
                                capture_output=True, timeout=300)  # fmt: skip
        assert result.returncode == 0, f"{' '.join(words)}: {result.stderr.decode()}"

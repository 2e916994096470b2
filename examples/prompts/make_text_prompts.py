"""Build the prompts ``specobs sweep`` sends by default: real text, not random token ids.

A drafter guesses continuations of text; on vLLM's random dataset (token ids drawn uniformly)
it guesses far less, so a sweep on random tokens measures an acceptance no real traffic has.
These prompts are real English prose and real Python, taken from this project's own
documentation (paragraphs of ``docs/*.md``) and source (functions of ``specobs/``), so they
can be shipped with it: half prose, half code, as serving traffic mixes free text with
repetitive, copyable text. Deterministic: the same tree gives the same file, byte for byte.

    python examples/prompts/make_text_prompts.py            # writes specobs/loops/text_prompts.jsonl
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "specobs" / "loops" / "text_prompts.jsonl"
#: Prompts of each kind, and their length bounds in characters (short enough for a small
#: context window: a few hundred tokens with a 64-token answer).
PER_KIND = 32
MIN_CHARS, MAX_CHARS = 120, 400


def _key(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def prose() -> list[tuple[str, str]]:
    """Paragraphs of the docs: consecutive text lines, no headings, tables, lists or code."""
    out = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for block in re.split(r"\n\s*\n", text):
            lines = [line.strip() for line in block.splitlines()]
            if not lines or any(line.startswith(("#", "|", "-", "*", ">", "<!--")) or not line for line in lines):
                continue
            paragraph = " ".join(lines)
            if MIN_CHARS <= len(paragraph) <= MAX_CHARS and paragraph[0].isupper():
                out.append((f"docs/{path.name}", paragraph))
    return out


def code() -> list[tuple[str, str]]:
    """Functions of the package, as written (docstring and comments kept)."""
    out = []
    for path in sorted((ROOT / "specobs").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and node.end_lineno is not None:
                text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                text = "\n".join(line.rstrip() for line in text.splitlines())
                if MIN_CHARS <= len(text) <= MAX_CHARS:
                    out.append((str(path.relative_to(ROOT)), text))
    return out


def choose(items: list[tuple[str, str]], n: int) -> list[tuple[str, str]]:
    """``n`` items spread by hash (stable under unrelated edits), no two from the same text."""
    unique = {_key(text): (source, text) for source, text in items}
    return [unique[k] for k in sorted(unique)[:n]]


def main() -> None:
    records = [{"prompt": t, "kind": "prose", "source": s} for s, t in choose(prose(), PER_KIND)]
    records += [{"prompt": t, "kind": "code", "source": s} for s, t in choose(code(), PER_KIND)]
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    print(f"wrote {len(records)} prompts to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

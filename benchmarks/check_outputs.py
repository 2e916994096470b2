"""Results must not change: save ``report`` and ``recommend`` JSON of every bundled input (and of
large step files) with one version of specobs, then compare them with another's.

    python benchmarks/check_outputs.py save /tmp/ref [--large FILE ...]   # before a change
    python benchmarks/check_outputs.py save /tmp/new [--large FILE ...]   # after it
    python benchmarks/check_outputs.py compare /tmp/ref /tmp/new         # identical, floats to 1e-9

Each command runs in its own process (``python -m specobs.cli``) with the current PYTHONPATH.
Large files (10M step rows) take ``report`` and ``recommend`` only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "data"
#: Relative difference two floats may have and still be the same result.
FLOAT_TOLERANCE = 1e-9


def bundled_inputs() -> list[Path]:
    """Every input under examples/data: each folder and each file at the top level (not docs)."""
    return sorted(p for p in EXAMPLES.iterdir() if p.is_dir() or p.suffix in (".log", ".txt", ".jsonl", ".parquet"))


def save(out: Path, large: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    runs = [(p, cmd) for p in bundled_inputs() for cmd in ("report", "recommend")]
    runs += [(Path(p), cmd) for p in large for cmd in ("report", "recommend")]
    for path, cmd in runs:
        name = f"{path.name}.{cmd}.json"
        started = time.perf_counter()
        # Bundled inputs by their path inside the checkout, so that two checkouts compare equal.
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        done = subprocess.run(
            [sys.executable, "-m", "specobs.cli", cmd, str(shown), "--format", "json"],
            capture_output=True,
            text=True,
            env=os.environ,
            cwd=ROOT,
        )
        (out / name).write_text(done.stdout)
        if done.returncode:
            (out / f"{name}.stderr").write_text(done.stderr)
        print(f"{name}: rc={done.returncode} {time.perf_counter() - started:.1f}s", flush=True)


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ beyond :data:`FLOAT_TOLERANCE`, and each float difference below it."""
    if isinstance(a, float) and isinstance(b, float):
        if a == b or (math.isnan(a) and math.isnan(b)):
            return []
        scale = max(abs(a), abs(b))
        relative = abs(a - b) / scale
        tag = "float" if relative <= FLOAT_TOLERANCE else "DIFF"
        return [f"{tag} {where}: {a!r} vs {b!r} (rel {relative:.1e})"]
    if type(a) is not type(b):
        return [f"DIFF {where}: {a!r} vs {b!r}"]
    if isinstance(a, dict):
        out = [f"DIFF {where}: keys {sorted(set(a) ^ set(b))}"] if set(a) != set(b) else []
        for k in a:
            if k in b:
                out += differences(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list):
        out = [f"DIFF {where}: length {len(a)} vs {len(b)}"] if len(a) != len(b) else []
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            out += differences(x, y, f"{where}[{i}]")
        return out
    return [] if a == b else [f"DIFF {where}: {a!r} vs {b!r}"]


def compare(ref: Path, new: Path) -> int:
    failed = 0
    for path in sorted(ref.glob("*.json")):
        other = new / path.name
        if not other.exists():
            print(f"{path.name}: MISSING")
            failed += 1
            continue
        text_a, text_b = path.read_text(), other.read_text()
        if text_a == text_b:
            print(f"{path.name}: identical")
            continue
        found = differences(json.loads(text_a), json.loads(text_b))
        real = [d for d in found if d.startswith("DIFF")]
        failed += bool(real)
        print(f"{path.name}: {'DIFFERENT' if real else 'same (floats below 1e-9)'}")
        for line in found[:20]:
            print("   ", line)
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("save")
    s.add_argument("out", type=Path)
    s.add_argument("--large", nargs="*", default=[])
    c = sub.add_parser("compare")
    c.add_argument("ref", type=Path)
    c.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.what == "save":
        save(args.out, args.large)
    else:
        sys.exit(1 if compare(args.ref, args.new) else 0)


if __name__ == "__main__":
    main()

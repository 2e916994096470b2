"""What splitting by context length costs: on the engine thread, and in a report of many steps.

    python benchmarks/bench_context.py [--rows 3000000] [--before REV] [--no-write]

Measures:
  - the capture's per-step cost of reading the context (``hooks._context``) at batch 8, 64 and 256,
    over requests shaped like vLLM's (``num_tokens`` a property over the token list), against the
    whole per-step budget it must stay small in (target: ≤ 0.5 µs per request);
  - ``specobs report`` and ``specobs recommend`` on ``--rows`` generated steps that carry a context
    (``bench_ingest``'s generator plus ``context_length``), this checkout against ``--before`` (a git
    revision before context existed, checked out into a temporary worktree), alternating, best of
    two each: the split by context must not cost the report more than noise (target ≤ 1.10×).
Appends the results to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

from results import machine, publish

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


class Request:
    """``vllm.v1.request.Request`` as far as the hook reads it."""

    def __init__(self, tokens: int) -> None:
        self._all_token_ids = [1] * tokens

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)


def hook_costs() -> dict[int, float]:
    """µs per step of ``_context`` at each batch size."""
    from specobs.vllm.hooks import _context

    out = {}
    for batch in (8, 64, 256):
        requests = {f"r{i}": Request(100 + i) for i in range(batch)}
        scheduled = {f"r{i}": 1 for i in range(batch)}
        n = max(200, 200_000 // batch)
        best = min(timeit.repeat(lambda: _context(requests, scheduled), number=n, repeat=5))  # noqa: B023
        out[batch] = best / n * 1e6
    return out


def steps_with_context(path: Path, rows: int) -> None:
    import polars as pl

    sys.path.insert(0, str(HERE))
    from bench_ingest import generate_steps

    plain = path.with_suffix(".plain.parquet")
    generate_steps(plain, rows)
    frame = pl.read_parquet(plain)
    index = pl.int_range(pl.len())
    frame.with_columns(
        context_length=((index // 64) % 4000 + 100).cast(pl.Float64), context_length_max=(index // 64) % 4000 + 200
    ).write_parquet(path, row_group_size=1_000_000)
    plain.unlink()


def timed(code: Path, *args: str) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of ``python -m specobs.cli ARGS`` with ``code`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run(
        ["/usr/bin/time", "-f", "%e %M", sys.executable, "-m", "specobs.cli", *args],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    wall, rss = out.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--before", default="6561aa0", help="a revision without context (default: before it)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    costs = hook_costs()
    lines = [
        f"## {dt.date.today()} — context length: capture cost and report cost",
        "",
        machine(),
        "",
        "| measure | value |",
        "|---|---|",
        *(f"| `_context` per step, batch {b} | {us:.2f} µs ({us / b:.3f} µs per request) |" for b, us in costs.items()),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data = folder / "steps.parquet"
        steps_with_context(data, args.rows)
        before = folder / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", str(before), args.before], check=True)
        try:
            for verb in ("report", "recommend"):
                best: dict[str, tuple[float, float]] = {}
                for _ in range(2):
                    for name, code in (("before", before), ("now", ROOT)):
                        wall, rss = timed(code, verb, str(data), "-f", "json")
                        if name not in best or wall < best[name][0]:
                            best[name] = (wall, rss)
                (wb, rb), (wn, rn) = best["before"], best["now"]
                lines.append(
                    f"| `specobs {verb}`, {args.rows:,} steps with context: before → now | "
                    f"{wb:.2f} s → {wn:.2f} s ({wn / wb:.2f}×, target ≤ 1.10×); {rb:,.0f} → {rn:,.0f} MiB |"
                )
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], check=False)
    lines += ["", f"Before: {args.before} (no context column, no split); best of two runs each, alternating."]
    publish(lines, not args.no_write)


if __name__ == "__main__":
    main()

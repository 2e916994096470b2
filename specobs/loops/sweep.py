"""``specobs sweep``: vLLM's own serving benchmark against real servers, one configuration at a time.

For each configuration (``plain``, each speculative config or schedule), a real vLLM OpenAI
server starts with the specobs capture on; vLLM's own benchmark client (``vllm bench serve``,
run as :mod:`specobs.loops.bench_client`) measures it at every load level; the server stops,
and its processes are gone, before the next one starts: never two vLLM servers at once.
Configurations are interleaved across repeats (repeat 1 in the order given, repeat 2 reversed,
and so on), so drift of the machine over the sweep hits every configuration alike. Before each
server starts, the sweep waits (up to a limit) for a quiet machine.

Output, under ``out``::

    results/<config>-c<level>-r<repeat>.json   vLLM's result files, as it writes them
                                              (request rates: <config>-rps<rate>-r<repeat>.json)
    capture/                                  the capture's event files (SPECOBS_RUN_ID=sweep-<config>-r<repeat>)
    logs/<config>-r<repeat>.log               each server's output
    logs/<config>-r<repeat>.bench.log         the benchmark client's output, every level
    sweep.json                                the plan, the order the servers ran in, their timings
    prompts.sharegpt.json                     the prompts as a ShareGPT dataset (not with random tokens)

Every request is greedy (``--temperature 0``: since vLLM 0.32 the benchmark no longer is by
default, and sampling changes what a drafter can guess) and generates exactly its output length
(``--ignore-eos``). ``--save-detailed`` keeps every request's latencies, so goodput under any
SLO can be computed later. Each result carries ``--label <config>`` and ``--metadata
config=<name> k=<k> method=<method> repeat=<r>`` (and the speculative config), which is how
``specobs report`` tells the configurations apart and pairs each with plain.

The prompts are real text unless asked otherwise: the user's prompts file, else the prompts
bundled with specobs (:data:`TEXT_PROMPTS`: prose and Python, half each). vLLM's own default is
its random dataset, token ids drawn uniformly, on which a drafter guesses far less than on text
(users report 12% acceptance on random tokens against 52% on prose): a sweep on them measures an
acceptance no real traffic has, so it is only run when asked for (``prompts`` None, the CLI's
``--random-tokens``), and every result says its dataset (``--metadata dataset=...``; the report
warns on random tokens).

The prompts go to the benchmark as a ShareGPT dataset: vLLM's ``custom`` dataset needs
pandas, which not every vLLM build brings, while its ShareGPT reader is plain JSON. ShareGPT
skips prompts under 4 tokens and, with fewer prompts than ``num_prompts``, repeats some.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from specobs.analysis.under_load import SPAN_SLACK
from specobs.capture.config import SPECOBS_DIR, SPECOBS_ENABLE, SPECOBS_RUN_ID
from specobs.errors import SpecobsError
from specobs.loops.parallel import ONE_DEVICE, Parallel, VllmBuild, check_speculation, cpu_binding, installed_vllm
from specobs.loops.parallel import SERVER_FLAGS as PARALLEL_FLAGS
from specobs.loops.vllm_server import VllmServer, wait_quiet

#: The two kinds of load level: closed loop (``--max-concurrency``) or open loop (``--request-rate``).
LOADS = ("concurrency", "rate")
#: The name a plain configuration may be given without a config (``--config plain``).
PLAIN = "plain"
#: The prompts a sweep sends unless given its own: real prose and code (built by
#: ``examples/prompts/make_text_prompts.py`` from specobs's own docs and source).
TEXT_PROMPTS = Path(__file__).with_name("text_prompts.jsonl")
#: The dataset name a result carries for those prompts, for a user's prompts file, and for vLLM's
#: random tokens.
TEXT_DATASET = "specobs-text"
PROMPTS_DATASET = "prompts"
RANDOM_DATASET = "random"
#: Seconds between the last benchmark and SIGINT: the capture writes its rows every second.
FLUSH_S = 2.0
#: Seconds between two levels' runs against one server. vLLM dates a result to the second and
#: ``specobs report`` widens each result's time window by ``SPAN_SLACK`` either side to find the
#: engine steps inside it, so without a pause a level's window would take in the next level's
#: warm-up and first steps (a concurrency-1 level showed a mean batch of 1.3).
LEVEL_PAUSE_S = 2 * SPAN_SLACK + 1
#: A configuration's name becomes part of file names and run ids.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: Server flags the sweep sets itself (its own options say what they should be).
SERVER_FLAGS = (
    "--host", "--port", "--model", "--served-model-name", "--speculative-config", "--max-num-seqs",
    *(flag for flags in PARALLEL_FLAGS.values() for flag in flags),
)  # fmt: skip
#: Benchmark flags the sweep sets itself.
BENCH_FLAGS = (
    "--base-url", "--host", "--port", "--endpoint", "--backend", "--model", "--served-model-name", "--tokenizer",
    "--max-concurrency", "--request-rate", "--save-result", "--append-result", "--result-dir", "--result-filename",
    "--label", "--metadata", "--num-prompts", "--seed", "--temperature", "--ignore-eos", "--num-warmups",
    "--dataset-name", "--dataset-path", "--random-input-len", "--random-output-len", "--sharegpt-output-len",
    "--input-len", "--output-len", "--percentile-metrics", "--metric-percentiles", "--save-detailed",
)  # fmt: skip
#: What ``check_plan`` calls each field by default (the CLI passes its flags).
FIELD_NAMES: dict[str, str] = {
    name: name
    for name in (
        "model", "configurations", "levels", "load", "repeats", "num_prompts", "input_len", "output_len", "prompts",
        "dataset", "warmups", "seed", "server_args", "bench_args", "max_num_seqs", "out", "quiet_limit_s",
        "quiet_cores", "server_timeout_s", "run_timeout_s", "served_model_name", "allow_without_plain",
        "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
    )
}  # fmt: skip


@dataclass(frozen=True)
class Configuration:
    """One server of a sweep: a name and vLLM's ``--speculative-config`` (None: plain decoding)."""

    name: str
    speculative_config: Mapping[str, Any] | None = None

    @property
    def plain(self) -> bool:
        return self.speculative_config is None

    @property
    def method(self) -> str | None:
        return None if self.speculative_config is None else str(self.speculative_config.get("method"))

    @property
    def k(self) -> int:
        """``num_speculative_tokens`` (0: plain): the largest k, whatever a schedule does below it."""
        if self.speculative_config is None:
            return 0
        k = self.speculative_config.get("num_speculative_tokens")
        return k if isinstance(k, int) and not isinstance(k, bool) else 0

    def to_dict(self) -> dict[str, Any]:
        spec = None if self.speculative_config is None else dict(self.speculative_config)
        return {"name": self.name, "speculative_config": spec}


@dataclass(frozen=True)
class SweepPlan:
    """Everything a sweep does, checked by :func:`check_plan` before any server starts.

    ``levels`` are concurrencies (``load="concurrency"``: closed loop, ``--max-concurrency``)
    or request rates per second (``load="rate"``: Poisson arrivals, ``--request-rate``).
    ``prompts`` None: vLLM's random dataset of ``input_len`` tokens per prompt (not text: see the
    module's notes); ``dataset`` names the prompts in every result (default: ``prompts``, or
    ``random`` without prompts). ``server_args``
    go to every server after the sweep's own, ``bench_args`` to every benchmark run;
    ``environment`` is added to the servers' (the caller's environment is inherited). A plan
    without a plain configuration is refused (no ratios without it) unless
    ``allow_without_plain``. ``parallel``: every server's tensor, pipeline and data parallel
    sizes (the deployment's shape), plain ones included.
    """

    model: str
    configurations: tuple[Configuration, ...]
    out: Path
    levels: tuple[float, ...] = (1, 4, 16, 64)
    load: str = "concurrency"
    repeats: int = 3
    served_model_name: str | None = None
    tokenizer: str | None = None
    num_prompts: int = 32
    input_len: int = 64
    output_len: int = 64
    prompts: tuple[str, ...] | None = None
    dataset: str | None = None
    seed: int = 0
    warmups: int = 2
    server_args: tuple[str, ...] = ()
    bench_args: tuple[str, ...] = ()
    max_num_seqs: int | None = None
    allow_without_plain: bool = False
    quiet_limit_s: float = 600.0
    quiet_cores: float = 0.5
    server_timeout_s: float = 1200.0
    run_timeout_s: float = 3600.0
    environment: Mapping[str, str] = field(default_factory=dict)
    parallel: Parallel = ONE_DEVICE

    @property
    def dataset_name(self) -> str:
        """What every result says its prompts were (``--metadata dataset=...``)."""
        return RANDOM_DATASET if self.prompts is None else self.dataset or PROMPTS_DATASET

    @property
    def served(self) -> str:
        """The name the servers serve the model under (vLLM's default: the model as given)."""
        return self.served_model_name or self.model

    def order(self) -> tuple[tuple[int, Configuration], ...]:
        """(repeat, configuration) in the order the servers run: :func:`interleave`."""
        return interleave(self.configurations, self.repeats)

    def result_name(self, config: Configuration, level: float, repeat: int) -> str:
        """``<config>-c<level>-r<repeat>.json`` (a request rate: ``<config>-rps<rate>-r<repeat>.json``)."""
        prefix = "c" if self.load == "concurrency" else "rps"
        return f"{config.name}-{prefix}{level_text(level)}-r{repeat}.json"

    def to_dict(self) -> dict[str, Any]:
        """The plan as ``sweep.json`` records it (the prompts counted, not copied)."""
        data = asdict(self)
        data["configurations"] = [c.to_dict() for c in self.configurations]
        data["out"] = str(self.out)
        data["prompts"] = None if self.prompts is None else len(self.prompts)
        data["dataset"] = self.dataset_name
        data["environment"] = dict(self.environment)
        return data


@dataclass(frozen=True)
class SweepProgress:
    """What the sweep is doing now: ``runs_done`` of ``runs_total`` benchmark runs finished;
    ``phase`` is ``waiting`` (for a quiet machine), ``starting``, ``bench``, ``stopping``,
    ``note`` (``message`` says what the user should know) or ``done``."""

    runs_done: int
    runs_total: int
    phase: str
    config: str | None = None
    repeat: int | None = None
    level: float | None = None
    message: str = ""


@dataclass(frozen=True)
class ServerRun:
    """One server of a sweep as it ran: when, on how busy a machine, and what it wrote."""

    config: str
    repeat: int
    command: str
    busy_cores_before: float
    started_unix: float
    healthy_unix: float
    stopped_unix: float
    returncode: int | None
    log: str
    bench_log: str
    results: tuple[str, ...]


@dataclass(frozen=True)
class SweepRecord:
    """A finished sweep: the plan, the servers in the order they ran, the result files."""

    plan: SweepPlan
    servers: tuple[ServerRun, ...]
    results: tuple[Path, ...]

    def to_dict(self) -> dict[str, Any]:
        """``sweep.json``: paths relative to the output folder."""
        return {
            "plan": self.plan.to_dict(),
            "order": [[s.repeat, s.config] for s in self.servers],
            "servers": [asdict(s) for s in self.servers],
        }


def level_text(level: float) -> str:
    """A level as file names and messages show it: ``4``, ``2.5``."""
    return f"{level:g}"


def interleave(configurations: Sequence[Configuration], repeats: int) -> tuple[tuple[int, Configuration], ...]:
    """(repeat, configuration) pairs: odd repeats in the order given, even ones reversed
    (plain, ngram, ngram, plain, …): a slow drift of the machine then falls on each
    configuration alike, and no configuration always runs first after a quiet spell."""
    order: list[tuple[int, Configuration]] = []
    for repeat in range(1, repeats + 1):
        turn = list(configurations) if repeat % 2 else list(reversed(configurations))
        order.extend((repeat, c) for c in turn)
    return tuple(order)


def parse_configuration(text: str, flag: str = "--config") -> Configuration:
    """``plain``, ``NAME=none`` (plain decoding under another name) or ``NAME={json}`` (vLLM's
    ``--speculative-config``)."""
    name, equals, spec = text.partition("=")
    name = name.strip()
    if not equals:
        if name == PLAIN:
            return Configuration(PLAIN)
        raise SpecobsError(f'{flag} {text}: expected plain, NAME=none or NAME=\'{{"method": "ngram", ...}}\'')
    if not _NAME.match(name):
        raise SpecobsError(f"{flag} {text}: the name must be letters, digits, '.', '_' or '-' (it names files)")
    if spec.strip().lower() in ("none", "null", "plain", ""):
        return Configuration(name)
    try:
        value = json.loads(spec)
    except ValueError as exc:
        raise SpecobsError(f"{flag} {name}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise SpecobsError(f'{flag} {name}: expected a JSON object like \'{{"method": "ngram"}}\'')
    return Configuration(name, value)


def parse_levels(text: str, load: str = "concurrency", flag: str = "--concurrency") -> tuple[float, ...]:
    """``1,4,16`` → concurrencies (whole numbers of 1 or more), or ``0.5,2,8`` → request rates
    (positive numbers per second); distinct, in the order given."""
    parts = [p.strip() for p in text.split(",")]
    try:
        values = tuple(float(p) for p in parts if p) if all(parts) else ()
    except ValueError:
        values = ()
    example = "1,4,16" if load == "concurrency" else "0.5,2,8"
    if not values:
        raise SpecobsError(f"{flag} {text}: expected comma-separated numbers ({example})")
    _check_levels(values, load, flag)
    return tuple(int(v) if load == "concurrency" else v for v in values)


def _check_levels(levels: Sequence[float], load: str, flag: str) -> None:
    shown = ",".join(level_text(v) if isinstance(v, int | float) else repr(v) for v in levels)
    if not levels:
        raise SpecobsError(f"{flag}: no load levels")
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in levels)
    if load == "concurrency" and (not numbers or any(v < 1 or v != int(v) for v in levels)):
        raise SpecobsError(f"{flag} {shown}: concurrencies are whole numbers of 1 or more")
    if load == "rate" and (not numbers or any(v <= 0 for v in levels)):
        raise SpecobsError(f"{flag} {shown}: request rates are positive numbers per second (no inf: use a concurrency)")
    if len(set(levels)) != len(levels):
        raise SpecobsError(f"{flag} {shown}: each level once")


def _flag_of(argument: str) -> str:
    return argument.split("=", 1)[0].replace("_", "-")


def check_plan(plan: SweepPlan, names: Mapping[str, str] = FIELD_NAMES, *, vllm: VllmBuild | None = None) -> None:
    """Raise a :class:`SpecobsError` naming the first thing a sweep cannot run with
    (``names``: what to call each field; the CLI passes its flags). Nothing is started.
    ``vllm``: the vLLM that will run (pipeline parallel with speculation crashes in some)."""
    configs = plan.configurations
    if not configs:
        raise SpecobsError(f"{names['configurations']}: no configurations (give plain and at least one more)")
    seen: set[str] = set()
    for c in configs:
        if not isinstance(c.name, str) or not _NAME.match(c.name):
            raise SpecobsError(f"{names['configurations']} {c.name}: the name must be letters, digits, '.', '_' or '-'")
        if c.name in seen:
            raise SpecobsError(f"{names['configurations']} {c.name}: named twice")
        seen.add(c.name)
        spec = c.speculative_config
        if spec is None:
            continue
        if not isinstance(spec, Mapping) or not isinstance(spec.get("method"), str) or not spec.get("method"):
            raise SpecobsError(f'{names["configurations"]} {c.name}: needs a "method" (ngram, draft_model, ...)')
        k = spec.get("num_speculative_tokens")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise SpecobsError(f'{names["configurations"]} {c.name}: needs "num_speculative_tokens", 1 or more')
    if not any(c.plain for c in configs) and not plan.allow_without_plain:
        raise SpecobsError(
            f"{names['configurations']}: no plain configuration, so no speculative one can be compared with plain "
            f"decoding (add {names['configurations']} plain, or pass {names['allow_without_plain']} to run without one)"
        )
    if plan.load not in LOADS:
        raise SpecobsError(f"{names['load']} {plan.load}: one of {', '.join(LOADS)}")
    _check_levels(plan.levels, plan.load, names["levels"])
    for key, low in (("repeats", 1), ("num_prompts", 1), ("input_len", 1), ("output_len", 1), ("warmups", 0)):
        value = getattr(plan, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise SpecobsError(f"{names[key]} {value}: must be a whole number of at least {low}")
    if plan.max_num_seqs is not None and (not isinstance(plan.max_num_seqs, int) or plan.max_num_seqs < 1):
        raise SpecobsError(f"{names['max_num_seqs']} {plan.max_num_seqs}: must be a whole number of at least 1")
    for key, strict in (
        ("quiet_limit_s", False), ("quiet_cores", True), ("server_timeout_s", True), ("run_timeout_s", True),
    ):  # fmt: skip
        value = getattr(plan, key)
        if not isinstance(value, int | float) or not math.isfinite(value) or (value <= 0 if strict else value < 0):
            raise SpecobsError(f"{names[key]} {value}: must be a {'positive' if strict else 'non-negative'} number")
    if plan.prompts is not None and (not plan.prompts or any(not isinstance(p, str) or not p for p in plan.prompts)):
        raise SpecobsError(f"{names['prompts']}: no prompts (a list of non-empty strings)")
    _check_parallel(plan, names, vllm)
    for key, owned in (("server_args", SERVER_FLAGS), ("bench_args", BENCH_FLAGS)):
        for argument in getattr(plan, key):
            if _flag_of(argument) in owned:
                raise SpecobsError(f"{names[key]}: {_flag_of(argument)} is set by the sweep itself (see its options)")
    if not plan.model or (
        not os.path.exists(plan.model) and (plan.model.startswith((".", "/", "~")) or "/" not in plan.model)
    ):
        raise SpecobsError(f"{names['model']} {plan.model}: no such model folder")
    out = Path(plan.out)
    if out.exists() and not out.is_dir():
        raise SpecobsError(f"{names['out']} {out}: exists and is not a folder")
    if (out / "results").is_dir() and any((out / "results").glob("*.json")):
        raise SpecobsError(f"{names['out']} {out}: already holds sweep results (results/); choose another folder")


def _check_parallel(plan: SweepPlan, names: Mapping[str, str], vllm: VllmBuild | None) -> None:
    """The sizes are whole numbers; no speculation where vLLM crashes on it (pipeline parallel on
    some releases) or drops what a configuration names (a batch-size schedule at data parallel > 1,
    where every step drafts the static k: the sweep would measure something else)."""
    parallel = plan.parallel
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        size = getattr(parallel, key)
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise SpecobsError(f"{names[key]} {size}: must be a whole number of 1 or more")
    check_speculation(parallel, any(not c.plain for c in plan.configurations), vllm, names["pipeline_parallel_size"])
    if parallel.data_parallel_size == 1:
        return
    for c in plan.configurations:
        if c.speculative_config is not None and c.speculative_config.get("num_speculative_tokens_per_batch_size"):
            raise SpecobsError(
                f"{names['configurations']} {c.name}: a batch-size schedule at {names['data_parallel_size']} "
                f"{parallel.data_parallel_size}: vLLM drops num_speculative_tokens_per_batch_size at data parallel "
                f"> 1 and every step drafts k={c.k}; give one k, or measure one rank at data parallel 1"
            )


def server_arguments(plan: SweepPlan, config: Configuration) -> list[str]:
    """The server's arguments after ``python -m vllm.entrypoints.openai.api_server`` (the
    address is :class:`~specobs.loops.vllm_server.VllmServer`'s)."""
    args = ["--model", plan.model, "--served-model-name", plan.served]
    if config.speculative_config is not None:
        args += ["--speculative-config", json.dumps(dict(config.speculative_config), separators=(",", ":"))]
    if plan.max_num_seqs is not None:
        args += ["--max-num-seqs", str(plan.max_num_seqs)]
    return [*args, *plan.parallel.server_flags(), *plan.server_args]


def metadata(
    config: Configuration, repeat: int, parallel: Parallel = ONE_DEVICE, dataset: str = RANDOM_DATASET
) -> list[str]:
    """``--metadata`` items: the configuration, its method and k, the repeat, the prompts'
    dataset, the parallel sizes above 1 (the shape it ran at) and the speculative config itself,
    as compact JSON."""
    items = [f"config={config.name}", f"method={config.method or 'none'}", f"k={config.k}", f"repeat={repeat}"]
    items.append(f"dataset={dataset}")
    items += [f"{key}={size}" for key, size in parallel.engine_args().items()]
    if config.speculative_config is not None:
        items.append("speculative_config=" + json.dumps(dict(config.speculative_config), separators=(",", ":")))
    return items


def bench_arguments(
    plan: SweepPlan, config: Configuration, repeat: int, level: float, base_url: str, dataset: Path | None = None
) -> list[str]:
    """The ``vllm bench serve`` flags of one run (``dataset``: the prompts as ShareGPT JSON)."""
    args = [
        "--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", plan.model, "--served-model-name", plan.served, "--tokenizer", plan.tokenizer or plan.model,
    ]  # fmt: skip
    if dataset is None:
        args += ["--dataset-name", "random", "--random-input-len", str(plan.input_len),
                 "--random-output-len", str(plan.output_len)]  # fmt: skip
    else:
        args += ["--dataset-name", "sharegpt", "--dataset-path", str(dataset),
                 "--sharegpt-output-len", str(plan.output_len)]  # fmt: skip
    args += [
        "--num-prompts", str(plan.num_prompts), "--seed", str(plan.seed), "--temperature", "0", "--ignore-eos",
        "--num-warmups", str(plan.warmups),
    ]  # fmt: skip
    if plan.load == "concurrency":
        args += ["--request-rate", "inf", "--max-concurrency", str(int(level))]
    else:
        args += ["--request-rate", level_text(level)]
    args += [
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--save-detailed", "--result-dir", str(Path(plan.out) / "results"),
        "--result-filename", plan.result_name(config, level, repeat), "--disable-tqdm",
        "--label", config.name, *plan.bench_args, "--metadata",
        *metadata(config, repeat, plan.parallel, plan.dataset_name),
    ]  # fmt: skip
    return args


def write_sharegpt(prompts: Sequence[str], path: Path) -> Path:
    """The prompts as a ShareGPT dataset (each a conversation of the prompt and an empty answer:
    the output length is the sweep's)."""
    items = [
        {"id": str(i), "conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": ""}]}
        for i, p in enumerate(prompts)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(items, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    return path


def server_environment(plan: SweepPlan, config: Configuration, repeat: int) -> dict[str, str]:
    """The capture on, into ``out/capture``, under run id ``sweep-<config>-r<repeat>``; an
    allow-list of vLLM plugins (``VLLM_PLUGINS``), if the caller has one, gets ``specobs``."""
    env = {
        "PYTHONUNBUFFERED": "1",
        SPECOBS_ENABLE.name: "1",
        SPECOBS_DIR.name: str((Path(plan.out) / "capture").resolve()),
        SPECOBS_RUN_ID.name: f"sweep-{config.name}-r{repeat}",
        **plan.environment,
    }
    allowed = env.get("VLLM_PLUGINS", os.environ.get("VLLM_PLUGINS"))
    if allowed is not None and "specobs" not in allowed.split(","):
        env["VLLM_PLUGINS"] = ",".join([p for p in allowed.split(",") if p] + ["specobs"])
    return env


def _bench_levels(
    plan: SweepPlan, config: Configuration, repeat: int, base_url: str, dataset: Path | None,
    logs: tuple[Path, Path], tell: _Progress, python: str,
) -> list[str]:  # fmt: skip
    """Every level's benchmark run against one server, in one client process (vLLM is imported
    once), its output appended to the bench log; the result files' names. Progress follows the
    result files as they appear; a run that outlasts ``plan.run_timeout_s`` is stopped."""
    log, bench_log = logs
    results = Path(plan.out) / "results"
    runs = [bench_arguments(plan, config, repeat, level, base_url, dataset) for level in plan.levels]
    names = [plan.result_name(config, level, repeat) for level in plan.levels]
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=results.parent, delete=False) as handle:
        json.dump(runs, handle)
    listed = Path(handle.name)
    pending = list(zip(plan.levels, names, strict=True))
    client: subprocess.Popen[bytes] | None = None
    try:
        with open(bench_log, "ab") as out:
            client = subprocess.Popen(
                [python, "-m", "specobs.loops.bench_client", "--runs", str(listed), "--pause", f"{LEVEL_PAUSE_S:g}"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
            tell("bench", config, repeat, pending[0][0])
            deadline = time.monotonic() + plan.run_timeout_s
            status: int | None = None
            while status is None:
                try:
                    status = client.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    if time.monotonic() > deadline:
                        client.kill()
                        client.wait()
                        at = level_text(pending[0][0]) if pending else "?"
                        raise SpecobsError(
                            f"the benchmark of {config.name} r{repeat} at {plan.load} {at} took longer than "
                            f"{plan.run_timeout_s:.0f} s; see {bench_log} and {log}"
                        ) from None
                while pending and (results / pending[0][1]).exists():
                    pending.pop(0)
                    tell.done += 1
                    deadline = time.monotonic() + plan.run_timeout_s
                    if pending:
                        tell("bench", config, repeat, pending[0][0])
    finally:
        if client is not None and client.poll() is None:  # interrupted: no client outlives the sweep
            client.kill()
            client.wait()
        listed.unlink(missing_ok=True)
    for level, name in zip(plan.levels, names, strict=True):
        what = f"{config.name} r{repeat} at {plan.load} {level_text(level)}"
        if not (results / name).exists():
            raise SpecobsError(f"the benchmark of {what} exited with {status}; see {bench_log} and {log}")
        result = _read_result(results / name, what, bench_log)
        if result.get("failed"):
            tell("note", config, repeat, level, f"{what}: {result['failed']} request(s) failed; see {bench_log}")
    tell.done += len(pending)
    if status != 0:
        raise SpecobsError(f"the benchmark of {config.name} r{repeat} exited with {status}; see {bench_log} and {log}")
    return names


class _Progress:
    """Counts finished runs and tells ``on_progress`` what happens."""

    def __init__(self, on_progress: Callable[[SweepProgress], None] | None, total: int) -> None:
        self.on_progress, self.total, self.done = on_progress, total, 0

    def __call__(
        self, phase: str, config: Configuration | None = None, repeat: int | None = None,
        level: float | None = None, message: str = "",
    ) -> None:  # fmt: skip
        if self.on_progress is not None:
            name = None if config is None else config.name
            self.on_progress(SweepProgress(self.done, self.total, phase, name, repeat, level, message))


def run_sweep(
    plan: SweepPlan,
    on_progress: Callable[[SweepProgress], None] | None = None,
    *,
    python: str = sys.executable,
) -> SweepRecord:
    """Run every server of ``plan.order()`` and its benchmark runs; return what ran.

    Raises :class:`SpecobsError` (from :func:`check_plan`) before anything starts, and
    :class:`~specobs.loops.vllm_server.ServerError` or :class:`SpecobsError` naming the log when a
    server does not start or a benchmark run fails; the server is stopped either way.
    """
    vllm = installed_vllm()
    check_plan(plan, vllm=vllm)
    parallel = plan.parallel
    bind = cpu_binding(parallel, {**os.environ, **plan.environment}, vllm,
                       ranks=parallel.workers * parallel.data_parallel_size)  # fmt: skip
    plan = replace(plan, out=Path(plan.out).resolve(), environment={**bind, **plan.environment})
    out = plan.out
    for folder in ("results", "capture", "logs"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    dataset = None if plan.prompts is None else write_sharegpt(plan.prompts, out / "prompts.sharegpt.json")
    order = plan.order()
    tell = _Progress(on_progress, len(order) * len(plan.levels))
    for name, value in bind.items():
        tell("note", message=f"{name}={value} for the servers: a core list per vLLM CPU worker of "
             f"{parallel.text()} (vLLM's automatic binding needs a NUMA node per worker)")  # fmt: skip
    servers: list[ServerRun] = []
    for repeat, config in order:
        servers.append(_run_server(plan, config, repeat, dataset, tell, python))
        record = SweepRecord(plan, tuple(servers), tuple(out / "results" / n for s in servers for n in s.results))
        (out / "sweep.json").write_text(json.dumps(record.to_dict(), indent=1) + "\n")
    tell("done")
    return SweepRecord(plan, tuple(servers), tuple(out / "results" / n for s in servers for n in s.results))


def _run_server(
    plan: SweepPlan, config: Configuration, repeat: int, dataset: Path | None, tell: _Progress, python: str
) -> ServerRun:
    """Wait for a quiet machine, start one server, run every level against it, stop it."""
    out = plan.out

    def waiting(busy: float) -> None:
        tell("waiting", config, repeat, message=f"machine busy ({busy:.2f} cores): waiting before the next server")

    busy = wait_quiet(plan.quiet_limit_s, plan.quiet_cores, on_wait=waiting) if plan.quiet_limit_s else 0.0
    if plan.quiet_limit_s and busy >= plan.quiet_cores:
        tell("note", config, repeat, message=f"machine still busy ({busy:.2f} cores) after "
             f"{plan.quiet_limit_s:.0f} s: starting anyway")  # fmt: skip
    log, bench_log = out / "logs" / f"{config.name}-r{repeat}.log", out / "logs" / f"{config.name}-r{repeat}.bench.log"
    server = VllmServer(
        server_arguments(plan, config), log, environment=server_environment(plan, config, repeat), python=python
    )
    tell("starting", config, repeat, message=server.command)
    started = time.time()
    with server:
        server.wait_healthy(plan.server_timeout_s)
        healthy = time.time()
        written = _bench_levels(plan, config, repeat, server.base_url, dataset, (log, bench_log), tell, python)
        tell("stopping", config, repeat)
        time.sleep(FLUSH_S)  # the capture's last rows reach the disk before SIGINT
    return ServerRun(
        config=config.name, repeat=repeat, command=server.command, busy_cores_before=round(busy, 3),
        started_unix=started, healthy_unix=healthy, stopped_unix=time.time(),
        returncode=None if server.process is None else server.process.returncode,
        log=str(log.relative_to(out)), bench_log=str(bench_log.relative_to(out)), results=tuple(written),
    )  # fmt: skip


def _read_result(path: Path, what: str, bench_log: Path) -> dict[str, Any]:
    """A run's result file; an error naming the benchmark's log when it is missing or holds no
    completed request."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        raise SpecobsError(f"the benchmark of {what} wrote no result {path.name}; see {bench_log}") from None
    if not isinstance(result, dict) or not result.get("completed"):
        raise SpecobsError(f"the benchmark of {what} completed no request; see {bench_log}")
    return result


__all__ = [
    "LOADS",
    "PLAIN",
    "PROMPTS_DATASET",
    "RANDOM_DATASET",
    "TEXT_DATASET",
    "TEXT_PROMPTS",
    "Configuration",
    "ServerRun",
    "SweepPlan",
    "SweepProgress",
    "SweepRecord",
    "bench_arguments",
    "check_plan",
    "interleave",
    "level_text",
    "metadata",
    "parse_configuration",
    "parse_levels",
    "run_sweep",
    "server_arguments",
    "server_environment",
    "write_sharegpt",
]

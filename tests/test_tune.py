"""The closed loop's decisions (race, choice, verification) on a bench whose true speeds are known.

The bench here is not vLLM: it simulates engine steps whose tokens and seconds follow a known
truth, with per-step noise, a machine that drifts, a background load that comes and goes (what
a busy host does), a plain engine process slower or faster than the speculative one, and a
fake clock advanced by every step, so every decision can be checked against the truth. It
honours what the real engine does: a step's tokens come from the drafts of the step before, so
the first step after a switch counts for nothing. The real engines are exercised in
tests/test_tune_real.py.
"""

from __future__ import annotations

import json
import math
import random

import pytest
from typer.testing import CliRunner

from specobs.analysis.intervals import mean_interval, t95
from specobs.cli import app
from specobs.render import to_json
from specobs.render.tuning import tune_to_markdown
from specobs.tuning.engine import mixed_lengths, read_prompts
from specobs.tuning.paired import Block, StepAttribution
from specobs.tuning.tune import (
    PLAIN,
    Config,
    merged,
    power_buckets,
    tune,
    workload_time,
)

BLOCK_STEPS = 4


class KnownBench:
    """Steps whose mean tokens/s at (k, batch) is ``truth(k, batch)`` (k None: the plain engine).

    A step at batch b and k generates about b·(1 + 0.6k) tokens; its seconds are that over the
    truth, times the machine's speed at that moment (log-normal, ``drift`` wide, mean-reverting over ~10 s, and
    ``load``: a background process that slows the machine by that share for 0.5–3 s at a time,
    half of the time), times log-normal step noise. The plain engine runs ``engine_bias`` slower.
    """

    def __init__(self, truth, *, step_noise=0.25, drift=0.10, load=0.0, engine_bias=1.0, seed=1, largest=16,
                 round_s=1.0):  # fmt: skip
        self.truth = truth
        self.step_noise = step_noise
        self.drift = drift
        self.load = load
        self.engine_bias = engine_bias
        self.rng = random.Random(seed)
        self.now = 0.0
        self.largest = largest
        self.round_s = round_s
        self._walk = 0.0
        self._walk_at = 0.0
        self._load_on = False
        self._load_until = 0.0

    def tps(self, config: Config, batch: int) -> float:
        if config.engine == PLAIN:
            return self.truth(None, batch)
        return self.truth(self.k(config.schedule, batch), batch)

    @staticmethod
    def k(schedule, batch: int) -> int:
        return next((k for lo, hi, k in schedule if lo <= batch <= hi), schedule[-1][2])

    def _machine(self) -> float:
        dt = self.now - self._walk_at
        if dt > 0:  # mean-reverting over ~10 s: the machine wanders by ``drift`` but comes back
            keep = math.exp(-dt / 10.0)
            self._walk = self._walk * keep + self.rng.gauss(0, self.drift * math.sqrt(1 - keep * keep))
            self._walk_at = self.now
        if self.load and self.now >= self._load_until:
            self._load_on = self.rng.random() < 0.5
            self._load_until = self.now + self.rng.uniform(0.5, 3.0)
        return math.exp(self._walk) * (1 + self.load if self._load_on else 1.0)

    def _step(self, k: int | None, batch: int) -> tuple[float, float]:
        mean = batch * (1 + 0.6 * (k or 0))
        tokens = max(1.0, self.rng.gauss(mean, 0.5 * mean))
        seconds = mean / self.truth(k, batch) * self._machine() * math.exp(self.rng.gauss(0, self.step_noise))
        if k is None:
            seconds *= self.engine_bias
        self.now += seconds
        return tokens, seconds

    def stretch(self, engine, schedules, batch_size, round_index, seed):
        order_rng = random.Random(seed)
        attribution = StepAttribution(1)
        blocks: dict[tuple[int, int], list[float]] = {}
        started = self.now
        cycle, queue, current, left = -1, [], 0, 0
        sizes = [batch_size] if batch_size is not None else list(range(self.largest, 0, -1))
        while True:
            for batch in sizes:
                for _ in range(8 if batch_size is None else 1):
                    if left == 0:
                        if not queue:
                            cycle += 1
                            queue = order_rng.sample(range(len(schedules)), len(schedules))
                        current, left = queue.pop(), BLOCK_STEPS
                    left -= 1
                    schedule = schedules[current]
                    k = None if engine == PLAIN else self.k(schedule, batch)
                    tokens, seconds = self._step(k, batch)
                    if attribution.add((current, k)):
                        block = blocks.setdefault((cycle, current), [0.0, 0.0, 0])
                        block[0] += tokens
                        block[1] += seconds
                        block[2] += 1
            if self.now - started >= self.round_s:
                break
        return [Block(c, i, t, s, n) for (c, i), (t, s, n) in blocks.items()]

    def steps(self):
        return None  # no captured steps: unmeasured buckets fall back to the nearest measured one

    def clock(self) -> float:
        return self.now


def ngram_like(k, batch):
    """Speculation pays at small batches (best k falls with batch size) and loses at 16."""
    plain = 400.0 * batch**0.8
    if k is None:
        return plain
    if k == 0:
        return plain * 0.97  # the drafter still runs: the k = 0 tax
    best = {1: 3, 4: 2, 16: 0}[min((1, 4, 16), key=lambda b: abs(math.log(b / batch)))]
    gain = {1: 1.6, 4: 1.4, 16: 1.0}[min((1, 4, 16), key=lambda b: abs(math.log(b / batch)))]
    return plain * gain * (1 - 0.08 * abs(k - best)) if best else plain * gain * (1 - 0.05 * k)


def close_call(k, batch):
    """Neighbouring ks 4% apart at the best one (5 at batch 1, 3 at 4, 2 at 16): close enough that
    round-level noise (10–30%) cannot tell them apart in a few minutes."""
    plain = 400.0 * batch**0.8
    if k is None:
        return plain
    if k == 0:
        return plain * 0.97
    near = min((1, 4, 16), key=lambda b: abs(math.log(b / batch)))
    best = {1: 5, 4: 3, 16: 2}[near]
    gain = {1: 1.8, 4: 1.4, 16: 1.15}[near]
    return plain * gain * (1 - 0.04 * abs(k - best))


def run(truth, *, budget=600.0, seed=0, bench_seed=1, max_k=4, **bench):
    bench_ = KnownBench(truth, seed=bench_seed, **bench)
    result = tune(
        bench_, method="ngram", base_config={"method": "ngram", "num_speculative_tokens": max_k},
        batch_sizes=[1, 4, 16], max_k=max_k, budget_s=budget, seed=seed, clock=bench_.clock,
    )  # fmt: skip
    return bench_, result


def test_the_chosen_k_is_within_noise_of_the_true_best_over_many_machines():
    """30 differently noisy machines: each measured batch size's k costs at most one k step of
    the truth (8%), usually nothing; the verified gain over the best static k never excludes 0."""
    exact = 0
    for bench_seed in range(1, 31):
        _, result = run(ngram_like, bench_seed=bench_seed)
        for b in result.buckets:
            if b.basis != "measured":
                continue
            best = max(ngram_like(k, b.measured_batch_size) for k in range(5))
            regret = 1 - ngram_like(b.num_speculative_tokens, b.measured_batch_size) / best
            assert regret <= 0.081, (bench_seed, b)
            exact += regret == 0
        assert result.verification.gain_vs_best_static_high >= 0
    assert exact >= 60  # of 90 choices


def test_the_race_finds_the_true_best_k_at_every_measured_batch_size():
    _bench, result = run(ngram_like)
    by_batch = {b.measured_batch_size: b.num_speculative_tokens for b in result.buckets if b.basis == "measured"}
    assert by_batch == {1: 3, 4: 2, 16: 0}  # k = 0 at 16: drafting off beats every k there
    leaders = {m.batch_size: m for m in result.measurements if m.leader}
    assert leaders[16].engine == "plain"  # the plain engine is faster still, but a schedule runs in one engine
    assert result.schedule == merged(result.buckets)
    assert result.schedule[0] == (1, 1, 3) and result.schedule[-1][2] == 0
    config = json.loads(result.speculative_config)
    assert config["num_speculative_tokens"] == 3
    assert config["num_speculative_tokens_per_batch_size"] == [list(r) for r in result.schedule]


def test_clearly_slower_candidates_are_dropped_and_measured_less():
    _bench, result = run(ngram_like)
    at_16 = {(m.engine, m.num_speculative_tokens): m for m in result.measurements if m.batch_size == 16}
    assert at_16[("speculative", 4)].eliminated  # 0.8 of plain: far behind the leader
    assert at_16[("speculative", 4)].rounds < at_16[("plain", 0)].rounds
    for m in result.measurements:
        assert m.low <= m.tokens_per_second <= m.high


def test_verification_measures_the_gain_the_truth_implies():
    bench, result = run(ngram_like)
    v = result.verification
    chosen = Config("speculative", result.schedule)
    static = Config.static(v.best_static_num_speculative_tokens, 16)
    true_vs_static = workload_time(lambda b: bench.tps(static, b), 16) / workload_time(
        lambda b: bench.tps(chosen, b), 16
    )
    true_vs_plain = workload_time(lambda b: bench.tps(Config(PLAIN), b), 16) / workload_time(
        lambda b: bench.tps(chosen, b), 16
    )
    assert v.gain_vs_best_static_low <= true_vs_static - 1 <= v.gain_vs_best_static_high
    assert v.gain_vs_plain_low <= true_vs_plain - 1 <= v.gain_vs_plain_high
    assert v.gain_vs_best_static_high >= 0
    assert v.rounds >= 3


def test_no_speculation_when_the_plain_engine_wins_everywhere():
    def loses(k, batch):
        plain = 100.0 * batch
        return plain if k is None else plain * (0.8 - 0.03 * k)

    _, result = run(loses)
    assert result.speculative_config is None
    assert result.schedule == ((1, 16, 0),)
    assert all(b.num_speculative_tokens == 0 and b.basis == "plain engine" for b in result.buckets)
    v = result.verification
    assert v.gain_vs_plain == 0.0
    assert v.gain_vs_best_static > 0.1  # plain measured faster than the best static k, by ~20%
    assert "without speculative decoding" in tune_to_markdown(result)


def test_a_k_within_noise_of_the_leader_yields_to_the_best_static_k():
    def flat(k, batch):  # every k ≥ 1 the same: the schedule must not vary k for nothing
        plain = 100.0 * batch
        return plain if k is None else plain * (1.3 if k else 0.9)

    _, result = run(flat)
    assert len(result.schedule) == 1
    v = result.verification
    assert result.schedule[0][2] == v.best_static_num_speculative_tokens
    # The same configuration is not measured twice: its gain over itself is 0 by construction.
    assert (v.gain_vs_best_static, v.gain_vs_best_static_low, v.gain_vs_best_static_high) == (0.0, 0.0, 0.0)
    assert v.gain_vs_plain_low > 0.2  # 1.3× plain, measured


def test_the_race_keeps_to_its_share_of_the_budget():
    _bench, result = run(ngram_like, budget=60.0)
    assert result.noise.rounds >= 3  # at least the minimum, even when a round is long
    race_time = result.seconds["race"]
    one_round = race_time / result.noise.rounds
    assert race_time <= 0.7 * 60.0 + one_round
    assert result.seconds["total"] <= 60.0 + 4 * one_round


def test_intervals_and_buckets():
    assert t95(1) == pytest.approx(12.706, abs=1e-3)
    assert t95(100) == pytest.approx(1.984, abs=0.002)
    mean, low, high = mean_interval([10.0, 12.0, 11.0])
    assert mean == 11.0 and low == pytest.approx(11 - 4.3027 / math.sqrt(3), abs=1e-3) and high > mean
    assert power_buckets(16) == [(1, 1), (2, 3), (4, 7), (8, 15), (16, 16)]
    assert power_buckets(20)[-1] == (16, 20)
    assert mixed_lengths(4, 100) == [25, 50, 75, 100]


def test_json_has_every_contract_key():
    _, result = run(ngram_like)
    data = json.loads(to_json(result))
    assert {"speculative_config", "schedule", "measurements", "verification", "noise", "seconds"} <= set(data)
    assert data["schedule"] == [list(r) for r in result.schedule]
    m = data["measurements"][0]
    assert {"batch_size", "num_speculative_tokens", "tokens_per_second", "low", "high", "rounds"} <= set(m)
    v = data["verification"]
    for key in ("schedule_tokens_per_second", "best_static_num_speculative_tokens", "best_static_tokens_per_second",
                "plain_tokens_per_second"):  # fmt: skip
        assert isinstance(v[key], int | float)
    for gain in ("gain_vs_best_static", "gain_vs_plain"):
        assert v[f"{gain}_low"] <= v[gain] <= v[f"{gain}_high"]


def test_prompts_file_skips_bad_lines_and_names_them(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a b"}\nnot json\n\n{"text": 1}\n{"prompt": "c"}\n')
    prompts, skipped = read_prompts(str(path))
    assert prompts == ["a b", "c"]
    assert skipped == [f"{path}:2: not a JSON object", f"{path}:4: no string 'prompt'"]
    text = tmp_path / "p.txt"
    text.write_text("first prompt\n\nsecond {not json}\n")
    assert read_prompts(str(text)) == (["first prompt", "second {not json}"], [])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--speculative-config", "{"], "--speculative-config: not JSON"),
        (["--speculative-config", "[1]"], "expected a JSON object"),
        (["--speculative-config", '{"num_speculative_tokens": 3}'], 'needs a "method"'),
        (["--speculative-config", '{"method": "ngram"}'], '"num_speculative_tokens"'),
        (["--batch-sizes", "1,x"], "--batch-sizes 1,x"),
        (["--batch-sizes", "4,4"], "distinct"),
        (["--budget", "soon"], "--budget soon: not a duration"),
        (["--max-tokens", "0"], "--max-tokens 0"),
        (["--model", "./nowhere"], "--model ./nowhere: no such model folder"),
        (["--prompts", "EMPTY"], "no prompts"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(tmp_path, args, message):
    model = tmp_path / "model"
    model.mkdir()
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n")
    (tmp_path / "empty.txt").write_text("\n")
    base = {"--model": str(model), "--prompts": str(prompts), "--out": str(tmp_path / "out"),
            "--speculative-config": '{"method": "ngram", "num_speculative_tokens": 3}'}  # fmt: skip
    given = dict(zip(args[::2], args[1::2], strict=True))
    if given.get("--prompts") == "EMPTY":
        given["--prompts"] = str(tmp_path / "empty.txt")
    options = [x for key, value in {**base, **given}.items() for x in (key, value)]
    result = CliRunner().invoke(app, ["tune", *options])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert message in lines[-1] and "Traceback" not in result.output


def test_the_bundled_tune_example_has_the_keys_of_a_fresh_result():
    """docs/tune.md documents the keys of examples/data/tune-ngram/tune.json: that file must have
    exactly the keys a tune run writes now (rerun examples/make_tune_example.py when they change)."""
    from pathlib import Path

    from specobs.results import TuneResult

    def keys(value, prefix=""):
        if isinstance(value, dict):
            for key, item in value.items():
                if prefix in ("noise.idle_cpu_seconds", "noise.busy_seconds", "seconds"):
                    continue
                yield f"{prefix}.{key}" if prefix else key
                yield from keys(item, f"{prefix}.{key}" if prefix else key)
        elif isinstance(value, list):
            for item in value:
                yield from keys(item, prefix + "[]")

    bundled = json.loads((Path(__file__).parents[1] / "examples/data/tune-ngram/tune.json").read_text())
    _, result = run(ngram_like)
    fresh = json.loads(to_json(result))
    assert set(keys(bundled)) == set(keys(fresh))
    assert set(bundled["seconds"]) == set(fresh["seconds"])
    assert json.loads(to_json(TuneResult.from_dict(bundled))) == bundled  # read back whole

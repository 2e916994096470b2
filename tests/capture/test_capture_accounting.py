"""The capture's per-step accounting, driven through the patched entry points of fakes shaped like vLLM 0.32.

``FakeScheduler`` has the three ``Scheduler`` methods the hooks patch, with vLLM's signatures,
and does what vLLM's do with the numbers the hooks read: ``schedule`` builds a
``SchedulerOutput``-shaped object (``num_scheduled_tokens``, ``total_num_scheduled_tokens``,
``scheduled_spec_decode_tokens``, ``num_spec_tokens_to_schedule`` from a batch-size → k
lookup, ``num_invalid_spec_tokens``); ``update_from_output`` calls ``make_spec_decoding_stats``
once per request that verified drafts, with ``num_accepted = len(generated) - 1``, as
``vllm/v1/core/sched/scheduler.py`` does. ``FakeRunner`` is Model Runner V1
(``execute_model``, then ``sample_tokens`` calling ``_sample`` and ``propose_draft_token_ids``);
``FakeRunnerV2`` is Model Runner V2 (``sample`` and ``speculator.propose``). One fake clock
stands in for the hooks' ``time`` and their span clock, and moves only when a fake does work,
so every time below is a sum written out by hand; so are all the counts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from specobs.capture import MemorySink, Recorder
from specobs.capture.config import CaptureConfig
from specobs.vllm import hooks

T0 = 1764472000.0  # the fake wall clock at fake perf_counter 0
SCHEDULE, UPDATE = 0.001, 0.0005  # seconds of scheduler work in schedule() and update_from_output()
SAMPLE = 0.002  # rejection sampling
EXECUTE_PER_TOKEN = 0.001  # the target forward: per scheduled token
PROPOSE_PER_REQUEST = 0.0005  # the drafter: per request in the batch


class FakeTime:
    """The hooks' ``time`` module and their span clock in one: time moves only by ``advance``."""

    def __init__(self) -> None:
        self.now = 0.0

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return T0 + self.now

    def start(self) -> FakeSpan:
        return FakeSpan(self)


class FakeSpan:
    clock = "host"  # the span protocol's clock name (a host clock: no device here)

    def __init__(self, clock: FakeTime) -> None:
        self.time, self.begin, self.end = clock, clock.now, None

    def stop(self) -> None:
        self.end = self.time.now

    def seconds(self) -> float | None:
        return None if self.end is None else self.end - self.begin


@dataclass
class Req:
    """One request's part of a step: a decode verifying ``drafted`` tokens, or a prefill chunk."""

    id: str
    drafted: int = 0  # draft tokens scheduled for verification
    accepted: int = 0  # of them, accepted by the target (it then samples accepted + 1 tokens)
    invalid: int = 0  # grammar-invalid drafts (SchedulerOutput.num_invalid_spec_tokens)
    prefill: int = 0  # prompt tokens of a prefill chunk that samples nothing
    keep: int | None = None  # the request stops after this many of its sampled tokens (max_tokens, EOS)

    @property
    def tokens(self) -> int:
        return self.prefill or 1 + self.drafted


@dataclass
class SchedulerOutput:
    """The fields of vLLM's ``SchedulerOutput`` that the hooks and these fakes read."""

    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    scheduled_spec_decode_tokens: dict[str, list[int]]
    num_spec_tokens_to_schedule: int = 0
    num_invalid_spec_tokens: dict[str, int] | None = None
    plan: list[Req] = field(default_factory=list)  # the fakes' script; vLLM's has no such field


@dataclass
class ModelRunnerOutput:
    req_ids: list[str]
    req_id_to_index: dict[str, int]
    sampled_token_ids: list[list[int]]


@dataclass
class SpecDecodingStats:
    """vLLM's stats record, as far as ``make_spec_decoding_stats`` fills it."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0


class FakeScheduler:
    """``vllm.v1.core.sched.scheduler.Scheduler``'s hooked methods, doing the bookkeeping the hooks rely on."""

    def __init__(self, clock: FakeTime, num_spec_tokens: int, dynamic_sd_lookup: list[int] | None = None) -> None:
        self.clock = clock
        self.num_spec_tokens = num_spec_tokens
        self.dynamic_sd_lookup = dynamic_sd_lookup
        self.log_stats = False  # the hooks must see every draft with stats logging off too
        self.vllm_config = SimpleNamespace(
            model_config=SimpleNamespace(served_model_name=["tiny-llama"], model="/models/tiny-llama"),
            speculative_config=SimpleNamespace(method="ngram", model="ngram"),
            # As vLLM runs rank 1 of a dense model's data parallel: its own engine, with
            # data_parallel_rank reset to 0 and the rank kept in data_parallel_index.
            parallel_config=SimpleNamespace(data_parallel_rank=0, data_parallel_index=1),
        )
        self.plan: list[Req] = []

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        self.clock.advance(SCHEDULE)
        reqs, self.plan = self.plan, []
        k = self.num_spec_tokens
        if self.dynamic_sd_lookup is not None and reqs:
            k = self.dynamic_sd_lookup[len(reqs)]
        invalid = {r.id: r.invalid for r in reqs if r.invalid}
        return SchedulerOutput(
            num_scheduled_tokens={r.id: r.tokens for r in reqs},
            total_num_scheduled_tokens=sum(r.tokens for r in reqs),
            scheduled_spec_decode_tokens={r.id: [7] * r.drafted for r in reqs if r.drafted},
            num_spec_tokens_to_schedule=k,
            num_invalid_spec_tokens=invalid or None,
            plan=reqs,
        )

    def update_from_output(self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput) -> dict:
        self.clock.advance(UPDATE)
        sampled_token_ids = model_runner_output.sampled_token_ids
        spec_decoding_stats = None
        for req_id in scheduler_output.num_scheduled_tokens:
            req_index = model_runner_output.req_id_to_index[req_id]
            generated_token_ids = sampled_token_ids[req_index] if sampled_token_ids else []
            scheduled_spec_token_ids = scheduler_output.scheduled_spec_decode_tokens.get(req_id)
            if scheduled_spec_token_ids and generated_token_ids:
                spec_decoding_stats = self.make_spec_decoding_stats(
                    spec_decoding_stats,
                    num_draft_tokens=len(scheduled_spec_token_ids),
                    num_accepted_tokens=max(len(generated_token_ids) - 1, 0),
                    num_invalid_spec_tokens=scheduler_output.num_invalid_spec_tokens,
                    request_id=req_id,
                )
            keep = next(r.keep for r in scheduler_output.plan if r.id == req_id)
            if keep is not None:  # vLLM's _update_request_with_output: `del new_token_ids[num_new:]`
                del generated_token_ids[keep:]
        return {0: spec_decoding_stats}

    def make_spec_decoding_stats(
        self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens, num_invalid_spec_tokens, request_id
    ):
        if not self.log_stats or not num_draft_tokens:
            return None
        stats = spec_decoding_stats or SpecDecodingStats()
        if num_invalid_spec_tokens:
            num_draft_tokens -= num_invalid_spec_tokens.get(request_id, 0)
        stats.num_drafts += 1
        stats.num_draft_tokens += num_draft_tokens
        stats.num_accepted_tokens += num_accepted_tokens
        return stats


def _sampled(plan: Sequence[Req]) -> ModelRunnerOutput:
    return ModelRunnerOutput(
        req_ids=[r.id for r in plan],
        req_id_to_index={r.id: i for i, r in enumerate(plan)},
        sampled_token_ids=[[] if r.prefill else [3] * (r.accepted + 1) for r in plan],
    )


class FakeRunner:
    """Model Runner V1 (``vllm.v1.worker.gpu_model_runner.GPUModelRunner``): the calls the hooks time."""

    def __init__(self, clock: FakeTime) -> None:
        self.clock = clock
        self.execute_model_state: SchedulerOutput | None = None

    def execute_model(self, scheduler_output: SchedulerOutput, intermediate_tensors=None) -> None:
        self.clock.advance(EXECUTE_PER_TOKEN * scheduler_output.total_num_scheduled_tokens)
        self.execute_model_state = scheduler_output
        return None  # the output comes from sample_tokens

    def _sample(self, logits, spec_decode_metadata) -> ModelRunnerOutput:
        self.clock.advance(SAMPLE)
        assert self.execute_model_state is not None
        return _sampled(self.execute_model_state.plan)

    def propose_draft_token_ids(self, scheduler_output: SchedulerOutput, sampled_token_ids, *rest) -> list[list[int]]:
        self.clock.advance(PROPOSE_PER_REQUEST * len(scheduler_output.num_scheduled_tokens))
        return [[7] for _ in scheduler_output.num_scheduled_tokens]

    def sample_tokens(self, grammar_output) -> ModelRunnerOutput:
        scheduler_output = self.execute_model_state
        assert scheduler_output is not None
        output = self._sample(None, None)
        self.execute_model_state = None
        self.propose_draft_token_ids(scheduler_output, output.sampled_token_ids, None, None, None, None, None, None)
        return output


class FakeSpeculator:
    def __init__(self, clock: FakeTime) -> None:
        self.clock = clock

    def propose(self, input_batch, *rest) -> list[list[int]]:
        self.clock.advance(PROPOSE_PER_REQUEST * len(input_batch))
        return [[7] for _ in input_batch]


class AsyncOutput:
    """Model Runner V2's ``AsyncOutput``: ``get_output()`` fills the ``ModelRunnerOutput`` made
    before drafting and returns that same object (vllm/v1/worker/gpu/async_utils.py)."""

    def __init__(self, output: ModelRunnerOutput) -> None:
        self.model_runner_output = output
        self.sampled_token_ids = output.sampled_token_ids  # vLLM's has its own copy too: not what travels

    def get_output(self) -> ModelRunnerOutput:
        return self.model_runner_output


class FakeRunnerV2:
    """Model Runner V2 (``vllm.v1.worker.gpu.model_runner.GPUModelRunner``): ``sample``, the output
    wrapped in an ``AsyncOutput``, then ``speculator.propose``, then the async output returned
    (always, even without async scheduling), as vLLM 0.32 and 0.33 run it."""

    def __init__(self, clock: FakeTime) -> None:
        self.clock = clock
        self.speculator = FakeSpeculator(clock)
        self.execute_model_state: SchedulerOutput | None = None

    def execute_model(self, scheduler_output: SchedulerOutput, intermediate_tensors=None, dummy_run=False) -> None:
        self.clock.advance(EXECUTE_PER_TOKEN * scheduler_output.total_num_scheduled_tokens)
        self.execute_model_state = scheduler_output
        return None

    def sample(self, hidden_states, input_batch, grammar_output) -> ModelRunnerOutput:
        self.clock.advance(SAMPLE)
        return _sampled(input_batch)

    def sample_tokens(self, grammar_output) -> AsyncOutput | None:
        if self.execute_model_state is None:
            return None
        plan, self.execute_model_state = self.execute_model_state.plan, None
        async_output = AsyncOutput(self.sample(None, plan, grammar_output))
        self.speculator.propose(plan, None, None, None, None, None)
        return async_output


class FakeVllmConfig:
    """``vllm.config.vllm.VllmConfig`` as the front end builds it: ``__post_init__`` drops a
    batch-size schedule at data parallel > 1 (``_maybe_disable_dynamic_sd_for_data_parallel``)."""

    def __init__(self, data_parallel_size: int, schedule: list[tuple[int, int, int]] | None) -> None:
        self.parallel_config = SimpleNamespace(data_parallel_size=data_parallel_size)
        self.speculative_config = SimpleNamespace(num_speculative_tokens_per_batch_size=schedule)
        self._maybe_disable_dynamic_sd_for_data_parallel()

    def _maybe_disable_dynamic_sd_for_data_parallel(self) -> None:
        if (
            self.speculative_config.num_speculative_tokens_per_batch_size
            and self.parallel_config.data_parallel_size > 1
        ):
            self.speculative_config.num_speculative_tokens_per_batch_size = None


class Engine:
    """One engine core: the scheduler and the runner called in vLLM's order."""

    def __init__(self, scheduler: FakeScheduler, runner: FakeRunner | FakeRunnerV2, sink: MemorySink) -> None:
        self.scheduler, self.runner, self.sink = scheduler, runner, sink

    def schedule(self, *plan: Req) -> SchedulerOutput:
        self.scheduler.plan = list(plan)
        return self.scheduler.schedule()

    def run(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        """``execute_model`` then ``sample_tokens`` (EngineCore.step and step_with_batch_queue alike)."""
        assert self.runner.execute_model(scheduler_output) is None
        output = self.runner.sample_tokens(None)
        if isinstance(output, AsyncOutput):  # the engine core's AsyncOutputFuture.result()
            output = output.get_output()
        assert output is not None
        return output

    def update(self, scheduler_output: SchedulerOutput, runner_output: ModelRunnerOutput) -> dict:
        return self.scheduler.update_from_output(scheduler_output, runner_output)

    def step(self, *plan: Req) -> dict:
        """One synchronous step (EngineCore.step)."""
        scheduler_output = self.schedule(*plan)
        return self.update(scheduler_output, self.run(scheduler_output))

    def rows(self) -> tuple[list[dict], list[dict]]:
        """Step rows and per-request rows written so far."""
        hooks.current().recorder.flush(final=True)
        steps = [r for r in self.sink.rows if r["request_id"] is None]
        return steps, [r for r in self.sink.rows if r["request_id"] is not None]


@pytest.fixture
def engine(monkeypatch):
    """``engine(config, num_spec_tokens=..., dynamic_sd_lookup=..., runner="v1")``: hooks installed on the fakes."""
    clock = FakeTime()
    monkeypatch.setattr(hooks, "time", clock)
    monkeypatch.setattr(hooks, "platform_labels", lambda: {"platform": "cpu", "device": "fake-cpu"})
    assert hooks.current() is None

    def start(
        config: CaptureConfig | None = None,
        *,
        num_spec_tokens: int = 4,
        dynamic_sd_lookup: list[int] | None = None,
        runner: str = "v1",
        warm: bool = True,
    ) -> Engine:
        """``warm``: run the engine's first step (engine start: no step time) and forget its row and
        the clock's move, so that a test's steps are steady ones from time 0."""
        sink = MemorySink()
        runner_cls = FakeRunner if runner == "v1" else FakeRunnerV2
        capture = hooks.install(
            config or CaptureConfig(run_id="t", workload="unit"),
            Recorder([sink], flush_interval=60.0),
            scheduler=FakeScheduler,
            runners={runner: runner_cls},
            vllm_config=FakeVllmConfig,
            clock=clock,
        )
        assert capture.missing == []
        e = Engine(FakeScheduler(clock, num_spec_tokens, dynamic_sd_lookup), runner_cls(clock), sink)
        if warm:
            e.step(Req("start", prefill=4))
            capture.recorder.flush(final=True)
            sink.rows.clear()
            clock.now = 0.0
        return e

    yield start
    hooks.uninstall()
    assert "__specobs__" not in vars(FakeScheduler.schedule)  # the fakes are as they were


def per_pos(row: dict) -> tuple[list[int], list[int], list[int]]:
    """(a_i, n_i, m_i) of a row."""
    return row["num_accepted_tokens_per_pos"], row["num_drafts_per_pos"], row["num_drafts_accepted_before_pos"]


def test_per_position_counts_timing_and_labels_of_one_step(engine):
    e = engine(CaptureConfig(run_id="t", workload="unit", per_request=True))
    result = e.step(
        Req("A", drafted=4, accepted=4),  # all accepted
        Req("B", drafted=4, accepted=1),  # rejected at position 1
        Req("C", drafted=2, accepted=0),  # a short draft (the drafter found 2 tokens), rejected at 0
        Req("D", drafted=3, accepted=3),  # a short draft, all accepted
        Req("E", drafted=4, accepted=2, invalid=1),  # 1 grammar-invalid draft: 3 count; rejected at 2
        Req("F", prefill=32),  # a prefill chunk: no drafts, samples nothing
    )
    assert result == {0: None}  # vLLM's own return value, untouched (stats logging off)
    (step,), per_request = e.rows()
    # (drafted, accepted): A (4, 4), B (4, 1), C (2, 0), D (3, 3), E (3, 2).
    # a_i = #(accepted > i): i=0 A B D E, i=1 A D E, i=2 A D, i=3 A.
    # n_i = #(drafted > i):  i=0 all 5, i=1 all 5, i=2 A B D E, i=3 A B.
    # m_i = #(drafted > i and accepted >= i): i=0 all 5, i=1 A B D E, i=2 A D E, i=3 A.
    assert per_pos(step) == ([4, 3, 2, 1], [5, 5, 4, 2], [5, 4, 3, 1])
    assert step["num_drafts"] == 5
    assert step["num_draft_tokens"] == 4 + 4 + 2 + 3 + 3
    assert step["num_accepted_tokens"] == 4 + 1 + 0 + 3 + 2
    assert step["num_generated_tokens"] == 5 + 2 + 1 + 4 + 3 + 0  # accepted + 1 each, F none
    assert step["batch_size"] == 6 and step["num_spec_tokens"] == 4
    assert step["num_scheduled_tokens"] == 5 + 5 + 3 + 4 + 5 + 32  # 1 + scheduled drafts (E's 4), F's chunk
    # 54 tokens at 1 ms each, plus 2 ms sampling; 6 requests at 0.5 ms to propose; the step is
    # everything from schedule() starting to update_from_output() returning.
    assert step["verify_seconds"] == pytest.approx(0.054 + 0.002)
    assert step["draft_seconds"] == pytest.approx(0.003)
    assert step["step_seconds"] == pytest.approx(0.001 + 0.054 + 0.002 + 0.003 + 0.0005)
    assert step["ts"] == pytest.approx(T0 + 0.0605)
    labels = {k: step[k] for k in ("run_id", "workload", "engine", "model", "method", "draft_model", "platform")}
    assert labels == {
        "run_id": "t",
        "workload": "unit",
        "engine": 1,
        "model": "tiny-llama",
        "method": "ngram",
        "draft_model": None,  # vLLM fills the ngram method's "model" with the method name
        "platform": "cpu",
    }
    rows = {r["request_id"]: per_pos(r) for r in per_request}
    assert rows == {
        "A": ([1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]),
        "B": ([1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]),
        "C": ([0, 0, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]),
        "D": ([1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0]),
        "E": ([1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]),
    }
    assert {r["request_id"]: (r["num_draft_tokens"], r["num_accepted_tokens"]) for r in per_request} == {
        "A": (4, 4),
        "B": (4, 1),
        "C": (2, 0),
        "D": (3, 3),
        "E": (3, 2),
    }
    assert all(r["batch_size"] == 6 and r["num_drafts"] == 1 and r["ts"] == step["ts"] for r in per_request)
    assert hooks.current().recorder.hook_errors == 0


def test_the_hooks_see_every_draft_with_vllms_stats_logging_on_too(engine):
    e = engine()
    e.scheduler.log_stats = True
    stats = e.step(Req("a", drafted=4, accepted=2), Req("b", drafted=4, accepted=3, invalid=1))[0]
    (step,), _ = e.rows()
    assert (stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens) == (2, 4 + 3, 2 + 3)
    assert (step["num_drafts"], step["num_draft_tokens"], step["num_accepted_tokens"]) == (2, 7, 5)


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_two_steps_in_flight_keep_their_own_counts_and_timing(engine, runner):
    """Async scheduling (EngineCore.step_with_batch_queue): step 2 is scheduled and run before step 1 is updated."""
    e = engine(num_spec_tokens=3, runner=runner)
    first = e.schedule(Req("a", drafted=3, accepted=1), Req("b", drafted=3, accepted=3))  # t 0 → 0.001
    first_output = e.run(first)  # 8 tokens: 0.008 verify + 0.002 sampling, then 2 × 0.0005 drafting → 0.012
    second = e.schedule(Req("c", drafted=2, accepted=0), Req("d", drafted=3, accepted=2), Req("e", prefill=16))
    second_output = e.run(second)  # 0.013; 23 tokens: 0.023 + 0.002, then 3 × 0.0005 → 0.0395
    e.update(first, first_output)  # → 0.040
    e.update(second, second_output)  # → 0.0405
    (one, two), _ = e.rows()
    # Step 1, a (3, 1) and b (3, 3): a_i [2, 1, 1], n_i [2, 2, 2], m_i: a at 0-1, b at 0-2.
    assert per_pos(one) == ([2, 1, 1], [2, 2, 2], [2, 2, 1])
    assert (one["num_draft_tokens"], one["num_accepted_tokens"], one["num_generated_tokens"]) == (6, 4, 2 + 4)
    assert (one["batch_size"], one["num_scheduled_tokens"]) == (2, 8)
    assert one["verify_seconds"] == pytest.approx(0.008 + 0.002)
    assert one["draft_seconds"] == pytest.approx(0.001)
    assert one["step_seconds"] == pytest.approx(0.040)  # scheduled at 0, updated at 0.040
    # Step 2, c (2, 0), d (3, 2), e a prefill: a_i [1, 1, 0], n_i [2, 2, 1], m_i: c at 0, d at 0-2.
    assert per_pos(two) == ([1, 1, 0], [2, 2, 1], [2, 1, 1])
    assert (two["num_draft_tokens"], two["num_accepted_tokens"], two["num_generated_tokens"]) == (5, 2, 1 + 3)
    assert (two["batch_size"], two["num_scheduled_tokens"]) == (3, 23)
    assert two["verify_seconds"] == pytest.approx(0.023 + 0.002)
    assert two["draft_seconds"] == pytest.approx(0.0015)
    assert two["step_seconds"] == pytest.approx(0.0405 - 0.012)  # scheduled at 0.012
    assert hooks.current().recorder.hook_errors == 0


def test_a_step_scheduled_before_the_hooks_gets_null_timing_not_anothers(engine):
    e = engine(num_spec_tokens=2)
    # Scheduled before the hooks were installed: no schedule() call the capture saw.
    unhooked = SchedulerOutput({"x": 3}, 3, {"x": [7, 7]}, 2, plan=[Req("x", drafted=2, accepted=1)])
    hooked = e.schedule(Req("y", drafted=2, accepted=2))  # t 0 → 0.001
    hooked_output = e.run(hooked)  # 3 tokens: 0.003 + 0.002, then 0.0005 drafting → 0.0065
    e.update(unhooked, _sampled(unhooked.plan))  # the older step finishes first → 0.007
    e.update(hooked, hooked_output)  # → 0.0075
    (late, step), _ = e.rows()
    assert (late["step_seconds"], late["verify_seconds"], late["draft_seconds"]) == (None, None, None)
    assert per_pos(late) == ([1, 0], [1, 1], [1, 1])  # its counts still count: x (2, 1)
    assert step["step_seconds"] == pytest.approx(0.0075)
    assert step["verify_seconds"] == pytest.approx(0.003 + 0.002)
    assert step["draft_seconds"] == pytest.approx(0.0005)
    assert per_pos(step) == ([1, 1], [1, 1], [1, 1])


def test_dynamic_k_follows_the_batch_size_and_lists_fit_longer_drafts(engine):
    # num_speculative_tokens_per_batch_size giving k 5 at batch 1, 3 at 2-3, 1 at 4-8 (index = batch size).
    e = engine(num_spec_tokens=5, dynamic_sd_lookup=[0, 5, 3, 3, 1, 1, 1, 1, 1])
    e.step(Req("p", drafted=5, accepted=2))
    # Batch 3 → k 3, but p's 5 tokens were drafted at k 5; q's drafter found only 2 tokens.
    e.step(Req("p", drafted=5, accepted=4), Req("q", drafted=2, accepted=2), Req("r", prefill=8))
    e.step(*(Req(rid, drafted=1, accepted=acc) for rid, acc in (("s", 1), ("t", 0), ("u", 1), ("v", 1))))
    e.step(Req("w", drafted=0), Req("x", prefill=4))  # batch 2 → k 3, nothing to verify
    steps, _ = e.rows()
    assert [s["num_spec_tokens"] for s in steps] == [5, 3, 1, 3]
    # p (5, 2): accepted at 0-1, drafted at 0-4, tried at 0-2.
    assert per_pos(steps[0]) == ([1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 0, 0])
    # p (5, 4) and q (2, 2): lists 5 long at k 3; p tried everywhere, q at 0-1.
    assert per_pos(steps[1]) == ([2, 2, 1, 1, 0], [2, 2, 1, 1, 1], [2, 2, 1, 1, 1])
    assert (steps[1]["num_draft_tokens"], steps[1]["num_accepted_tokens"]) == (7, 6)
    assert per_pos(steps[2]) == ([3], [4], [4])  # s t u v, one token each, t rejected
    assert per_pos(steps[3]) == ([0, 0, 0], [0, 0, 0], [0, 0, 0]) and steps[3]["num_drafts"] == 0


def test_a_static_k_ignores_the_scheduled_k_field(engine):
    e = engine(num_spec_tokens=3)  # no lookup: vLLM leaves num_spec_tokens_to_schedule = num_spec_tokens
    output = e.schedule(Req("a", drafted=3, accepted=1))
    output.num_spec_tokens_to_schedule = 0  # an older vLLM's default
    e.update(output, e.run(output))
    (step,), _ = e.rows()
    assert step["num_spec_tokens"] == 3 and per_pos(step) == ([1, 0, 0], [1, 1, 1], [1, 1, 0])


def _sampled_ids(engine, monkeypatch, requests: list[str]) -> tuple[list[dict], list[dict]]:
    monkeypatch.setenv("SPECOBS_PER_REQUEST", "1")
    monkeypatch.setenv("SPECOBS_PER_REQUEST_SAMPLE", "0.25")
    monkeypatch.setenv("SPECOBS_RUN_ID", "sampling")
    e = engine(CaptureConfig.from_env())
    for start in range(0, len(requests), 500):
        e.step(*(Req(rid, drafted=2, accepted=1) for rid in requests[start : start + 500]))
    e.step(*(Req(rid, drafted=2, accepted=2) for rid in requests[:500]))  # the first 500 again
    rows = e.rows()
    hooks.uninstall()
    return rows


def test_per_request_rows_sample_a_stable_share_of_request_ids(engine, monkeypatch):
    requests = [f"cmpl-{i:05d}-0" for i in range(2000)]
    steps, per_request = _sampled_ids(engine, monkeypatch, requests)
    assert [s["num_drafts"] for s in steps] == [500, 500, 500, 500, 500]  # step rows count every request
    sampled = {r["request_id"] for r in per_request}
    # 25% of 2000: the binomial standard deviation is sqrt(0.25 * 0.75 / 2000) = 0.0097; allow 4 of them.
    assert abs(len(sampled) / 2000 - 0.25) < 0.039
    # A sampled request keeps all its rows: the first 500 ran twice, the rest once.
    first = set(requests[:500])
    rows_per_id = {rid: sum(r["request_id"] == rid for r in per_request) for rid in sampled}
    assert rows_per_id == {rid: 2 if rid in first else 1 for rid in sampled}
    # The choice depends on the request id only: another engine (process) picks the same ones.
    _, again = _sampled_ids(engine, monkeypatch, list(reversed(requests)))
    assert {r["request_id"] for r in again} == sampled


@pytest.mark.parametrize(("share", "expected"), [("0", 0), ("1", 40), ("1.5", 40), ("-1", 0)])
def test_per_request_sample_edges(engine, monkeypatch, share, expected):
    monkeypatch.setenv("SPECOBS_PER_REQUEST", "1")
    monkeypatch.setenv("SPECOBS_PER_REQUEST_SAMPLE", share)
    e = engine(CaptureConfig.from_env())
    e.step(*(Req(f"r{i}", drafted=1, accepted=1) for i in range(40)))
    (step,), per_request = e.rows()
    assert step["num_drafts"] == 40 and len(per_request) == expected


class BrokenClock:
    def start(self):
        raise RuntimeError("no clock")


def test_accepted_tokens_cut_by_a_stop_are_counted_past_the_end(engine):
    e = engine(num_spec_tokens=4)
    e.step(
        Req("A", drafted=4, accepted=4, keep=2),  # samples 5, keeps 2: the bonus and 2 accepted cut
        Req("B", drafted=4, accepted=3, keep=3),  # samples 4, keeps 3: only the bonus cut
        Req("C", drafted=4, accepted=1),  # no stop
    )
    e.step(Req("D", drafted=4, accepted=2))
    (first, second), _ = e.rows()
    assert first["num_accepted_tokens"] == 8  # vLLM counts before the stop trims: 4 + 3 + 1
    assert first["num_generated_tokens"] == 2 + 3 + 2  # what the requests kept
    assert first["num_accepted_tokens_past_end"] == 2  # A's 2 accepted tokens beyond its end
    assert second["num_accepted_tokens_past_end"] == 0


def test_run_metadata_is_recorded_once_per_engine_and_labels_every_row(engine):
    e = engine(num_spec_tokens=2, warm=False)
    e.scheduler.vllm_config.parallel_config.tensor_parallel_size = 2
    e.scheduler.vllm_config.model_config.enforce_eager = False
    e.scheduler.vllm_config.compilation_config = SimpleNamespace(cudagraph_mode=SimpleNamespace(name="PIECEWISE"))
    e.scheduler.vllm_config.speculative_config.num_speculative_tokens_per_batch_size = [(1, 4, 2), (5, 8, 1)]
    e.runner.attn_groups = [
        [SimpleNamespace(backend=Backend("ROCM_AITER_FA"), layer_names=["model.layers.0"])],
        [SimpleNamespace(backend=Backend("ROCM_ATTN"), layer_names=["draft.layers.0"])],
    ]
    e.runner.drafter = SimpleNamespace(draft_attn_groups=[e.runner.attn_groups[1][0]])
    e.step(Req("a", drafted=2, accepted=1))
    e.step(Req("b", drafted=2, accepted=2))
    steps, _ = e.rows()
    (record,) = e.sink.metadata  # one record for the engine, not one per step
    assert record["specobs_metadata"] == 1 and record["engine"] == 1 and record["run_id"] == "t"
    assert (record["attention_backend"], record["draft_attention_backend"]) == ("ROCM_AITER_FA", "ROCM_ATTN")
    assert (record["graph_mode"], record["tensor_parallel_size"]) == ("piecewise", 2)
    assert record["schedule"] == ((1, 4, 2), (5, 8, 1)) and record["method"] == "ngram"
    assert all((r["attention_backend"], r["graph_mode"]) == ("ROCM_AITER_FA", "piecewise") for r in steps)
    assert len(steps) == 2  # the metadata record is no step
    # The engine's first step is engine start: its counts count, its times are no step time.
    first, second = steps
    assert (first["step_seconds"], first["verify_seconds"], first["draft_seconds"], first["timing_clock"]) == (
        None,
        None,
        None,
        None,
    )
    assert first["num_accepted_tokens"] == 1 and second["verify_seconds"] == pytest.approx(3 * 0.001 + 0.002)
    assert hooks.current().recorder.untimed_steps == 0  # left out on purpose, not lost


class Backend:
    def __init__(self, name: str) -> None:
        self.name = name

    def get_name(self) -> str:
        return self.name


def test_errors_inside_the_hooks_are_counted_and_never_raised(engine, caplog):
    e = engine(num_spec_tokens=2)
    recorder = hooks.current().recorder
    # A runner output the capture cannot read (vLLM never sends None, but the hooks must not care):
    # finish_step fails on it; the scheduler's own work and return value are untouched.
    output = e.schedule(Req("a", drafted=2, accepted=1), Req("b", prefill=8))
    runner_output = e.run(output)
    runner_output.sampled_token_ids[1] = None
    with caplog.at_level(logging.WARNING, logger="specobs"):
        assert e.update(output, runner_output) == {0: None}
        assert recorder.hook_errors == 1
        # A clock that fails: each timed runner call (execute_model, _sample, propose) counts one error.
        hooks.current().clock = BrokenClock()
        e.step(Req("c", drafted=2, accepted=2))
        assert recorder.hook_errors == 1 + 3
        e.step(Req("d", drafted=2, accepted=0))
        assert recorder.hook_errors == 1 + 3 + 3
    (c, d), _ = e.rows()  # the failed step wrote nothing; the untimed ones still count
    assert per_pos(c) == ([1, 1], [1, 1], [1, 1]) and c["verify_seconds"] is None and c["draft_seconds"] is None
    assert per_pos(d) == ([0, 0], [1, 1], [1, 0])
    assert c["step_seconds"] is not None  # the scheduler's own clock still ran
    warnings = [r.getMessage() for r in caplog.records if "failed and was skipped" in r.getMessage()]
    assert len(warnings) == 2  # one per place (update_from_output, timing), not per failure


def test_the_engines_own_errors_pass_through_and_leave_no_half_step(engine):
    e = engine(num_spec_tokens=2)
    output = e.schedule(Req("a", drafted=2, accepted=2), Req("b", drafted=2, accepted=2))
    runner_output = e.run(output)
    del runner_output.req_id_to_index["b"]  # vLLM fails on "b", after observing "a"
    with pytest.raises(KeyError):
        e.update(output, runner_output)
    started = e.scheduler.clock.now
    e.step(Req("c", drafted=2, accepted=0))
    (step,), _ = e.rows()  # only c: a's observation went with the failed step
    assert per_pos(step) == ([0, 0], [1, 1], [1, 0]) and step["num_drafts"] == 1
    # c's own timing, not the failed step's: 3 tokens (0.003) + sampling, 0.0005 drafting, the scheduler's work.
    assert step["verify_seconds"] == pytest.approx(0.003 + 0.002)
    assert step["step_seconds"] == pytest.approx(0.001 + 0.003 + 0.002 + 0.0005 + 0.0005)
    assert e.scheduler.clock.now - started == pytest.approx(step["step_seconds"])
    assert hooks.current().recorder.hook_errors == 0


# --- tensor/pipeline parallel: the runner in a worker process, the scheduler here ---------------------------------
#
# vLLM's MultiprocExecutor pickles each SchedulerOutput to the workers and the output rank's
# ModelRunnerOutput back. Here a forked process plays the worker: its own hooks (installed there
# alone, with its own fake clock) time the fake runner; this process runs the fake scheduler with
# the scheduler hooks only. Everything crosses the process boundary pickled, as in vLLM.


class LateSpan(FakeSpan):
    """A device span: the device reaches its end only once more work has been queued after it, so its
    seconds are unknown while its step's output leaves and known by the next step's."""

    def seconds(self) -> float | None:
        return None if self.end is None or self.time.now <= self.end else super().seconds()


class LateClock(FakeTime):
    def start(self) -> FakeSpan:
        return LateSpan(self)


def _worker(conn, mode: str) -> None:
    """The worker's loop: pickled SchedulerOutput in, ``execute_model`` + ``sample_tokens``, pickled output out."""
    import pickle

    hooks._CAPTURE = None  # forked from a process with hooks: this one gets its own (the class patches stay)
    clock = LateClock() if mode == "late" else FakeTime()
    hooks.time = clock  # this process only
    runner_cls = FakeRunnerV2 if mode == "v2" else FakeRunner
    if mode != "unhooked":
        runners = {"v2" if mode == "v2" else "v1": runner_cls}
        hooks.install(CaptureConfig(run_id="t"), scheduler=FakeScheduler, runners=runners, clock=clock)
        if mode == "broken":
            hooks.current().clock = BrokenClock()
    runner = runner_cls(clock)
    runner.attn_groups = [[SimpleNamespace(backend=Backend("ROCM_AITER_FA"), layer_names=["model.layers.0"])]]
    runner.drafter = SimpleNamespace(draft_attn_groups=[])
    while (message := conn.recv_bytes()) != b"stop":
        scheduler_output = pickle.loads(message)
        assert runner.execute_model(scheduler_output) is None
        output = runner.sample_tokens(None)
        if isinstance(output, AsyncOutput):  # vLLM's WorkerProc.enqueue_output: get_output(), then pickle
            output = output.get_output()
        conn.send_bytes(pickle.dumps(output))
    conn.close()


class SplitEngine(Engine):
    """An engine core whose runner is a worker process (tensor parallel size > 1)."""

    def __init__(self, scheduler: FakeScheduler, sink: MemorySink, mode: str) -> None:
        super().__init__(scheduler, FakeRunner(scheduler.clock), sink)
        self.start_worker(mode)

    def start_worker(self, mode: str) -> None:
        import multiprocessing

        self.conn, child = multiprocessing.get_context("fork").Pipe()
        self.process = multiprocessing.get_context("fork").Process(target=_worker, args=(child, mode), daemon=True)
        self.process.start()

    def stop_worker(self) -> None:
        self.conn.send_bytes(b"stop")
        self.process.join(10)

    def run(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        import pickle

        self.conn.send_bytes(pickle.dumps(scheduler_output))
        return pickle.loads(self.conn.recv_bytes())


@pytest.fixture
def split_engine(monkeypatch):
    """``split_engine(mode)``: the worker started first (no thread here to fork), then the scheduler hooks here."""
    engines: list[SplitEngine] = []

    def start(mode: str = "host", num_spec_tokens: int = 3) -> SplitEngine:
        clock = FakeTime()
        sink = MemorySink()
        e = SplitEngine(FakeScheduler(clock, num_spec_tokens), sink, mode)
        engines.append(e)
        monkeypatch.setattr(hooks, "time", clock)
        monkeypatch.setattr(hooks, "platform_labels", lambda: {"platform": "cpu", "device": "fake-cpu"})
        hooks.install(CaptureConfig(run_id="t"), Recorder([sink], flush_interval=60.0), scheduler=FakeScheduler,
                      runners={}, clock=clock)  # fmt: skip
        return e

    yield start
    for e in engines:
        if e.process.is_alive():
            e.stop_worker()
    hooks.uninstall()


def test_a_workers_timing_reaches_the_engine_cores_row_of_the_same_step(split_engine):
    e = split_engine("host")
    e.step(Req("start", prefill=4))  # engine start: its times are no step time
    e.step(Req("a", drafted=3, accepted=1), Req("b", drafted=3, accepted=3))  # 8 tokens
    e.step(Req("c", drafted=2, accepted=0), Req("d", prefill=16))  # 19 tokens
    steps, _ = e.rows()
    first, one, two = steps
    assert (first["verify_seconds"], first["step_seconds"], first["timing_clock"]) == (None, None, None)
    # The worker's own clock, by hand: 1 ms per scheduled token + 2 ms sampling; 0.5 ms per request drafting.
    assert one["verify_seconds"] == pytest.approx(0.008 + 0.002) and one["draft_seconds"] == pytest.approx(0.001)
    assert two["verify_seconds"] == pytest.approx(0.019 + 0.002) and two["draft_seconds"] == pytest.approx(0.001)
    assert one["timing_clock"] == "host" and per_pos(one) == ([2, 1, 1], [2, 2, 2], [2, 2, 1])
    # The scheduler's clock here moved only by its own work (the worker's time is on another clock).
    assert one["step_seconds"] == pytest.approx(SCHEDULE + UPDATE)
    (meta,) = e.sink.metadata
    assert (meta["timing_source"], meta["attention_backend"], meta["missing_hooks"]) == ("worker", "ROCM_AITER_FA", [])
    recorder = hooks.current().recorder
    assert (recorder.untimed_steps, recorder.unresolved_timings, recorder.hook_errors) == (0, 0, 0)


def test_timing_still_in_flight_comes_with_a_later_output_and_a_lost_one_is_counted(split_engine):
    e = split_engine("late")
    e.step(Req("start", prefill=4))
    e.step(Req("a", drafted=3, accepted=2))  # its spans are in flight when its output leaves
    recorder = hooks.current().recorder
    recorder.flush()
    assert [r["batch_size"] for r in e.sink.rows] == [1]  # the start row only: step a waits for its seconds
    e.step(Req("b", drafted=3, accepted=0), Req("c", drafted=3, accepted=3))  # brings a's seconds
    recorder.flush()
    _start, a = e.sink.rows
    assert a["verify_seconds"] == pytest.approx(0.004 + 0.002) and a["draft_seconds"] == pytest.approx(0.0005)
    assert a["timing_clock"] == "host" and per_pos(a) == ([1, 1, 0], [1, 1, 1], [1, 1, 1])
    # The worker dies: b/c's seconds never come. Its row is written untimed at the end, counted, not guessed.
    e.process.kill()
    e.process.join(10)
    recorder.flush(final=True)
    *_, bc = e.sink.rows
    assert (bc["batch_size"], bc["verify_seconds"], bc["draft_seconds"]) == (2, None, None)
    assert bc["num_accepted_tokens"] == 3 and recorder.unresolved_timings == 2  # its draft and verify
    assert recorder.untimed_steps == 1  # one step went untimed
    # A restarted worker times the next steps again.
    e.start_worker("host")
    e.step(Req("d", drafted=3, accepted=1))
    recorder.flush(final=True)
    assert e.sink.rows[-1]["verify_seconds"] == pytest.approx(0.004 + 0.002)


def test_a_worker_without_hooks_leaves_rows_untimed_and_counted_and_worker_errors_are_counted_here(split_engine):
    e = split_engine("unhooked")
    for name in ("start", "a", "b"):
        e.step(Req(name, drafted=2, accepted=1))
    steps, _ = e.rows()
    assert [r["verify_seconds"] for r in steps] == [None, None, None]
    assert sum(r["num_accepted_tokens"] for r in steps) == 3  # acceptance is the engine core's own
    recorder = hooks.current().recorder
    assert (recorder.untimed_steps, recorder.unresolved_timings) == (2, 0)  # the start step is not counted
    (meta,) = e.sink.metadata
    assert meta["timing_source"] is None
    e.stop_worker()
    # A worker whose clock fails: its three timed calls per step count as errors here, with the step's row.
    e.start_worker("broken")
    e.step(Req("c", drafted=2, accepted=2))
    e.step(Req("d", drafted=2, accepted=2))
    assert recorder.hook_errors == 2 * 3


def test_a_schedule_vllm_drops_at_data_parallel_reaches_the_engine_cores_metadata(engine, monkeypatch):
    """The front end notes the data parallel size and the schedule before vLLM drops it; each
    rank's engine core (a dense model's: reconfigured to data parallel size 1, rank 0) reads
    them back, so the known pitfall fires on captured metadata, not only on logs."""
    from specobs.analysis.pitfalls import matching
    from specobs.capture.config import SPECOBS_FRONT_END
    from specobs.records import RunMetadata

    monkeypatch.setenv(SPECOBS_FRONT_END.name, "")  # unset now, and again after the test (the hook writes it)
    e = engine(num_spec_tokens=3, warm=False)
    front = FakeVllmConfig(2, [(1, 4, 3), (5, 8, 1)])  # what `vllm serve --data-parallel-size 2` builds
    assert front.speculative_config.num_speculative_tokens_per_batch_size is None  # vLLM dropped it
    # The engine core of rank 1, as vLLM reconfigures a dense model's rank.
    e.scheduler.vllm_config.parallel_config = SimpleNamespace(data_parallel_size=1, data_parallel_rank=0,
                                                              data_parallel_index=1)  # fmt: skip
    e.scheduler.vllm_config.speculative_config.num_speculative_tokens = 3
    e.scheduler.vllm_config.speculative_config.num_speculative_tokens_per_batch_size = None
    for _ in range(3):
        e.step(Req("a", drafted=3, accepted=2))
    steps, _ = e.rows()
    (record,) = e.sink.metadata
    assert (record["engine"], record["data_parallel_size"]) == (1, 2)
    assert record["schedule_configured"] == ((1, 4, 3), (5, 8, 1)) and record["schedule"] is None
    assert {r["engine"] for r in steps} == {1}
    meta = RunMetadata(**{k: v for k, v in record.items() if k != "specobs_metadata"})
    assert [p.id for p in matching(meta, None)] == ["schedule_disabled"]


def test_model_runner_v2_in_a_worker_hands_its_timing_over_through_the_async_output(split_engine):
    """Model Runner V2 (the default on GPUs) returns an AsyncOutput from sample_tokens; the worker
    process calls its get_output() before pickling. The timing rides on the output it gives."""
    e = split_engine("v2")
    e.step(Req("start", prefill=4))
    e.step(Req("a", drafted=3, accepted=1), Req("b", drafted=3, accepted=3))  # 8 tokens
    _, one = e.rows()[0]
    assert one["verify_seconds"] == pytest.approx(0.008 + 0.002)  # execute_model + sample
    assert one["draft_seconds"] == pytest.approx(0.001)  # speculator.propose, 2 requests
    assert per_pos(one) == ([2, 1, 1], [2, 2, 2], [2, 2, 1])
    assert hooks.current().recorder.untimed_steps == 0


def test_a_front_end_note_inherited_from_further_up_is_not_this_engines():
    """Only the note of this process or of its parent (the front end that started this engine core)
    counts: one left in the environment by another vLLM further up (a shell, a test runner) does not."""
    import json
    import os

    from specobs.vllm.engine_metadata import front_end

    note = {"data_parallel_size": 2, "schedule_configured": [[1, 8, 3]]}
    for pid, counts in ((os.getpid(), True), (os.getppid(), True), (1, False), (None, False)):
        env = {"SPECOBS_FRONT_END": json.dumps({**note, "pid": pid})}
        assert (front_end(env, own=True).get("data_parallel_size") == 2) is counts, pid
    assert front_end({"SPECOBS_FRONT_END": "{not json"}) == {}

"""Context length per step (``context_length``, ``context_length_max``), through the patched
entry points of a fake scheduler shaped like vLLM 0.32's.

``FakeScheduler.update_from_output`` does what vLLM's does with the numbers the hook reads: per
scheduled request it reports the drafts (``make_spec_decoding_stats``), appends the sampled tokens
to the request (``Request.num_tokens`` is a property over its token list, as in
``vllm/v1/request.py``) and frees a request that reached its ``max_tokens``, deleting it from
``scheduler.requests``: the hook reads the contexts before that, as the drafts saw them. Every count below is written out by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from specobs.capture import MemorySink, Recorder
from specobs.capture.config import CaptureConfig
from specobs.capture.timing import HostClock
from specobs.vllm import hooks


class Request:
    """``vllm.v1.request.Request`` as far as the hook reads it."""

    def __init__(self, request_id: str, prompt: int, max_tokens: int = 1000) -> None:
        self.request_id = request_id
        self._all_token_ids = [1] * prompt
        self.num_prompt_tokens = prompt
        self.max_tokens = max_tokens
        self.num_computed_tokens = 0

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)


class Broken:
    """A request object whose ``num_tokens`` raises something other than AttributeError."""

    @property
    def num_tokens(self) -> int:
        raise RuntimeError("not readable")


@dataclass
class SchedulerOutput:
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    scheduled_spec_decode_tokens: dict[str, list[int]]
    num_invalid_spec_tokens: dict[str, int] | None = None


@dataclass
class ModelRunnerOutput:
    req_id_to_index: dict[str, int]
    sampled_token_ids: list[list[int]]


class FakeScheduler:
    """``Scheduler.schedule``/``update_from_output``/``make_spec_decoding_stats`` with vLLM's signatures."""

    def __init__(self) -> None:
        self.num_spec_tokens = 3
        self.dynamic_sd_lookup = None
        self.vllm_config = SimpleNamespace(
            model_config=SimpleNamespace(served_model_name=["tiny-llama"], model="tiny-llama"),
            speculative_config=SimpleNamespace(method="ngram", model="ngram"),
            parallel_config=SimpleNamespace(data_parallel_rank=0),
        )
        self.requests: dict[str, Any] = {}
        self.plan: dict[str, tuple[int, int]] = {}  # request id -> (drafted, accepted) of the next step

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        plan, self.plan = self.plan, {}
        return SchedulerOutput(
            num_scheduled_tokens={r: 1 + d for r, (d, _) in plan.items()},
            total_num_scheduled_tokens=sum(1 + d for d, _ in plan.values()),
            scheduled_spec_decode_tokens={r: [7] * d for r, (d, _) in plan.items() if d},
        )

    def update_from_output(self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput) -> dict:
        for req_id in scheduler_output.num_scheduled_tokens:
            request = getattr(self, "requests", {}).get(req_id)
            generated = model_runner_output.sampled_token_ids[model_runner_output.req_id_to_index[req_id]]
            drafted = scheduler_output.scheduled_spec_decode_tokens.get(req_id)
            if drafted and generated:
                self.make_spec_decoding_stats(None, len(drafted), len(generated) - 1, None, req_id)
            if isinstance(request, Request):
                request._all_token_ids.extend(generated)
                if request.num_tokens - request.num_prompt_tokens >= request.max_tokens:
                    del self.requests[req_id]  # _free_request: gone before the hook reads the requests
        return {}

    def make_spec_decoding_stats(
        self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens, num_invalid_spec_tokens, request_id
    ):
        return None


@pytest.fixture
def engine(monkeypatch):
    """``engine(per_request=False)``: (scheduler, step function, sink) with the hooks installed."""
    monkeypatch.setattr(hooks, "platform_labels", lambda: {"platform": "cpu", "device": "fake-cpu"})
    assert hooks.current() is None

    def start(per_request: bool = False):
        sink = MemorySink()
        capture = hooks.install(
            CaptureConfig(run_id="t", per_request=per_request),
            Recorder([sink], flush_interval=60.0),
            scheduler=FakeScheduler,
            runners={},
            clock=HostClock(),
        )
        assert capture.missing == []
        scheduler = FakeScheduler()

        def step(**plan: tuple[int, int]) -> list[dict]:
            """One step: each request drafts and accepts as its (drafted, accepted) says; the rows it wrote."""
            scheduler.plan = dict(plan)
            out = scheduler.schedule()
            ids = list(plan)
            sampled = [[3] * (accepted + 1) for _, accepted in plan.values()]
            scheduler.update_from_output(out, ModelRunnerOutput({r: i for i, r in enumerate(ids)}, sampled))
            capture.recorder.flush(final=True)
            rows, sink.rows[:] = list(sink.rows), []
            return rows

        return scheduler, step, capture

    yield start
    hooks.uninstall()


def context(row: dict) -> tuple[float | None, int | None]:
    return row["context_length"], row["context_length_max"]


def test_mean_and_longest_context_the_drafts_were_conditioned_on(engine):
    scheduler, step, capture = engine()
    scheduler.requests = {"A": Request("A", 10), "B": Request("B", 30), "C": Request("C", 101)}
    (row,) = step(A=(3, 3), B=(3, 0), C=(0, 0))
    # Before the step's tokens are appended: A 10, B 30, C 101 (A then samples 4 tokens).
    assert context(row) == (pytest.approx((10 + 30 + 101) / 3), 101)
    assert row["batch_size"] == 3 and row["num_accepted_tokens"] == 3
    (row,) = step(A=(3, 1))  # a step of one request: its own context, 10 + 4
    assert context(row) == (14.0, 14)
    assert capture.recorder.hook_errors == 0


def test_a_request_that_finishes_in_the_step_still_counts(engine):
    scheduler, step, capture = engine()
    scheduler.requests = {"A": Request("A", 20, max_tokens=2), "B": Request("B", 50)}
    (row,) = step(A=(3, 2), B=(3, 0))  # A samples 3 tokens, reaches max_tokens and is freed
    assert "A" not in scheduler.requests
    assert context(row) == (35.0, 50)  # read before it was freed: A 20 and B 50
    assert row["num_drafts"] == 2  # A's draft is still counted
    scheduler.requests = {}
    (row,) = step(B=(3, 3))  # every request gone: unknown, never 0
    assert context(row) == (None, None)
    assert row["num_drafts"] == 1 and capture.recorder.hook_errors == 0


def test_a_request_without_the_attribute_or_a_scheduler_without_requests_keeps_the_row(engine):
    scheduler, step, capture = engine()
    scheduler.requests = {"A": Request("A", 40), "B": SimpleNamespace(num_computed_tokens=7), "C": None}
    (row,) = step(A=(3, 3), B=(3, 0), C=(3, 1))
    assert context(row) == (40.0, 40)  # B has no num_tokens and C no request: both skipped
    assert row["num_drafts"] == 3 and row["num_accepted_tokens"] == 4
    scheduler.requests = {"A": Request("A", 40), "B": SimpleNamespace(num_tokens="many")}
    (row,) = step(A=(1, 0), B=(1, 0))
    assert context(row) == (40.0, 40)  # not an int: skipped
    scheduler.requests = {"A": Broken()}
    (row,) = step(A=(3, 3))
    assert context(row) == (None, None) and row["num_drafts"] == 1  # a raising attribute: the row stays
    del scheduler.requests
    (row,) = step(A=(3, 3))
    assert context(row) == (None, None) and row["num_accepted_tokens"] == 3
    assert capture.recorder.hook_errors == 0


def test_per_request_rows_carry_their_own_context(engine):
    scheduler, step, capture = engine(per_request=True)
    scheduler.requests = {"A": Request("A", 10), "B": Request("B", 300), "C": SimpleNamespace()}
    rows = step(A=(3, 3), B=(3, 1), C=(3, 0))
    (row,) = [r for r in rows if r["request_id"] is None]
    own = {r["request_id"]: context(r) for r in rows if r["request_id"] is not None}
    assert context(row) == (pytest.approx((10 + 300) / 2), 300)
    assert own == {"A": (10.0, 10), "B": (300.0, 300), "C": (None, None)}
    assert capture.recorder.hook_errors == 0


def test_context_columns_round_trip_through_event_files(engine, tmp_path):
    from specobs.capture.sinks import JsonlSink
    from specobs.ingest import load

    scheduler, step, capture = engine()
    sink = JsonlSink(tmp_path, "t")
    capture.recorder.sinks = [sink]
    scheduler.requests = {"A": Request("A", 10), "B": Request("B", 30)}
    step(A=(3, 3), B=(3, 0))
    scheduler.requests = {}
    step(A=(3, 3))
    capture.recorder.flush(final=True)
    sink.close()
    windows = load([str(tmp_path)]).windows.collect().sort("end_ts")
    assert windows["context_length"].to_list() == [20.0, None]
    assert windows["context_length_max"].to_list() == [30, None]

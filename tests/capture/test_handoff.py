"""The worker→engine-core timing hand-off (specobs/capture/handoff.py) on its own: device spans
from a fake of the CUDA/HIP event API in the worker, payloads from another process taken as
untrusted input, place-holders that expire when their seconds can no longer come.

The hooks driving it across a real process boundary: tests/capture/test_capture_accounting.py.
"""

from __future__ import annotations

import pickle
import time

import pytest
from test_capture import FakeEvent, wait_for

from specobs.capture import MemorySink, Recorder
from specobs.capture.handoff import MAX_WAITING, Joiner, WorkerTiming, stamp, stamp_of
from specobs.capture.timing import DeviceClock


def test_device_spans_leave_the_worker_only_once_the_device_got_there():
    FakeEvent.device_done, FakeEvent.device_time_ms = False, 0.0
    clock = DeviceClock(make_event=FakeEvent, is_capturing=FakeEvent.is_capturing)
    worker = WorkerTiming()
    worker.facts = {"attention_backend": "ROCM_AITER_FA"}
    spans = []
    for _ in range(3):  # execute_model, _sample, propose: 2.5 ms each on the fake device
        span = clock.start()
        span.stop()
        spans.append(span)
    worker.finish(7, draft=[spans[2]], verify=spans[:2])
    assert worker.payload() == ((), 0, {"attention_backend": "ROCM_AITER_FA"})  # facts go; step 7 waits
    assert worker.payload() is None  # nothing new
    FakeEvent.device_done = True
    ((step, draft, verify, clock_name),), errors, facts = worker.payload()
    assert (step, clock_name, errors, facts) == (7, "device", 0, None)
    assert draft == pytest.approx(0.0025) and verify == pytest.approx(0.005)
    assert worker.payload() is None  # sent once


def test_a_worker_gives_up_on_spans_still_in_flight_after_the_limit_and_counts_them():
    FakeEvent.device_done = False
    clock = DeviceClock(make_event=FakeEvent, is_capturing=FakeEvent.is_capturing)
    worker = WorkerTiming()
    for step in range(MAX_WAITING + 5):
        span = clock.start()
        span.stop()
        worker.finish(step, draft=[], verify=[span])
    assert worker.dropped == 5
    FakeEvent.device_done = True
    entries, _, _ = worker.payload()
    assert [e[0] for e in entries] == list(range(5, MAX_WAITING + 5))  # the oldest were given up
    assert all(e[1] is None for e in entries)  # no draft span: no draft time, not zero


class Output:
    """An object with a ``__dict__``, as vLLM's ``SchedulerOutput`` and ``ModelRunnerOutput`` (dataclasses)."""


class Slotted:
    __slots__ = ("x",)


def test_the_step_stamp_travels_with_a_pickled_object_and_only_an_int_is_a_stamp():
    out = Output()
    assert stamp_of(out) is None and stamp(out, 12)
    assert stamp_of(pickle.loads(pickle.dumps(out))) == 12
    out.__dict__["_specobs_step"] = "12"
    assert stamp_of(out) is None
    assert not stamp(Slotted(), 1) and stamp_of(Slotted()) is None


@pytest.mark.parametrize(
    "payload",
    [
        None,
        "((1, 0.1, 0.2, 'host'),)",
        ((1, 0.1, 0.2, "host"),),  # not (entries, errors, facts)
        [((1, 0.1, 0.2, "host"),), 0, None],  # a list, not a tuple
    ],
)
def test_a_payload_that_is_not_one_is_ignored_and_proves_nothing(payload):
    joiner = Joiner()
    assert joiner.receive(payload) == {}
    assert not joiner.seen  # rows do not start waiting for seconds that nothing sends


def test_bad_entries_are_dropped_and_good_ones_around_them_kept():
    joiner = Joiner()
    bad = [
        (2, float("nan"), 0.1, "host"),  # not a number of seconds
        (3, -0.1, 0.1, "host"),  # negative
        (4, 0.1, "0.2", "host"),  # a string
        (5, 0.1),  # too short
    ]
    payload = (((1, 0.001, 0.004, "device"), *bad, (6, None, 0.002, 7)), 2, {"tp_rank": 0, "x" * 3: [1, "a"], 9: "k"})
    assert joiner.receive(payload) == {1: (0.001, 0.004, "device"), 6: (None, 0.002, None)}
    assert joiner.errors == 2 and joiner.facts == {"tp_rank": 0, "xxx": ["a"]}  # only short strings and ints


def test_a_row_waits_for_late_seconds_and_an_expired_wait_is_written_untimed_at_once():
    sink = MemorySink()
    recorder = Recorder([sink], flush_interval=60.0)
    joiner = Joiner()
    joiner.receive(((), 0, None))  # the worker sends timing
    late = {step: joiner.wait_for(step) for step in (1, 2)}
    for step, (draft, verify) in late.items():
        recorder.record({"ts": float(step), "draft_seconds": [draft], "verify_seconds": [verify]})
    recorder.flush()
    assert sink.rows == []  # both wait
    joiner.receive((((1, None, 0.004, "host"),), 0, None))  # step 1's seconds: it ran no drafter
    recorder.flush()
    (one,) = sink.rows
    assert (one["draft_seconds"], one["verify_seconds"]) == (None, 0.004)  # no draft: null, not counted
    assert recorder.unresolved_timings == 0
    for step in range(3, MAX_WAITING + 3):  # step 2's wait is evicted: its seconds cannot come any more
        joiner.wait_for(step)
    started = time.monotonic()
    recorder.flush()
    wait_for(lambda: len(sink.rows) == 2)
    assert time.monotonic() - started < 5  # at once, not after the 30 s timeout
    two = sink.rows[1]
    assert (two["draft_seconds"], two["verify_seconds"]) == (None, None)
    assert (recorder.unresolved_timings, recorder.untimed_steps) == (2, 1)
    recorder.close()


def test_an_async_output_carries_the_timing_on_what_it_gives_and_no_output_keeps_it_for_the_next():
    """Model Runner V2's AsyncOutput has a sampled_token_ids of its own, but what travels to the
    engine core is what its get_output() gives: the seconds go there. A sample_tokens that returns
    nothing (no step to sample) keeps them for the next output, without an error."""
    from types import SimpleNamespace

    from specobs.capture.config import CaptureConfig
    from specobs.capture.handoff import HANDOFF_ATTR
    from specobs.capture.timing import HostClock
    from specobs.vllm.hooks import Capture

    capture = Capture(CaptureConfig(run_id="t"), clock=HostClock())
    capture._facts_sent = True
    runner = SimpleNamespace()

    def step(n: int) -> None:
        runner.__dict__.update(_specobs_step=n, _specobs_stamped=True)
        span = capture.clock.start()
        span.stop()
        capture.add_span(n, "verify", span)

    step(1)
    capture.hand_off(runner, None)  # nothing to carry it
    inner = Output()
    outer = SimpleNamespace(sampled_token_ids=[[1]], get_output=lambda: inner)
    step(2)
    capture.hand_off(runner, outer)
    assert HANDOFF_ATTR not in vars(outer)  # the async wrapper does not travel
    assert outer.get_output() is inner
    entries, errors, _ = vars(inner)[HANDOFF_ATTR]
    assert [e[0] for e in entries] == [1, 2] and errors == 0 and capture.worker.errors == 0

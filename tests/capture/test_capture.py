"""The engine-agnostic capture pieces: recorder, device-event timing, event-file sinks, crash safety."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from specobs import schema
from specobs.capture import JsonlSink, MemorySink, ParquetSink, Recorder
from specobs.capture.row import StepRow
from specobs.capture.sinks import STEP_COLUMNS
from specobs.capture.timing import DeviceClock, HostClock, clock_of
from specobs.ingest import load


@pytest.fixture(autouse=True)
def _no_torch(monkeypatch):
    """These pieces are engine-agnostic: keep torch (seconds to import) out of them, host clock and CPU labels."""
    from specobs.vllm import hooks

    monkeypatch.setattr(hooks, "clock_for_device", HostClock)
    monkeypatch.setattr(hooks, "platform_labels", lambda: {"platform": "cpu", "device": None})


def row(i: int, **extra) -> dict:
    return {
        "ts": 1764472000.0 + i,
        "run_id": "r",
        "engine": 0,
        "batch_size": 4,
        "num_spec_tokens": 3,
        "num_drafts": 4,
        "num_draft_tokens": 12,
        "num_accepted_tokens": 7,
        "num_accepted_tokens_per_pos": [4, 2, 1],
        **extra,
    }


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)


def test_rows_reach_the_sink_within_a_flush_interval():
    sink = MemorySink()
    recorder = Recorder([sink], flush_interval=0.2)
    for i in range(10):
        recorder.record(row(i))
    wait_for(lambda: len(sink.rows) == 10, timeout=2.0)
    assert sink.rows[3]["num_accepted_tokens_per_pos"] == [4, 2, 1]
    assert set(sink.rows[0]) == set(schema.STEPS)
    recorder.close()
    assert sink.closed and recorder.counters["dropped_events"] == 0


class RaisingSink:
    def __init__(self) -> None:
        self.calls = 0

    def write(self, rows):
        self.calls += 1
        raise RuntimeError("disk on fire")

    def close(self):
        raise RuntimeError("still on fire")


def test_a_raising_sink_is_counted_never_raised():
    sink, good = RaisingSink(), MemorySink()
    recorder = Recorder([sink, good], flush_interval=0.1)
    for i in range(5):
        recorder.record(row(i))
    wait_for(lambda: len(good.rows) == 5)
    recorder.close()
    assert sink.calls >= 1 and recorder.sink_errors >= 2  # a failed write and a failed close
    assert recorder.dropped_events == 5  # the raising sink lost them; the good one did not


class BlockingSink:
    def __init__(self) -> None:
        self.release = threading.Event()

    def write(self, rows):
        self.release.wait()  # forever, until the test ends

    def close(self):
        pass


def test_a_blocking_sink_never_blocks_the_engine():
    sink = BlockingSink()
    recorder = Recorder([sink], capacity=100, flush_interval=0.05, close_timeout=0.2)
    recorder.record(row(0))
    time.sleep(0.3)  # the flush thread is now stuck in the sink
    started = time.perf_counter()
    for i in range(1000):
        recorder.record(row(i))
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5  # 1000 records never waited on the sink
    assert recorder.dropped_events == 900  # the queue holds 100; the rest are counted drops
    started = time.perf_counter()
    recorder.close()
    assert time.perf_counter() - started < 2.0  # closing gives up on the stuck sink
    sink.release.set()


class FakeEvent:
    """torch.cuda.Event stand-in: a timestamp set by record(), complete once the 'device' says so.

    Like HIP, it refuses to be recorded while the stream captures a graph (``capturing``)."""

    device_done = False
    device_time_ms = 0.0
    capturing = False
    records = 0

    def __init__(self) -> None:
        self.at: float | None = None

    @classmethod
    def is_capturing(cls) -> bool:
        return cls.capturing

    def record(self) -> None:
        if FakeEvent.capturing:
            raise RuntimeError("hipErrorStreamCaptureUnsupported: operation not permitted when stream is capturing")
        FakeEvent.records += 1
        FakeEvent.device_time_ms += 2.5  # the device needs 2.5 ms between records
        self.at = FakeEvent.device_time_ms

    def query(self) -> bool:
        return FakeEvent.device_done

    def elapsed_time(self, end: FakeEvent) -> float:
        assert FakeEvent.device_done, "elapsed_time read before the events completed"
        return end.at - self.at


def test_device_spans_wait_for_the_device_and_never_synchronise():
    FakeEvent.device_done = False
    clock = DeviceClock(make_event=FakeEvent, is_capturing=FakeEvent.is_capturing)
    sink = MemorySink()
    recorder = Recorder([sink], flush_interval=0.05)
    span = clock.start()
    span.stop()
    recorder.record(row(0, verify_seconds=[span], draft_seconds=None))
    time.sleep(0.3)
    assert sink.rows == []  # held back while the device has not reached the end event
    FakeEvent.device_done = True
    wait_for(lambda: len(sink.rows) == 1)
    assert sink.rows[0]["verify_seconds"] == pytest.approx(0.0025)
    recorder.close()


def test_unresolved_device_spans_become_null_at_close():
    FakeEvent.device_done = False
    span = DeviceClock(make_event=FakeEvent, is_capturing=FakeEvent.is_capturing).start()
    span.stop()
    sink = MemorySink()
    recorder = Recorder([sink], flush_interval=0.05, close_timeout=0.5)
    recorder.record(row(0, verify_seconds=[span]))
    time.sleep(0.2)
    recorder.close()
    assert sink.rows[0]["verify_seconds"] is None and recorder.unresolved_timings == 1


def test_step_row_fields_are_the_schemas_step_columns():
    assert [f.name for f in dataclasses.fields(StepRow)] == list(schema.STEPS)
    assert tuple(schema.STEPS) == STEP_COLUMNS  # what the sinks keep
    with pytest.raises(TypeError):
        StepRow(num_draft=4)  # a misspelt column fails loudly instead of becoming a null
    with pytest.raises(AttributeError):
        StepRow().num_draft = 4  # slots: no attribute outside the columns either
    assert StepRow(num_drafts=4).to_dict() == {**dict.fromkeys(schema.STEPS), "num_drafts": 4}


def test_step_rows_reach_sinks_as_dicts_and_device_spans_resolve_off_the_row():
    FakeEvent.device_done = False
    span = DeviceClock(make_event=FakeEvent, is_capturing=FakeEvent.is_capturing).start()
    span.stop()
    sink = MemorySink()
    recorder = Recorder([sink], flush_interval=0.05)
    step = StepRow(ts=1764472000.0, run_id="r", num_drafts=4, num_accepted_tokens=7, verify_seconds=[span])
    recorder.record(step)
    time.sleep(0.3)
    assert sink.rows == []  # held back while the device has not reached the end event
    FakeEvent.device_done = True
    wait_for(lambda: len(sink.rows) == 1)
    (written,) = sink.rows
    assert type(written) is dict and written["verify_seconds"] == pytest.approx(0.0025)
    assert (written["num_drafts"], written["num_accepted_tokens"], written["request_id"]) == (4, 7, None)
    assert step.verify_seconds == [span]  # the engine's row was never changed
    recorder.close()


def test_device_clock_never_records_an_event_inside_a_graph_capture():
    FakeEvent.device_done, FakeEvent.capturing, FakeEvent.records = True, False, 0
    clock = DeviceClock(make_event=FakeEvent, is_capturing=FakeEvent.is_capturing)
    outside = clock.start()
    outside.stop()
    assert (outside.clock, FakeEvent.records, outside.seconds()) == ("device", 2, pytest.approx(0.0025))

    FakeEvent.capturing = True  # a warm-up captures a graph: HIP would refuse every record
    inside = clock.start()
    time.sleep(0.01)
    inside.stop()
    assert inside.clock == "host" and FakeEvent.records == 2 and clock.host_spans == 1
    assert 0.009 < inside.seconds() < 1.0  # host time, not the fake device's 2.5 ms

    FakeEvent.capturing = False
    crossing = clock.start()  # started before a capture, stopped inside one
    FakeEvent.capturing = True
    crossing.stop()
    FakeEvent.capturing = False
    assert crossing.clock == "host" and FakeEvent.records == 3 and crossing.seconds() is not None
    assert clock_of([outside, inside]) == "mixed" and clock_of([outside]) == "device" and clock_of([]) is None

    def unknown() -> bool:
        raise RuntimeError("no capture state")

    assert DeviceClock(make_event=FakeEvent, is_capturing=unknown).start().clock == "host"  # unknown: never record


def test_host_clock_measures_elapsed_time():
    span = HostClock().start()
    time.sleep(0.02)
    span.stop()
    assert 0.015 < span.seconds() < 0.5


def test_jsonl_rotation_and_reading_back(tmp_path):
    sink = JsonlSink(tmp_path, "run:1", rotate_bytes=2000)
    for start in range(0, 40, 5):
        sink.write([row(i) for i in range(start, start + 5)])
    sink.close()
    assert len(sink.paths) > 2 and all(p.name.startswith("specobs-run_1-p") for p in sink.paths)
    result = load([str(tmp_path)])
    frame = result.windows.collect()
    assert frame.height == 40 and result.skipped == []
    assert sorted(frame["end_ts"].to_list()) == [1764472000.0 + i for i in range(40)]


def test_parquet_parts_appear_whole(tmp_path):
    sink = ParquetSink(tmp_path, "r", part_seconds=0.0)
    sink.write([row(i) for i in range(3)])
    sink.write([row(i) for i in range(3, 5)])
    sink.close()
    assert [p.suffix for p in sink.paths] == [".parquet", ".parquet"]
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind
    assert load([str(tmp_path)]).windows.collect()["num_accepted_tokens"].sum() == 35


WRITER = textwrap.dedent(
    """
    import sys, time
    from specobs.capture import Recorder, JsonlSink, ParquetSink
    folder, kind = sys.argv[1], sys.argv[2]
    sink = JsonlSink(folder, "kill") if kind == "jsonl" else ParquetSink(folder, "kill", part_seconds=0.05)
    recorder = Recorder([sink], flush_interval=0.05)
    i = 0
    while True:
        recorder.record({"ts": float(i), "num_drafts": 2, "num_draft_tokens": 6, "num_accepted_tokens": 3,
                         "num_accepted_tokens_per_pos": [2, 1, 0], "model": "x" * (i % 300)})
        i += 1
        if i % 200 == 0:
            time.sleep(0.001)
    """
)


def written(folder) -> int:
    """Bytes in ``folder`` now (a part renamed meanwhile counts at its next look)."""
    total = 0
    for path in folder.iterdir():
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_sigkill_leaves_only_complete_records(tmp_path, kind):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), kind])
    # Kill it mid-write once it has written for a while (start-up time varies with machine load).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and written(tmp_path) < 200_000:
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    result = load([str(tmp_path)])
    frame = result.windows.collect()
    assert frame.height > 1000
    assert result.skipped == []  # no bad record, no half-written part
    # A kill inside a write can leave part of the last line (the kernel stops a large write between
    # pages): at most that one unfinished line, left out with a notice, never counted.
    assert len(result.notices) <= 1 and all("write cut short" in n.why for n in result.notices)
    assert (frame["num_accepted_tokens"] == 3).all()
    assert all(not name.endswith(".tmp") for name in os.listdir(tmp_path) if not name.startswith("."))


def test_missing_or_changed_hook_points_are_skipped_with_a_note():
    from specobs.capture.config import CaptureConfig
    from specobs.vllm import hooks
    from specobs.vllm.hookpoints import HOOK_POINTS, lost

    class Runner:
        def execute_model(self, scheduler_output):
            return "ran"

    class Scheduler:
        def make_spec_decoding_stats(self, stats, drafted):  # an older, different signature
            return None

    capture = hooks.Capture(CaptureConfig(), recorder=Recorder([MemorySink()]))
    hooks._patch(capture, Runner, "execute_model", hooks._wrap_execute)
    hooks._patch(capture, Runner, "propose_draft_token_ids", hooks._wrap_propose)
    (point,) = [p for p in HOOK_POINTS if p.method == "make_spec_decoding_stats"]
    hooks._patch(capture, Scheduler, "make_spec_decoding_stats", hooks._wrap_make_stats, params=point.params)
    assert [w.rsplit(".", 1)[-1] for w in capture.installed] == ["execute_model"]
    assert any(w.endswith("propose_draft_token_ids") for w in capture.missing)
    assert any(w.endswith("make_spec_decoding_stats (signature changed)") for w in capture.missing)
    # What the rows then lack, named from the hook-point table (a class of the test's own is not in it).
    assert lost(["vllm.v1.core.sched.scheduler.Scheduler.make_spec_decoding_stats (signature changed)"]) == [
        point.without
    ]
    assert "acceptance counts" in point.without and lost(capture.missing) == []
    assert Runner().execute_model(object()) == "ran"  # the hooked method still does its job
    hooks._patch(capture, Runner, "execute_model", hooks._wrap_execute)  # idempotent
    assert len(capture.installed) == 1
    for cls, name, original in capture.originals:
        setattr(cls, name, original)


def _step(capture, observations, k: int, batch: int) -> None:
    """One scheduler step through the capture's own entry points, as the vLLM hooks call them."""
    from types import SimpleNamespace

    capture.begin_update()
    for args in observations:
        capture.observe_draft(*args)
    drafts = capture.end_update()
    scheduler = SimpleNamespace(num_spec_tokens=5, dynamic_sd_lookup=[0, 5, 3, 3, 1], vllm_config=None)
    output = SimpleNamespace(
        num_scheduled_tokens={str(i): 1 for i in range(batch)},
        total_num_scheduled_tokens=batch,
        num_spec_tokens_to_schedule=k,
    )
    capture.finish_step(scheduler, output, SimpleNamespace(sampled_token_ids=None), drafts)


def test_drafts_per_position_follow_each_request_drafted_length():
    from specobs.capture.config import CaptureConfig
    from specobs.vllm import hooks

    sink = MemorySink()
    recorder = Recorder([sink])
    capture = hooks.Capture(CaptureConfig(per_request=True, run_id="u"), recorder=recorder)
    # (scheduled draft tokens, accepted, grammar-invalid drafts, request id), as the scheduler passes them.
    _step(capture, [(3, 1, None, "a"), (2, 2, None, "b"), (3, 0, {"c": 2}, "c"), (0, 0, None, "idle")], k=3, batch=4)
    # k fell to 1 at batch 4, but "d" was drafted at batch 1 (k 5): the lists grow to fit.
    _step(capture, [(5, 4, None, "d"), (1, 1, None, "e")], k=1, batch=4)
    recorder.flush(final=True)
    steps = [r for r in sink.rows if r["request_id"] is None]
    assert [r["num_drafts"] for r in steps] == [3, 2]
    assert steps[0]["num_drafts_per_pos"] == [3, 2, 1]  # drafted 3, 2 and 3 - 2 invalid = 1
    assert steps[0]["num_accepted_tokens_per_pos"] == [2, 1, 0]
    # Tried at: a (3 drafted, 1 accepted) 0-1, b (2, 2) 0-1, c (1, 0) 0. Position 2 was reached
    # by a, but after its position 1 was rejected: m_2 = 0 while n_2 = 1.
    assert steps[0]["num_drafts_accepted_before_pos"] == [3, 2, 0]
    assert steps[1]["num_drafts_per_pos"] == [2, 1, 1, 1, 1]
    assert steps[1]["num_accepted_tokens_per_pos"] == [2, 1, 1, 1, 0]
    assert steps[1]["num_drafts_accepted_before_pos"] == [2, 1, 1, 1, 1]  # d (5, 4) 0-4, e (1, 1) 0
    per_request = {(r["request_id"], r["num_spec_tokens"]): r for r in sink.rows if r["request_id"] is not None}
    assert per_request["c", 3]["num_drafts_per_pos"] == [1, 0, 0]
    assert per_request["c", 3]["num_accepted_tokens_per_pos"] == [0, 0, 0]
    assert per_request["c", 3]["num_drafts_accepted_before_pos"] == [1, 0, 0]
    assert per_request["a", 3]["num_drafts_accepted_before_pos"] == [1, 1, 0]
    assert per_request["b", 3]["num_drafts_accepted_before_pos"] == [1, 1, 0]
    assert per_request["d", 1]["num_drafts_accepted_before_pos"] == [1, 1, 1, 1, 1]
    assert per_request["e", 1]["num_drafts_accepted_before_pos"] == [1]
    assert per_request["d", 1]["num_drafts_per_pos"] == [1, 1, 1, 1, 1]
    assert per_request["d", 1]["num_accepted_tokens_per_pos"] == [1, 1, 1, 1, 0]
    assert per_request["e", 1]["num_drafts_per_pos"] == [1]
    # Summed over requests, the per-request rows give the step rows.
    for step, ids in ((steps[0], "abc"), (steps[1], "de")):
        rows = [r for (rid, _), r in per_request.items() if rid in ids]
        for name in ("num_drafts_per_pos", "num_drafts_accepted_before_pos", "num_accepted_tokens_per_pos"):
            width = len(step[name])
            padded = [r[name] + [0] * (width - len(r[name])) for r in rows]
            assert [sum(col) for col in zip(*padded, strict=True)] == step[name]
    assert recorder.hook_errors == 0
    recorder.close()


def test_a_step_without_drafts_has_zero_lists_of_length_k():
    from specobs.capture.config import CaptureConfig
    from specobs.vllm import hooks

    sink = MemorySink()
    recorder = Recorder([sink])
    _step(hooks.Capture(CaptureConfig(), recorder=recorder), [], k=3, batch=2)
    recorder.flush(final=True)
    (step,) = sink.rows
    assert step["num_drafts_per_pos"] == [0, 0, 0] and step["num_accepted_tokens_per_pos"] == [0, 0, 0]
    assert step["num_drafts_accepted_before_pos"] == [0, 0, 0]
    recorder.close()


def test_trials_per_position_with_mixed_drafted_and_accepted_lengths():
    """m_i counts drafts with drafted > i and accepted >= i; the a_{i-1} n_i / n_{i-1} estimate is off."""
    from specobs.capture.config import CaptureConfig
    from specobs.vllm import hooks

    sink = MemorySink()
    recorder = Recorder([sink])
    capture = hooks.Capture(CaptureConfig(per_request=True, run_id="u"), recorder=recorder)
    # (drafted, accepted): p (4, 4) tried at 0-3, q (2, 2) 0-1, r (2, 1) 0-1, s (4, 0) 0, t (1, 0) 0,
    # u (3, 3) 0-2.
    pairs = {"p": (4, 4), "q": (2, 2), "r": (2, 1), "s": (4, 0), "t": (1, 0), "u": (3, 3)}
    _step(capture, [(d, a, None, rid) for rid, (d, a) in pairs.items()], k=4, batch=6)
    recorder.flush(final=True)
    (step,) = [r for r in sink.rows if r["request_id"] is None]
    assert (step["num_drafts"], step["num_draft_tokens"], step["num_accepted_tokens"]) == (6, 16, 10)
    assert step["num_drafts_per_pos"] == [6, 5, 3, 2]  # n_i: drafted > i
    assert step["num_accepted_tokens_per_pos"] == [4, 3, 2, 1]  # a_i: accepted > i
    assert step["num_drafts_accepted_before_pos"] == [6, 4, 2, 1]  # m_i: drafted > i and accepted >= i
    a, n, m = (step[c] for c in ("num_accepted_tokens_per_pos", "num_drafts_per_pos", "num_drafts_accepted_before_pos"))
    assert [x / y for x, y in zip(a, m, strict=True)] == [4 / 6, 3 / 4, 1.0, 1.0]
    # The estimate from a and n alone: β_2 = 2 / (3 * 3 / 5) = 1.11, an impossible rate.
    assert a[2] / (a[1] * n[2] / n[1]) == pytest.approx(10 / 9)
    per_request = {r["request_id"]: r["num_drafts_accepted_before_pos"] for r in sink.rows if r["request_id"]}
    assert per_request == {
        "p": [1, 1, 1, 1],
        "q": [1, 1, 0, 0],
        "r": [1, 1, 0, 0],
        "s": [1, 0, 0, 0],
        "t": [1, 0, 0, 0],
        "u": [1, 1, 1, 0],
    }
    assert recorder.hook_errors == 0
    recorder.close()


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_event_files_keep_drafts_per_position(tmp_path, kind):
    sink = JsonlSink(tmp_path, "r") if kind == "jsonl" else ParquetSink(tmp_path, "r")
    sink.write(
        [
            row(
                0,
                num_drafts_per_pos=[4, 3, 1],
                num_accepted_tokens_per_pos=[3, 2, 1],
                num_drafts_accepted_before_pos=[4, 3, 1],
            ),
            row(1),
        ]
    )
    sink.close()
    result = load([str(tmp_path)])
    frame = result.windows.collect().sort("end_ts")
    assert result.skipped == []
    assert frame["num_drafts_per_pos"].to_list() == [[4, 3, 1], None]  # a row without it stays null
    assert frame["num_drafts_accepted_before_pos"].to_list() == [[4, 3, 1], None]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_captured_rows_round_trip_through_event_files(tmp_path, kind):
    from specobs.capture.config import CaptureConfig
    from specobs.vllm import hooks

    memory = MemorySink()
    recorder = Recorder([memory])
    capture = hooks.Capture(CaptureConfig(run_id="u"), recorder=recorder)
    _step(capture, [(4, 4, None, "p"), (2, 1, None, "r"), (4, 0, None, "s"), (3, 3, None, "u")], k=4, batch=4)
    _step(capture, [(5, 2, None, "x")], k=1, batch=4)
    recorder.flush(final=True)
    recorder.close()
    sink = JsonlSink(tmp_path, "u") if kind == "jsonl" else ParquetSink(tmp_path, "u")
    sink.write(memory.rows)
    sink.close()
    result = load([str(tmp_path)])
    assert result.skipped == []
    frame = result.windows.collect().sort("end_ts")
    assert frame["num_drafts_accepted_before_pos"].to_list() == [[4, 3, 2, 1], [1, 1, 1, 0, 0]]
    assert frame["num_drafts_per_pos"].to_list() == [[4, 4, 3, 2], [1, 1, 1, 1, 1]]
    assert frame["num_accepted_tokens_per_pos"].to_list() == [[3, 2, 2, 1], [1, 1, 0, 0, 0]]


def test_contradictory_per_position_counts_are_skipped_and_reported(tmp_path):
    import json

    good = row(0, num_drafts_per_pos=[4, 2, 1], num_accepted_tokens_per_pos=[3, 2, 1])
    lines = [
        good,
        {**good, "num_accepted_tokens_per_pos": [3, 2, 2]},  # accepted at 2 more often than reached
        {**good, "num_drafts_per_pos": [5, 2, 1]},  # more drafts reach position 0 than were made
        {**good, "num_drafts_per_pos": [4, 2, 3], "num_accepted_tokens_per_pos": [3, 1, 1]},  # rises
        {**good, "num_drafts_per_pos": [4, -1, 0]},
        {**good, "num_drafts_per_pos": "4,2,1"},
        row(6),  # an older record without the column
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    result = load([str(path)])
    frame = result.windows.collect()
    assert frame["source_line"].to_list() == [1, 2]
    assert frame["num_drafts_per_pos"].to_list() == [[4, 2, 1], None]
    assert [(s.line, s.why) for s in result.skipped] == [
        (2, "num_accepted_tokens_per_pos[2] (2) exceeds num_drafts_per_pos[2] (1)"),
        (3, "num_drafts_per_pos[0] (5) exceeds num_drafts (4)"),
        (4, "num_drafts_per_pos rises at position 2 (2 then 3)"),
        (5, "num_drafts_per_pos[1] is negative (-1)"),
        (6, "num_drafts_per_pos is not a list of integers"),
    ]
    assert all(str(s).startswith(f"{path}:") for s in result.skipped)


GOOD = row(
    0, num_drafts_per_pos=[4, 2, 1], num_accepted_tokens_per_pos=[3, 2, 1], num_drafts_accepted_before_pos=[4, 2, 1]
)
BEFORE = "num_drafts_accepted_before_pos"
#: A record that breaks one rule, and the reason the reader gives.
CONTRADICTIONS = {
    "a > m": (
        {**GOOD, BEFORE: [4, 2, 0]},
        f"num_accepted_tokens_per_pos[2] (1) exceeds {BEFORE}[2] (0)",
    ),
    "m > n": ({**GOOD, BEFORE: [4, 2, 2]}, f"{BEFORE}[2] (2) exceeds num_drafts_per_pos[2] (1)"),
    "m_0 != n_0": ({**GOOD, BEFORE: [3, 2, 1]}, f"{BEFORE}[0] (3) is not num_drafts_per_pos[0] (4)"),
    "m_i > a_(i-1)": (
        {**GOOD, "num_drafts_per_pos": [4, 3, 1], "num_accepted_tokens_per_pos": [2, 1, 0], BEFORE: [4, 3, 1]},
        f"{BEFORE}[1] (3) exceeds num_accepted_tokens_per_pos[0] (2)",
    ),
    "m_0 > drafts without n": (
        {**GOOD, "num_drafts_per_pos": None, BEFORE: [5, 2, 1]},
        f"{BEFORE}[0] (5) exceeds num_drafts (4)",
    ),
    "m rises without n": (
        {**GOOD, "num_drafts_per_pos": None, "num_accepted_tokens_per_pos": [3, 1, 0], BEFORE: [4, 1, 2]},
        f"{BEFORE} rises at position 2 (1 then 2)",
    ),
    "m negative": ({**GOOD, BEFORE: [4, -1, 0]}, f"{BEFORE}[1] is negative (-1)"),
    "m not a list": ({**GOOD, BEFORE: "4,2,1"}, f"{BEFORE} is not a list of integers"),
    "m longer than n": ({**GOOD, BEFORE: [4, 2, 1, 1]}, f"{BEFORE}[3] (1) exceeds num_drafts_per_pos[3] (0)"),
    "n shorter, m_0 missing": (
        {**GOOD, "num_accepted_tokens_per_pos": [], BEFORE: []},
        f"{BEFORE}[0] (0) is not num_drafts_per_pos[0] (4)",
    ),
}


@pytest.mark.parametrize("case", list(CONTRADICTIONS))
def test_each_contradiction_of_the_trials_is_caught_alone(tmp_path, case):
    """One bad record among good ones: the vectorised check must see it, the line check name it."""
    import json

    bad, why = CONTRADICTIONS[case]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in (GOOD, bad, {**GOOD, "ts": GOOD["ts"] + 2})) + "\n")
    result = load([str(path)])
    assert [(s.line, s.why) for s in result.skipped] == [(2, why)]
    assert all(str(s).startswith(f"{path}:2: ") for s in result.skipped)
    assert result.windows.collect()["end_ts"].to_list() == [GOOD["ts"], GOOD["ts"] + 2]


def test_trials_are_read_and_missing_ones_are_null(tmp_path):
    import json

    import polars as pl

    from specobs import validity

    lines = [
        GOOD,
        {**GOOD, "ts": GOOD["ts"] + 1, BEFORE: None},  # explicitly null
        row(2, num_drafts_per_pos=[4, 2, 1], num_accepted_tokens_per_pos=[3, 2, 1]),  # no key: older files
        row(3, num_accepted_tokens_per_pos=[3, 2, 1], num_drafts_accepted_before_pos=[4, 3, 2]),  # no n
        row(4, num_accepted_tokens_per_pos=[3, 0, 0], num_drafts_accepted_before_pos=[4, 3, 0]),  # β_2 unknown
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    result = load([str(path)])
    assert result.skipped == []
    frame = result.windows.collect().sort("source_line")
    assert frame[BEFORE].to_list() == [[4, 2, 1], None, None, [4, 3, 2], [4, 3, 0]]
    # Consistent files take the vectorised path (no line-by-line parsing).
    steps = pl.read_ndjson(path, schema=schema.STEPS)
    assert not steps.select(validity.contradictory().any()).item()


def test_the_online_tuner_reads_its_earlier_variable_names_too():
    """``SPECOBS_ONLINE_TUNER`` was ``SPECOBS_TUNE``: a deployment that sets the old name keeps working."""
    from specobs.capture.config import CaptureConfig

    old = CaptureConfig.from_env(
        {"SPECOBS_TUNE": "apply", "SPECOBS_TUNE_SHARE": "0.2", "SPECOBS_TUNE_CHUNK_STEPS": "8"}
    )
    assert (old.online_tuner, old.online_tuner_share, old.online_tuner_chunk_steps) == ("apply", 0.2, 8)
    both = CaptureConfig.from_env({"SPECOBS_TUNE": "apply", "SPECOBS_ONLINE_TUNER": "observe"})
    assert both.online_tuner == "observe"
    assert CaptureConfig.from_env({}).online_tuner is None


def test_workers_only_installs_the_hooks_in_vllms_worker_processes_alone(monkeypatch):
    """SPECOBS_ENABLE=workers (what specobs tune starts its engines with): the plugin installs the hooks
    in a process vLLM named ``VllmWorker-<rank>`` and nowhere else."""
    import multiprocessing

    import specobs.vllm
    from specobs.capture.config import CaptureConfig
    from specobs.vllm import hooks

    config = CaptureConfig.from_env({"SPECOBS_ENABLE": "workers"})
    assert (config.enabled, config.workers_only) == (True, True)
    assert CaptureConfig.from_env({"SPECOBS_ENABLE": "1"}).workers_only is False
    assert CaptureConfig.from_env({"SPECOBS_ENABLE": "worker"}).enabled is False  # not a value: the default
    monkeypatch.setenv("SPECOBS_ENABLE", "workers")
    monkeypatch.delenv("SPECOBS_RUN_ID", raising=False)  # register() sets it for the processes it starts
    installed: list[bool] = []
    monkeypatch.setattr(hooks, "install", lambda *a, **k: installed.append(True))
    specobs.vllm.register()  # this test process: not a worker
    assert installed == []
    monkeypatch.setattr(multiprocessing.current_process(), "name", "VllmWorker-1")
    specobs.vllm.register()
    assert installed == [True]
